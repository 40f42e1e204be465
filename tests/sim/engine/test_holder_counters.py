"""The per-holder counters holders.parquet reads: queueing wait and fan-in of the calls that ran, busy time."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from fakes import Fabric, FakeStep, NoNet
from simroute.sim.engine import HolderPartials, RouteExchange, RouteShare, Sequence


def _exchange(merge_s: float = 0.0) -> RouteExchange:
    return RouteExchange(NoNet(), lambda a, b: Fabric, q_bytes=1152, p_bytes=1032, tp=1, merge_s=merge_s,
                         exchanges_per_step=FakeStep.layers)


def _submit_at(env, engine, seq, at_s):
    def late():
        yield env.timeout(at_s)
        engine.submit(seq)
    env.process(late())


def _logged_wait(engine) -> float:
    """What the requester's iteration log says its routed queries waited at holders (per iteration x ran)."""
    cols = engine.log.cols
    return float(np.dot(np.frombuffer(cols["holder_wait_s"]), np.frombuffer(cols["iterations"], dtype=np.int32)))


def test_served_adds_wait_and_fan_in_per_call():
    partials = HolderPartials()
    partials.served(10, 2e-6, 3)
    partials.served(5, 0.0, 1)
    assert partials.queued_s == pytest.approx(2e-5)
    assert partials.fan_in_calls == 35 and partials.max_fan_in == 3


def test_a_lone_requester_on_an_idle_holder_waits_nothing_and_shares_nothing(make_engine):
    env = simpy.Environment()
    holder, req = make_engine(env, 1), make_engine(env, 0, exchange=_exchange(), steps_per_event=8)
    req.submit(Sequence(0, 100, 40, routes=(RouteShare(holder, 4096.0),)))
    env.run()
    partials = holder.partials
    assert partials.calls == pytest.approx(FakeStep.layers * 40)
    assert partials.queued_s == 0 and partials.max_fan_in == 1
    assert partials.fan_in_calls == pytest.approx(partials.calls)


def test_wait_on_a_busy_holder_is_what_the_requesters_log_charged(make_engine):
    """Inline on a busy holder a call waits for its current layer: the holder's summed wait equals the
    requester log's holder waits (per iteration, times the iterations each event ran, cuts included)."""
    env = simpy.Environment()
    holder = make_engine(env, 1, steps_per_event=1)
    req = make_engine(env, 0, exchange=_exchange(), steps_per_event=64)
    for i in range(4):
        holder.submit(Sequence(100 + i, 200, 80))
    req.submit(Sequence(0, 100, 120, routes=(RouteShare(holder, 20000.0),)))
    _submit_at(env, req, Sequence(1, 50, 10), 0.02)        # cuts a 64-iteration event
    env.run()
    assert req.cuts > 0
    assert holder.partials.queued_s > 0
    assert holder.partials.queued_s == pytest.approx(_logged_wait(req), rel=1e-12)


def test_two_requesters_routing_at_once_share_the_holders_calls(make_engine):
    env = simpy.Environment()
    ex = _exchange()
    holder = make_engine(env, 2)
    requesters = [make_engine(env, i, exchange=ex, steps_per_event=1) for i in range(2)]
    for i, req in enumerate(requesters):
        req.submit(Sequence(i, 100, 60, routes=(RouteShare(holder, 8192.0),)))
    env.run()
    partials = holder.partials
    assert partials.max_fan_in == 2
    assert 1 < partials.fan_in_calls / partials.calls <= 2
    assert partials.queued_s == pytest.approx(sum(_logged_wait(req) for req in requesters), rel=1e-12)


def test_busy_time_is_the_sum_of_the_engines_events(make_engine):
    """busy_s counts each event once at its real length: cut events and events lengthened by partial work
    that began during them (absorbed) included."""
    env = simpy.Environment()
    holder = make_engine(env, 1, steps_per_event=64)
    req = make_engine(env, 0, exchange=_exchange(), steps_per_event=64)
    for i in range(4):
        holder.submit(Sequence(100 + i, 200, 300))
    _submit_at(env, req, Sequence(0, 2000, 100, routes=(RouteShare(holder, 400000.0),)), 0.05)
    _submit_at(env, holder, Sequence(9, 50, 10), 0.07)
    env.run()
    for engine in (holder, req):
        assert engine.busy_s > 0
        assert engine.busy_s == pytest.approx(float(np.sum(engine.log.cols["duration_s"])), rel=1e-12)
    assert holder.cuts > 0 and holder.partials.charged_s > 0
