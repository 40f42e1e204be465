"""`trace info`: size, span, rate, token percentiles and reuse, computed in one streamed pass.

Reuse is measured in prompt tokens (a request's chunk tokens plus its own tokens; own tokens are
never reusable): `reuse_unbounded` is the fraction already present in an unbounded shared store
when the requests are replayed in arrival order (the first attendance of a chunk misses, every
later one hits); `lru_hit_ratio` is the same with an LRU store of `lru_capacity_tokens`.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from simroute.workload.validate import RequestChecker, check_chunks
from simroute.workload.reader import iter_request_batches, read_chunks, read_trace_meta

PERCENTILES = (50, 90, 99)


@dataclasses.dataclass
class TraceInfo:
    requests: int
    chunks: int
    span_s: float
    rate_rps: float
    closed_loop_requests: int
    tenants: int
    prompt_tokens: dict[str, float]        # own + attended chunk tokens
    own_prompt_tokens: dict[str, float]
    output_tokens: dict[str, float]
    chunks_per_request: dict[str, float]
    total_prompt_tokens: int
    unique_chunk_tokens: int               # the unbounded store's final footprint
    reuse_unbounded: float
    lru_capacity_tokens: int | None
    lru_hit_ratio: float | None
    meta: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _summary(parts: list[np.ndarray]) -> dict[str, float]:
    x = np.concatenate(parts) if parts else np.zeros(0)
    if len(x) == 0:
        return {"mean": 0.0, "min": 0.0, "max": 0.0, **{f"p{q}": 0.0 for q in PERCENTILES}}
    out = {"mean": float(x.mean()), "min": float(x.min()), "max": float(x.max())}
    out.update({f"p{q}": float(v) for q, v in zip(PERCENTILES, np.percentile(x, PERCENTILES))})
    return out


class _Lru:
    """Token-capacity LRU over chunk indices (a plain loop: only run when asked for)."""

    def __init__(self, capacity: int, tokens: np.ndarray) -> None:
        self.capacity, self.tokens = capacity, tokens
        self.store: OrderedDict[int, int] = OrderedDict()
        self.used = 0
        self.hit_tokens = 0

    def access(self, idx: np.ndarray) -> None:
        store, tokens, cap = self.store, self.tokens, self.capacity
        for i, t in zip(idx.tolist(), tokens[idx].tolist()):
            if i in store:
                store.move_to_end(i)
                self.hit_tokens += t
                continue
            if t > cap:
                continue
            store[i] = t
            self.used += t
            while self.used > cap:
                self.used -= store.popitem(last=False)[1]


# columns read only so that `trace info` applies the same checks as `run`
CHECKED_ONLY = ["think_s", "parent_id", "requester_hint", "prefill_hint", "chunk_at_cached_offset", "topk",
                "holders_spanned"]


def trace_info(path: str | Path, *, lru_capacity_tokens: int | None = None,
               batch_rows: int = 65_536) -> TraceInfo:
    """Statistics of a trace in one pass over its request row groups (memory: a few numbers per request)."""
    meta = read_trace_meta(path)
    chunks = read_chunks(path, columns=["chunk_id", "tokens", "cached_offset", "holder_hint", "corpus"])
    check_chunks(path, chunks)
    ids = chunks["chunk_id"].to_numpy()
    tokens = chunks["tokens"].to_numpy().astype(np.int64)
    if len(ids) and np.any(np.diff(ids) <= 0):
        order = np.argsort(ids, kind="stable")
        ids, tokens = ids[order], tokens[order]
    seen = np.zeros(len(ids), dtype=bool)
    lru = _Lru(lru_capacity_tokens, tokens) if lru_capacity_tokens is not None else None
    own_parts, prompt_parts, out_parts, k_parts = [], [], [], []
    first = last = None
    n = closed = 0
    hit = total = 0
    tenants: set[str] = set()
    cols = ["request_id", "arrival_s", "tenant", "after_id", "prompt_tokens", "output_tokens", "chunk_ids"]
    checker = RequestChecker(path, ids)
    for batch in iter_request_batches(path, batch_rows=batch_rows, columns=cols + CHECKED_ONLY):
        checker.check(batch)
        arrival = batch.column("arrival_s").to_numpy()
        if len(arrival) == 0:
            continue
        first = arrival[0] if first is None else first
        last = arrival[-1]
        n += len(arrival)
        closed += int(np.count_nonzero(batch.column("after_id").to_numpy() >= 0))
        tenant = batch.column("tenant")
        tenants.update(tenant.dictionary.to_pylist() if hasattr(tenant, "dictionary")
                       else pc.unique(tenant).to_pylist())
        lists = batch.column("chunk_ids")
        counts = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(lists).to_numpy()
        idx = np.searchsorted(ids, flat)
        tok = tokens[idx]
        repeat = np.ones(len(idx), dtype=bool)
        repeat[np.unique(idx, return_index=True)[1]] = False
        hits = seen[idx] | repeat
        seen[idx] = True
        own = batch.column("prompt_tokens").to_numpy().astype(np.int64)
        per_req = np.bincount(np.repeat(np.arange(len(own)), counts), weights=tok, minlength=len(own))
        hit += int(tok[hits].sum())
        total += int(own.sum() + tok.sum())
        if lru is not None:
            lru.access(idx)
        own_parts.append(own)
        prompt_parts.append(own + per_req.astype(np.int64))
        out_parts.append(batch.column("output_tokens").to_numpy())
        k_parts.append(counts)
    span = float(last - first) if n else 0.0
    return TraceInfo(
        requests=n, chunks=len(ids), span_s=span, rate_rps=(n / span) if span > 0 else 0.0,
        closed_loop_requests=closed, tenants=len(tenants), prompt_tokens=_summary(prompt_parts),
        own_prompt_tokens=_summary(own_parts), output_tokens=_summary(out_parts),
        chunks_per_request=_summary(k_parts), total_prompt_tokens=total,
        unique_chunk_tokens=int(tokens[seen].sum()), reuse_unbounded=(hit / total) if total else 0.0,
        lru_capacity_tokens=lru_capacity_tokens,
        lru_hit_ratio=((lru.hit_tokens / total) if total else 0.0) if lru is not None else None,
        meta=meta)


def format_info(info: TraceInfo) -> str:
    """Human-readable summary for the CLI."""
    def row(name: str, d: dict[str, float]) -> str:
        return (f"  {name:<20} mean {d['mean']:>10.1f}  p50 {d['p50']:>9.0f}  p90 {d['p90']:>9.0f}  "
                f"p99 {d['p99']:>9.0f}  max {d['max']:>9.0f}")
    m = info.meta
    lines = [f"trace: {m.get('producer', '?')} {m.get('name', '?')} (seed {m.get('seed')})",
             f"  requests {info.requests:,}  chunks {info.chunks:,}  tenants {info.tenants}  "
             f"closed-loop {info.closed_loop_requests:,}",
             f"  span {info.span_s:,.3f} s  rate {info.rate_rps:,.3f} req/s"
             + (f"  at most {m['max_concurrency']} in flight (max_concurrency)" if m.get("max_concurrency") else ""),
             row("prompt tokens", info.prompt_tokens), row("own prompt tokens", info.own_prompt_tokens),
             row("output tokens", info.output_tokens), row("chunks/request", info.chunks_per_request),
             f"  reuse (unbounded store) {info.reuse_unbounded:.2%} of {info.total_prompt_tokens:,} prompt tokens; "
             f"footprint {info.unique_chunk_tokens:,} tokens"]
    if info.lru_hit_ratio is not None:
        lines.append(f"  LRU hit ratio at {info.lru_capacity_tokens:,} tokens: {info.lru_hit_ratio:.2%}")
    return "\n".join(lines)
