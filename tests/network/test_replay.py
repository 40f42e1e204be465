"""Whole-flow-set replay (simroute.network.replay): the compiled loop against the online engine and the textbook
max-min progression, hand-counted cases, the component restriction, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simroute.errors import ConfigurationError, UnknownNameError
from simroute.network import FlowEngine, maxmin_rates
from simroute.network.kernels import compiled_available
from simroute.network.replay import CompiledReplay, FlowSet, replay

INF = math.inf
COMPILED = ["numba"] if compiled_available() else []
BACKENDS = COMPILED + ["engine", "engine-numpy"]


def textbook(flows: FlowSet, capacity: list[float], latency: list[float]) -> np.ndarray:
    """Finish times by the obvious progression: at every arrival or completion, max-min rates of the active
    flows from scratch (`maxmin_rates`), bytes left drained at those rates until the next event."""
    n = len(flows)
    paths = [flows.path(i) for i in range(n)]
    caps = [None] * n if flows.rate_cap_Bps is None else [None if c == INF else float(c) for c in flows.rate_cap_Bps]
    finish = np.full(n, INF)
    pending = sorted(range(n), key=lambda i: flows.arrival_s[i])
    left: dict[int, float] = {}
    now = 0.0
    while pending or left:
        ids = list(left)
        rates = maxmin_rates([paths[i] for i in ids], capacity, [caps[i] for i in ids]) if ids else []
        step = min((left[i] / r for i, r in zip(ids, rates)), default=INF)
        nxt = min(now + step, flows.arrival_s[pending[0]] if pending else INF)
        for i, r in zip(ids, rates):
            left[i] -= r * (nxt - now)
            if left[i] <= 1e-12 * flows.nbytes[i]:
                finish[i] = nxt + sum(latency[link] for link in paths[i])
                del left[i]
        now = nxt
        while pending and flows.arrival_s[pending[0]] <= now:
            i = pending.pop(0)
            if flows.nbytes[i] > 0 and paths[i]:
                left[i] = float(flows.nbytes[i])
            else:
                finish[i] = now
    return finish


@st.composite
def flow_sets(draw):
    """Small fabrics (1-7 links, 1-10 GB/s) and 1-18 flows of 10-100 MB (FCTs >= 1 ms: the engines' 1e-12 s
    same-instant window stays below 1e-9 of any FCT); arrivals on a coarse grid so some coincide; repeated
    paths (groups), zero-byte and linkless flows, rate caps and latencies now and then."""
    n_links = draw(st.integers(1, 7))
    capacity = [draw(st.sampled_from([1e9, 2.5e9, 4e9, 1e10])) for _ in range(n_links)]
    latency = [draw(st.sampled_from([0.0, 0.0, 1e-6, 5e-6])) for _ in range(n_links)]
    n = draw(st.integers(1, 18))
    pool = [tuple(draw(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=4, unique=True)))
            for _ in range(draw(st.integers(1, 6)))]
    paths = [draw(st.sampled_from(pool + [()])) if draw(st.integers(0, 15)) == 0 else draw(st.sampled_from(pool))
             for _ in range(n)]
    arrival = [draw(st.integers(0, 40)) * 2.5e-3 for _ in range(n)]
    nbytes = [0.0 if draw(st.integers(0, 20)) == 0 else float(draw(st.integers(10, 100))) * 1e6 for _ in range(n)]
    caps = None
    if draw(st.booleans()):
        caps = [draw(st.sampled_from([INF, INF, 3e8, 2e9])) for _ in range(n)]
    return FlowSet.from_paths(arrival, nbytes, paths, caps), capacity, latency


def _close(got: np.ndarray, want: np.ndarray, arrival: np.ndarray) -> None:
    fct_got, fct_want = got - arrival, want - arrival
    assert np.all(np.isfinite(got))
    scale = np.maximum(np.abs(fct_want), 1e-3)         # zero-byte flows: FCT 0 on both sides
    assert np.max(np.abs(fct_got - fct_want) / scale) <= 1e-9


@pytest.mark.slow                      # compiles the replay loop on a cold numba cache (~17 s CPU)
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flow_sets())
def test_every_backend_matches_the_textbook_progression(case):
    flows, capacity, latency = case
    want = textbook(flows, capacity, latency)
    for backend in BACKENDS:
        got = replay(flows, capacity, latency_s=latency, backend=backend)
        _close(got.finish_s, want, flows.arrival_s)


@pytest.mark.skipif(not COMPILED, reason="numba not importable (or SIMROUTE_NO_NUMBA set)")
@settings(max_examples=20, deadline=None)
@given(flow_sets())
def test_compiled_replay_matches_the_engine_in_array_mode(case):
    flows, capacity, latency = case
    saved = FlowEngine.arrays_on, FlowEngine.arrays_off, FlowEngine.online_core
    FlowEngine.arrays_on, FlowEngine.arrays_off = 1, 0      # every engine step a full compiled solve
    FlowEngine.online_core = False
    try:
        online = replay(flows, capacity, latency_s=latency, backend="engine")
    finally:
        FlowEngine.arrays_on, FlowEngine.arrays_off, FlowEngine.online_core = saved
    compiled = replay(flows, capacity, latency_s=latency, backend="numba")
    _close(compiled.finish_s, online.finish_s, flows.arrival_s)
    assert compiled.events == online.events


@pytest.fixture
def cascade_always():
    """The compiled loop tries the engine's cascade at every re-solve (by default only from 256 active groups)."""
    saved = CompiledReplay.cascade_from, CompiledReplay.cascade_floor
    CompiledReplay.cascade_from, CompiledReplay.cascade_floor = 1, 10**9
    yield
    CompiledReplay.cascade_from, CompiledReplay.cascade_floor = saved


