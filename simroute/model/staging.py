"""The holder's K-stream staging pool as mechanisms, each with its own constant ("Move the Query, Not the Cache",
§6.1-§6.2 and Fig 5b).

A holder stages each fetched chunk's c_KV into the symmetric heap as device-to-device copies before the NIC
reads it (§6.2), one copy per layer. One host thread issues the copies in layer order, round-robin over a pool
of K CUDA streams ("async issue"), then joins the streams it used (an event per stream that the NIC's put waits
on). What each step costs, and where its constant comes from:

- **host dispatch**: `dispatch_s` of host time per copy issued, serial on the issuing thread. The paper's
  prototype issues from Python; §7 measures its per-layer gather launch-bound at ~320 us over 27 layers
  (11.9 us a per-layer operation), the same stack's cost of one per-layer copy. The `staging` probe measures it.
- **host join**: `join_s` per stream the chunk used (one host call per stream, at the same per-call cost).
- **hardware work queues**: stream k feeds queue k mod `hw_queues` (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default,
  published); a queue runs its work in issue order, so streams beyond the queues share them.
- **copy engines**: at most `copy_engines` copies run at once (the GPU's asyncEngineCount, 3 on H100 SXM,
  published); running copies share the GPU's copy rate `hbm_copy_Bps` (achievable HBM / 2: each byte is read
  and written), each at most `copy_Bps` (one engine alone; by default that same rate).

The chunk is staged at max(host: n dispatches + the joins, device: the last copy's end) (`stage_s`). Nothing
here is fitted to Fig 5b: the paper's -7% at K = 8 and K = 16's regression are what `simroute validate`
judges the mechanism on (rows `staging-elbow`, `staging-past-elbow`, docs/VALIDATION.md).
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass

from simroute.model.geometry import get_model

PAPER_CHUNK_TOKENS = 2048                     # §6.2's chunk-prefetch workload: 2048-token chunks ...
PAPER_CHUNK_MODEL = "deepseek-v2-lite"        # ... of the paper's measured geometry (27 layers, bf16 c_KV)
CUDA_DEFAULT_CONNECTIONS = 8                  # CUDA_DEVICE_MAX_CONNECTIONS' default (NVIDIA CUDA documentation)


def paper_chunk_bytes() -> float:
    """Bytes of the chunk the paper's staging elbow was measured on (63.7 MB)."""
    return get_model(PAPER_CHUNK_MODEL).chunk_bytes(PAPER_CHUNK_TOKENS)


def paper_chunk_layers() -> int:
    """Layers (per-layer copies) of that chunk: 27."""
    return get_model(PAPER_CHUNK_MODEL).layers


@dataclass(frozen=True)
class StagingParams:
    """The staging mechanisms' constants (module docstring), with where each came from (`sources`: field ->
    text). Times in seconds, rates in bytes per second."""

    dispatch_s: float
    join_s: float
    copy_Bps: float
    hbm_copy_Bps: float
    copy_engines: int
    hw_queues: int
    sources: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for name in ("dispatch_s", "join_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"staging {name} must be >= 0, got {getattr(self, name)}")
        for name in ("copy_Bps", "hbm_copy_Bps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"staging {name} must be > 0, got {getattr(self, name)}")
        for name in ("copy_engines", "hw_queues"):
            if getattr(self, name) < 1:
                raise ValueError(f"staging {name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class StageTimes:
    """One chunk's staging: host_s (dispatches and joins), device_s (the last copy's end), total_s (the later)."""

    host_s: float
    device_s: float
    streams_used: int

    @property
    def total_s(self) -> float:
        return max(self.host_s, self.device_s)


def issue_plan(copies: int, streams: int, hw_queues: int) -> list[int]:
    """The hardware queue of each copy: copy i goes to stream i mod K, stream k to queue k mod `hw_queues`."""
    return [(copy % streams) % hw_queues for copy in range(copies)]


def copy_ends_s(issued_s: list[float], queues: list[int], copy_bytes: float, params: StagingParams) -> list[float]:
    """When each copy ends on the device: a copy starts once it is issued, every earlier copy of its queue has
    ended and a copy engine is free (copies start in issue order); the m copies running share the GPU's copy
    rate, each at min(`copy_Bps`, `hbm_copy_Bps` / m). Exact (piecewise-constant rates between events)."""
    count = len(issued_s)
    ends = [0.0] * count
    if count == 0:
        return ends
    lines: dict[int, deque[int]] = {}
    for index, queue in enumerate(queues):
        lines.setdefault(queue, deque()).append(index)
    running: dict[int, float] = {}           # copy -> bytes left
    busy: set[int] = set()                  # queues with a copy running
    now, done = 0.0, 0
    while done < count:
        heads = sorted(line[0] for queue, line in lines.items() if line and queue not in busy)
        for index in heads:                  # start what may start, in issue order
            if len(running) >= params.copy_engines:
                break
            if issued_s[index] <= now:
                lines[queues[index]].popleft()
                busy.add(queues[index])
                running[index] = copy_bytes
        rate = min(params.copy_Bps, params.hbm_copy_Bps / len(running)) if running else 0.0
        finish = min(running.values()) / rate if running else float("inf")
        arrive = min((issued_s[line[0]] for line in lines.values() if line and issued_s[line[0]] > now),
                     default=float("inf"))
        step = min(finish, arrive - now)
        now += step
        for index in list(running):
            left = running[index] - rate * step
            if left <= copy_bytes * 1e-12:
                del running[index]
                busy.discard(queues[index])
                ends[index] = now
                done += 1
            else:
                running[index] = left
    return ends


def stage_times(copies: int, copy_bytes: float, streams: int, params: StagingParams) -> StageTimes:
    """One chunk of `copies` copies of `copy_bytes` on a pool of `streams` streams (module docstring)."""
    if copies < 1:
        return StageTimes(0.0, 0.0, 0)
    if streams < 1:
        raise ValueError(f"a staging pool needs at least one stream, got {streams}")
    used = min(streams, copies)
    issued = [(copy + 1) * params.dispatch_s for copy in range(copies)]
    ends = copy_ends_s(issued, issue_plan(copies, streams, params.hw_queues), copy_bytes, params)
    return StageTimes(host_s=copies * params.dispatch_s + used * params.join_s, device_s=max(ends),
                      streams_used=used)


@functools.lru_cache(maxsize=4096)
def stage_s(copies: int, copy_bytes: float, streams: int, params: StagingParams) -> float:
    """Seconds to stage one chunk: `stage_times(...).total_s`. Kept per arguments and process: a run's chunks come
    in few sizes and every holder's pool asks for the same ones (on the 1024-GPU Zipf bench, `copy_ends_s`
    was ~5% of a run's CPU before)."""
    return stage_times(copies, copy_bytes, streams, params).total_s
