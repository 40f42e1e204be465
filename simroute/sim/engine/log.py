"""Per-iteration records of every instance engine, and inter-token gaps, in flat typed arrays."""

from __future__ import annotations

from array import array

import numpy as np

COLUMNS = (("instance", "i"), ("t_start_s", "d"), ("duration_s", "d"), ("iterations", "i"), ("decode_seqs", "i"),
           ("prefill_seqs", "i"), ("new_tokens", "i"), ("compute_s", "d"), ("exchange_s", "d"),
           ("holder_wait_s", "d"), ("holder_work_s", "d"), ("hidden_s", "d"), ("weights_bytes", "d"),
           ("kv_bytes", "d"), ("pinned_bytes", "d"), ("copy_bytes", "d"), ("free_bytes", "d"))


class IterationLog:
    """One row per engine event (an event of `iterations` > 1 stands for that many identical decode
    iterations, each `(duration_s - holder_work_s) / iterations` long). `enabled = False` keeps counters only."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.cols = {name: array(code) for name, code in COLUMNS}
        self.iterations = 0
        self.events = 0
        self.itl_s = array("d")         # inter-token gap values ...
        self.itl_n = array("d")         # ... and how many tokens saw each

    def add(self, row: tuple) -> int:
        """Append one event's row; returns its index (for `revise`)."""
        self.events += 1
        self.iterations += row[3]
        if self.enabled:
            for (name, _), value in zip(COLUMNS, row):
                self.cols[name].append(value)
        return self.events - 1

    def revise(self, index: int, planned: int, ran: int, duration_s: float, holder_work_s: float,
               hidden_s: float) -> None:
        """Event `index`, planned as `planned` iterations, was cut after `ran` (a new arrival): its iterations,
        duration, holder work and hidden exchange time as run."""
        self.iterations -= planned - ran
        if self.enabled:
            cols = self.cols
            cols["iterations"][index] = ran
            cols["duration_s"][index] = duration_s
            cols["holder_work_s"][index] = holder_work_s
            cols["hidden_s"][index] = hidden_s

    def extend(self, index: int, seconds: float) -> None:
        """Event `index` ran `seconds` of holder work more than planned (its duration and holder work)."""
        if self.enabled:
            self.cols["duration_s"][index] += seconds
            self.cols["holder_work_s"][index] += seconds

    def gap(self, seconds: float, tokens: float) -> None:
        if tokens > 0:
            self.itl_s.append(seconds)
            self.itl_n.append(tokens)

    def table(self):
        import pyarrow as pa
        return pa.table({name: np.frombuffer(self.cols[name], dtype=np.int32 if code == "i" else np.float64)
                         if len(self.cols[name]) else np.zeros(0, np.int32 if code == "i" else np.float64)
                         for name, code in COLUMNS})

    def itl_percentiles(self, scale: float = 1e3) -> dict[str, float | None]:
        """Token-weighted inter-token latency percentiles (every generated token after the first counts once)."""
        if not len(self.itl_s):
            return {"mean": None, "p50": None, "p95": None, "p99": None, "max": None}
        v = np.frombuffer(self.itl_s, dtype=np.float64)
        w = np.frombuffer(self.itl_n, dtype=np.float64)
        order = np.argsort(v, kind="stable")
        v, w = v[order], w[order]
        cum = np.cumsum(w) / w.sum()
        pick = lambda q: float(v[min(np.searchsorted(cum, q), len(v) - 1)] * scale)
        return {"mean": float((v * w).sum() / w.sum() * scale), "p50": pick(0.5), "p95": pick(0.95),
                "p99": pick(0.99), "max": float(v[-1] * scale)}


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
