"""Group membership shared by the object- and array-mode solvers: flows with an identical link set and cap form a
group (`maxmin.Group`, one rate); these are the steps that make, join, drain and drop one, keeping the links'
load, flow counts and telemetry in step. The online core keeps its groups in its own buffers instead."""

from __future__ import annotations

import heapq

from mypy_extensions import mypyc_attr

from simroute.network.flows import EPS, ActiveFlow, finish_reached
from simroute.network.maxmin import Group, LinkId
from simroute.network.solvers.base import Solver


@mypyc_attr(allow_interpreted_subclasses=True)     # compiled (simroute.compiled); array mode subclasses it
class GroupSolver(Solver):
    """A solver whose groups live in `bulk.groups` (object and array mode; not registered itself)."""

    def take_starts(self, starts: list[ActiveFlow]) -> list[ActiveFlow]:
        """Count one step and its starts."""
        bulk = self.bulk
        bulk.steps += 1
        bulk.flow_events += len(starts)
        return starts

    def group_for(self, flow: ActiveFlow, now: float) -> Group:
        bulk = self.bulk
        key = (flow.links, flow.cap)
        group = bulk.groups.get(key)
        if group is None:
            group = bulk.groups[key] = Group(key, flow.links, flow.cap)
            group.last_t = now
            for link in flow.links:
                bulk.link_groups[link].add(group)
            if bulk.columns is not None:
                bulk.columns.add(group)
        return group

    def links_change(self, links: tuple[LinkId, ...], flows: int, rate: float, now: float) -> None:
        """`flows` flows at `rate` join (or leave, when negative) these links."""
        telemetry = self.telemetry
        telemetry.touch_path(links, now)
        if flows > 0:
            telemetry.joined.update(links)
        bulk = self.bulk
        load, link_n, delta = bulk.load, bulk.link_n, flows * rate
        for link in links:
            load[link] += delta
            link_n[link] += flows

    def drop_group(self, group: Group) -> None:
        bulk = self.bulk
        if bulk.columns is not None:
            bulk.columns.remove(group)
        del bulk.groups[group.key]
        for link in group.links:
            members = bulk.link_groups[link]
            members.discard(group)
            if not members:
                bulk.load[link] = 0.0
        group.version += 1

    def pop_done(self, group: Group, work: float) -> list[ActiveFlow]:
        """Flows of the group whose finish work is reached (within float noise of the work clock)."""
        flows = group.flows
        done = [heapq.heappop(flows)[2]]
        while flows and finish_reached(flows[0][0], work, EPS):
            done.append(heapq.heappop(flows)[2])
        self.bulk.flow_events += len(done)
        return done

    def join(self, group: Group, flow: ActiveFlow, now: float) -> None:
        """Add a started flow to its group (work clock already advanced to now)."""
        flow.finish_work = group.work + flow.nbytes
        group.seq += 1
        heapq.heappush(group.flows, (flow.finish_work, group.seq, flow))
        group.n += 1
        self.bulk.n_active += 1
        self.links_change(group.links, 1, group.rate, now)
        self.started(flow, now)

    @staticmethod
    def advance(group: Group, now: float) -> None:
        if now > group.last_t:
            group.work += group.rate * (now - group.last_t)
            group.last_t = now

    def flow_rates(self) -> dict[int, float]:
        columns = self.bulk.columns
        out: dict[int, float] = {}
        for group in self.bulk.groups.values():
            rate = group.rate if columns is None else float(columns.rate[group.slot])
            for _work, _seq, flow in group.flows:
                out[flow.fid] = rate
        return out

    def active_flows(self) -> list[tuple[int, tuple[int, ...], float]]:
        return [(flow.fid, group.links, group.cap) for group in self.bulk.groups.values()
                for _work, _seq, flow in group.flows]
