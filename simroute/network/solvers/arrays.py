"""Array mode (many groups): group state lives in columns (`GroupColumns`: links, flows, cap, rate, bottleneck,
work clock, last update, next finish work, completion time) and, compiled, which groups use each link. A
re-rating is the backend's incremental re-solve (`_compiled.cascade_numba`: progressive filling in level order
over the groups whose rate can move) or, once that involves more than `cascade_limit` of the groups, a
from-scratch solve by the backend (`kernels`: numba, or the NumPy reference, which always solves in full); a
kernel commits the groups whose rate moved and integrates their links' telemetry; the next completion is an
array reduction. In a dense fabric one start can move a large share of the groups (tens of percent at 10k flows
on the 1024-GPU fat-tree), which is where the full solve takes over.

In tolerance mode (`rate_tolerance` > 0) a group keeps its committed rate while the exact rate is within that
relative distance (full solves only), and the largest deviation committed is counted in `bulk.max_rate_error`.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from simroute.network.columns import GroupColumns
from simroute.network.flows import SAME, ActiveFlow, completion_time, instant_end
from simroute.network.maxmin import Group
from simroute.network.solvers.base import Solver, SolverMode, register_solver
from simroute.network.solvers.groups import GroupSolver
from simroute.network.telemetry import FULL_LOAD


@register_solver
class ArraySolver(GroupSolver):
    """Groups in columns, re-solved by the backend's kernels; hands back to object mode below `arrays_off`
    groups (`SolverSettings`)."""

    mode = SolverMode.ARRAYS

    def enter(self, now: float, previous: Solver | None) -> None:
        """Move the groups into columns, then one full solve."""
        bulk = self.bulk
        groups = list(bulk.groups.values())
        width = max([len(group.links) for group in groups] + [1])
        columns = GroupColumns(len(bulk.cap), max(1024, 2 * len(groups)), width, self.host.backend)
        for group in groups:
            self.advance(group, now)
            columns.add(group)
        bulk.columns = columns
        bulk.recapped.clear()                              # the full solve below reads the residual as it is
        bulk.load = np.array(list(bulk.load) + [0.0])      # + the sentinel's slot (never read)
        self.telemetry.set_array_mode(True)
        if groups:
            self.full_solve(now)
            self.host.schedule_wake(float(columns.due[:len(columns.groups)].min()), now)

    def leave(self, now: float) -> None:
        """Columns written back into the group objects, the load becomes a list again."""
        bulk = self.bulk
        columns = bulk.columns
        for slot in range(len(columns.groups)):
            self.advance_slot(slot, now)
        columns.write_back()
        bulk.columns = None
        bulk.load = bulk.load[:-1].tolist()
        self.telemetry.set_array_mode(False)

    def step(self, now: float, starts: list[ActiveFlow]) -> Enum | None:
        """Completions due now (array reduction), pending starts, one re-solve, commit by kernel."""
        bulk = self.bulk
        columns = bulk.columns
        assert columns is not None
        limit = instant_end(now)
        count = len(columns.groups)
        due = columns.due[:count]
        finishing = count > 0 and due.min() <= limit
        recapped = bool(bulk.recapped)
        bulk.recapped.clear()                     # a charge moved: one full solve on the new residual
        if not finishing and not starts and not recapped:   # a stale wake-up: nothing changed, nothing to solve
            if count:
                self.host.schedule_wake(float(due.min()), now)
            return None
        seeds: list[Group] = []
        dirty: list[int] = []
        if finishing:
            for slot in sorted(np.flatnonzero(due <= limit).tolist(), reverse=True):
                group = columns.groups[slot]
                self.finish_slot(group, now)
                if group.n:
                    seeds.append(group)
                else:
                    dirty.extend(group.links)
        for flow in self.take_starts(starts):
            group = self.group_for(flow, now)
            self.advance_slot(group.slot, now)
            group.work = float(columns.work[group.slot])
            group.rate = float(columns.rate[group.slot])
            self.join(group, flow, now)
            self.refresh_slot(group, now)
            seeds.append(group)
        if len(bulk.groups) < self.settings.arrays_off:
            return SolverMode.OBJECTS
        if recapped or not self.cascade(now, seeds, dirty):
            self.full_solve(now)
        count = len(columns.groups)
        if count:
            self.host.schedule_wake(float(columns.due[:count].min()), now)
        return None

    def advance_slot(self, slot: int, now: float) -> None:
        columns = self.bulk.columns
        elapsed = now - columns.last_t[slot]
        if elapsed > 0:
            columns.work[slot] += columns.rate[slot] * elapsed
            columns.last_t[slot] = now

    def refresh_slot(self, group: Group, now: float) -> None:
        """Keep a group's flow count, next finish and completion time in its column after a change."""
        columns, slot = self.bulk.columns, group.slot
        columns.flows[slot] = group.n
        columns.next_work[slot] = next_work = group.flows[0][0]
        columns.due[slot] = completion_time(now, next_work, columns.work[slot], columns.rate[slot])

    def finish_slot(self, group: Group, now: float) -> None:
        bulk = self.bulk
        columns, slot = bulk.columns, group.slot
        self.advance_slot(slot, now)
        done = self.pop_done(group, float(columns.work[slot]))
        rate = float(columns.rate[slot])
        self.links_change(group.links, -len(done), rate, now)
        group.n -= len(done)
        bulk.n_active -= len(done)
        if group.n == 0:
            self.drop_group(group)
        else:
            self.refresh_slot(group, now)
        complete = self.host.complete
        for flow in done:
            complete(flow, now + flow.latency)

    def cascade(self, now: float, seeds: list[Group], dirty: list[int]) -> bool:
        """Re-solve incrementally (the backend's cascade: only groups whose rate can move); False when there
        is no cascade kernel, in tolerance mode, or when it reaches `cascade_limit` of the groups."""
        bulk, settings = self.bulk, self.settings
        columns = bulk.columns
        backend = self.host.backend
        count = len(columns.groups)
        if backend.cascade is None or settings.rate_tolerance > 0 or count == 0:
            return False
        slots = np.array([group.slot for group in seeds if group.slot >= 0], dtype=np.int64)
        limit = max(settings.cascade_floor, int(settings.cascade_limit * count))
        ok, solved, rate, bn = backend.cascade(
            slots, np.array(dirty, dtype=np.int64), columns.links[:, :count], columns.flows[:count],
            columns.cap[:count], columns.rate[:count], columns.bn[:count], bulk.capacity_padded, bulk.load,
            columns.member, columns.deg, limit, SAME, *columns.cascade_scratch())
        if not ok:
            bulk.cascade_aborts += 1
            return False
        bulk.rerates += 1
        bulk.version += 1
        bulk.rerated_groups += len(solved)
        self.commit_slots(now, solved, rate, bn, SAME)
        return True

    def full_solve(self, now: float) -> None:
        bulk = self.bulk
        columns = bulk.columns
        count = len(columns.groups)
        bulk.rerates += 1
        bulk.full_solves += 1
        bulk.rerated_groups += count
        bulk.version += 1
        if count == 0:
            return
        tolerance = self.settings.rate_tolerance
        rate, bn = self.host.backend.fill_groups(columns.links[:, :count], columns.flows[:count],
                                                 columns.cap[:count], bulk.capacity_padded)
        self.commit_slots(now, np.arange(count, dtype=np.int64), rate, bn, max(SAME, tolerance))
        if tolerance > 0:
            with np.errstate(divide="ignore", invalid="ignore"):
                error = np.abs(columns.rate[:count] - rate) / rate
            worst = float(np.nanmax(error, initial=0.0))
            bulk.max_rate_error = max(bulk.max_rate_error, worst)

    def commit_slots(self, now: float, slots: np.ndarray, rate: np.ndarray, bn: np.ndarray, same: float) -> None:
        """Commit re-solved groups by kernel: work clocks, rates, completion times, link load, and the
        telemetry of the links whose load moves (integrated in the same pass, in its arrays)."""
        columns, telemetry = self.bulk.columns, self.telemetry
        touched, starts, loads = self.host.backend.commit_slots(
            now, slots, rate, bn, columns.links, columns.flows, columns.rate, columns.bn, columns.work,
            columns.last_t, columns.next_work, columns.due, self.bulk.load, telemetry._sat_cap, telemetry._bytes,
            telemetry._saturated, telemetry._link_t, same, FULL_LOAD)
        if telemetry.record_series and touched.size:
            telemetry.record_intervals(touched, starts, loads, now)
