"""The one SLO definition of simroute: what an SLO is, its default, how it is read and how a run is judged by it.

`simroute run` (summary.json `slo`), `simroute plan` and every study (their `slo_attainment` column, frontier and
search) read SLOs here and nowhere else, so every report measures against the SLO the user gave:

- An SLO is one or more conditions `[stat] metric op value` joined by `and` (or given as a list / a repeated
  `--slo`): `p99 ttft_ms <= 2000 and p99 tpot_ms <= 50`. A condition reads one column of a run's flat metrics
  (`METRICS`, `flatten`): a latency statistic (`mean|p50|p95|p99|max` of `ttft_ms|tpot_ms|e2e_ms|itl_ms`) or any
  other column (`slo_attainment >= 0.99`, `output_tokens_per_s_per_gpu >= 150`, `bytes_fetch <= 1e10`).
- **Attainment** is per request: the share of completed requests whose own TTFT, TPOT (requests with more than
  one output token) and end-to-end latency satisfy the SLO's conditions on those metrics, whatever their
  statistic (`p99 ttft_ms <= 2000` asks each request for TTFT <= 2000 ms; DistServe's goodput reads an SLO
  the same way). `itl_ms` and non-latency conditions judge the run as a whole only.
- A run **meets** the SLO when it was *served* (`served`: it ran, completed at least MIN_COMPLETION of its
  requests and its arrivals did not outrun its service) and every condition holds on its own figures. A
  study's or plan's point meets it when every seed's run does.
- `DEFAULT_SLO` is the one default: p99 TTFT within 2 s and p99 TPOT within 50 ms (a choice, not a measured
  figure: the capacity question of the README, `simroute plan`'s default since it shipped); docs/STUDIES.md
  "SLOs" documents it.

A light module (no numpy at import): `RunConfig` checks its `slo` field with it.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simroute.defaults import MIN_COMPLETION

# The one default SLO of every command (run, plan, a study that names none).
DEFAULT_SLO: tuple[str, ...] = ("p99 ttft_ms <= 2000", "p99 tpot_ms <= 50")
JOINER = " and "

OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}
STATS = ("mean", "p50", "p95", "p99", "max")
LATENCIES = ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms")
PER_REQUEST = ("ttft_ms", "tpot_ms", "e2e_ms")      # latencies each request has its own value of
METRICS: tuple[str, ...] = (
    "requests", "completed", "dropped",
    *[f"{metric}_{stat}" for metric in LATENCIES for stat in STATS],
    # the serving benchmark clients' throughput (summary.json `serving`): over the first send to the last completion
    "request_throughput", "output_tokens_per_s", "total_tokens_per_s", "input_tokens_per_s_per_gpu",
    "output_tokens_per_s_per_gpu", "total_tokens_per_s_per_gpu",
    "slo_attainment", "bytes_route", "bytes_fetch", "bytes_local", "bytes_pd_transfer",
    "n_route", "n_fetch", "n_local", "n_resident", "n_first_touch",
    "instances", "max_link_utilisation", "peak_spine_flows", "fct_pd_mean_ms", "fct_pd_p95_ms",
    "fct_fetch_mean_ms", "holder_queries_per_call", "holder_max_fan_in", "holder_mean_wait_us",
    "busiest_holder_work_share", "evictions",
    "copies_refused", "overflow_chunks", "sim_time_s", "overloaded", "ttft_growth",
)
FRACTIONS = frozenset({"slo_attainment", "overloaded", "busiest_holder_work_share"})

_RE = re.compile(r"^\s*(?:(mean|p50|p95|p99|max)\s+)?([a-z][a-z0-9_]*)\s*(<=|>=|<|>)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class Condition:
    """One condition on one column of a run's flat metrics."""

    column: str
    op: str
    value: float

    @property
    def metric(self) -> str:
        """The latency the column is a statistic of (`ttft_ms` for `ttft_ms_p99`), else the column itself."""
        head, _, stat = self.column.rpartition("_")
        return head if stat in STATS and head in LATENCIES else self.column

    def holds(self, row: dict[str, Any]) -> bool:
        measured = row.get(self.column)
        if measured is None or (isinstance(measured, float) and math.isnan(measured)):
            return False
        return OPS[self.op](measured, self.value)

    def __str__(self) -> str:
        return f"{self.column} {self.op} {self.value:g}"


