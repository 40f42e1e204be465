"""SLO conditions and the bisection of a capacity search.

An SLO is `[stat] metric op value`: `p99 ttft_ms <= 50`, `mean tpot_ms < 30`, `slo_attainment >= 0.99`.
The search assumes monotonicity, as Vidur's capacity search does: feasible below the answer for `max`
(load), feasible above it for `min` (holders, replicas). A probe is feasible when every seed meets the SLO.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from simroute.defaults import MIN_COMPLETION
from simroute.study.store import METRICS, STATS

OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}


class Goal(StrEnum):
    """Which end of a search's range is good (a study's `search.goal`); the values are the YAML's words."""

    MAX = "max"     # the largest value meeting the SLO (load: feasible below the answer)
    MIN = "min"     # the smallest value meeting the SLO (holders, replicas, hosts: feasible above it)


class SearchStatus(StrEnum):
    """How one group's search ended (search.json's `status`)."""

    RUNNING = "running"
    FOUND = "found"                 # bisected to within the tolerance
    BOUND = "bound"                 # even the range's bad end meets the SLO: the answer is that end
    INFEASIBLE = "infeasible"       # not even the range's good end meets it
    INCOMPLETE = "incomplete"       # stopped (max_points) before the search ended


_RE = re.compile(r"^\s*(?:(mean|p50|p95|p99|max)\s+)?([a-z_]+)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class Condition:
    column: str
    op: str
    value: float

    def holds(self, row: dict[str, Any]) -> bool:
        measured = row.get(self.column)
        if measured is None or (isinstance(measured, float) and math.isnan(measured)):
            return False
        return OPS[self.op](measured, self.value)

    def __str__(self) -> str:
        return f"{self.column} {self.op} {self.value:g}"


def parse_slo(text: str) -> Condition:
    """`p99 ttft_ms <= 50` -> Condition('ttft_ms_p99', '<=', 50.0); raises ValueError with the valid forms."""
    match = _RE.match(text)
    if not match:
        raise ValueError(f"cannot read SLO '{text}'; write e.g. 'p99 ttft_ms <= 50' or 'slo_attainment >= 0.99'")
    stat, metric, comparison, value = match.groups()
    col = f"{metric}_{stat}" if stat else metric
    if col not in METRICS:
        latency = [f"{stat_name} {metric_name}" for metric_name in ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms")
                   for stat_name in STATS]
        raise ValueError(f"unknown SLO metric '{col}'; valid: {', '.join(latency)} or a column such as "
                         "slo_attainment, completed, bytes_fetch, output_tokens_per_s_per_gpu")
    try:
        bound = float(value)
    except ValueError:
        raise ValueError(f"not a number: '{value}' in SLO '{text}'") from None
    if not math.isfinite(bound):
        raise ValueError(f"'{value}' in SLO '{text}' is not a finite number")
    low, high = metric_range(col)
    never = ((comparison == "<=" and bound < low) or (comparison == "<" and bound <= low)
             or (comparison == ">=" and bound > high) or (comparison == ">" and bound >= high))
    if never:
        span = f"{low:g} to {high:g}" if high != math.inf else f"{low:g} or more"
        raise ValueError(f"SLO '{text.strip()}' can never hold: {col} is {span}, so no run could meet it")
    return Condition(col, comparison, bound)


FRACTIONS = frozenset({"slo_attainment", "overloaded", "busiest_holder_work_share"})


def metric_range(column: str) -> tuple[float, float]:
    """The values a point's metric can take: a share is 0 to 1, every other metric (latencies, counts, bytes,
    utilisation, growth ratios) is 0 or more."""
    return (0.0, 1.0) if column in FRACTIONS else (0.0, math.inf)


def finished(row: dict[str, Any]) -> bool:
    """A point that ran, completed at least MIN_COMPLETION of its requests and whose arrivals did not outrun its
    service (`overloaded`, simroute.sim.metrics.overload): only these can meet an SLO. A run that dropped most of
    its requests has the latencies of the few that got through; an overloaded one, latencies set by the trace's
    length."""
    requests, completed = row.get("requests"), row.get("completed")
    return (row.get("status") == "ok" and isinstance(requests, (int, float)) and isinstance(completed, (int, float))
            and not math.isnan(requests) and not math.isnan(completed) and requests > 0
            and completed >= MIN_COMPLETION * requests and row.get("overloaded") != 1.0)


def meets(rows: list[dict[str, Any]], slo: tuple[str, ...]) -> bool:
    """All seeds' rows finished (`finished`) and meet every condition."""
    conds = [parse_slo(text) for text in slo]
    return bool(rows) and all(finished(row) and all(condition.holds(row) for condition in conds) for row in rows)


@dataclass
class Bisection:
    """The state of one group's search; `probes()` says what to run next, `observe()` takes the verdicts."""

    goal: Goal
    lo: float
    hi: float
    integer: bool
    tolerance: float
    seen: dict[float, bool] = field(default_factory=dict)
    answer: float | None = None
    done: bool = False
    status: SearchStatus = SearchStatus.RUNNING

    def value(self, probe: float) -> float:
        return float(int(round(probe))) if self.integer else float(probe)

    def probes(self) -> list[float]:
        if self.done:
            return []
        low, high = self.value(self.lo), self.value(self.hi)
        ends = [end for end in (low, high) if end not in self.seen]
        if ends:
            return ends
        mid = math.floor((low + high) / 2) if self.integer else (low + high) / 2
        return [self.value(mid)]

    def observe(self, value: float, feasible: bool) -> None:
        self.seen[value] = feasible
        low, high = self.value(self.lo), self.value(self.hi)
        if low not in self.seen or high not in self.seen:
            return
        good_end, bad_end = (low, high) if self.goal == Goal.MAX else (high, low)
        if value in (low, high) and len(self.seen) <= 2:
            if not self.seen[good_end]:
                return self._finish(None, SearchStatus.INFEASIBLE)
            if self.seen[bad_end]:
                return self._finish(bad_end, SearchStatus.BOUND)
        elif value not in (low, high):
            ok_side = (value if feasible else None)
            if self.goal == Goal.MAX:
                self.lo, self.hi = (value, self.hi) if ok_side is not None else (self.lo, value)
            else:
                self.lo, self.hi = (self.lo, value) if ok_side is not None else (value, self.hi)
        if self.value(self.hi) - self.value(self.lo) <= self.tolerance:
            self._finish(self.value(self.lo if self.goal == Goal.MAX else self.hi), SearchStatus.FOUND)

    def _finish(self, answer: float | None, status: SearchStatus) -> None:
        self.answer, self.status, self.done = answer, status, True

    def max_probes(self) -> int:
        """An upper bound on probes (for the progress bar's total)."""
        span = (self.hi - self.lo) / self.tolerance
        return 2 + max(0, math.ceil(math.log2(max(span, 1.0))))
