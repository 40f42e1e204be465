"""Object mode (few groups): groups are Python objects; a start or finish re-solves the changed groups and those
bottlenecked on their links over what the others leave (`maxmin.fill`), and grows that set while an untouched
group loses its bottleneck (SimGrid "lazy" style, refined). At the fixpoint every group has a valid bottleneck,
which is exactly max-min fairness. Completions sit in one heap with version stamps.

In tolerance mode (`rate_tolerance` > 0) the cascade stops once every violated bottleneck is within the slack.
"""

from __future__ import annotations

import heapq
from enum import Enum

from simroute.network.flows import ActiveFlow, instant_end
from simroute.network.maxmin import Group, LinkId, fill
from simroute.network.solvers.base import Solver, SolverHost, SolverMode, register_solver
from simroute.network.solvers.groups import GroupSolver


class ObjectSolver(GroupSolver):
    """Incremental progressive filling over group objects; hands over to array mode or the online core as the
    group count grows (`SolverSettings`)."""

    mode = SolverMode.OBJECTS

    def __init__(self, host: SolverHost) -> None:
        super().__init__(host)
        self.heap: list[tuple[float, int, int, Group]] = []
        self.seq = 0
        self.stamp = 0

    def enter(self, now: float, previous: Solver | None) -> None:
        """Solve every group from its committed state and queue its next completion."""
        groups = self.bulk.groups
        if groups:
            self.rerate(set(groups.values()), set(), now)
            self.reschedule_all(now)

    def leave(self, now: float) -> None:
        self.heap.clear()
        self.host.reset_wake()

    def step(self, now: float, starts: list[ActiveFlow]) -> Enum | None:
        """Handle every completion due now and every pending start, then re-rate once."""
        heap = self.heap
        seeds: set[Group] = set()
        dirty: set[LinkId] = set()
        bulk, complete = self.bulk, self.host.complete
        limit = instant_end(now)
        while heap and heap[0][0] <= limit:
            _t, version, _seq, group = heapq.heappop(heap)
            if version != group.version or group.n == 0:
                continue
            self.advance(group, now)
            done = self.pop_done(group, group.work)
            self.links_change(group.links, -len(done), group.rate, now)
            group.n -= len(done)
            bulk.n_active -= len(done)
            if group.n == 0:
                self.drop_group(group)
                dirty.update(group.links)
                seeds.discard(group)
            else:
                seeds.add(group)
            for flow in done:
                complete(flow, now + flow.latency)
        for flow in self.take_starts(starts):
            group = self.group_for(flow, now)
            self.advance(group, now)
            self.join(group, flow, now)
            seeds.add(group)
        if bulk.recapped:                             # message charges moved: those links' groups re-solve
            link_groups, advance = bulk.link_groups, self.advance
            for link in bulk.recapped:
                dirty.add(link)
                for group in link_groups[link]:
                    advance(group, now)               # a seed's completion is re-queued from its work now
                    seeds.add(group)
            bulk.recapped.clear()
        settings, count = self.settings, len(bulk.groups)
        if settings.want_core and count >= settings.core_on:
            return SolverMode.ONLINE
        if count >= settings.arrays_on:               # many groups: array mode, starting with a full solve
            return SolverMode.ARRAYS
        if seeds or dirty:
            self.rerate(seeds, dirty, now)
        while heap and heap[0][1] != heap[0][3].version:
            heapq.heappop(heap)
        if len(heap) > 3 * len(bulk.groups) + 1024:     # drop stale entries
            heap[:] = [entry for entry in heap if entry[1] == entry[3].version]
            heapq.heapify(heap)
        if heap:
            self.host.schedule_wake(heap[0][0], now)
        return None

    def rerate(self, seeds: set[Group], dirty: set[LinkId], now: float) -> None:
        """Re-solve the changed groups; grow the set while an untouched group loses its bottleneck.

        One loop (solve, then check the links whose share moved) kept together: splitting it would pass
        the tentative state between functions on every round.
        """
        self.stamp += 1
        stamp = self.stamp
        bulk = self.bulk
        bulk.version += 1
        solving = [group for group in seeds if group.n > 0]
        check: set[LinkId] = set(dirty)
        for group in solving:
            group.mark = stamp
            group.tent_rate, group.tent_bn = group.rate, group.bn
            check.update(group.links)
        # typed locals: the compiled build (simroute.compiled) reads the groups' fields and the capacities natively
        cap: list[float] = bulk.residual
        link_groups: list[set[Group]] = bulk.link_groups
        slack = self.settings.slack
        # Groups bottlenecked on a link a seed or a dropped group uses are the likeliest to move: solving them
        # in the first round saves a fill round most of the time (solving more groups is always exact).
        for link in check:
            for group in link_groups[link]:
                if group.bn == link and group.mark != stamp:
                    group.mark = stamp
                    group.tent_rate, group.tent_bn = group.rate, group.bn
                    solving.append(group)
        while True:
            level = fill(solving, cap, bulk.load) if solving else {}
            bulk.rerates += 1
            for group in solving:
                if group.tent_rate != group.new_rate or group.tent_bn != group.new_bn:
                    group.tent_rate, group.tent_bn = group.new_rate, group.new_bn
                    check.update(group.links)
            grow: list[Group] = []
            for link in check:
                members = link_groups[link]
                if not members:
                    continue
                total = top = 0.0
                for group in members:
                    rate = group.new_rate if group.mark == stamp else group.rate
                    total += rate * group.n
                    if rate > top:
                        top = rate
                full = total >= cap[link] * (1 - slack)
                link_level = level.get(link)
                for group in members:
                    if group.mark == stamp:
                        continue
                    if (group.bn == link and (not full or group.rate < top * (1 - slack))) or \
                            (full and link_level is not None and group.rate > link_level * (1 + slack) + 1e-6):
                        group.mark = stamp
                        grow.append(group)
            if not grow:
                break
            check = set()
            for group in grow:
                group.tent_rate, group.tent_bn = group.rate, group.bn
            solving.extend(grow)
        self.commit(solving, seeds, now)

    def commit(self, solved: list[Group], seeds: set[Group], now: float) -> None:
        self.bulk.rerated_groups += len(solved)
        touch_path, heap, load = self.telemetry.touch_path, self.heap, self.bulk.load
        for group in solved:
            fresh = group.new_rate
            group.bn = group.new_bn
            changed = fresh != group.rate
            if changed:
                self.advance(group, now)
                delta = (fresh - group.rate) * group.n
                touch_path(group.links, now)
                for link in group.links:
                    load[link] += delta
                group.rate = fresh
            if group.flows and (changed or group in seeds):
                group.version += 1
                self.seq += 1
                if fresh > 0:
                    heapq.heappush(heap, (now + (group.flows[0][0] - group.work) / fresh, group.version,
                                          self.seq, group))

    def reschedule_all(self, now: float) -> None:
        heap = self.heap
        heap.clear()
        for group in self.bulk.groups.values():
            group.version += 1
            self.seq += 1
            if group.rate > 0 and group.flows:
                heap.append((now + (group.flows[0][0] - group.work) / group.rate, group.version, self.seq, group))
        heapq.heapify(heap)
        self.host.reset_wake()
        if heap:
            self.host.schedule_wake(heap[0][0], now)


# filed by a call, not the decorator: a decorated class is no native class for mypyc (simroute.compiled)
register_solver(ObjectSolver)
