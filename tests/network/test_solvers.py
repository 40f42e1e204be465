"""The solver registry (simroute/network/solvers/): every registered mode gives the max-min rates counted by hand,
an unknown mode is refused by name, and a solver defined here is picked up with no edit elsewhere."""

from __future__ import annotations

import math
from collections.abc import Iterator
from enum import Enum

import pytest
import simpy

from simroute.errors import ConfigurationError, UnknownNameError
from simroute.network import SOLVERS, FlowEngine, SolverMode, maxmin_rates, register_solver
from simroute.network.flows import ActiveFlow
from simroute.network.kernels import compiled_available
from simroute.network.solvers import Solver, solver_class

from netstub import StubTopology

# Hand-counted cases: (link capacities, flows as (src, dst, link ids, rate cap), max-min rates in flow order).
CASES = {
    # link 1 (4 B/s) halves between the two flows crossing it; the first flow takes what link 0 leaves: 10 - 2
    "two links": ([10.0, 4.0], [("a", "b", (0,), None), ("c", "d", (0, 1), None), ("e", "f", (1,), None)],
                  [8.0, 2.0, 2.0]),
    # a flow capped at 2 B/s leaves 12 - 2 = 10 to the other two
    "rate cap": ([12.0], [("a", "b", (0,), None), ("a", "b", (0,), 2.0), ("c", "d", (0,), None)],
                 [5.0, 2.0, 5.0]),
    # parking lot 6 / 9 / 12: the long flow is held to 6 / 2 = 3 on link 0; link 1 leaves 9 - 3 = 6 to its
    # own flow; link 2 leaves 12 - 3 = 9 to its two (same pair, so one group), 4.5 each
    "parking lot": ([6.0, 9.0, 12.0], [("a", "b", (0, 1, 2), None), ("c", "d", (0,), None), ("e", "f", (1,), None),
                                        ("g", "h", (2,), None), ("g", "h", (2,), None)],
                    [3.0, 3.0, 6.0, 4.5, 4.5]),
}


def _engine(mode: Enum | str, case: str) -> tuple[simpy.Environment, FlowEngine, list[simpy.Event]]:
    capacities, flows, _rates = CASES[case]
    topology = StubTopology(capacities, {(src, dst): links for src, dst, links, _cap in flows})
    env = simpy.Environment()
    engine = FlowEngine(env, topology, mode=mode)
    events = [engine.transfer(src, dst, 60.0, rate_cap_Bps=cap) for src, dst, _links, cap in flows]
    env.run(until=1e-9)
    return env, engine, events


def _modes() -> list[Enum]:
    return [mode for mode in SOLVERS if mode is not SolverMode.ONLINE or compiled_available()]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", _modes(), ids=lambda mode: mode.value)
def test_every_registered_mode_gives_the_hand_counted_rates(mode, case):
    _env, engine, _events = _engine(mode, case)
    assert engine.mode is mode                                   # pinned: no hand-over to another solver
    rates = engine.flow_rates()
    assert [rates[fid] for fid in sorted(rates)] == CASES[case][2]


@pytest.mark.parametrize("mode", _modes(), ids=lambda mode: mode.value)
def test_every_registered_mode_finishes_the_flows_when_counted_by_hand(mode):
    # two links, 60 B each: the first flow finishes at 60 / 8 = 7.5 s; the two on link 1 keep 2 B/s each
    # (link 1 still halves), so they finish at 60 / 2 = 30 s
    env, engine, events = _engine(mode, "two links")
    env.run()
    assert [event.value.end for event in events] == pytest.approx([7.5, 30.0, 30.0], rel=1e-12)
    assert engine.n_active == 0 and engine.flow_rates() == {}


@pytest.mark.parametrize("mode", _modes(), ids=lambda mode: mode.value)
def test_every_registered_mode_keeps_the_link_state_the_message_model_reads(mode):
    # one 12 B/s link, flows of 12, 60 and 60 B: 4 B/s each until the first finishes at 3 s, then 6 B/s each;
    # a new flow's share is then max(12 - 12, 12 / (2 + 1)) = 4, and the others finish at 3 + 48 / 6 = 11 s
    env = simpy.Environment()
    engine = FlowEngine(env, StubTopology([12.0], {("a", "b"): (0,)}), mode=mode)
    events = [engine.transfer("a", "b", nbytes) for nbytes in (12.0, 60.0, 60.0)]
    env.run(until=1e-9)
    assert engine.link_share(0) == 3.0 and engine.bulk.link_n[0] == 3
    env.run(until=5.0)
    assert engine.link_share(0) == 4.0 and engine.bulk.link_n[0] == 2 and engine.bulk.load[0] == 12.0
    env.run()
    assert [event.value.end for event in events] == pytest.approx([3.0, 11.0, 11.0], rel=1e-12)
    assert engine.link_share(0) == 12.0 and engine.bulk.link_n[0] == 0


