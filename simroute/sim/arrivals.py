"""Requests out of the trace: streamed batches become `RequestSpec`s, started at their arrival (open loop) or
after their parent finishes plus a think time (closed loop, agentic traces).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import simpy

from simroute.sim.context import SimContext
from simroute.sim.vocab import DropReason, Status
from simroute.workload import iter_request_batches
from simroute.workload.validate import RequestChecker

REQUEST_COLUMNS = ["request_id", "arrival_s", "after_id", "think_s", "requester_hint", "prefill_hint",
                   "prompt_tokens", "output_tokens", "chunk_ids", "chunk_at_cached_offset", "topk",
                   "holders_spanned", "parent_id", "tenant"]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request as the trace gives it (chunk ids already resolved to chunk indices)."""

    request_id: int
    requester_hint: int       # instance to serve it (-1 = the router decides)
    prefill_hint: int         # instance that prefills its prompt (-1 = the requester; PD disaggregation)
    prompt_tokens: int
    output_tokens: int
    chunk_indices: list[int]
    cached: list[bool]        # per chunk: served at the offset it was cached at
    topk: int                 # sparse selection budget (0 = dense)
    holders_spanned: int      # holders a sparse selection spans


def attendance_counts(trace: str, chunk_ids: np.ndarray) -> np.ndarray:
    """How often each chunk (by index into `chunk_ids`) is attended in the trace: a streamed pre-pass."""
    counts = np.zeros(len(chunk_ids), dtype=np.int64)
    order = np.argsort(chunk_ids)
    for batch in iter_request_batches(trace, columns=["chunk_ids"]):
        flat = batch.column(0).flatten().to_numpy()
        pos = np.searchsorted(chunk_ids, flat, sorter=order)
        known = (pos < len(chunk_ids)) & (chunk_ids[order[np.minimum(pos, len(chunk_ids) - 1)]] == flat)
        np.add.at(counts, order[pos[known]], 1)
    return counts


class Arrivals:
    """Feeds the trace's first `n_requests` requests into the run; `start(spec)` launches one."""

    def __init__(self, ctx: SimContext, n_requests: int, sorted_chunk_ids: np.ndarray,
                 start: Callable[[RequestSpec], None],
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.ctx, self.n_requests, self.start, self.progress = ctx, n_requests, start, progress
        self.sorted_chunk_ids = sorted_chunk_ids

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
        ids, arrival, after, think = (column[c].to_numpy() for c in ("request_id", "arrival_s", "after_id", "think_s"))
        hint, prefill_hint = column["requester_hint"].to_numpy(), column["prefill_hint"].to_numpy()
        prompt, output = column["prompt_tokens"].to_numpy(), column["output_tokens"].to_numpy()
        topk, spanned = column["topk"].to_numpy(), column["holders_spanned"].to_numpy()
        offsets = column["chunk_ids"].offsets.to_numpy()
        flat_ids = column["chunk_ids"].flatten().to_numpy()
        flat_cached = column["chunk_at_cached_offset"].flatten().to_numpy(zero_copy_only=False)
        index = ctx.cluster.chunks.index
        for j in range(len(ids)):
            request = int(ids[j])
            spec = None
            if request < n:
                ctx.recorder.output_tokens[request] = output[j]
                lo, hi = offsets[j], offsets[j + 1]
                if until is not None and arrival[j] > until and after[j] < 0:
                    ctx.recorder.drop(request, DropReason.UNFINISHED)
                elif not all(int(c) in index for c in flat_ids[lo:hi].tolist()):
                    ctx.recorder.drop(request, DropReason.UNKNOWN_CHUNK)
                else:
                    spec = RequestSpec(request, int(hint[j]), int(prefill_hint[j]), int(prompt[j]), int(output[j]),
                                       [index[c] for c in flat_ids[lo:hi].tolist()], flat_cached[lo:hi].tolist(),
                                       int(topk[j]), int(spanned[j]))
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
