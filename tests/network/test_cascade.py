"""The incremental re-solve (cascade) of array mode: after any change it gives the rates a from-scratch solve
gives (compiled and as plain Python), its link membership matches a rebuild, and the engine using it stays
max-min on the 1024-GPU fat-tree, falling back to full solves past `cascade_limit`."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simroute.network import SOLVERS, SolverMode, maxmin_rates
from simroute.network import _compiled
from simroute.network.columns import GroupColumns
from simroute.network.kernels import NUMPY_BACKEND, commit_slots_numpy, compiled_backend
from simroute.network.solvers.arrays import ArraySolver

from test_large import _closed_loop, _EarlyArrays, assert_maxmin

MODES = ["python"] + (["compiled"] if _compiled.HAVE_NUMBA else [])
N_LINKS = 8


def _kernel(name: str, mode: str):
    function = getattr(_compiled, name)
    return getattr(function, "py_func", function) if mode == "python" else function


class _State:
    """Groups as columns, their membership and committed rates: a miniature of the engine's array mode."""

    def __init__(self, groups, caps, mode):
        self.mode, self.capacity = mode, np.array(caps + [math.inf])
        self.paths = [list(path) for path, _n, _c in groups]
        self.n = [float(k) for _p, k, _c in groups]
        self.gcap = [math.inf if c is None else c for _p, _k, c in groups]
        self.rate, self.bn = fill_reference(self.paths, self.n, self.gcap, self.capacity)

    def arrays(self):
        links = np.full((5, len(self.paths)), N_LINKS, dtype=np.int64)
        for slot, path in enumerate(self.paths):
            links[:len(path), slot] = path
        member, deg = _kernel("members_build", self.mode)(links, len(self.paths), N_LINKS, 1)
        return links, member, deg

    def load(self, links):
        """Committed load per link (+ the sentinel): n x rate summed over each link's groups."""
        out = np.zeros(N_LINKS + 1)
        np.add.at(out, links.ravel(), np.tile(np.array(self.n) * self.rate, links.shape[0]))
        out[N_LINKS] = 0.0
        return out

    def change(self, what, path, k, cap, pick):
        """Add a group, drop one, or change one's flow count; returns (seeds, dirty)."""
        if what == "add" or not self.paths:
            self.paths.append(list(path))
            self.n.append(float(k))
            self.gcap.append(math.inf if cap is None else cap)
            self.rate = np.append(self.rate, 0.0)
            self.bn = np.append(self.bn, -2)
            return [len(self.paths) - 1], []
        slot = pick % len(self.paths)
        if what == "drop":
            dirty = self.paths.pop(slot)
            for column in ("n", "gcap"):
                getattr(self, column).pop(slot)
            self.rate, self.bn = np.delete(self.rate, slot), np.delete(self.bn, slot)
            return [], dirty
        self.n[slot] = float(k)
        return [slot], []

    def cascade(self, seeds, dirty, limit=10**9):
        links, member, deg = self.arrays()
        groups = len(self.paths)
        scratch = GroupColumns(N_LINKS, max(groups, 1), 5).cascade_scratch()   # the engine's own scratch
        ok, slots, rate, bn = _kernel("cascade_numba", self.mode)(
            np.array(seeds, dtype=np.int64), np.array(dirty, dtype=np.int64), links, np.array(self.n),
            np.array(self.gcap), self.rate.copy(), self.bn.copy(), self.capacity, self.load(links), member, deg,
            limit, 1e-12,
            *scratch)
        assert not scratch[1].any() and not scratch[3].any() and (scratch[4][1] == -1).all()   # left clean
        return ok, slots, rate, bn


def fill_reference(paths, n, gcap, capacity):
    links = np.full((5, len(paths)), N_LINKS, dtype=np.intp)
    for slot, path in enumerate(paths):
        links[:len(path), slot] = path
    return NUMPY_BACKEND.fill_groups(links, np.array(n), np.array(gcap), capacity)


group_st = st.tuples(st.lists(st.integers(0, N_LINKS - 1), min_size=1, max_size=5, unique=True), st.integers(1, 3),
                     st.one_of(st.none(), st.floats(0.5, 30.0), st.sampled_from([2.5, 5.0])))