@pytest.mark.skipif(not COMPILED, reason="numba not importable (or SIMROUTE_NO_NUMBA set)")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(flow_sets())
def test_compiled_replay_through_the_cascade_matches_the_textbook(cascade_always, case):
    flows, capacity, latency = case
    got = replay(flows, capacity, latency_s=latency, backend="numba")
    _close(got.finish_s, textbook(flows, capacity, latency), flows.arrival_s)


@pytest.mark.skipif(not COMPILED, reason="numba not importable (or SIMROUTE_NO_NUMBA set)")
def test_many_groups_cascade_and_component_solves_agree_with_the_engine():
    # 1,200 flows on the 64-GPU fat-tree within 2 ms: several hundred groups in flight, so the compiled loop
    # runs the cascade (and falls back to component solves where it gives up); the component-only loop and
    # the online engine must give the same finish times.
    from simroute.network import load_topology, shipped_topology
    topo = load_topology(shipped_topology("fattree"))
    rng = np.random.default_rng(11)
    n = 1200
    pairs = rng.integers(0, len(topo.gpus), size=(n, 2))
    paths = [topo.path_ids(int(a), int(b), int(rng.integers(0, 8)))[0] for a, b in pairs]
    flows = FlowSet.from_paths(np.sort(rng.uniform(0, 2e-3, n)), rng.uniform(1e6, 3e7, n), paths)
    capacity = [link.capacity_Bps for link in topo.links]
    latency = [link.latency_s for link in topo.links]
    cascaded = replay(flows, capacity, latency_s=latency, backend="numba")
    saved = CompiledReplay.cascade_limit
    CompiledReplay.cascade_limit = 0.0
    try:
        components = replay(flows, capacity, latency_s=latency, backend="numba")
    finally:
        CompiledReplay.cascade_limit = saved
    online = replay(flows, capacity, latency_s=latency, backend="engine")
    assert cascaded.solved_groups < components.solved_groups / 2       # the cascade re-solved fewer groups
    for result in (cascaded, components):
        _close(result.finish_s, online.finish_s, flows.arrival_s)
        assert result.events == online.events == 2 * np.count_nonzero([len(p) for p in paths])


@pytest.mark.parametrize("backend", BACKENDS)
def test_hand_counted_two_flows_on_one_link(backend):
    # 1 GB/s link; A 1 GB and B 0.5 GB both at t=0: 0.5 GB/s each, B ends at 1 s, A's last 0.5 GB at full rate
    # ends at 1.5 s. C (0.25 GB) arrives at 1.25 s: A has 0.25 GB left, both at 0.5 GB/s end at 1.75 s.
    flows = FlowSet.from_paths([0.0, 0.0, 1.25], [1e9, 5e8, 2.5e8], [(0,), (0,), (0,)])
    result = replay(flows, [1e9], latency_s=[2e-6], backend=backend)
    assert result.finish_s == pytest.approx([1.75 + 2e-6, 1.0 + 2e-6, 1.75 + 2e-6], rel=1e-12)
    assert result.fct_s == pytest.approx([1.75 + 2e-6, 1.0 + 2e-6, 0.5 + 2e-6], rel=1e-12)
    assert result.events == 6


