"""Instances (a GPU or a tensor-parallel group), their HBM, and which chunks each holds.

Canonical chunks are pinned where placement put them; fetched or re-prefilled copies are evictable (LRU)
and, while resident, serve other requesters too (a holder is whoever has the chunk in HBM).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import simpy

from simroute.sim.holder import HolderServer, StagingPool


@dataclass(eq=False)
class Instance:
    id: int
    gpu: str                      # the GPU whose NIC / links carry this instance's traffic
    host: int
    capacity_bytes: float
    compute: simpy.Resource       # prefill / re-prefill / splice on this instance, one at a time
    holder: HolderServer
    staging: StagingPool
    pinned_bytes: float = 0.0
    copies: "OrderedDict[int, float]" = field(default_factory=OrderedDict)
    copy_bytes: float = 0.0
    active: int = 0               # requests in flight with this instance as requester
    evictions: int = 0
    refused: int = 0

    @property
    def free_bytes(self) -> float:
        return self.capacity_bytes - self.pinned_bytes - self.copy_bytes


class ChunkStore:
    """Chunk attributes as arrays (indexed by a dense chunk index) and the holder sets."""

    def __init__(self, chunk_ids: np.ndarray, tokens: np.ndarray, cached_offset: np.ndarray,
                 canonical: np.ndarray, holder_hint: np.ndarray, kv_bytes_per_token: float) -> None:
        self.ids = chunk_ids
        self.index = {int(c): i for i, c in enumerate(chunk_ids.tolist())}
        self.tokens = tokens
        self.cached_offset = cached_offset
        self.canonical = canonical
        self.holder_hint = holder_hint
        self.bytes = tokens.astype(np.float64) * kv_bytes_per_token
        self.holders: list[list[int]] = [[] for _ in range(len(chunk_ids))]
        self.pinned: list[set[int]] = [set() for _ in range(len(chunk_ids))]
        self.pending: dict[tuple[int, int], simpy.Event] = {}   # (chunk, instance) copies being made

    def resident_on(self, ci: int, inst: int) -> bool:
        return inst in self.holders[ci]

    def add_copy(self, ci: int, inst: Instance) -> bool:
        """Make a fetched / re-prefilled copy resident on `inst`, evicting LRU copies; False if it cannot fit."""
        if inst.id in self.holders[ci]:
            if ci in inst.copies:
                inst.copies.move_to_end(ci)
            return True
        size = float(self.bytes[ci])
        while inst.free_bytes < size and inst.copies:
            old, old_size = inst.copies.popitem(last=False)
            inst.copy_bytes -= old_size
            self.holders[old].remove(inst.id)
            inst.evictions += 1
        if inst.free_bytes < size:
            inst.refused += 1
            return False
        inst.copies[ci] = size
        inst.copy_bytes += size
        self.holders[ci].append(inst.id)
        return True

    def touch(self, ci: int, inst: Instance) -> None:
        if ci in inst.copies:
            inst.copies.move_to_end(ci)