@dataclass(frozen=True)
class SLO:
    """A set of conditions, all of which must hold; `texts` are the user's words, in their order."""

    texts: tuple[str, ...]
    conditions: tuple[Condition, ...]

    @property
    def text(self) -> str:
        return JOINER.join(self.texts)

    def per_request(self) -> dict[str, list[Condition]]:
        """The conditions each request is judged by, by latency (ttft_ms, tpot_ms, e2e_ms)."""
        out: dict[str, list[Condition]] = {}
        for condition in self.conditions:
            if condition.metric in PER_REQUEST:
                out.setdefault(condition.metric, []).append(condition)
        return out

    def violated(self, row: dict[str, Any]) -> list[str]:
        """The conditions a run's flat metrics break (its user's words)."""
        return [text for text, condition in zip(self.texts, self.conditions) if not condition.holds(row)]

    def met(self, row: dict[str, Any]) -> bool:
        """Served, and every condition holds."""
        return served(row) and not self.violated(row)


def parse_condition(text: str) -> Condition:
    """`p99 ttft_ms <= 50` -> Condition('ttft_ms_p99', '<=', 50.0); raises ValueError with the valid forms."""
    match = _RE.match(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"cannot read SLO '{text}'; write e.g. 'p99 ttft_ms <= 50' or 'slo_attainment >= 0.99'")
    stat, metric, comparison, value = match.groups()
    col = f"{metric}_{stat}" if stat else metric
    if col not in METRICS:
        latency = [f"{stat_name} {metric_name}" for metric_name in LATENCIES for stat_name in STATS]
        typed = f"{stat} {metric}" if stat else metric       # as the user wrote it, not the column it would read
        raise ValueError(f"unknown SLO metric '{typed}'; valid: {', '.join(latency)} or a column such as "
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


def split(texts: str | Sequence[str]) -> tuple[str, ...]:
    """The conditions of an SLO given as text (`a and b`) or a list of texts (each may hold `and`)."""
    items = [texts] if isinstance(texts, str) else list(texts)
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"an SLO condition is text like 'p99 ttft_ms <= 50', got {str(item)[:40]!r}")
        out += [part.strip() for part in re.split(r"\s+and\s+", item.strip()) if part.strip()]
    return tuple(out)


def parse(texts: str | Sequence[str]) -> SLO:
    """An SLO from its text or list of texts; ValueError (one line) when a condition cannot be read, none is
    given, one repeats, or `slo_attainment` is asked of an SLO that sets no per-request latency to attain."""
    parts = split(texts)
    if not parts:
        raise ValueError("an SLO needs at least one condition, e.g. 'p99 ttft_ms <= 2000'")
    conditions = tuple(parse_condition(part) for part in parts)
    seen: set[Condition] = set()
    for part, condition in zip(parts, conditions):
        if condition in seen:
            raise ValueError(f"SLO condition '{part}' is given twice")
        seen.add(condition)
    slo = SLO(parts, conditions)
    if any(condition.column == "slo_attainment" for condition in conditions) and not slo.per_request():
        raise ValueError("'slo_attainment' is the share of requests meeting the SLO's TTFT / TPOT / e2e "
                         "conditions: give one too, e.g. 'p99 ttft_ms <= 2000 and slo_attainment >= 0.99'")
    return slo


def metric_range(column: str) -> tuple[float, float]:
    """The values a run's metric can take: a share is 0 to 1, every other metric (latencies, counts, bytes,
    utilisation, growth ratios) is 0 or more."""
    return (0.0, 1.0) if column in FRACTIONS else (0.0, math.inf)


DEFAULT = parse(DEFAULT_SLO)


def attainment(slo: SLO, latencies_ms: dict[str, Any], output_tokens: Any) -> float | None:
    """The share of completed requests meeting the SLO's per-request conditions. `latencies_ms` maps ttft_ms,
    tpot_ms, e2e_ms to arrays over the completed requests; a request of one output token has no TPOT (met).
    None without completed requests or per-request conditions."""
    import numpy as np
    tokens = np.asarray(output_tokens)
    judged = slo.per_request()
    if not tokens.size or not judged:
        return None
    ok = np.ones(tokens.size, dtype=bool)
    for metric, conditions in judged.items():
        values = np.asarray(latencies_ms[metric], dtype=float)
        for condition in conditions:
            with np.errstate(invalid="ignore"):
                good = OPS[condition.op](values, condition.value)
            if metric == "tpot_ms":
                good |= tokens <= 1
            ok &= good
    return float(ok.mean())


