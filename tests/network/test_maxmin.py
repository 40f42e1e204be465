"""Max-min fairness: textbook cases exact, bytes conserved, incremental == full recomputation."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytest import approx

from simroute.network import FlowEngine, maxmin_rates

from netstub import AlwaysFull, CoreFromFirst, ObjectMode, StubTopology


def _engine(caps, routes):
    env = simpy.Environment()
    return env, FlowEngine(env, StubTopology(caps, routes))


def test_shared_bottleneck_exact_times():
    env, e = _engine([10.0], {("a", "b"): (0,), ("c", "d"): (0,)})
    f1, f2 = e.transfer("a", "b", 100.0), e.transfer("c", "d", 200.0)
    env.run(until=1.0)
    assert e.flow_rates() == {1: 5.0, 2: 5.0}
    env.run()
    assert f1.value.end == approx(20.0, rel=1e-12)     # 100 B at 5 B/s
    assert f2.value.end == approx(30.0, rel=1e-12)     # 100 B left at 10 B/s


def test_parking_lot():
    # long flow over links 0,1,2; one short flow on each link; link 0 is the narrowest
    env, e = _engine([10.0, 20.0, 30.0], {("L", "M"): (0, 1, 2), ("a", "b"): (0,), ("c", "d"): (1,),
                                          ("e", "f"): (2,)})
    for s, d in [("L", "M"), ("a", "b"), ("c", "d"), ("e", "f")]:
        e.transfer(s, d, 1e6)
    env.run(until=0.5)
    assert e.flow_rates() == {1: 5.0, 2: 5.0, 3: 15.0, 4: 25.0}


def test_capped_flows_are_private_links():
    env, e = _engine([10.0], {("a", "b"): (0,), ("c", "d"): (0,), ("x", "y"): (0,)})
    e.transfer("a", "b", 1e6, rate_cap_Bps=2.0)
    e.transfer("c", "d", 1e6)
    e.transfer("x", "y", 1e6, rate_cap_Bps=3.0)
    env.run(until=0.5)
    assert e.flow_rates() == {1: 2.0, 2: 5.0, 3: 3.0}


def test_zero_bytes_and_same_endpoint_complete_immediately():
    env, e = _engine([10.0], {("a", "b"): (0,)})
    ev0, ev1 = e.transfer("a", "b", 0), e.transfer("a", "a", 123.0)
    env.run()
    assert ev0.value.end == 0.0 and ev1.value.end == 0.0


flow_st = st.tuples(st.floats(0.0, 5.0), st.floats(1.0, 500.0), st.lists(st.integers(0, 6), min_size=1, max_size=4,
                                                                         unique=True),
                    st.one_of(st.none(), st.floats(0.5, 20.0)))


@pytest.mark.parametrize("engine", [CoreFromFirst, ObjectMode, AlwaysFull],
                         ids=["online core (compiled) or object mode (without numba)", "object mode", "full-solve path"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flows=st.lists(flow_st, min_size=1, max_size=24), checks=st.lists(st.floats(0.01, 40.0), min_size=1,
                                                                           max_size=6),
       caps=st.lists(st.sampled_from([5.0, 10.0, 20.0, 40.0]), min_size=7, max_size=7))
def test_incremental_equals_full_recomputation(engine, flows, checks, caps):
    routes = {(f"s{i}", f"d{i}"): tuple(sorted(p)) for i, (_t, _b, p, _c) in enumerate(flows)}
    env = simpy.Environment()
    e = engine(env, StubTopology(caps, routes))
    events, link_sum = [], [0.0] * len(caps)

    def starter(i, t, nbytes, cap):
        yield env.timeout(t)
        events.append(e.transfer(f"s{i}", f"d{i}", nbytes, rate_cap_Bps=cap))

    for i, (t, b, p, c) in enumerate(flows):
        env.process(starter(i, t, b, c))
        for l in set(p):
            link_sum[l] += b
    for t in sorted(set(checks)):
        env.run(until=t + 1e-7)
        active = e.active_flows()
        ref = maxmin_rates([a[1] for a in active], caps, [None if a[2] == float("inf") else a[2] for a in active])
        got = e.flow_rates()
        for (fid, _l, _c), r in zip(active, ref):
            assert got[fid] == approx(r, rel=1e-6, abs=1e-9)
    env.run()
    assert len(events) == len(flows) and all(ev.triggered for ev in events)
    for ev in events:
        rec = ev.value
        bottleneck = min([caps[l] for l in rec.links] + [c for c in [flows[int(rec.src[1:])][3]] if c])
        assert rec.end - rec.start >= rec.nbytes / bottleneck * (1 - 1e-9)      # never ends early
    e.telemetry.flush()
    for l, want in enumerate(link_sum):                                            # bytes conserved
        assert e.telemetry.link_bytes[l] == approx(want, rel=1e-6, abs=1e-6)
