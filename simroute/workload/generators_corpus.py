"""`corpus` (shared canonical corpus, Zipf popularity, re-homed reuse) and `sparse` (DSA/NSA selection).

Both stream fixed-size batches (GEN_BATCH) so a 10M-request trace never sits in memory.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from simroute.workload.generators import (GEN_BATCH, check, check_horizon, check_refs, check_sizes, dedupe_rows,
                                          dict_strings, lengths, poisson_arrivals, register, tenant_names)
from simroute.workload.writer import TraceWriter, list_array


@dataclasses.dataclass(frozen=True)
class CorpusParams:
    requests: int = 10_000
    qps: float = 20.0                 # open-loop Poisson rate
    chunks: int = 256                 # C canonical chunks in the corpus
    chunk_tokens: int = 2_048         # ct
    zipf_s: float = 1.1               # popularity skew: P(rank k) ~ 1 / k^s (chunk id = rank)
    chunks_per_request: float = 2.0   # mean chunks attended (1 + Poisson), deduplicated
    max_chunks_per_request: int = 8
    prefix_tokens: int = 512          # median of each request's own (different) prefix, log-normal
    prefix_sigma: float = 0.6
    output_tokens: int = 128          # median decoded tokens, log-normal
    output_sigma: float = 0.5
    tenants: int = 8
    instances: int = 8                # tenant i is homed on instance i % instances (requester_hint)
    place_chunks: bool = False        # holder_hint = chunk_id % instances (else -1: the simulator places)

    def __post_init__(self) -> None:
        for name in ("requests", "chunks", "chunk_tokens", "tenants", "instances", "max_chunks_per_request",
                     "prefix_tokens", "output_tokens"):
            check(getattr(self, name) >= 1, f"{name} must be >= 1")
        check(self.qps > 0 and self.zipf_s >= 0, "qps must be > 0 and zipf_s >= 0")
        check_horizon(self.requests / self.qps, f"qps {self.qps:g} for {self.requests:,} requests")
        check(1 <= self.chunks_per_request <= self.max_chunks_per_request,
              "chunks_per_request must be within [1, max_chunks_per_request]")
        check_sizes(self.requests, self.chunks, self.instances, self.tenants)
        check_refs(self.requests * min(self.chunks_per_request, self.chunks))     # the mean a request attends


@register("corpus", CorpusParams, "canonical Zipf-popular corpus attended after per-request prefixes")
def gen_corpus(writer: TraceWriter, p: CorpusParams, rng: np.random.Generator) -> None:
    weights = 1.0 / np.arange(1, p.chunks + 1, dtype=np.float64) ** p.zipf_s
    cdf = np.cumsum(weights / weights.sum())
    cdf[-1] = 1.0
    t = 0.0
    tenants = tenant_names(p.tenants)
    home = np.arange(p.tenants) % p.instances
    kmax = min(p.max_chunks_per_request, p.chunks)
    for start in range(0, p.requests, GEN_BATCH):
        n = min(GEN_BATCH, p.requests - start)
        arrival = poisson_arrivals(rng, n, p.qps, t)
        t = float(arrival[-1])
        k = np.clip(1 + rng.poisson(p.chunks_per_request - 1, size=n), 1, kmax)
        rows = np.repeat(np.arange(n), k)
        draws = np.searchsorted(cdf, rng.random(len(rows)), side="right").astype(np.int64)
        offsets, flat = dedupe_rows(rows, np.minimum(draws, p.chunks - 1), n)
        tenant = rng.integers(0, p.tenants, size=n)
        writer.add_requests({
            "arrival_s": arrival, "tenant": dict_strings(tenant, tenants),
            "requester_hint": home[tenant].astype(np.int32),
            "prompt_tokens": lengths(rng, n, p.prefix_tokens, p.prefix_sigma, 1, 1 << 30),
            "output_tokens": lengths(rng, n, p.output_tokens, p.output_sigma, 1, 1 << 30),
            "chunk_ids": list_array(offsets, flat, pa.int64()),
            # after a request-specific prefix: attended away from the cached offset (re-homed)
            "chunk_at_cached_offset": list_array(offsets, np.zeros(len(flat), dtype=bool), pa.bool_()),
        })
    ids = np.arange(p.chunks, dtype=np.int64)
    writer.finish({"chunk_id": ids, "tokens": np.full(p.chunks, p.chunk_tokens, dtype=np.int32),
                   "corpus": "corpus", "cached_offset": 0, "canonical": True,
                   "holder_hint": (ids % p.instances).astype(np.int32) if p.place_chunks else -1})


@dataclasses.dataclass(frozen=True)
class SparseParams:
    requests: int = 10_000
    qps: float = 20.0
    holders: int = 8                  # instances holding the shared store
    spanned: int = 4                  # M: holders one decode step's selection spans
    chunks_per_holder: int = 16       # store chunks on each holder
    chunk_tokens: int = 2_048
    chunks_per_holder_request: int = 2  # chunks a request attends on each spanned holder
    topk: int = 2_048                 # selection budget per decode step (DeepSeek-V3.2 / GLM-5.1)
    prompt_tokens: int = 256          # median own prompt
    prompt_sigma: float = 0.5
    output_tokens: int = 128
    output_sigma: float = 0.5
    tenants: int = 4

    def __post_init__(self) -> None:
        for name in ("requests", "holders", "spanned", "chunks_per_holder", "chunk_tokens", "topk",
                     "chunks_per_holder_request", "tenants", "prompt_tokens", "output_tokens"):
            check(getattr(self, name) >= 1, f"{name} must be >= 1")
        check(self.spanned <= self.holders, "spanned (M) must be <= holders")
        check(self.chunks_per_holder_request <= self.chunks_per_holder,
              "chunks_per_holder_request must be <= chunks_per_holder")
        check(self.spanned < 1 << 15 and self.qps > 0, "spanned must fit int16; qps > 0")
        check_horizon(self.requests / self.qps, f"qps {self.qps:g} for {self.requests:,} requests")
        check_sizes(self.requests, self.holders * self.chunks_per_holder, self.holders, self.tenants)
        check_refs(self.requests * self.spanned * self.chunks_per_holder_request)


@register("sparse", SparseParams, "top-k selection over chunks spread on M holders (DSA/NSA)")
def gen_sparse(writer: TraceWriter, p: SparseParams, rng: np.random.Generator) -> None:
    t = 0.0
    tenants = tenant_names(p.tenants)
    per_req = p.spanned * p.chunks_per_holder_request
    batch = max(1, min(GEN_BATCH, (1 << 24) // (p.holders + p.spanned * p.chunks_per_holder)))
    for start in range(0, p.requests, batch):
        n = min(batch, p.requests - start)
        arrival = poisson_arrivals(rng, n, p.qps, t)
        t = float(arrival[-1])
        holders = np.argsort(rng.random((n, p.holders)), axis=1)[:, :p.spanned]          # M distinct
        local = np.argsort(rng.random((n, p.spanned, p.chunks_per_holder)), axis=2)
        local = np.sort(local[:, :, :p.chunks_per_holder_request], axis=2)
        holders = np.sort(holders, axis=1)
        flat = (holders[:, :, None] * p.chunks_per_holder + local).reshape(-1).astype(np.int64)
        offsets = np.arange(n + 1, dtype=np.int64) * per_req
        writer.add_requests({
            "arrival_s": arrival, "tenant": dict_strings(rng.integers(0, p.tenants, size=n), tenants),
            "prompt_tokens": lengths(rng, n, p.prompt_tokens, p.prompt_sigma, 1, 1 << 30),
            "output_tokens": lengths(rng, n, p.output_tokens, p.output_sigma, 1, 1 << 30),
            "chunk_ids": list_array(offsets, flat, pa.int64()),
            # selected entries keep their cached positions (re-homing a scattered selection diverges)
            "chunk_at_cached_offset": list_array(offsets, np.ones(len(flat), dtype=bool), pa.bool_()),
            "topk": p.topk, "holders_spanned": p.spanned,
        })
    ids = np.arange(p.holders * p.chunks_per_holder, dtype=np.int64)
    writer.finish({"chunk_id": ids, "tokens": np.full(len(ids), p.chunk_tokens, dtype=np.int32),
                   "corpus": "sparse-store", "cached_offset": (ids % p.chunks_per_holder) * p.chunk_tokens,
                   "canonical": True, "holder_hint": (ids // p.chunks_per_holder).astype(np.int32)})
