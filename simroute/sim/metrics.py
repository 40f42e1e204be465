"""Per-request records, the run summary and the output files (Parquet + summary.json).

Everything a study or report needs is in these files; reports read only them.
"""

from __future__ import annotations

import json
import platform
from array import array
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from simroute.arrow import table, to_numpy
from simroute.compiled import compiled_modules
from simroute.sim.slo import attainment as slo_attainment
from simroute.sim.slo import judge as judge_slo
from simroute.sim.slo import parse as parse_slo
from simroute.sim.engine.log import itl_stats
from simroute.sim.vocab import DropReason, Primitive, Status

PRIMITIVE_NAMES = {int(p): p.label for p in Primitive}
DROP_REASONS = {int(d): d.label for d in DropReason}


class Recorder:
    """Preallocated per-request columns (index = request_id) and a decision log.

    The log's chunks are as the caller names them: chunk ids, or (with `chunk_id_of`, the chunk store's ids in
    its index order) dense chunk indices, turned into ids once when the table is built (a run's decisions are
    one per chunk of every request: mapping them one by one on the way in cost more than the rest of the log)."""

    FLOAT_COLS = ("arrival", "ttft", "tpot", "e2e", "ttft_floor", "bytes_route", "bytes_fetch", "bytes_pd",
                  "bytes_fanout", "ttft_queueing", "ttft_prefill_compute", "ttft_transfer", "ttft_exchanges",
                  "ttft_holder_wait", "ttft_frontend")
    # where the TTFT went: the first five on the scheduler's side (`TtftParts`), then the request's path outside
    # the GPU (the engine preset's ingress and first-token egress)
    TTFT_PARTS = ("queueing", "prefill_compute", "transfer", "exchanges", "holder_wait", "frontend")

    def __init__(self, n: int, chunk_id_of: np.ndarray | None = None) -> None:
        self.n = n
        self.chunk_id_of = chunk_id_of
        for c in self.FLOAT_COLS:
            setattr(self, c, np.full(n, np.nan) if c in ("arrival", "ttft", "tpot", "e2e", "ttft_floor")
                    else np.zeros(n))
        self.requester = np.full(n, -1, dtype=np.int32)
        self.preemptions = np.zeros(n, dtype=np.int32)
        self.output_tokens = np.zeros(n, dtype=np.int32)
        self.input_tokens = np.zeros(n, dtype=np.int64)     # whole prompt: own tokens + attended chunks' tokens
        self.status = np.full(n, Status.PENDING, dtype=np.int8)
        self.drop_reason = np.full(n, DropReason.NONE, dtype=np.int8)
        self.dec_req, self.dec_chunk, self.dec_holder, self.dec_prim = array("q"), array("q"), array("i"), array("b")
        self._ttft_part_columns = tuple(getattr(self, f"ttft_{name}") for name in self.TTFT_PARTS)   # per request

    @property
    def counts(self) -> np.ndarray:
        """Decisions per request and primitive code (n x primitives, int32), counted from the log when read (the
        tables and the summary): one bincount for the run, not a numpy update per request."""
        kinds = len(Primitive)
        codes = _log_column(self.dec_req, np.int64) * kinds + _log_column(self.dec_prim, np.int8)
        return np.bincount(codes, minlength=self.n * kinds).astype(np.int32).reshape(self.n, kinds)

    def decision(self, request: int, chunk_id: int, holder: int, primitive: Primitive) -> None:
        self.dec_req.append(request)
        self.dec_chunk.append(chunk_id)
        self.dec_holder.append(holder)
        self.dec_prim.append(primitive)

    def decisions(self, request: int, chunk_ids: Sequence[int], holders: Sequence[int],
                  primitives: Sequence[int]) -> None:
        """`decision` for each of one request's chunks, in order (one extend per column, not four appends each;
        given as arrays of the log's types, `array("q")`, `("i")` and `("b")`, each extend is one copy)."""
        n = len(primitives)
        if not n:
            return
        codes = primitives if isinstance(primitives, array) else array("b", primitives)
        self.dec_req.extend(array("q", [request]) * n)
        self.dec_chunk.extend(chunk_ids)
        self.dec_holder.extend(holders)
        self.dec_prim.extend(codes)

    def ttft_parts(self, request: int, parts: Any) -> None:
        """Where a request's TTFT went (`simroute.sim.engine.serving.TtftParts`, in TTFT_PARTS order)."""
        for column, value in zip(self._ttft_part_columns, parts):
            column[request] = value

    def drop(self, request: int, reason: DropReason) -> None:
        self.status[request] = Status.DROPPED
        self.drop_reason[request] = reason

    def complete(self, request: int) -> None:
        self.status[request] = Status.COMPLETED

    def requests_table(self):
        done = self.status == Status.COMPLETED
        cols = {
            "request_id": np.arange(self.n, dtype=np.int64), "requester": self.requester,
            "arrival_s": self.arrival, "ttft_s": self.ttft, "tpot_s": self.tpot, "e2e_s": self.e2e,
            "ttft_floor_s": self.ttft_floor, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "status": np.where(done, Status.COMPLETED.label,
                               np.where(self.status == Status.DROPPED, Status.DROPPED.label, Status.PENDING.label)),
            "drop_reason": np.array([DROP_REASONS[int(x)] for x in self.drop_reason]) if self.n < 2_000_000
            else self.drop_reason,
        }
        counts = self.counts            # counted from the log on each read: once here
        for code, name in PRIMITIVE_NAMES.items():
            cols[f"n_{name.replace('-', '_')}"] = counts[:, code]
        cols.update({"bytes_route": self.bytes_route, "bytes_fetch": self.bytes_fetch, "bytes_pd": self.bytes_pd,
                     "bytes_fetch_fanout": self.bytes_fanout})
        cols.update({f"ttft_{name}_s": getattr(self, f"ttft_{name}") for name in self.TTFT_PARTS})
        cols["preemptions"] = self.preemptions
        return table(cols)

    def decided_chunk_ids(self) -> np.ndarray:
        """The log's chunks as chunk ids (int64), in the log's order."""
        logged = _log_column(self.dec_chunk, np.int64)
        if self.chunk_id_of is None:
            return logged
        return np.asarray(self.chunk_id_of, dtype=np.int64)[logged]

    def decisions_table(self):
        return table({"request_id": _log_column(self.dec_req, np.int64),
                         "chunk_id": self.decided_chunk_ids(),
                         "holder": _log_column(self.dec_holder, np.int32),
                         "primitive": primitive_labels(_log_column(self.dec_prim, np.int8))})


