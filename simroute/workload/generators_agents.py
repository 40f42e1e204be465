"""`agents`: documents pinned as immutable prefixes, forked by many sub-agents (the paper's core case).

Per document: an orchestrator (root) request reads the document, then N sub-agents fork it; each
sub-agent issues R requests that attend the whole document at its cached offsets (a true prefix, so
a fetched copy needs no splice), append a short own suffix and decode T tokens. Closed loop (next
request `think_s` after the previous one completes) or open-loop Poisson per sub-agent.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np
import pyarrow as pa

from simroute.workload.generators import (check, check_horizon, check_memory, check_sizes, dict_strings, lengths,
                                          register, tenant_names)
from simroute.workload.writer import TraceWriter, list_array


MAX_OUTPUT_TOKENS = 1 << 15          # a log-normal output draw is clipped here


@dataclasses.dataclass(frozen=True)
class AgentsParams:
    documents: int = 4
    doc_tokens: int = 16_384          # D: tokens of each pinned document
    chunk_tokens: int = 2_048         # ct: canonical chunk size the document is cut into
    subagents: int = 16               # N sub-agents forking each document
    requests_per_agent: int = 4       # R requests per sub-agent
    suffix_tokens: int = 256          # median own suffix per request (log-normal)
    suffix_sigma: float = 0.5
    output_tokens: int = 256          # T decoded tokens per sub-agent request (the median when output_sigma > 0)
    output_sigma: float = 0.0         # log-normal spread of sub-agent outputs (0: every one decodes T tokens)
    root: bool = True                 # an orchestrator request per document that the sub-agents fork from
    root_output_tokens: int = 512
    tenants: int = 2                  # documents are spread round-robin over tenants
    arrival: Literal["closed", "poisson"] = "closed"
    think_s: float = 2.0              # mean think time (closed loop), exponential
    rate_per_agent: float = 0.5       # requests/s of each sub-agent (poisson)
    doc_interval_s: float = 5.0       # documents start this far apart
    nominal_tpot_s: float = 0.02      # for the nominal arrival_s of closed-loop requests only
    qps: float | None = None          # set: the whole trace is one open-loop Poisson stream of this mean rate
                                      # (overrides arrival, think_s, rate_per_agent and doc_interval_s)

    def __post_init__(self) -> None:
        for name in ("documents", "doc_tokens", "chunk_tokens", "subagents", "requests_per_agent",
                     "tenants", "output_tokens", "suffix_tokens"):
            check(getattr(self, name) >= 1, f"{name} must be >= 1")
        check(self.think_s >= 0 and self.doc_interval_s >= 0 and self.suffix_sigma >= 0 and self.output_sigma >= 0,
              "think_s, doc_interval_s, suffix_sigma and output_sigma must be >= 0")
        check(self.rate_per_agent > 0 and self.nominal_tpot_s >= 0, "rate_per_agent must be > 0")
        check(self.qps is None or (isinstance(self.qps, (int, float)) and 0 < self.qps < 1e9),
              "qps must be a rate > 0 (requests/s) or unset")
        requests = self.documents * (1 + self.subagents * self.requests_per_agent)
        if self.qps is not None:
            check_horizon(requests / self.qps, f"qps {self.qps:g} for {requests:,} requests")
        else:
            check_horizon(self.documents * self.doc_interval_s + self.requests_per_agent
                          * max(self.think_s + self.nominal_tpot_s * self.output_tokens, 1.0 / self.rate_per_agent),
                          f"{self.documents:,} documents {self.doc_interval_s:g} s apart, each agent's "
                          f"{self.requests_per_agent} requests")
        n_chunks = -(-self.doc_tokens // self.chunk_tokens)
        check_sizes(requests, self.documents * n_chunks, 0, self.tenants)
        check_memory(requests, requests * n_chunks)      # every request lists its document's chunks


def _stream_at_rate(rng: np.random.Generator, p: AgentsParams, per_doc: int,
                    turns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival, after, think) of an open-loop trace whose requests arrive as one Poisson stream of `p.qps`:
    the stream's instants are dealt to the requests at random, then each document's root takes its document's
    first instant and each sub-agent's turns keep their order, so the load is exactly the asked rate."""
    n = p.documents * per_doc
    instants = np.cumsum(rng.exponential(1.0 / p.qps, size=n))
    arrival = instants[rng.permutation(n)]
    first_agent = 1 if p.root else 0
    for d in range(p.documents):
        base = d * per_doc
        if p.root:
            earliest = base + int(np.argmin(arrival[base:base + per_doc]))
            arrival[[base, earliest]] = arrival[[earliest, base]]
        idx = base + first_agent + np.arange(p.subagents * turns).reshape(p.subagents, turns)
        arrival[idx] = np.sort(arrival[idx], axis=1)
    return arrival, np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.float32)


