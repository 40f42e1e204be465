"""Large components: array mode (full solves by the numba kernels or the NumPy reference) and the switch
between it and the object-mode cascade; both backends against the textbook reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simroute.network import FlowEngine, SolverMode, load_topology, maxmin_rates
from simroute.network.kernels import NUMPY_BACKEND, compiled_backend

BACKENDS = ["numpy"] + (["numba"] if compiled_backend() is not None else [])

from simroute.network import DATA_DIR as TOPO_DIR


def assert_maxmin(eng, rel=1e-9):
    """Max-min optimality without the O(n^2) reference: feasible, and every flow is at its cap or has a
    bottleneck link that is full and on which no flow gets more (the textbook characterisation)."""
    active, rates = eng.active_flows(), eng.flow_rates()
    load: dict[int, float] = {}
    top: dict[int, float] = {}
    for fid, links, _cap in active:
        r = rates[fid]
        for l in links:
            load[l] = load.get(l, 0.0) + r
            top[l] = max(top.get(l, 0.0), r)
    for l, ld in load.items():
        assert ld <= eng.cap[l] * (1 + rel), (l, ld, eng.cap[l])
    for fid, links, cap in active:
        r = rates[fid]
        if cap < math.inf and r >= cap * (1 - rel):
            continue
        assert any(load[l] >= eng.cap[l] * (1 - rel) and r >= top[l] * (1 - rel) for l in links), (fid, r)


group_st = st.tuples(st.lists(st.integers(0, 7), min_size=1, max_size=5, unique=True), st.integers(1, 3),
                     st.one_of(st.none(), st.floats(0.5, 30.0), st.sampled_from([2.5, 5.0])))


def _fill(backend):
    return NUMPY_BACKEND.fill_groups if backend == "numpy" else compiled_backend().fill_groups


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=150, deadline=None)
@given(groups=st.lists(group_st, min_size=1, max_size=30),
       caps=st.lists(st.sampled_from([5.0, 10.0, 20.0, 40.0]), min_size=8, max_size=8))
def test_fill_arrays_equals_reference(backend, groups, caps):
    K, L = max(len(p) for p, _n, _c in groups), len(caps)
    links = np.full((K, len(groups)), L, dtype=np.intp)
    for i, (p, _n, _c) in enumerate(groups):
        links[:len(p), i] = p
    n = np.array([k for _p, k, _c in groups], dtype=float)
    gcap = np.array([math.inf if c is None else c for _p, _k, c in groups])
    rate, bn = _fill(backend)(links, n, gcap, np.array(caps + [math.inf]))
    paths, fcaps, want_idx = [], [], []
    for i, (p, k, c) in enumerate(groups):
        paths += [p] * k
        fcaps += [c] * k
        want_idx += [i] * k
    ref = maxmin_rates(paths, caps, fcaps)
    assert [rate[i] for i in want_idx] == pytest.approx(ref, rel=1e-9, abs=1e-12)
    for i, (p, _k, c) in enumerate(groups):        # the reported bottleneck is the cap or one of its links
        assert (bn[i] == -1 and c is not None and rate[i] == pytest.approx(c)) or bn[i] in p


def approx_rel(r):
    return pytest.approx(r, rel=1e-6, abs=1e-9)


class _EarlyArrays(FlowEngine):
    """Array mode from 200 groups on, object mode again below 100: a run crosses both ways."""

    online_core = False
    arrays_on = numpy_arrays_on = 200
    arrays_off = numpy_arrays_off = 100


def _closed_loop(n_flows, n_done, seed, checks=(), cls=_EarlyArrays, backend="auto"):
    topo = load_topology(TOPO_DIR / "fattree-1024.yaml")
    env = simpy.Environment()
    eng = cls(env, topo, keep_records=True, backend=backend)
    rng = np.random.default_rng(seed)
    gpus, done = topo.gpus, [0]
    pairs = rng.integers(0, len(gpus), size=(n_flows + n_done, 2)).tolist()
    sizes = rng.uniform(1e6, 1e8, n_flows + n_done).tolist()
    nxt = [0]

    def start():
        i = nxt[0]
        nxt[0] += 1
        a, b = pairs[i]
        ev = eng.transfer(gpus[a], gpus[b], sizes[i], rate_cap_Bps=None if i % 7 else 12e9)
        ev.callbacks.append(finish)

    def finish(_ev):
        done[0] += 1
        if nxt[0] < len(pairs):
            start()

    for _ in range(n_flows):
        start()
    seen = 0
    while done[0] < n_done:
        env.step()
        if seen < len(checks) and done[0] >= checks[seen]:
            seen += 1
            assert_maxmin(eng)
    return env, eng, topo, sizes, pairs


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_component_stays_maxmin_and_conserves_bytes(backend):
    # 600 flows on the 1024-GPU fat-tree: array mode (full solves with the NumPy reference, mostly incremental
    # re-solves compiled), then object mode while draining
    env, eng, topo, sizes, pairs = _closed_loop(600, 300, seed=5, checks=(0, 50, 150, 299), backend=backend)
    array_solves = eng.full_solves if backend == "numpy" else eng.rerates - eng.full_solves
    assert eng.backend.name == backend and array_solves > 100 and eng.array_mode
    g = next(iter(eng.bulk.groups.values()))             # the check itself is sharp: a rate off by 1e-6 fails it
    eng.bulk.columns.rate[g.slot] *= 1 + 1e-6
    with pytest.raises(AssertionError):
        assert_maxmin(eng)
    eng.bulk.columns.rate[g.slot] /= 1 + 1e-6
    rerates = eng.rerates
    env.run()                                           # drain: the engine drops its arrays on the way down
    assert eng.n_active == 0 and not eng.array_mode and eng.rerates - eng.full_solves > rerates - eng.full_solves
    want = [0.0] * len(topo.links)
    for rec in eng.telemetry.records:
        for l in rec.links:
            want[l] += rec.nbytes
    eng.telemetry.flush()
    assert eng.telemetry.link_bytes == pytest.approx(want, rel=1e-6, abs=1e-3)
    assert sorted(r.nbytes for r in eng.telemetry.records) == sorted(sizes)


def test_large_component_is_deterministic():
    a = _closed_loop(400, 150, seed=9)[1].telemetry.records
    b = _closed_loop(400, 150, seed=9)[1].telemetry.records
    assert [(r.fid, r.start, r.end) for r in a] == [(r.fid, r.start, r.end) for r in b]


@pytest.mark.skipif(len(BACKENDS) < 2, reason="numba not installed: only the NumPy reference path exists")
def test_compiled_and_reference_paths_give_the_same_completions():
    runs = {}
    for backend in BACKENDS:
        records = _closed_loop(400, 200, seed=4, backend=backend)[1].telemetry.records
        runs[backend] = {r.fid: r.end for r in records}
    assert runs["numba"].keys() == runs["numpy"].keys()
    for fid, end in runs["numpy"].items():
        assert runs["numba"][fid] == pytest.approx(end, rel=1e-9)


def test_object_and_array_modes_and_the_online_core_give_the_same_completions():
    class ObjectsOnly(FlowEngine):
        online_core = False
        arrays_on = numpy_arrays_on = 10**9

    objects = {r.fid: r.end for r in _closed_loop(300, 150, seed=2, cls=ObjectsOnly)[1].telemetry.records}
    arrays = {r.fid: r.end for r in _closed_loop(300, 150, seed=2)[1].telemetry.records}
    env, core_engine, *_ = _closed_loop(300, 150, seed=2, cls=FlowEngine)
    core = {r.fid: r.end for r in core_engine.telemetry.records}
    assert core_engine.mode is SolverMode.ONLINE or compiled_backend() is None
    assert objects.keys() == arrays.keys() == core.keys()
    for fid, end in objects.items():
        assert arrays[fid] == pytest.approx(end, rel=1e-9) and core[fid] == pytest.approx(end, rel=1e-9)


def test_tolerance_mode_bounds_and_reports_its_error():
    # 300 flows from distinct GPUs into one: they share its downlink, so a finish moves the others' rates
    # by ~1/300 (inside the tolerance: kept) while the mode's bound and report are checked
    class Tolerant(_EarlyArrays):
        pass

    topo = load_topology(TOPO_DIR / "fattree-1024.yaml")
    env = simpy.Environment()
    eng = Tolerant(env, topo, rate_tolerance=1e-2)
    rng = np.random.default_rng(1)
    for src in rng.choice(np.arange(8, 1024), size=300, replace=False).tolist():
        eng.transfer(topo.gpus[src], topo.gpus[0], float(rng.uniform(1e6, 4e6)))
    env.run(until=9e-3)
    report = eng.tolerance_report()
    assert eng.array_mode and 1e-4 < report["max_rate_error"] <= 1e-2
    rates = eng.flow_rates()
    active = eng.active_flows()
    ref = maxmin_rates([a[1] for a in active], eng.cap, None)
    assert [rates[a[0]] for a in active] == pytest.approx(ref, rel=1.01e-2)
    assert [rates[a[0]] for a in active] != pytest.approx(ref, rel=1e-6)       # it did keep stale rates