change_st = st.tuples(st.sampled_from(["add", "drop", "count"]), group_st, st.integers(0, 1000))


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=120, deadline=None)
@given(groups=st.lists(group_st, min_size=1, max_size=25), changes=st.lists(change_st, min_size=1, max_size=6),
       caps=st.lists(st.sampled_from([5.0, 10.0, 20.0, 40.0]), min_size=N_LINKS, max_size=N_LINKS))
def test_cascade_equals_full_solve_and_reference(mode, groups, changes, caps):
    state = _State(groups, caps, mode)
    for what, (path, k, cap), pick in changes:
        seeds, dirty = state.change(what, path, k, cap, pick)
        ok, slots, rate, bn = state.cascade(seeds, dirty)
        assert ok
        state.rate[slots], state.bn[slots] = rate, bn          # commit, as the engine does
        want, _bn = fill_reference(state.paths, state.n, state.gcap, state.capacity)
        assert state.rate == pytest.approx(want, rel=1e-9, abs=1e-12)
        flows = [(path, cap) for path, k, cap in zip(state.paths, state.n, state.gcap) for _ in range(int(k))]
        ref = maxmin_rates([path for path, _c in flows], caps, [None if c == math.inf else c for _p, c in flows])
        got = [state.rate[slot] for slot, k in enumerate(state.n) for _ in range(int(k))]
        assert got == pytest.approx(ref, rel=1e-9, abs=1e-12)
        for slot, path in enumerate(state.paths):           # every bottleneck is the cap or a link of the group
            assert (state.bn[slot] == -1 and state.rate[slot] == pytest.approx(state.gcap[slot])) or \
                state.bn[slot] in path
        untouched = np.setdiff1d(np.arange(len(state.paths)), slots)
        assert (state.rate[untouched] == want[untouched]).all() or \
            state.rate[untouched] == pytest.approx(want[untouched], rel=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_cascade_gives_up_past_its_limit(mode):
    # one link shared by 20 single-flow groups: a new one moves every rate, more than a limit of 5 allows
    state = _State([([0], 1, None)] * 20, [40.0] * N_LINKS, mode)
    seeds, dirty = state.change("add", [0], 1, None, 0)
    ok, slots, _rate, _bn = state.cascade(seeds, dirty, limit=5)
    assert not ok and slots.size == 0
    ok, slots, rate, _bn = state.cascade(seeds, dirty)
    assert ok and len(slots) == 21 and rate == pytest.approx([40.0 / 21] * 21)


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=60, deadline=None)
@given(groups=st.lists(group_st, min_size=2, max_size=20), drops=st.lists(st.integers(0, 100), max_size=8))
def test_membership_kernels_match_a_rebuild(mode, groups, drops):
    """Adding groups one by one and removing some (last column moved into the hole, as the engine does)
    leaves the same per-link sets as building them from the final columns."""
    links = np.full((5, len(groups)), N_LINKS, dtype=np.int64)
    for slot, (path, _k, _c) in enumerate(groups):
        links[:len(path), slot] = path
    member, deg = _kernel("members_build", mode)(links, 0, N_LINKS, 64)
    for slot in range(len(groups)):
        assert _kernel("members_add", mode)(member, deg, links, slot, N_LINKS)
    count = len(groups)
    for pick in drops:
        if count == 1:
            break
        slot = pick % count
        _kernel("members_remove", mode)(member, deg, links, slot, count - 1, N_LINKS)
        links[:, slot] = links[:, count - 1]
        count -= 1
    want_member, want_deg = _kernel("members_build", mode)(links, count, N_LINKS, 1)
    assert (deg == want_deg).all()
    for lid in range(N_LINKS):
        assert sorted(member[lid, :deg[lid]]) == sorted(want_member[lid, :want_deg[lid]])
    narrow = np.full((N_LINKS + 1, 1), -1, dtype=np.int64)     # a full row refuses (the engine rebuilds wider)
    busy = int(np.argmax(want_deg))
    if want_deg[busy] >= 1:
        one = np.zeros(N_LINKS + 1, dtype=np.int64)
        one[busy] = 1
        assert not _kernel("members_add", mode)(narrow, one, links, int(np.flatnonzero(
            (links[:, :count] == busy).any(0))[0]), N_LINKS)


