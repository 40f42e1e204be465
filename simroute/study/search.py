"""The capacity search of a study: a coarse grid over the whole range, then refinement at every boundary.

SLO conditions are read and judged in one place, simroute/sim/slo.py (re-exported here for the study code). A
search never assumes that more of a resource (or less load) helps: it probes `coarse` values spread over the
range (both ends included), then bisects every adjacent pair whose verdicts differ until they are `tolerance`
apart, and reports the answer (the smallest feasible value for `min`, the largest for `max`) together with every
non-monotone edge it saw (a feasible probe with an infeasible one on its good side, e.g. 1 host meets the SLO
and 8 do not). A probe is feasible when every seed's run meets the SLO (`SLO.met`). With `coarse: 2` and a
monotone metric it probes exactly what a bisection would (Vidur's capacity search).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from simroute.sim.slo import FRACTIONS, OPS, Condition, metric_range, parse  # noqa: F401 - re-exported
from simroute.sim.slo import parse_condition as parse_slo
from simroute.sim.slo import served as finished


class Goal(StrEnum):
    """Which end of a search's range is good (a study's `search.goal`); the values are the YAML's words."""

    MAX = "max"     # the largest value meeting the SLO (load: feasible below the answer)
    MIN = "min"     # the smallest value meeting the SLO (holders, replicas, hosts: feasible above it)


class SearchStatus(StrEnum):
    """How one group's search ended (search.json's `status`)."""

    RUNNING = "running"
    FOUND = "found"                 # refined to within the tolerance
    BOUND = "bound"                 # even the range's bad end meets the SLO: the answer is that end
    INFEASIBLE = "infeasible"       # no probe meets it
    INCOMPLETE = "incomplete"       # stopped (max_points) before the search ended


def meets(rows: list[dict[str, Any]], slo: tuple[str, ...] | str) -> bool:
    """Every seed's row served (`finished`) and meeting every condition of the SLO."""
    judged = parse(slo)
    return bool(rows) and all(judged.met(row) for row in rows)


@dataclass
class Refinement:
    """The state of one group's search; `probes()` says what to run next (empty once it has ended), `observe()`
    takes the verdicts. Assumes nothing of the metric's shape between probes."""

    goal: Goal
    lo: float
    hi: float
    integer: bool
    tolerance: float
    coarse: int = 2
    seen: dict[float, bool] = field(default_factory=dict)
    answer: float | None = None
    done: bool = False
    status: SearchStatus = SearchStatus.RUNNING

    def value(self, probe: float) -> float:
        return float(int(round(probe))) if self.integer else float(probe)

    def grid(self) -> list[float]:
        """The coarse probes: `coarse` values over [lo, hi], geometric where the range spans a factor of 4 or more
        above zero (host counts: 1, 2, 3, 5, 8), else even; both ends always."""
        count = max(2, int(self.coarse))
        low, high = self.value(self.lo), self.value(self.hi)
        if low > 0 and high / low >= 4:
            values = [low * (high / low) ** (index / (count - 1)) for index in range(count)]
        else:
            values = [low + (high - low) * index / (count - 1) for index in range(count)]
        return sorted({self.value(value) for value in values} | {low, high})

    def probes(self) -> list[float]:
        if self.done:
            return []
        pending = [value for value in self.grid() if value not in self.seen]
        if pending:
            return pending
        order = sorted(self.seen)
        out = []
        for below, above in zip(order, order[1:]):
            if self.seen[below] != self.seen[above] and above - below > self.tolerance:
                mid = self.value(math.floor((below + above) / 2) if self.integer else (below + above) / 2)
                if below < mid < above:
                    out.append(mid)
        if not out:
            self._conclude()
        return out

    def observe(self, value: float, feasible: bool) -> None:
        self.seen[value] = feasible

    def _conclude(self) -> None:
        feasible = [value for value, met in self.seen.items() if met]
        self.done = True
        if not feasible:
            self.answer, self.status = None, SearchStatus.INFEASIBLE
            return
        self.answer = min(feasible) if self.goal == Goal.MIN else max(feasible)
        bad_end = self.value(self.lo) if self.goal == Goal.MIN else self.value(self.hi)
        self.status = SearchStatus.BOUND if self.answer == bad_end else SearchStatus.FOUND

    def nonmonotone(self) -> list[tuple[float, float]]:
        """Adjacent probes whose verdicts go the wrong way: (feasible, infeasible) with the infeasible one on the
        good side (more of the resource for `min`, less load for `max`)."""
        order = sorted(self.seen)
        out = []
        for below, above in zip(order, order[1:]):
            if self.goal == Goal.MIN and self.seen[below] and not self.seen[above]:
                out.append((below, above))
            if self.goal == Goal.MAX and not self.seen[below] and self.seen[above]:
                out.append((above, below))
        return out

    def max_probes(self) -> int:
        """An estimate of the probes (for the progress bar's total): the grid and one bisection."""
        span = (self.hi - self.lo) / self.tolerance
        return len(self.grid()) + max(0, math.ceil(math.log2(max(span, 1.0))))