def test_a_mode_given_by_its_value_is_the_same_solver():
    assert solver_class("arrays") is solver_class(SolverMode.ARRAYS) is SOLVERS[SolverMode.ARRAYS]
    _env, engine, _events = _engine("objects", "rate cap")
    assert engine.mode is SolverMode.OBJECTS


def test_an_unknown_mode_is_refused_by_name():
    with pytest.raises(UnknownNameError, match="unknown solver mode 'simplex'; valid: .*arrays.*objects"):
        solver_class("simplex")
    with pytest.raises(UnknownNameError, match="solver mode 'simplex'"):
        FlowEngine(simpy.Environment(), StubTopology([1.0], {("a", "b"): (0,)}), mode="simplex")
    with pytest.raises(UnknownNameError, match="unknown backend 'simplex'"):
        FlowEngine(simpy.Environment(), StubTopology([1.0], {("a", "b"): (0,)}), backend="simplex")


def test_the_online_core_is_refused_where_it_cannot_run():
    with pytest.raises(ConfigurationError, match="online"):
        FlowEngine(simpy.Environment(), StubTopology([1.0], {("a", "b"): (0,)}), mode=SolverMode.ONLINE,
                   rate_tolerance=1e-3)


# ---- a solver from outside the package ----------------------------------------------------------------
class ToyMode(Enum):
    FROM_SCRATCH = "from-scratch"


class FromScratch(Solver):
    """Every step re-solves every flow in flight with the textbook reference (`maxmin_rates`); each flow's
    `finish_work` is its bytes to go."""

    mode = ToyMode.FROM_SCRATCH

    def __init__(self, host) -> None:
        super().__init__(host)
        self.flows: list[ActiveFlow] = []
        self.rates: list[float] = []
        self.last_t = 0.0

    def step(self, now: float, starts: list[ActiveFlow]) -> Enum | None:
        for flow, rate in zip(self.flows, self.rates):
            flow.finish_work -= rate * (now - self.last_t)
        self.last_t = now
        done = [flow for flow in self.flows if flow.finish_work <= 1e-9 * flow.nbytes]
        self.flows = [flow for flow in self.flows if flow not in done] + starts
        for flow in starts:
            self.started(flow, now)
        for flow in done:
            self.host.complete(flow, now + flow.latency)
        self.bulk.version += 1
        self.rates = maxmin_rates([flow.links for flow in self.flows], self.bulk.cap,
                                  [None if flow.cap == math.inf else flow.cap for flow in self.flows])
        if self.flows:
            self.host.schedule_wake(now + min(flow.finish_work / rate for flow, rate in zip(self.flows, self.rates)),
                                    now)
        return None

    def flow_rates(self) -> dict[int, float]:
        return {flow.fid: rate for flow, rate in zip(self.flows, self.rates)}

    def active_flows(self) -> list[tuple[int, tuple[int, ...], float]]:
        return [(flow.fid, flow.links, flow.cap) for flow in self.flows]


@pytest.fixture
def toy() -> Iterator[type[Solver]]:
    register_solver(FromScratch)
    try:
        yield FromScratch
    finally:
        SOLVERS.pop(ToyMode.FROM_SCRATCH)


def test_a_solver_defined_here_is_picked_up_by_the_registry(toy):
    assert solver_class("from-scratch") is toy and ToyMode.FROM_SCRATCH in SOLVERS
    for case, (_capacities, _flows, want) in CASES.items():
        env, engine, events = _engine(ToyMode.FROM_SCRATCH, case)
        assert isinstance(engine.solver, toy)
        rates = engine.flow_rates()
        assert [rates[fid] for fid in sorted(rates)] == want, case
    env, engine, events = _engine("from-scratch", "two links")
    env.run()
    assert [event.value.end for event in events] == pytest.approx([7.5, 30.0, 30.0], rel=1e-12)
    with pytest.raises(ValueError, match="registered twice"):
        register_solver(FromScratch)
