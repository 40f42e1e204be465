"""The online core (one compiled kernel call per engine step): entered from object mode with flows in flight,
exact through its growth paths, shared groups, slot and table reuse; and same-instant starts handled by a
queued wake-up (on the core and in object mode)."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from simroute.network import FlowEngine, load_topology, maxmin_rates
from simroute.network._online import H_TOMB
from simroute.network.kernels import compiled_backend

from simroute.network import DATA_DIR as TOPO_DIR
from netstub import CoreFromFirst, ObjectMode, StubTopology

needs_numba = pytest.mark.skipif(compiled_backend() is None, reason="numba not installed or SIMROUTE_NO_NUMBA set")


@needs_numba
def test_core_is_entered_with_flows_in_flight_grows_its_buffers_and_stays_maxmin():
    # 300 flows at once from 10 GPUs: object mode hands them to the core at its first step (>= core_on groups),
    # more groups, flows and pending starts than the first layout holds, and NIC links with ~30 groups each
    # (the membership rows start 4 wide)
    topo = load_topology(TOPO_DIR / "fattree-1024.yaml")
    env = simpy.Environment()
    eng = FlowEngine(env, topo)
    rng = np.random.default_rng(11)
    events = [eng.transfer(topo.gpus[int(rng.integers(10))], topo.gpus[int(rng.integers(10, 1024))],
                           float(rng.uniform(1e6, 5e7)), rate_cap_Bps=None if i % 5 else 20e9) for i in range(300)]
    env.run(until=1e-7)
    assert eng.steps == 1 and eng.full_solves == 1               # object mode took the starts, the core solved
    core = eng.solver.core
    assert core is not None and core.dims["S"] >= 512 and core.dims["W"] >= 16 and core.dims["P"] >= 300
    active = eng.active_flows()
    want = maxmin_rates([links for _fid, links, _cap in active], eng.cap,
                        [None if cap == np.inf else cap for _fid, _links, cap in active])
    got = eng.flow_rates()
    assert [got[fid] for fid, _links, _cap in active] == pytest.approx(want, rel=1e-9)
    env.run()
    assert eng.n_active == 0 and core.count == 0 and all(event.triggered for event in events)
    eng.telemetry.flush()
    bytes_per_link = np.zeros(len(topo.links))
    for event in events:
        bytes_per_link[list(event.value.links)] += event.value.nbytes
    assert eng.telemetry.link_bytes == pytest.approx(bytes_per_link, rel=1e-9, abs=1e-3)


@needs_numba
def test_core_shares_groups_and_reuses_slots_and_table_entries():
    topo = StubTopology([10.0, 10.0], {("a", "b"): (0, 1), ("c", "d"): (1,)})
    env = simpy.Environment()
    eng = CoreFromFirst(env, topo)
    first = [eng.transfer("a", "b", 20.0) for _ in range(4)] + [eng.transfer("a", "b", 20.0, rate_cap_Bps=1.0)]
    env.run(until=1e-9)
    assert eng.solver.core.count == 2                     # one group per (path, cap): 4 uncapped flows, 1 capped
    assert sorted(eng.flow_rates().values()) == pytest.approx([1.0, 2.25, 2.25, 2.25, 2.25])   # (10 - 1) / 4
    env.run()
    assert [event.value.end for event in first] == pytest.approx([20 / 2.25] * 4 + [20.0])    # the capped: 1 B/s

    lone: list[simpy.Event] = []

    def one_after_another():
        for i in range(400):                        # 400 groups made and dropped: the table rebuilds itself
            event = eng.transfer("c", "d", 5.0, rate_cap_Bps=float(1 + i % 3))
            lone.append(event)
            yield event

    start = env.now
    env.process(one_after_another())
    env.run()
    ends = [event.value.end - event.value.start for event in lone]
    assert ends == pytest.approx([5.0 / (1 + i % 3) for i in range(400)], rel=1e-12)
    assert lone[-1].value.end == pytest.approx(start + sum(ends))
    assert eng.solver.core.count == 0 and eng.solver.core.ibuf[H_TOMB] < 400


@pytest.mark.parametrize("engine", [CoreFromFirst, ObjectMode], ids=["online core", "object mode"])
def test_a_start_at_a_queued_wake_up_is_handled_by_it(engine):
    # flow A (10 B at 10 B/s) ends at t = 1; a process started before A's wake-up was queued starts B at t = 1:
    # the start needs no flush of its own (the wake-up takes it), and both end on time
    topo = StubTopology([10.0], {("a", "b"): (0,)})
    env = simpy.Environment()
    eng = engine(env, topo)
    late: list[simpy.Event] = []

    def at_one():
        yield env.timeout(1.0)
        late.append(eng.transfer("a", "b", 10.0))

    env.process(at_one())
    early = eng.transfer("a", "b", 10.0)
    env.run()
    assert early.value.end == 1.0 and late[0].value.end == pytest.approx(2.0, rel=1e-15)
    assert eng.steps == 3                           # t = 0, t = 1 (A ends, B starts), t = 2
