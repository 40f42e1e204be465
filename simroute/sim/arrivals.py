"""Requests out of the trace: streamed batches become `RequestSpec`s, started at their arrival (open loop) or
after their parent finishes plus a think time (closed loop, agentic traces); under a concurrency limit (the
serving benchmark clients' `--max-concurrency`) a request that is due waits, first come first served, for one of
the limit's slots.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import simpy

from simroute.arrow import filled, list_null_values, list_values, to_numpy
from simroute.sim.cluster import ChunkStore
from simroute.sim.context import SimContext
from simroute.sim.request_spec import RequestSpec
from simroute.sim.vocab import DropReason, Status
from simroute.workload import iter_request_batches
from simroute.workload.validate import RequestChecker

REQUEST_COLUMNS = ["request_id", "arrival_s", "after_id", "think_s", "requester_hint", "prefill_hint",
                   "prompt_tokens", "output_tokens", "chunk_ids", "chunk_at_cached_offset", "topk",
                   "holders_spanned", "parent_id", "tenant"]


def attendance_counts(trace: str, chunk_ids: np.ndarray) -> np.ndarray:
    """How often each chunk (by index into `chunk_ids`) is attended in the trace: a streamed pre-pass."""
    counts = np.zeros(len(chunk_ids), dtype=np.int64)
    order = np.argsort(chunk_ids)
    for batch in iter_request_batches(trace, columns=["chunk_ids"]):
        flat = list_values(batch.column(0))
        pos = np.searchsorted(chunk_ids, flat, sorter=order)
        known = (pos < len(chunk_ids)) & (chunk_ids[order[np.minimum(pos, len(chunk_ids) - 1)]] == flat)
        np.add.at(counts, order[pos[known]], 1)
    return counts


def input_tokens(prompt: np.ndarray, offsets: np.ndarray, flat_index: np.ndarray, known: np.ndarray,
                 chunk_tokens: np.ndarray) -> np.ndarray:
    """Each row's whole prompt: its own tokens + the tokens of the known chunks it attends (the row's chunks are
    flat[offsets[i]:offsets[i + 1]], looked up as `flat_index`, `known`). What a benchmark client counts as input,
    and with the output what an engine checks against the model's context window: the one formula for both."""
    tokens = (np.where(known, chunk_tokens[flat_index], 0) if len(flat_index) and len(chunk_tokens)
              else np.zeros(len(flat_index), np.int64))
    tokens_before = np.concatenate(([0], np.cumsum(tokens, dtype=np.int64)))
    return prompt.astype(np.int64) + tokens_before[offsets[1:]] - tokens_before[offsets[:-1]]


def sequence_tokens(trace: str, n_requests: int, chunks: ChunkStore) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(request ids, tokens) per streamed batch of the first `n_requests` requests: each request's whole sequence,
    its own prompt + the tokens of the chunks it attends (known ones) + its output tokens, the length a serving
    engine checks against the model's context window. Nulls count 0 (the request checker names them later)."""
    seen = 0
    columns = ["request_id", "prompt_tokens", "output_tokens", "chunk_ids"]
    for batch in iter_request_batches(trace, columns=columns):
        if seen >= n_requests:
            break
        take = min(len(batch), n_requests - seen)
        seen += take
        ids, prompt, output = (filled(batch.column(name), 0)[:take] for name in columns[:3])
        listed = batch.column("chunk_ids")
        offsets = to_numpy(listed.offsets)[:take + 1]
        offsets = offsets - offsets[0]
        flat = filled(listed.flatten(), -1) if listed.null_count or list_null_values(listed) else list_values(listed)
        index, known = chunks.indices_of(flat.astype(np.int64))
        yield ids.astype(np.int64), input_tokens(prompt, offsets, index, known, chunks.tokens) + output.astype(np.int64)


