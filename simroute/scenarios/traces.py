"""Small traces built in code for `simroute validate`, the tests and the benchmarks.

Each writes a regular trace dataset (through the workload writer), so the simulator runs them exactly as it
runs a user's file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from simroute.workload.writer import list_array, open_trace_writer


def write_trace(path: str | Path, requests: list[dict[str, Any]], chunks: list[dict[str, Any]],
                name: str = "scenario") -> Path:
    """Write `requests` (dicts of request columns; chunk_ids as lists) and `chunks` as a trace dataset."""
    import pyarrow as pa
    reqs = sorted(requests, key=lambda r: r["arrival_s"])
    cols: dict[str, Any] = {}
    keys = sorted({k for r in reqs for k in r} - {"chunk_ids", "chunk_at_cached_offset"})
    for k in keys:
        cols[k] = np.array([r[k] for r in reqs])
    lens = np.array([len(r.get("chunk_ids", [])) for r in reqs])
    offsets = np.concatenate(([0], np.cumsum(lens))).astype(np.int32)
    flat = np.array([c for r in reqs for c in r.get("chunk_ids", [])], dtype=np.int64)
    cached = np.array([c for r in reqs for c in r.get("chunk_at_cached_offset", [True] * len(r.get("chunk_ids", [])))],
                      dtype=bool)
    cols["chunk_ids"] = list_array(offsets, flat, pa.int64())
    cols["chunk_at_cached_offset"] = list_array(offsets, cached, pa.bool_())
    ccols: dict[str, Any] = {k: np.array([c[k] for c in chunks]) for k in (chunks[0] if chunks else {})}
    with open_trace_writer(path, {"producer": "scenario", "name": name}) as w:
        w.add_requests(cols)
        w.finish(ccols)
    return Path(path)


def fanin_trace(path: str | Path, n_requesters: int, *, chunk_tokens: int = 2048, n_chunks: int = 1,
                holder: int = 0, output_tokens: int = 64, prompt_tokens: int = 1, first_requester: int = 8,
                stride: int = 1, spacing_s: float = 0.0, cached: bool = True) -> Path:
    """N requesters (distinct instances) attend the same chunks on one holder at once (Fig 4b, §6.3); with
    `spacing_s` > 0 they arrive that far apart instead (each alone, if it is longer than one request lasts).
    `cached`: the chunks are attended at their cached offsets (a shared prefix: a fetch needs no splice)."""
    chunks = [{"chunk_id": i, "tokens": chunk_tokens, "canonical": True, "holder_hint": holder, "cached_offset":
               i * chunk_tokens} for i in range(n_chunks)]
    reqs = [{"arrival_s": k * spacing_s, "requester_hint": first_requester + k * stride,
             "prompt_tokens": prompt_tokens, "output_tokens": output_tokens, "chunk_ids": list(range(n_chunks)),
             "chunk_at_cached_offset": [cached] * n_chunks} for k in range(n_requesters)]
    return write_trace(path, reqs, chunks, name=f"fanin-{n_requesters}")


def single_chunk_trace(path: str | Path, *, requester: int, holder: int, chunk_tokens: int = 2048,
                       prompt_tokens: int = 16, output_tokens: int = 1, cached: bool = False) -> Path:
    """One request attending one remote chunk (the decode point of Fig 1b when prompt_tokens x h_q = Mq)."""
    chunks = [{"chunk_id": 0, "tokens": chunk_tokens, "canonical": True, "holder_hint": holder,
               "cached_offset": 0}]
    reqs = [{"arrival_s": 0.0, "requester_hint": requester, "prompt_tokens": prompt_tokens,
             "output_tokens": output_tokens, "chunk_ids": [0], "chunk_at_cached_offset": [cached]}]
    return write_trace(path, reqs, chunks, name="single-chunk")


def selection_trace(path: str | Path, *, requester: int, holders: list[int], topk: int = 2048,
                    chunk_tokens: int = 2048, prompt_tokens: int = 16, output_tokens: int = 1) -> Path:
    """One sparse request whose top-k selection spans len(holders) holders (Fig 4a)."""
    chunks = [{"chunk_id": i, "tokens": chunk_tokens, "canonical": True, "holder_hint": h,
               "cached_offset": i * chunk_tokens} for i, h in enumerate(holders)]
    reqs = [{"arrival_s": 0.0, "requester_hint": requester, "prompt_tokens": prompt_tokens,
             "output_tokens": output_tokens, "chunk_ids": list(range(len(holders))), "topk": topk,
             "holders_spanned": len(holders)}]
    return write_trace(path, reqs, chunks, name=f"selection-{len(holders)}")