def served(row: dict[str, Any]) -> bool:
    """A run (a point's row or `flatten`ed summary) that ran, completed at least MIN_COMPLETION of its requests and
    whose arrivals did not outrun its service (`overloaded`, simroute.sim.metrics.overload): only these can meet
    an SLO. A run that dropped most of its requests has the latencies of the few that got through; an overloaded
    one, latencies set by the trace's length."""
    requests, completed = row.get("requests"), row.get("completed")
    return (row.get("status", "ok") == "ok" and isinstance(requests, (int, float))
            and isinstance(completed, (int, float)) and not math.isnan(requests) and not math.isnan(completed)
            and requests > 0 and completed >= MIN_COMPLETION * requests and row.get("overloaded") != 1.0)


def flatten(summary: dict[str, Any]) -> dict[str, float]:
    """The numeric metrics of one run's summary.json as flat columns (NaN where a run has none): what an SLO
    condition reads."""
    row: dict[str, Any] = {"requests": summary["requests"], "completed": summary["completed"],
                           "dropped": summary["dropped"]}
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
        for stat in STATS:
            row[f"{metric}_{stat}"] = summary[metric].get(stat)
    serving = summary.get("serving") or {}
    itl = serving.get("itl_ms") or {}
    for stat in STATS:
        row[f"itl_ms_{stat}"] = itl.get("median" if stat == "p50" else stat)
    rate, per_gpu = serving.get("throughput") or {}, serving.get("throughput_per_gpu") or {}
    row["request_throughput"] = rate.get("requests_per_s")
    for key in ("output_tokens_per_s", "total_tokens_per_s"):
        row[key] = rate.get(key)
    for key in ("input_tokens_per_s", "output_tokens_per_s", "total_tokens_per_s"):
        row[f"{key}_per_gpu"] = per_gpu.get(key)
    row["slo_attainment"] = (summary.get("slo") or {}).get("attainment")
    for key in ("route", "fetch", "local", "pd_transfer"):
        row[f"bytes_{key}"] = summary["bytes"].get(key, 0.0)
    for key, count in summary["primitive_counts"].items():
        row[f"n_{key.replace('-', '_')}"] = count
    net, hold = summary.get("network", {}), summary.get("holders", {})
    row["instances"] = summary.get("instances")
    row["max_link_utilisation"] = net.get("max_link_utilisation")
    row["peak_spine_flows"] = max(net.get("peak_spine_concurrency", {}).values(), default=0)
    row["fct_pd_mean_ms"] = net.get("fct_ms_pd", {}).get("mean")
    row["fct_pd_p95_ms"] = net.get("fct_ms_pd", {}).get("p95")
    row["fct_fetch_mean_ms"] = net.get("fct_ms_fetch", {}).get("mean")
    row["holder_queries_per_call"] = hold.get("queries_per_call")
    row["holder_max_fan_in"] = hold.get("max_fan_in")
    row["holder_mean_wait_us"] = hold.get("mean_wait_us")
    row["busiest_holder_work_share"] = (hold.get("busiest") or {}).get("work_share")
    row["evictions"] = hold.get("evictions")
    row["copies_refused"] = hold.get("copies_refused")
    row["overflow_chunks"] = summary.get("placement", {}).get("overflow_chunks")
    row["sim_time_s"] = summary.get("sim_time_s")
    load = summary.get("load") or {}
    row["overloaded"] = None if load.get("overloaded") is None else float(bool(load["overloaded"]))
    row["ttft_growth"] = load.get("ttft_growth")
    return {key: (math.nan if row.get(key) is None else float(row[key])) for key in METRICS}


def judge(slo: SLO, summary: dict[str, Any]) -> dict[str, Any]:
    """A run summary's verdict against its SLO: served, met, the conditions it breaks (summary.json `slo`)."""
    row = flatten(summary)
    return {"served": served(row), "met": slo.met(row), "violated": slo.violated(row)}
