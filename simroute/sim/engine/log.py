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

    def add(self, row: tuple) -> None:
        self.events += 1
        self.iterations += row[3]
        if self.enabled:
            for (name, _), value in zip(COLUMNS, row):
                self.cols[name].append(value)

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