@pytest.mark.parametrize("backend", BACKENDS)
def test_bottleneck_chain_cap_zero_bytes_and_linkless(backend):
    # link 0 (1 GB/s) shared by X (links 0,1) and Y (link 0, capped at 0.2 GB/s); link 1 (0.5 GB/s): X gets 0.5,
    # Y its cap 0.2. X: 1 GB / 0.5 = 2 s. Y: 0.4 GB / 0.2 = 2 s. Z zero bytes, W no links: at arrival.
    flows = FlowSet.from_paths([0.0, 0.0, 0.3, 0.7], [1e9, 4e8, 0.0, 5e8], [(0, 1), (0,), (0,), ()],
                               rate_cap_Bps=[INF, 2e8, INF, INF])
    result = replay(flows, [1e9, 5e8], backend=backend)
    assert result.finish_s == pytest.approx([2.0, 2.0, 0.3, 0.7], rel=1e-12)


@pytest.mark.skipif(not COMPILED, reason="numba not importable (or SIMROUTE_NO_NUMBA set)")
def test_input_order_does_not_matter_and_result_is_deterministic():
    rng = np.random.default_rng(5)
    n, n_links = 200, 30
    paths = [tuple(rng.choice(n_links, size=int(rng.integers(1, 5)), replace=False)) for _ in range(n)]
    flows = FlowSet.from_paths(rng.uniform(0, 0.2, n), rng.uniform(1e7, 1e8, n), paths)
    capacity = rng.uniform(1e9, 1e10, n_links)
    base = replay(flows, capacity, backend="numba")
    perm = rng.permutation(n)
    shuffled = FlowSet.from_paths(flows.arrival_s[perm], flows.nbytes[perm], [paths[i] for i in perm])
    again = replay(shuffled, capacity, backend="numba")
    np.testing.assert_allclose(again.finish_s, base.finish_s[perm], rtol=1e-12)
    np.testing.assert_array_equal(replay(flows, capacity, backend="numba").finish_s, base.finish_s)
    assert base.events == 2 * n


@pytest.mark.skipif(not COMPILED, reason="numba not importable (or SIMROUTE_NO_NUMBA set)")
def test_resolve_covers_only_the_touched_component():
    # Flows on disjoint links: every re-solve is one group. Chained through a shared link: the whole set.
    n = 20
    arrival, nbytes = np.arange(n) * 1e-3, np.full(n, 1e8)
    apart = replay(FlowSet.from_paths(arrival, nbytes, [(i,) for i in range(n)]), np.full(n + 1, 1e9), backend="numba")
    assert apart.solves > 0 and apart.solved_groups <= apart.solves
    chained = replay(FlowSet.from_paths(arrival, nbytes, [(i, n) for i in range(n)]), np.full(n + 1, 1e9),
                     backend="numba")
    assert chained.solved_groups / chained.solves > 5
    # the disjoint case: each flow alone on its link, 0.1 s each
    np.testing.assert_allclose(apart.fct_s, 0.1, rtol=1e-12)


@pytest.mark.parametrize("flows, capacity, field", [
    (FlowSet.from_paths([0.0], [-1.0], [(0,)]), [1e9], "nbytes"),
    (FlowSet.from_paths([float("nan")], [1.0], [(0,)]), [1e9], "start_s"),
    (FlowSet.from_paths([0.0], [1.0], [(3,)]), [1e9], "links"),
    (FlowSet.from_paths([0.0, 0.0], [1.0, 1.0], [(0,), (1, 0, 1)]), [1e9, 1e9], "links"),
    (FlowSet.from_paths([0.0], [1.0], [(0,)], rate_cap_Bps=[0.0]), [1e9], "rate_cap_Bps"),
    (FlowSet.from_paths([0.0], [1.0], [(0,)]), [0.0], "capacity_Bps"),
])
def test_bad_input_names_the_field(flows, capacity, field):
    with pytest.raises(ConfigurationError, match=field):
        replay(flows, capacity)