@pytest.mark.skipif(compiled_backend() is None, reason="numba not installed or SIMROUTE_NO_NUMBA set")
def test_commit_kernels_agree():
    rng = np.random.default_rng(3)
    groups, n_links = 50, N_LINKS
    links = np.full((3, groups), n_links, dtype=np.int64)
    for slot in range(groups):
        path = rng.choice(n_links, size=rng.integers(1, 4), replace=False)
        links[:len(path), slot] = path
    base = dict(flows=rng.integers(1, 4, groups).astype(float), rate=rng.uniform(1, 5, groups),
                bn=np.zeros(groups, dtype=np.int64), work=rng.uniform(0, 10, groups),
                last_t=rng.uniform(0, 1, groups), next_work=rng.uniform(10, 20, groups), due=np.zeros(groups),
                load=rng.uniform(0, 30, n_links + 1), link_bytes=np.zeros(n_links), link_saturated=np.zeros(n_links),
                link_t=rng.uniform(0, 1, n_links))
    slots = np.array([1, 4, 9, 16, 25, 36, 49], dtype=np.int64)
    new_rate = base["rate"][slots] * np.array([1, 2, 0.5, 1 + 1e-14, 3, 0.25, 0.0])
    new_bn = np.arange(len(slots), dtype=np.int64)
    cap = np.full(n_links, 20.0)
    out = {}
    for name, kernel in (("numpy", commit_slots_numpy), ("numba", compiled_backend().commit_slots)):
        arrays = {key: value.copy() for key, value in base.items()}
        touched, starts, loads = kernel(2.0, slots, new_rate, new_bn, links, arrays["flows"], arrays["rate"],
                                        arrays["bn"], arrays["work"], arrays["last_t"], arrays["next_work"],
                                        arrays["due"], arrays["load"], cap, arrays["link_bytes"],
                                        arrays["link_saturated"], arrays["link_t"], 1e-12, 1 - 1e-9)
        out[name] = (arrays, touched, starts, loads)
    (a, *rest_a), (b, *rest_b) = out["numpy"], out["numba"]
    for key in base:
        assert a[key][:n_links] == pytest.approx(b[key][:n_links], rel=1e-12), key
    assert (rest_a[0] == rest_b[0]).all() and rest_a[1] == pytest.approx(rest_b[1])
    assert a["rate"][16] == base["rate"][16]                     # a move below `same` is not committed
    assert a["link_bytes"].sum() > 0 and (a["link_t"][rest_a[0]] == 2.0).all()


class _CheckedArrays(ArraySolver):
    """Array mode whose every incremental re-solve is checked against a from-scratch solve."""

    checked = 0

    def cascade(self, now, seeds, dirty):
        ok = super().cascade(now, seeds, dirty)
        if ok:
            columns, count = self.bulk.columns, len(self.bulk.columns.groups)
            want, _bn = NUMPY_BACKEND.fill_groups(columns.links[:, :count], columns.flows[:count],
                                                  columns.cap[:count], self.bulk.capacity_padded)
            assert columns.rate[:count] == pytest.approx(want, rel=1e-9)
            type(self).checked += 1
        return ok


class _Checked(_EarlyArrays):
    """The engine with its array-mode solver swapped for the checked one."""

    solvers = {**SOLVERS, SolverMode.ARRAYS: _CheckedArrays}


@pytest.mark.skipif(compiled_backend() is None, reason="numba not installed or SIMROUTE_NO_NUMBA set")
@pytest.mark.parametrize("limit", [1.0, 0.02])
def test_engine_cascade_matches_full_solves(limit):
    class Engine(_Checked):
        cascade_limit = limit
        cascade_floor = 4

    _CheckedArrays.checked = 0
    env, eng, topo, sizes, _pairs = _closed_loop(500, 250, seed=7, checks=(0, 100, 249), cls=Engine)
    cascades = eng.rerates - eng.full_solves
    assert _CheckedArrays.checked == cascades > 200
    assert (eng.cascade_aborts > 0) == (limit < 1.0)
    env.run()
    eng.telemetry.flush()
    want = np.zeros(len(topo.links))
    for rec in eng.telemetry.records:
        want[list(rec.links)] += rec.nbytes
    assert eng.telemetry.link_bytes == pytest.approx(want, rel=1e-6, abs=1e-3)


def test_reference_backend_solves_in_full():
    env, eng, *_ = _closed_loop(300, 60, seed=3, backend="numpy")
    assert eng.backend.cascade is None and eng.array_mode and eng.full_solves > 60 and eng.cascade_aborts == 0
    assert_maxmin(eng)