def _log_column(column: array, dtype: type) -> np.ndarray:
    """A decision log column as numpy, without a copy (`frombuffer` refuses an empty buffer)."""
    return np.frombuffer(column, dtype=dtype) if len(column) else np.zeros(0, dtype)


def primitive_labels(codes: np.ndarray):
    """The labels of primitive codes as one arrow string column, assembled from its buffers in NumPy (a numpy array
    of strings per decision costs ~50x more, and pyarrow's `take` loads pyarrow.compute and pandas): the
    offsets and the labels' bytes, no validity buffer (no label is null)."""
    import pyarrow as pa
    labels = [p.label.encode() for p in Primitive]
    width = max(len(label) for label in labels)
    padded = np.zeros((len(labels), width), dtype=np.uint8)
    for row, label in enumerate(labels):
        padded[row, :len(label)] = np.frombuffer(label, dtype=np.uint8)
    lengths = np.array([len(label) for label in labels], dtype=np.int32)[codes]
    offsets = np.zeros(len(codes) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = padded[codes][np.arange(width) < lengths[:, None]]
    return pa.Array.from_buffers(pa.string(), len(codes), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


# holders.parquet: one row per holder (instance), from its engine's counters. Calls are counted per requester
# (n requesters sharing one kernel call count n) and, like queries, once per exchange.
HOLDER_COLUMNS = {
    "holder": "instance id", "gpu": "its GPU endpoint", "host": "its host",
    "queries": "routed queries it answered (x exchanges)", "calls": "kernel calls it ran for requesters",
    "queries_per_call": "queries per call", "mean_fan_in": "requesters sharing a call, mean over calls",
    "max_fan_in": "most requesters that shared one call",
    "work_s": "partial-attention GPU seconds it ran for others", "work_share": "work_s / simulated time",
    "charged_s": "of work_s, what lengthened its own iterations",
    "wait_s": "expected queueing wait of its calls, summed", "mean_wait_s": "wait_s per call",
    "busy_s": "its engine's events (own iterations, their exchange waits, partials run inline)",
    "busy_share": "busy_s / simulated time",
}


def holder_table(engines: list[Any], instances: list[Any], sim_time_s: float):
    """Per-holder load (HOLDER_COLUMNS) from the instance engines' counters (`InstanceEngine.busy_s`,
    `HolderPartials`): what a capacity planner reads when a holder nears the fan-in elbow of its curve."""
    parts = [engine.partials for engine in engines]
    col = lambda name: np.array([float(getattr(p, name)) for p in parts])
    calls, queries, work = col("calls"), col("queries"), col("work_s")
    wait, fan_in = col("queued_s"), col("fan_in_calls")
    busy = np.array([float(engine.busy_s) for engine in engines])
    span = sim_time_s if sim_time_s > 0 else np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        per_call = lambda x: np.where(calls > 0, x / calls, np.nan)
        return table({
            "holder": np.array([inst.id for inst in instances], dtype=np.int32),
            "gpu": [inst.gpu for inst in instances], "host": np.array([inst.host for inst in instances], np.int32),
            "queries": queries, "calls": calls, "queries_per_call": per_call(queries),
            "mean_fan_in": per_call(fan_in), "max_fan_in": np.array([p.max_fan_in for p in parts], np.int32),
            "work_s": work, "work_share": work / span, "charged_s": col("charged_s"),
            "wait_s": wait, "mean_wait_s": per_call(wait), "busy_s": busy, "busy_share": busy / span})


def holder_summary(table) -> dict[str, Any]:
    """The run's holder figures (summary.json `holders`) from `holder_table`: totals, and the busiest holder
    (most partial-attention work) in its own figures; None where no holder answered a routed query."""
    cols = {name: to_numpy(table.column(name)) for name in table.column_names if name != "gpu"}   # the numbers
    calls = float(cols["calls"].sum())
    ratio = lambda name, scale=1.0: float(cols[name].sum() / calls * scale) if calls > 0 else None
    busiest = None
    if len(cols["work_s"]) and cols["work_s"].max() > 0:
        i = int(np.argmax(cols["work_s"]))          # the first of equals: the lowest id
        busiest = {"holder": int(cols["holder"][i]), "work_s": float(cols["work_s"][i]),
                   "work_share": float(cols["work_share"][i]), "busy_share": float(cols["busy_share"][i]),
                   "mean_fan_in": float(cols["mean_fan_in"][i]), "max_fan_in": int(cols["max_fan_in"][i]),
                   "mean_wait_us": float(cols["mean_wait_s"][i] * 1e6)}
    return {"queries": float(cols["queries"].sum()), "calls": calls, "queries_per_call": ratio("queries"),
            "mean_fan_in": _fan_in(cols, calls), "max_fan_in": int(cols["max_fan_in"].max(initial=0)),
            "mean_wait_us": ratio("wait_s", 1e6), "busiest": busiest,
            # the busiest engine's busy share of the simulated time (own iterations, exchange waits, inline partials)
            "max_busy_share": float(cols["busy_share"].max(initial=0.0))}


def _fan_in(cols: dict[str, np.ndarray], calls: float) -> float | None:
    """Call-weighted mean fan-in over every holder."""
    if calls <= 0:
        return None
    answered = cols["calls"] > 0
    return float((cols["mean_fan_in"][answered] * cols["calls"][answered]).sum() / calls)


def percentiles(x: np.ndarray, scale: float = 1e3) -> dict[str, float | None]:
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"mean": None, "p50": None, "p95": None, "p99": None, "max": None}
    q = np.percentile(x, [50, 95, 99]) * scale
    return {"mean": float(x.mean() * scale), "p50": float(q[0]), "p95": float(q[1]), "p99": float(q[2]),
            "max": float(x.max() * scale)}


def _client_stats(x: np.ndarray, stats: tuple[str, ...] = ("mean", "median", "std", "p99")) -> dict[str, float | None]:
    """Mean, median, std (ddof 0) and percentiles in ms, as the serving benchmark clients compute them (numpy)."""
    x = x[np.isfinite(x)]
    if not x.size:
        return {stat: None for stat in stats}
    pick = {"mean": lambda: x.mean(), "median": lambda: np.median(x), "std": lambda: x.std(),
            "p95": lambda: np.percentile(x, 95), "p99": lambda: np.percentile(x, 99), "max": lambda: x.max()}
    return {stat: float(pick[stat]() * 1e3) for stat in stats}


def serving_summary(rec: Recorder, gaps_s: np.ndarray, gap_tokens: np.ndarray, *, gpus: int,
                    concurrency: int | None, offered_qps: float | None,
                    itl: dict[str, float | None] | None = None) -> dict[str, Any]:
    """The figures the serving benchmark clients print (SGLang `bench_serving`, `vllm bench serve`), computed as
    they compute them: over the completed requests, the duration from the first request's send to the last
    completion, TPOT = (E2E - TTFT) / (output - 1) over requests of more than one output token, the input and
    output tokens of the completed requests; per GPU: divided by the GPUs that serve (instances x TP).
    `itl`: `itl_stats(gaps_s, gap_tokens)` where the caller has it already (`IterationLog.itl`)."""
    done = rec.status == Status.COMPLETED
    started = np.isfinite(rec.arrival)
    out: dict[str, Any] = {"concurrency_limit": concurrency, "request_rate": offered_qps, "gpus": int(gpus),
                           "completed": int(done.sum())}
    if not done.any():
        return {**out, "duration_s": None}
    end = rec.arrival[done] + rec.e2e[done]
    duration = float(end.max() - rec.arrival[started].min())
    inputs, outputs = int(rec.input_tokens[done].sum()), int(rec.output_tokens[done].sum())
    rate = (lambda x: x / duration) if duration > 0 else (lambda x: None)
    per_gpu = (lambda x: None if x is None else x / gpus) if gpus > 0 else (lambda x: None)
    throughput = {"requests_per_s": rate(float(done.sum())), "input_tokens_per_s": rate(float(inputs)),
                  "output_tokens_per_s": rate(float(outputs)), "total_tokens_per_s": rate(float(inputs + outputs))}
    return {**out, "duration_s": duration, "total_input_tokens": inputs, "total_output_tokens": outputs,
            "throughput": throughput, "throughput_per_gpu": {key: per_gpu(value) for key, value in throughput.items()},
            "ttft_ms": _client_stats(rec.ttft[done]),
            "tpot_ms": _client_stats(rec.tpot[done & (rec.output_tokens > 1)]),
            "itl_ms": itl_stats(gaps_s, gap_tokens) if itl is None else itl, "e2e_ms": _client_stats(rec.e2e[done]),
            # SGLang's "Concurrency": the mean number of requests in flight over the duration
            "mean_in_flight": float(rec.e2e[done].sum() / duration) if duration > 0 else None}


def summarise(rec: Recorder, *, config: dict[str, Any], inputs: dict[str, str], sim_time_s: float,
              extra: dict[str, Any]) -> dict[str, Any]:
    """The deterministic summary (no wall-clock figures: those go to perf.json)."""
    import simroute
    done = rec.status == Status.COMPLETED
    dropped = rec.status == Status.DROPPED
    ttft, tpot = rec.ttft[done], rec.tpot[done]
    slo = parse_slo(config["slo"])
    latencies = {"ttft_ms": rec.ttft[done] * 1e3, "tpot_ms": rec.tpot[done] * 1e3, "e2e_ms": rec.e2e[done] * 1e3}
    attainment = slo_attainment(slo, latencies, rec.output_tokens[done])
    counts = rec.counts.sum(axis=0)
    reasons: dict[str, int] = {}
    for code in np.unique(rec.drop_reason[dropped]):
        reasons[DropReason(int(code)).label] = int(np.count_nonzero(rec.drop_reason[dropped] == code))
    summary = {
        "requests": int(rec.n), "completed": int(done.sum()), "dropped": int(dropped.sum()),
        "dropped_by_reason": reasons,
        "ttft_ms": percentiles(ttft), "tpot_ms": percentiles(tpot[rec.output_tokens[done] > 1]),
        "e2e_ms": percentiles(rec.e2e[done]),
        "ttft_breakdown_ms": {name: _mean_ms(getattr(rec, f"ttft_{name}")[done]) for name in rec.TTFT_PARTS},
        "throughput": {"output_tokens_per_s": float(rec.output_tokens[done].sum() / sim_time_s)
                       if sim_time_s > 0 else None,
                       "goodput_requests_per_s": float(attainment * done.sum() / sim_time_s)
                       if sim_time_s > 0 and attainment is not None else None},
        "slo": {"text": slo.text, "conditions": list(slo.texts), "attainment": attainment,
                "per_request": {metric: [str(condition) for condition in conditions]
                                for metric, conditions in slo.per_request().items()}},
        "bytes": {"route": float(rec.bytes_route.sum()), "fetch": float(rec.bytes_fetch.sum()), "local": 0.0,
                  "pd_transfer": float(rec.bytes_pd.sum()), "fetch_fanout_nvlink": float(rec.bytes_fanout.sum())},
        "primitive_counts": {p.label: int(counts[p]) for p in Primitive},
        **extra,
        "sim_time_s": sim_time_s,
        "seed": config["seed"], "config": config, "inputs": inputs,
        "versions": {"simroute": simroute.__version__, "simroute_source": source_fingerprint(),
                     "compiled": compiled_modules(),      # those of its modules that ran compiled (mypyc)
                     "python": platform.python_version(),
                     **_versions("numpy", "simpy", "pyarrow", "networkx")},
    }
    summary["slo"].update(judge_slo(slo, summary))     # served, met, violated: the verdict studies and plans use
    return summary


# Last-quarter median TTFT over the second quarter's: a queue that grows linearly from the start (arrivals above
# service) gives (7/8) / (3/8) = 2.3; a stable queue about 1.
OVERLOAD_GROWTH = 2.0
OVERLOAD_MIN_TTFT_S = 1.0    # ... and the late requests waited at least this long (a fast run is no backlog)
OVERLOAD_MIN_REQUESTS = 40   # fewer completed requests say nothing about a trend


def overload(arrival_s: np.ndarray, ttft_s: np.ndarray) -> dict[str, Any]:
    """Did arrivals outrun service? The completed requests in arrival order: when the last quarter's median TTFT is
    OVERLOAD_GROWTH x the second quarter's (and at least OVERLOAD_MIN_TTFT_S), the queue grew for the whole run,
    so its latencies depend on how long the trace is, not on the cluster: `overloaded`."""
    order = np.argsort(arrival_s, kind="stable")
    ttft = np.asarray(ttft_s, dtype=float)[order]
    if ttft.size < OVERLOAD_MIN_REQUESTS:
        return {"ttft_growth": None, "overloaded": False}
    quarter = ttft.size // 4
    early, late = float(np.median(ttft[quarter:2 * quarter])), float(np.median(ttft[-quarter:]))
    growth = late / early if early > 0 else None
    return {"ttft_growth": growth,
            "overloaded": bool(growth is not None and growth >= OVERLOAD_GROWTH and late >= OVERLOAD_MIN_TTFT_S)}


def incomplete_account(summary: dict[str, Any]) -> str | None:
    """One line on why a run completed fewer than all its requests (None when all completed): the count, then
    each drop reason with its count and what to change."""
    requests, completed = int(summary["requests"]), int(summary["completed"])
    if completed >= requests:
        return None
    labels = {reason.label: reason for reason in DropReason}
    reasons = "; ".join(f"{count:,} {label}" + (f" ({labels[label].advice})" if label in labels
                                                 and labels[label].advice else "")
                        for label, count in summary.get("dropped_by_reason", {}).items())
    pending = requests - completed - int(summary["dropped"])
    if pending > 0:
        reasons += ("; " if reasons else "") + f"{pending:,} never arrived or never finished"
    return f"completed {completed:,} of {requests:,} requests: {reasons}"


def _mean_ms(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(x.mean() * 1e3) if x.size else None


_SOURCE_FP: str | None = None


def source_fingerprint() -> str:
    """sha256 (16 hex) of the simroute package's Python sources: ties results to the code that made them."""
    global _SOURCE_FP
    if _SOURCE_FP is None:
        import hashlib
        root = Path(__file__).resolve().parent.parent
        h = hashlib.sha256()
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
        _SOURCE_FP = h.hexdigest()[:16]
    return _SOURCE_FP


def _versions(*mods: str) -> dict[str, str]:
    """Each library's version: a loaded module's own, else its installed distribution's (a run that never imports
    networkx does not load it to read a version: 0.2 s of the default run's CPU)."""
    import sys
    out = {}
    for m in mods:
        try:
            out[m] = sys.modules[m].__version__ if m in sys.modules else _distribution_version(m)
        except Exception:
            out[m] = "?"
    return out


def _distribution_version(module: str) -> str:
    from importlib.metadata import version
    return version(module)


def write_outputs(out_dir: Path, summary: dict[str, Any], tables: dict[str, Any],
                  perf: dict[str, Any] | None = None) -> None:
    """Write every output into a temp directory, then rename it into place: all or nothing."""
    import pyarrow.parquet as pq
    from simroute.ioutil import atomic_path, check_replaceable
    check_replaceable(out_dir, ("summary.json",), "simroute run")
    with atomic_path(out_dir, directory=True, what="simroute run") as tmp:
        for name, table in tables.items():
            if table is not None:
                pq.write_table(table, tmp / f"{name}.parquet", compression="zstd")
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=False, default=_jd) + "\n")
        if perf is not None:   # wall-clock figures: not part of the deterministic outputs
            (tmp / "perf.json").write_text(json.dumps(perf, indent=2, default=_jd) + "\n")


def _jd(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o))