@register("agents", AgentsParams, "documents pinned as prefixes, forked by N sub-agents each")
def gen_agents(writer: TraceWriter, p: AgentsParams, rng: np.random.Generator) -> None:
    n_chunks = -(-p.doc_tokens // p.chunk_tokens)
    per_doc = (1 if p.root else 0) + p.subagents * p.requests_per_agent
    n = p.documents * per_doc
    arrival = np.zeros(n)
    after = np.full(n, -1, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    think = np.zeros(n, dtype=np.float32)
    session = np.zeros(n, dtype=np.int64)
    doc_of = np.repeat(np.arange(p.documents), per_doc)
    prompt = lengths(rng, n, p.suffix_tokens, p.suffix_sigma, 1, 1 << 30)
    out = lengths(rng, n, p.output_tokens, p.output_sigma, 1, MAX_OUTPUT_TOKENS)   # no draw when sigma is 0
    R = p.requests_per_agent
    for d in range(p.documents):
        base = d * per_doc
        start = d * p.doc_interval_s
        pos = base
        root_pos = -1
        if p.root:
            root_pos = pos
            arrival[pos] = start
            out[pos] = p.root_output_tokens
            session[pos] = d * (p.subagents + 1)
            pos += 1
        idx = pos + np.arange(p.subagents * R).reshape(p.subagents, R)  # [agent, turn]
        session[idx] = d * (p.subagents + 1) + 1 + np.arange(p.subagents)[:, None]
        parent[idx] = root_pos
        if p.arrival == "poisson":
            gaps = rng.exponential(1.0 / p.rate_per_agent, size=(p.subagents, R))
            first = start + (out[root_pos] * p.nominal_tpot_s if p.root else 0.0)
            arrival[idx] = first + np.cumsum(gaps, axis=1)
        else:
            think[idx] = rng.exponential(p.think_s, size=(p.subagents, R)) if p.think_s > 0 else 0.0
            prev = np.full(p.subagents, root_pos, dtype=np.int64)
            for r in range(R):
                cur = idx[:, r]
                after[cur] = prev
                if p.root or r > 0:
                    done = arrival[prev] + out[prev] * p.nominal_tpot_s
                else:
                    done = np.full(p.subagents, start)
                arrival[cur] = done + think[cur]
                prev = cur
    if p.qps is not None:
        arrival, after, think = _stream_at_rate(rng, p, per_doc, R)
    # Arrival order; references are input positions, remapped through the inverse permutation.
    order = np.argsort(arrival, kind="stable")
    inv = np.empty_like(order)
    inv[order] = np.arange(n)

    def remap(ref: np.ndarray) -> np.ndarray:
        return np.where(ref >= 0, inv[np.maximum(ref, 0)], -1)

    doc_sorted = doc_of[order]
    chunk_base = doc_sorted.astype(np.int64) * n_chunks
    flat = (chunk_base[:, None] + np.arange(n_chunks)[None, :]).ravel()
    offsets = np.arange(n + 1, dtype=np.int64) * n_chunks
    writer.add_requests({
        "arrival_s": arrival[order], "tenant": dict_strings(doc_sorted % p.tenants, tenant_names(p.tenants)),
        "session": session[order], "parent_id": remap(parent[order]), "after_id": remap(after[order]),
        "think_s": think[order], "prompt_tokens": prompt[order], "output_tokens": out[order],
        "chunk_ids": list_array(offsets, flat, pa.int64()),
        "chunk_at_cached_offset": list_array(offsets, np.ones(len(flat), dtype=bool), pa.bool_()),
    })
    ids = np.arange(p.documents * n_chunks, dtype=np.int64)
    k = ids % n_chunks
    tokens = np.where(k == n_chunks - 1, p.doc_tokens - (n_chunks - 1) * p.chunk_tokens, p.chunk_tokens)
    writer.finish({"chunk_id": ids, "tokens": tokens.astype(np.int32),
                   "corpus": dict_strings(ids // n_chunks, [f"doc{d}" for d in range(p.documents)]),
                   "cached_offset": k * p.chunk_tokens, "canonical": True})