def over_window(trace: str, n_requests: int, chunks: ChunkStore, window: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(ids, tokens) of the requests whose sequence (`sequence_tokens`) exceeds `window`, and the longest
    sequence of the trace: a streamed pre-pass (nothing when the window is unknown, 0)."""
    ids: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    longest = 0
    for batch_ids, tokens in sequence_tokens(trace, n_requests, chunks):
        if tokens.size:
            longest = max(longest, int(tokens.max()))
        if window > 0:
            over = tokens > window
            ids.append(batch_ids[over])
            lengths.append(tokens[over])
    if not ids:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), longest
    return np.concatenate(ids), np.concatenate(lengths), longest


@dataclass(frozen=True)
class ArrivalLoad:
    """How a run rescales the trace's open-loop arrival times (`--qps`, `--time-scale`): arrival_s x `time_scale`,
    nothing else changed (closed-loop requests keep their think times, prompts and outputs are untouched)."""

    time_scale: float             # factor on every open-loop arrival_s (1: the trace as written)
    trace_qps: float | None       # the replayed open-loop requests' own mean rate, (n - 1) / span; None if < 2
    open_loop_requests: int
    latest_s: float = 0.0         # the latest open-loop arrival_s as written (before the rescaling)

    @property
    def offered_qps(self) -> float | None:
        return None if self.trace_qps is None else self.trace_qps / self.time_scale

    def as_dict(self) -> dict[str, float | int | None]:
        return {"time_scale": self.time_scale, "trace_qps": self.trace_qps, "offered_qps": self.offered_qps,
                "open_loop_requests": self.open_loop_requests}


def arrival_load(trace: str, n_requests: int, *, qps: float | None, time_scale: float | None,
                 fields: tuple[str, str] = ("qps", "time_scale"), file: str | None = None) -> ArrivalLoad:
    """The rescaling a run applies: `qps` sets the open-loop mean rate (from the first `n_requests` rows' own),
    `time_scale` multiplies arrival times directly; neither: the trace as written. A streamed pre-pass. A
    rescaling that puts an arrival past MAX_TIME_S (or overflows) is refused, naming `fields` (qps, time scale):
    no run of it could end."""
    from simroute.errors import ConfigurationError
    from simroute.workload.validate import MAX_TIME_S
    load = _arrival_load(trace, n_requests, qps=qps, time_scale=time_scale, field=fields[0], file=file)
    if qps is None and time_scale is None:
        return load             # the trace as written: its own checks name a time past MAX_TIME_S
    latest = load.latest_s * load.time_scale
    if not (math.isfinite(load.time_scale) and load.time_scale > 0 and math.isfinite(latest)) or latest > MAX_TIME_S:
        flag = fields[0] if qps is not None else fields[1]
        value = qps if qps is not None else time_scale
        raise ConfigurationError(f"{value:g} puts the trace's last open-loop arrival at {latest:g} s (x "
                                 f"{load.time_scale:g}), past {MAX_TIME_S:g} s: no run of it could end", file=file,
                                 field=flag)
    return load


def check_rescaled_arrivals(trace: str, max_requests: int | None, *, qps: float | None, time_scale: float | None,
                            file: str | None = None, where: str = "") -> None:
    """`arrival_load`'s check of a point's load at a study's load time (the fields named as the study's)."""
    from simroute.workload import read_trace_meta
    n = int(read_trace_meta(trace)["requests"])
    named = tuple(f"{where}: {name}" if where else name for name in ("qps", "time_scale"))
    arrival_load(trace, n if max_requests is None else min(n, int(max_requests)), qps=qps, time_scale=time_scale,
                 fields=named, file=file)   # type: ignore[arg-type]


def _arrival_load(trace: str, n_requests: int, *, qps: float | None, time_scale: float | None, field: str,
                  file: str | None) -> ArrivalLoad:
    from simroute.errors import ConfigurationError
    first = last = None
    latest = 0.0
    count = seen = 0
    for batch in iter_request_batches(trace, columns=["arrival_s", "after_id"]):
        # nulls read as NaN (-1 for after_id) and are left out: the request checker names them when the run reads them
        arrival = to_numpy(batch.column(0)).astype(float)[: n_requests - seen]
        after = filled(batch.column(1), -1)[: n_requests - seen]
        seen += len(arrival)
        open_loop = arrival[((after < 0) | (after >= n_requests)) & np.isfinite(arrival)]
        if open_loop.size:
            first = float(open_loop[0]) if first is None else first
            last = float(open_loop[-1])
            latest = max(latest, float(open_loop.max()))
            count += int(open_loop.size)
        if seen >= n_requests:
            break
    own = (count - 1) / (last - first) if count >= 2 and last is not None and last > first else None
    if qps is not None:
        if own is None:
            raise ConfigurationError(f"the trace's {count} open-loop request(s) span no time, so there is no rate to "
                                     "rescale; use --time-scale or a trace with open-loop arrivals", file=file,
                                     field=field)
        return ArrivalLoad(own / qps, own, count, latest)      # a float quotient: inf past the range, no error
    return ArrivalLoad(1.0 if time_scale is None else float(time_scale), own, count, latest)


class ConcurrencyLimit:
    """At most `limit` requests in flight: the serving benchmark clients' asyncio semaphore over their list of
    prompts (SGLang `bench_serving`, `vllm bench serve` `--max-concurrency`). A request that is due (its arrival
    time reached, or its parent done plus its think time) takes a free slot at once, else waits in a FIFO queue;
    a request's end (completed or dropped: its done event) hands its slot to the head of the queue at that
    instant, or frees it. With every arrival at t = 0 this is a closed loop of `limit` clients in which the next
    prompt of the list goes the moment any request completes (not `limit` fixed chains of prompts)."""

    def __init__(self, ctx: SimContext, limit: int, start: Callable[[RequestSpec], None]) -> None:
        self.ctx, self.limit, self.start = ctx, limit, start
        self.free = limit
        self.queue: deque[RequestSpec] = deque()
        self.peak = 0                                  # most requests in flight at once (summary.json load)
        self._release = self.release                   # bound once: one callback per request

    def submit(self, spec: RequestSpec) -> None:
        """`spec` is due: it starts now if a slot is free, else when the requests queued before it have."""
        if self.free > 0:
            self.free -= 1
            self._launch(spec)
        else:
            self.queue.append(spec)

    def _launch(self, spec: RequestSpec) -> None:
        self.ctx.done_event(spec.request_id).callbacks.append(self._release)
        in_flight = self.limit - self.free
        if in_flight > self.peak:
            self.peak = in_flight
        self.start(spec)

    def release(self, _event: simpy.Event | None = None) -> None:
        """A request in flight ended: its slot goes to the head of the queue, else back to the free ones."""
        if self.queue:
            self._launch(self.queue.popleft())
        else:
            self.free += 1


class Arrivals:
    """Feeds the trace's first `n_requests` requests into the run; `start(spec)` launches one. Open-loop arrival
    times are multiplied by `time_scale` (`ArrivalLoad`); with `concurrency` set, a due request goes through a
    `ConcurrencyLimit` of that many slots (`limiter`)."""

    def __init__(self, ctx: SimContext, n_requests: int, sorted_chunk_ids: np.ndarray,
                 start: Callable[[RequestSpec], None],
                 progress: Callable[[int, int], None] | None = None, time_scale: float = 1.0,
                 concurrency: int | None = None, over_window: frozenset[int] = frozenset()) -> None:
        self.ctx, self.n_requests, self.progress = ctx, n_requests, progress
        self.sorted_chunk_ids = sorted_chunk_ids
        self.time_scale = time_scale
        self.limiter = ConcurrencyLimit(ctx, concurrency, start) if concurrency is not None else None
        self.start = self.limiter.submit if self.limiter is not None else start
        self.over_window = over_window       # requests past the model's context window, dropped at arrival
        # a sparse model (DSA) selects its top-k whenever it runs: a request with chunks whose context exceeds k is
        # a selection over them at the model's k, unless the trace gives its own `topk` (docs/MODEL.md)
        self.model_topk = int(ctx.params.geometry.index_topk)
        self.selections = {"model": 0, "trace": 0}

    def feed(self) -> Iterator[simpy.Event]:
        """A SimPy process: stream batches; open-loop requests wait for arrival_s, closed-loop ones for their
        parent (each in its own process)."""
        ctx, n = self.ctx, self.n_requests
        seen = 0
        checker = RequestChecker(ctx.config.trace, self.sorted_chunk_ids)
        for batch in iter_request_batches(ctx.config.trace, columns=REQUEST_COLUMNS):
            if seen >= n:
                break
            checker.check(batch)
            for row, spec, arrival_s, after_id, think_s in self._rows(batch):
                if seen >= n:
                    break
                seen += 1
                if spec is None:
                    continue
                if 0 <= after_id < n:
                    ctx.env.process(self._closed_loop(after_id, think_s, spec))
                    continue
                wait = arrival_s - ctx.env.now
                if wait > 0:
                    yield ctx.env.timeout(wait)
                self.start(spec)
            if self.progress:
                self.progress(seen, n)

    def _rows(self, batch) -> Iterator[tuple[int, RequestSpec | None, float, int, float]]:
        """(row, spec or None when it is out of range or dropped at arrival, arrival_s, after_id, think_s)."""
        ctx, n, until = self.ctx, self.n_requests, self.ctx.config.until_s
        column = {name: batch.column(name) for name in REQUEST_COLUMNS}
        ids, arrival, after, think = (to_numpy(column[c]) for c in ("request_id", "arrival_s", "after_id", "think_s"))
        if self.time_scale != 1.0:
            arrival = arrival * self.time_scale
        hint, prefill_hint = to_numpy(column["requester_hint"]), to_numpy(column["prefill_hint"])
        prompt, output = to_numpy(column["prompt_tokens"]), to_numpy(column["output_tokens"])
        topk, spanned = to_numpy(column["topk"]), to_numpy(column["holders_spanned"])
        offsets = to_numpy(column["chunk_ids"].offsets)
        flat_ids = list_values(column["chunk_ids"])
        flat_cached = list_values(column["chunk_at_cached_offset"])
        store = ctx.cluster.chunks
        flat_index, known = store.indices_of(flat_ids)
        unknown_before = np.concatenate(([0], np.cumsum(~known)))    # a row's unknown chunks: a difference
        inputs = input_tokens(prompt, offsets, flat_index, known, store.tokens)
        recorder = ctx.recorder
        model_topk = self.model_topk
        # the per-request columns as Python lists, once per batch (at most `batch_rows`): a numpy scalar read per
        # field of every row cost more than the rest of the loop; the chunk columns stay arrays, sliced per row
        ids, arrival, after, think, hint, prefill_hint, prompt, output, topk, spanned, inputs, offsets = (
            column.tolist() for column in (ids, arrival, after, think, hint, prefill_hint, prompt, output, topk,
                                           spanned, inputs, offsets))
        unknown_before = unknown_before.tolist()
        for j in range(len(ids)):
            request = int(ids[j])
            spec = None
            if request < n:
                recorder.output_tokens[request] = output[j]
                recorder.input_tokens[request] = inputs[j]
                lo, hi = offsets[j], offsets[j + 1]
                if until is not None and arrival[j] > until and after[j] < 0:
                    recorder.drop(request, DropReason.UNFINISHED)
                elif request in self.over_window:
                    recorder.drop(request, DropReason.OVER_WINDOW)
                else:
                    if unknown_before[hi] != unknown_before[lo]:     # a chunk the store lacks drops it
                        recorder.drop(request, DropReason.UNKNOWN_CHUNK)
                    else:
                        budget = int(topk[j])
                        if budget > 0:
                            self.selections["trace"] += 1
                        elif model_topk and hi > lo and inputs[j] > model_topk:
                            budget = model_topk
                            self.selections["model"] += 1
                        spec = RequestSpec(request, int(hint[j]), int(prefill_hint[j]), int(prompt[j]),
                                           int(output[j]), flat_index[lo:hi].tolist(), flat_cached[lo:hi].tolist(),
                                           budget, int(spanned[j]))
            yield j, spec, float(arrival[j]), int(after[j]), float(think[j])

    def _closed_loop(self, parent: int, think_s: float, spec: RequestSpec) -> Iterator[simpy.Event]:
        ctx = self.ctx
        yield ctx.done_event(parent)
        if ctx.recorder.status[parent] == Status.DROPPED:
            self._drop(spec, DropReason.PARENT_DROPPED)
            return
        if think_s > 0:
            yield ctx.env.timeout(think_s)
        if ctx.config.until_s is not None and ctx.env.now > ctx.config.until_s:
            self._drop(spec, DropReason.UNFINISHED)
            return
        self.start(spec)

    def _drop(self, spec: RequestSpec, reason: DropReason) -> None:
        self.ctx.recorder.drop(spec.request_id, reason)
        self.ctx.done_event(spec.request_id).succeed()
