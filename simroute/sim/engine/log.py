"""Per-iteration records of every instance engine, and inter-token gaps, in flat typed arrays."""

from __future__ import annotations

from array import array
from struct import Struct

import numpy as np

COLUMNS = (("instance", "i"), ("t_start_s", "d"), ("duration_s", "d"), ("iterations", "i"), ("decode_seqs", "i"),
           ("prefill_seqs", "i"), ("new_tokens", "i"), ("compute_s", "d"), ("exchange_s", "d"),
           ("holder_wait_s", "d"), ("holder_work_s", "d"), ("hidden_s", "d"), ("weights_bytes", "d"),
           ("kv_bytes", "d"), ("pinned_bytes", "d"), ("copy_bytes", "d"), ("free_bytes", "d"))


NAMES = tuple(name for name, _ in COLUMNS)
WIDTH = len(COLUMNS)
ITERATIONS, DURATION, HOLDER_WORK, HIDDEN = (NAMES.index(name) for name in ("iterations", "duration_s",
                                                                           "holder_work_s", "hidden_s"))
# one row as WIDTH native doubles, the bytes `array("d")` stores: packed in one C call and appended with
# `frombytes` (`array.extend` over a tuple converts and appends value by value, ~4x slower on every engine event)
_ROW = Struct(f"{WIDTH}d")


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """`np.percentile(np.repeat(values, weights), q)` (linear interpolation, numpy's default and the benchmark
    clients'), for whole-number `weights`, without building the repeated array (a run's inter-token gaps are
    logged as (gap, how many tokens saw it) pairs)."""
    return weighted_percentiles(values, weights, (q,))[0]


def weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """`weighted_percentile` at each of `qs`, sorting once (a run logs millions of gaps: the sort is the cost)."""
    order = np.argsort(values, kind="stable")
    sorted_values = np.asarray(values, dtype=float)[order]
    ends = np.cumsum(np.rint(np.asarray(weights)[order]).astype(np.int64))     # run r covers [ends[r-1], ends[r])
    out: list[float] = []
    for q in qs:
        position = (q / 100.0) * (int(ends[-1]) - 1)
        below = int(np.floor(position))
        fraction = position - below
        low = sorted_values[np.searchsorted(ends, below, side="right")]
        high = sorted_values[np.searchsorted(ends, min(below + 1, int(ends[-1]) - 1), side="right")]
        out.append(float(low + (high - low) * fraction))
    return out


ITL_STATS = ("mean", "median", "std", "p95", "p99", "max")


def itl_stats(gaps_s: np.ndarray, tokens: np.ndarray) -> dict[str, float | None]:
    """Inter-token latency (ms) over every generated token after a sequence's first, from the engines' (gap,
    tokens) pairs: equal to the clients' statistics over their pooled per-chunk gaps when each token is streamed
    on its own (the engine logs one entry for the k identical iterations of one event, docs/TRACE_FORMAT.md)."""
    keep = tokens > 0
    gaps_s, tokens = gaps_s[keep], tokens[keep]
    if not gaps_s.size:
        return {stat: None for stat in ITL_STATS}
    total = tokens.sum()
    mean = float((gaps_s * tokens).sum() / total)
    median, p95, p99 = weighted_percentiles(gaps_s, tokens, (50.0, 95.0, 99.0))
    return {"mean": mean * 1e3, "median": median * 1e3,
            "std": float(np.sqrt((tokens * (gaps_s - mean) ** 2).sum() / total)) * 1e3,
            "p95": p95 * 1e3, "p99": p99 * 1e3, "max": float(gaps_s.max()) * 1e3}