def test_unknown_backend_lists_the_valid_ones():
    with pytest.raises(UnknownNameError, match="engine"):
        replay(FlowSet.from_paths([0.0], [1.0], [(0,)]), [1e9], backend="fortran")


# ---- the CLI: simroute flows replay ------------------------------------------------------------------------

def _flow_frame(n: int = 60, seed: int = 3):
    import pandas as pd
    from simroute.network import load_topology, shipped_topology
    topo = load_topology(shipped_topology("fattree"))
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, len(topo.gpus), size=(n, 2))
    pairs[:, 1] = np.where(pairs[:, 0] == pairs[:, 1], (pairs[:, 1] + 1) % len(topo.gpus), pairs[:, 1])  # no self-flow
    choices = rng.integers(0, 4, n)
    frame = pd.DataFrame({"start_s": np.sort(rng.uniform(0, 5e-3, n)), "nbytes": rng.uniform(1e6, 5e7, n),
                          "src": [topo.gpus[a] for a, _b in pairs], "dst": [topo.gpus[b] for _a, b in pairs],
                          "path_index": [int(c) % topo.n_choices(int(a), int(b)) for c, (a, b) in zip(choices, pairs)]})
    return topo, frame


def test_cli_replays_a_csv_and_a_parquet_file_like_the_api(tmp_path, capsys):
    import json

    import pandas as pd
    import pyarrow.parquet as pq

    from simroute.cli.main import main
    topo, frame = _flow_frame()
    frame.to_csv(tmp_path / "flows.csv", index=False)
    paths = [topo.path_ids(topo.index(s), topo.index(d), int(c))[0]
             for s, d, c in zip(frame.src, frame.dst, frame.path_index)]
    pd.DataFrame({"start_s": frame.start_s, "nbytes": frame.nbytes, "links": [list(p) for p in paths]}) \
        .to_parquet(tmp_path / "links.parquet")
    want = replay(FlowSet.from_paths(frame.start_s, frame.nbytes, paths), [link.capacity_Bps for link in topo.links],
                  latency_s=[link.latency_s for link in topo.links], backend="engine")
    assert main(["flows", "replay", str(tmp_path / "flows.csv"), "-t", "fattree", "-o", str(tmp_path / "a.parquet"),
                 "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["flows"] == 60 and figures["fct_max_s"] == pytest.approx(float(want.fct_s.max()), rel=1e-9)
    assert main(["flows", "replay", str(tmp_path / "links.parquet"), "-t", "fattree", "-o",
                 str(tmp_path / "b.parquet")]) == 0
    for name in ("a.parquet", "b.parquet"):
        out = pq.read_table(tmp_path / name).to_pandas()
        np.testing.assert_allclose(out.finish_s, want.finish_s, rtol=1e-9)
        np.testing.assert_allclose(out.fct_s, out.finish_s - frame.start_s, rtol=1e-12)


@pytest.mark.parametrize("edit, field", [
    (lambda f: f.drop(columns=["nbytes"]), "nbytes"),
    (lambda f: f.assign(nbytes=-f.nbytes), "nbytes"),
    (lambda f: f.assign(src="nowhere"), "src"),
    (lambda f: f.assign(path_index=-1), "path_index"),
    (lambda f: f.drop(columns=["src"]), "links"),
])
def test_cli_bad_flow_file_is_one_line_exit_2(tmp_path, capsys, edit, field):
    from simroute.cli.main import main
    _topo, frame = _flow_frame(8)
    edit(frame).to_csv(tmp_path / "flows.csv", index=False)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["flows", "replay", str(tmp_path / "flows.csv"), "-t", "fattree", "-o",
                 str(tmp_path / "out.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "flows.csv" in err and field in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_cli_never_overwrites_an_output(tmp_path, capsys):
    from simroute.cli.main import main
    _topo, frame = _flow_frame(4)
    frame.to_csv(tmp_path / "flows.csv", index=False)
    (tmp_path / "mine.parquet").write_bytes(b"user data")
    assert main(["flows", "replay", str(tmp_path / "flows.csv"), "-o", str(tmp_path / "mine.parquet")]) == 2
    assert (tmp_path / "mine.parquet").read_bytes() == b"user data"
    assert "exists" in capsys.readouterr().err
