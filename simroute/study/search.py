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
from typing import Any

from simroute.defaults import MIN_COMPLETION
from simroute.study.store import METRICS, STATS

OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}
_RE = re.compile(r"^\s*(?:(mean|p50|p95|p99|max)\s+)?([a-z_]+)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class Condition:
    column: str
    op: str
    value: float

    def holds(self, row: dict[str, Any]) -> bool:
        v = row.get(self.column)
        return v is not None and not (isinstance(v, float) and math.isnan(v)) and OPS[self.op](v, self.value)

    def __str__(self) -> str:
        return f"{self.column} {self.op} {self.value:g}"


def parse_slo(text: str) -> Condition:
    """`p99 ttft_ms <= 50` -> Condition('ttft_ms_p99', '<=', 50.0); raises ValueError with the valid forms."""
    m = _RE.match(text)
    if not m:
        raise ValueError(f"cannot read SLO '{text}'; write e.g. 'p99 ttft_ms <= 50' or 'slo_attainment >= 0.99'")
    stat, metric, op, value = m.groups()
    col = f"{metric}_{stat}" if stat else metric
    if col not in METRICS:
        latency = [f"{s} {m}" for m in ("ttft_ms", "tpot_ms", "e2e_ms") for s in STATS]
        raise ValueError(f"unknown SLO metric '{col}'; valid: {', '.join(latency)} or a column such as "
                         "slo_attainment, completed, bytes_fetch")
    try:
        return Condition(col, op, float(value))
    except ValueError:
        raise ValueError(f"not a number: '{value}' in SLO '{text}'") from None


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
    conds = [parse_slo(s) for s in slo]
    return bool(rows) and all(finished(r) and all(c.holds(r) for c in conds) for r in rows)


@dataclass
class Bisection:
    """The state of one group's search; `probes()` says what to run next, `observe()` takes the verdicts."""

    goal: str
    lo: float
    hi: float
    integer: bool
    tolerance: float
    seen: dict[float, bool] = field(default_factory=dict)
    answer: float | None = None
    done: bool = False
    status: str = "running"     # "found", "bound" (answer is the range end), "infeasible"

    def value(self, x: float) -> float:
        return float(int(round(x))) if self.integer else float(x)

    def probes(self) -> list[float]:
        if self.done:
            return []
        lo, hi = self.value(self.lo), self.value(self.hi)
        ends = [x for x in (lo, hi) if x not in self.seen]
        if ends:
            return ends
        mid = math.floor((lo + hi) / 2) if self.integer else (lo + hi) / 2
        return [self.value(mid)]

    def observe(self, x: float, feasible: bool) -> None:
        self.seen[x] = feasible
        lo, hi = self.value(self.lo), self.value(self.hi)
        if lo not in self.seen or hi not in self.seen:
            return
        good_end, bad_end = (lo, hi) if self.goal == "max" else (hi, lo)
        if x in (lo, hi) and len(self.seen) <= 2:
            if not self.seen[good_end]:
                return self._finish(None, "infeasible")
            if self.seen[bad_end]:
                return self._finish(bad_end, "bound")
        elif x not in (lo, hi):
            ok_side = (x if feasible else None)
            if self.goal == "max":
                self.lo, self.hi = (x, self.hi) if ok_side is not None else (self.lo, x)
            else:
                self.lo, self.hi = (self.lo, x) if ok_side is not None else (x, self.hi)
        if self.value(self.hi) - self.value(self.lo) <= self.tolerance:
            self._finish(self.value(self.lo if self.goal == "max" else self.hi), "found")

    def _finish(self, answer: float | None, status: str) -> None:
        self.answer, self.status, self.done = answer, status, True

    def max_probes(self) -> int:
        """An upper bound on probes (for the progress bar's total)."""
        span = (self.hi - self.lo) / self.tolerance
        return 2 + max(0, math.ceil(math.log2(max(span, 1.0))))