class IterationLog:
    """One row per engine event (an event of `iterations` > 1 stands for that many identical decode
    iterations, each `(duration_s - holder_work_s) / iterations` long). `enabled = False` keeps counters only.

    The rows live in one flat array of doubles, `WIDTH` values a row (one `extend` per event rather than an
    append per column: the log is on every engine event's path); integer columns are exact in a double and
    are cast back when read (`cols`, `table`). Inter-token gaps likewise, as (seconds, tokens) pairs."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.rows = array("d")
        self.iterations = 0
        self.events = 0
        self.gaps = array("d")          # inter-token gap values and how many tokens saw each, interleaved
        self._itl: dict[str, float | None] | None = None     # `itl`, as of `_itl_pairs` gap pairs
        self._itl_pairs = -1

    def add(self, row: tuple) -> int:
        """Append one event's row (`WIDTH` values in COLUMNS order); returns its index (for `revise`)."""
        self.events += 1
        self.iterations += row[3]
        if self.enabled:
            self.rows.frombytes(_ROW.pack(*row))
        return self.events - 1

    def count(self, iterations: int) -> int:
        """An event with the log disabled: the counters only; returns its index."""
        self.events += 1
        self.iterations += iterations
        return self.events - 1

    def revise(self, index: int, planned: int, ran: int, duration_s: float, holder_work_s: float,
               hidden_s: float) -> None:
        """Event `index`, planned as `planned` iterations, was cut after `ran` (a new arrival): its iterations,
        duration, holder work and hidden exchange time as run."""
        self.iterations -= planned - ran
        if self.enabled:
            rows, at = self.rows, index * WIDTH
            rows[at + ITERATIONS] = ran
            rows[at + DURATION] = duration_s
            rows[at + HOLDER_WORK] = holder_work_s
            rows[at + HIDDEN] = hidden_s

    def extend(self, index: int, seconds: float) -> None:
        """Event `index` ran `seconds` of holder work more than planned (its duration and holder work)."""
        if self.enabled:
            rows, at = self.rows, index * WIDTH
            rows[at + DURATION] += seconds
            rows[at + HOLDER_WORK] += seconds

    def gap(self, seconds: float, tokens: float) -> None:
        if tokens > 0:
            self.gaps.append(seconds)
            self.gaps.append(tokens)

    def column(self, name: str) -> np.ndarray:
        """One column as a numpy array of its type (a copy: the log may still grow)."""
        i = NAMES.index(name)
        values = np.frombuffer(self.rows, dtype=np.float64)[i::WIDTH] if len(self.rows) else np.zeros(0)
        return values.astype(np.int32) if COLUMNS[i][1] == "i" else values.copy()

    @property
    def cols(self) -> dict[str, np.ndarray]:
        """Every column by name (copies; see `column`)."""
        return {name: self.column(name) for name in NAMES}

    @property
    def itl_s(self) -> np.ndarray:
        return np.frombuffer(self.gaps, dtype=np.float64)[0::2].copy() if len(self.gaps) else np.zeros(0)

    @property
    def itl_n(self) -> np.ndarray:
        return np.frombuffer(self.gaps, dtype=np.float64)[1::2].copy() if len(self.gaps) else np.zeros(0)

    def table(self):
        from simroute.arrow import table
        return table({name: self.column(name) for name in NAMES})

    def itl(self) -> dict[str, float | None]:
        """`itl_stats` of the gaps logged so far, kept until more are logged: the engine summary and the serving
        summary both report them, and a long run logs millions of gaps (a sort each time)."""
        if self._itl is None or self._itl_pairs != len(self.gaps):
            self._itl = itl_stats(self.itl_s, self.itl_n)
            self._itl_pairs = len(self.gaps)
        return dict(self._itl)

    def itl_percentiles(self) -> dict[str, float | None]:
        """Token-weighted inter-token latency (ms) under the summary's names: `itl_stats`, the median as p50."""
        stats = self.itl()
        return {"mean": stats["mean"], "p50": stats["median"], "p95": stats["p95"], "p99": stats["p99"],
                "max": stats["max"]}


def iteration_events(table, *, pid: int, max_events: int) -> list[dict]:
    """Chrome / Perfetto slices, one per engine event (an instance per thread), from the iterations table."""
    if table is None:
        return []
    cols = {name: table.column(name).to_numpy() for name in ("instance", "t_start_s", "duration_s", "iterations",
                                                             "decode_seqs", "prefill_seqs", "new_tokens",
                                                             "exchange_s", "holder_work_s")}
    out = []
    for i in range(min(len(cols["instance"]), max_events)):
        out.append({"name": f"{int(cols['decode_seqs'][i])} decode + {int(cols['prefill_seqs'][i])} prefill",
                    "cat": "iteration", "ph": "X", "ts": float(cols["t_start_s"][i]) * 1e6,
                    "dur": float(cols["duration_s"][i]) * 1e6, "pid": pid, "tid": int(cols["instance"][i]),
                    "args": {"iterations": int(cols["iterations"][i]), "new_tokens": int(cols["new_tokens"][i]),
                             "exchange_ms": float(cols["exchange_s"][i]) * 1e3,
                             "holder_work_ms": float(cols["holder_work_s"][i]) * 1e3}})
    return out
