"""Instances (a GPU or a tensor-parallel group), their HBM, and which chunks each holds.

Canonical chunks are pinned where placement put them; fetched or re-prefilled copies are evictable (LRU)
and, while resident, serve other requesters too (a holder is whoever has the chunk in HBM).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import simpy

from simroute.sim.holder import FifoServer, HolderServer, StagingPool


@dataclass(eq=False)
class Instance:
    id: int
    gpu: str                      # the GPU whose NIC / links carry this instance's traffic
    host: int
    capacity_bytes: float
    compute: FifoServer           # prefill / re-prefill / splice on this instance, one at a time
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
        self.pins: dict[tuple[int, int], int] = {}               # (chunk, instance) -> requests relying on it

    def pin(self, ci: int, inst: int) -> None:
        key = (ci, inst)
        self.pins[key] = self.pins.get(key, 0) + 1

    def unpin(self, ci: int, inst: int) -> None:
        key = (ci, inst)
        n = self.pins[key] - 1
        if n:
            self.pins[key] = n
        else:
            del self.pins[key]

    def resident_on(self, ci: int, inst: int) -> bool:
        return inst in self.holders[ci]

    def add_copy(self, ci: int, inst: Instance) -> bool:
        """Make a fetched / re-prefilled copy resident on `inst`, evicting LRU copies; False if it cannot fit."""
        if inst.id in self.holders[ci]:
            if ci in inst.copies:
                inst.copies.move_to_end(ci)
            return True
        size = float(self.bytes[ci])
        if inst.free_bytes < size:
            # Least recently used first; a copy that a running request attends or routes to stays.
            victims, freed = [], inst.free_bytes
            for old, old_size in inst.copies.items():
                if freed >= size:
                    break
                if (old, inst.id) not in self.pins:
                    victims.append(old)
                    freed += old_size
            if freed < size:
                inst.refused += 1     # kept by its request only (transient), not shared, not in the store
                return False
            for old in victims:
                inst.copy_bytes -= inst.copies.pop(old)
                self.holders[old].remove(inst.id)
                inst.evictions += 1
        inst.copies[ci] = size
        inst.copy_bytes += size
        self.holders[ci].append(inst.id)
        return True

    def touch(self, ci: int, inst: Instance) -> None:
        if ci in inst.copies:
            inst.copies.move_to_end(ci)
