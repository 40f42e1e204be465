"""The online core's adaptor: the compiled core (`_online.OnlineCore`) keeps groups, flows, links and their
telemetry clocks in packed buffers and takes one kernel call per engine step (the starts of the instant and the
completions due, re-solved incrementally or in full). This module is what the engine sees of it: entering it
with the flows in flight, the link load and telemetry clocks as views of its buffers, and the flows it finishes.

Exact and without a link series only (the engine enters it only then); once entered it is never left. numba
is imported on entering, not before (a small CLI run never reaches it).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from simroute.network.flows import INF, SAME, ActiveFlow, instant_end
from simroute.network.solvers.base import Solver, SolverHost, SolverMode, register_solver
from simroute.network.solvers.groups import GroupSolver
from simroute.network.telemetry import FULL_LOAD

CORE_ABORT = 2          # the core's status for a cascade past its limit, then a full solve (_online.ST_ABORT)


@register_solver
class OnlineSolver(Solver):
    """The compiled online core (see module docstring)."""

    mode = SolverMode.ONLINE

    def __init__(self, host: SolverHost) -> None:
        super().__init__(host)
        self.core: Any = None
        self.due = INF                  # the core's next completion

    def enter(self, now: float, previous: Solver | None) -> None:
        """Links integrated up to now, every active flow handed to the core with its bytes to go, then one step
        solves them all (from scratch). Link load, flow counts and the telemetry clocks become views of the
        core's buffers."""
        from simroute.network._online import OnlineCore
        bulk = self.bulk
        self.telemetry.flush(now)
        flows = []
        for group in bulk.groups.values():
            GroupSolver.advance(group, now)
            for finish_work, _seq, flow in sorted(group.flows):
                flow.finish_work = max(finish_work - group.work, 0.0)
                flows.append(flow)
        bulk.groups.clear()
        for members in bulk.link_groups:
            members.clear()
        settings = self.settings
        bulk.recapped.clear()             # the core starts from the residual as it is
        self.core = OnlineCore(bulk.residual, cascade_limit=settings.cascade_limit,
                               cascade_floor=settings.cascade_floor, same=SAME, full=FULL_LOAD,
                               on_relayout=self.views)
        self.views()
        if previous is not None:
            self.run(now, flows)

    def leave(self, now: float) -> None:
        raise RuntimeError("the online core is never left")

    def views(self) -> None:
        """Take the views of the core's link fields (again after it grew its buffers)."""
        core, bulk = self.core, self.bulk
        n_links = len(bulk.cap)
        bulk.load = core.field("float", "l_load")                  # + the sentinel's slot (never read)
        bulk.link_n = core.field("int", "l_n")[:n_links]
        self.telemetry.bind_arrays(core.field("float", "l_bytes")[:n_links], core.field("float", "l_sat")[:n_links],
                                   core.field("float", "l_t")[:n_links])

    def step(self, now: float, starts: list[ActiveFlow]) -> Enum | None:
        """Starts of this instant and completions due, in one kernel call; a stale wake-up waits again."""
        bulk = self.bulk
        if bulk.recapped:                 # message charges moved: their links' groups re-solve in this step
            self.core.set_capacity(bulk.recapped, [bulk.residual[link] for link in bulk.recapped])
            bulk.recapped.clear()
        elif not starts and self.due > instant_end(now):
            if self.due < INF:
                self.host.schedule_wake(self.due, now)
            return None
        bulk.steps += 1
        if starts:
            bulk.flow_events += len(starts)
            bulk.n_active += len(starts)
            started = self.started
            for flow in starts:
                started(flow, now)
        self.run(now, starts)
        return None

    def run(self, now: float, starts: list[ActiveFlow]) -> None:
        status, done, next_due, solved = self.core.run(now, starts)
        self.due = next_due
        bulk = self.bulk
        if status > 0:
            bulk.rerates += 1
            bulk.version += 1
            bulk.rerated_groups += solved
            if status == CORE_ABORT:
                bulk.cascade_aborts += 1
                bulk.full_solves += 1
        if done:
            bulk.flow_events += len(done)
            bulk.n_active -= len(done)
            complete = self.host.complete
            for flow in done:
                complete(flow, now + flow.latency)
        if next_due < INF:
            self.host.schedule_wake(next_due, now)

    def flow_rates(self) -> dict[int, float]:
        core = self.core
        rates, owner = core.field("float", "g_rate"), core.field("int", "f_group")
        return {flow.fid: float(rates[owner[flow.slot]]) for flow in core.flows if flow is not None}

    def active_flows(self) -> list[tuple[int, tuple[int, ...], float]]:
        return [(flow.fid, flow.links, flow.cap) for flow in self.core.flows if flow is not None]
