"""Where canonical chunks live: hash partitioning, consistent hashing, popularity-aware replication.

Placement is a pure function of the chunk table, the instances' HBM and the seed; capacity is respected
and what does not fit is reported as overflow (those chunks have no holder and must be re-prefilled).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

_M64 = (1 << 64) - 1


def mix64(x: int) -> int:
    """SplitMix64 finaliser: a deterministic, well-spread integer hash (Python's hash() is salted)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def mix64_array(x: np.ndarray) -> np.ndarray:
    """Vectorised SplitMix64 over uint64."""
    x = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@dataclass
class PlacementResult:
    holders: list[list[int]]      # per chunk index: instance ids holding it (empty = overflow)
    used_bytes: np.ndarray        # per instance
    overflow_chunks: int
    overflow_bytes: float
    replicated_chunks: int


def place(kind: str, chunk_ids: np.ndarray, chunk_bytes: np.ndarray, canonical: np.ndarray,
          holder_hint: np.ndarray, n_instances: int, capacity_bytes: float, *, seed: int,
          popularity: np.ndarray | None = None, replicas: int = 1, hot_fraction: float = 0.01,
          vnodes: int = 64) -> PlacementResult:
    """Place every canonical chunk (non-canonical chunks are created on first prefill, not placed)."""
    n = len(chunk_ids)
    holders: list[list[int]] = [[] for _ in range(n)]
    used = np.zeros(n_instances)
    overflow_n, overflow_b, replicated = 0, 0.0, 0
    salt = np.uint64(mix64(seed))
    h = mix64_array(np.asarray(chunk_ids, dtype=np.int64).view(np.uint64) ^ salt)
    if kind == "consistent-hash":
        ring_keys = sorted((mix64(mix64(i * 1_000_003 + v) ^ int(salt)), i)
                           for i in range(n_instances) for v in range(vnodes))
        ring_pos = [k for k, _ in ring_keys]
        ring_inst = [i for _, i in ring_keys]
    want = np.ones(n, dtype=np.int64)
    if kind == "popularity" and popularity is not None and replicas > 1:
        n_hot = int(np.ceil(hot_fraction * np.count_nonzero(canonical)))
        order = np.argsort(-popularity, kind="stable")
        hot = [i for i in order[:n_hot] if canonical[i] and popularity[i] > 0]
        want[hot] = min(replicas, n_instances)
        replicated = len(hot)
    # Place large-demand chunks first so replicas are not starved by the tail.
    for ci in np.flatnonzero(canonical):
        size = float(chunk_bytes[ci])
        start = int(holder_hint[ci]) if holder_hint[ci] >= 0 else None
        candidates = _candidates(kind, int(h[ci]), n_instances, start,
                                 ring_pos if kind == "consistent-hash" else None,
                                 ring_inst if kind == "consistent-hash" else None)
        for inst in candidates:
            if len(holders[ci]) >= want[ci]:
                break
            if used[inst] + size <= capacity_bytes and inst not in holders[ci]:
                holders[ci].append(inst)
                used[inst] += size
        if not holders[ci]:
            overflow_n += 1
            overflow_b += size
    return PlacementResult(holders, used, overflow_n, overflow_b, replicated)


def _candidates(kind: str, h: int, n: int, start: int | None, ring_pos, ring_inst):
    """Instances in the order a chunk tries them: its home first, then the probe sequence."""
    if start is not None:
        yield start
    if kind == "consistent-hash":
        j = bisect.bisect_left(ring_pos, h) % len(ring_pos)
        seen = set()
        for k in range(len(ring_pos)):
            inst = ring_inst[(j + k) % len(ring_pos)]
            if inst not in seen:
                seen.add(inst)
                yield inst
        return
    home = h % n
    # A second hash gives the stride so replicas land on well-spread instances (double hashing).
    stride = 1 + (mix64(h) % max(n - 1, 1)) if n > 1 else 1
    step = stride if np.gcd(stride, n) == 1 else 1
    for k in range(n):
        yield (home + k * step) % n
