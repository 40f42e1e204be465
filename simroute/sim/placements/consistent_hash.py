"""Consistent hashing: instances own arcs of a hash ring (64 virtual nodes each); a chunk walks the ring."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from simroute.network.hashing import mix64
from simroute.sim.placements.base import PLACEMENTS, Placement

VIRTUAL_NODES = 64


@PLACEMENTS.register("consistent-hash")
class ConsistentHashPlacement(Placement):
    """Consistent hashing on a ring of 64 virtual nodes per instance (few moves when instances change)."""

    def prepare(self, n_instances: int) -> None:
        ring = sorted((mix64(mix64(inst * 1_000_003 + v) ^ self.salt), inst)
                      for inst in range(n_instances) for v in range(VIRTUAL_NODES))
        self.ring_positions = [pos for pos, _ in ring]
        self.ring_instances = [inst for _, inst in ring]

    def candidates(self, chunk_hash: int, n_instances: int) -> Iterator[int]:
        positions, owners = self.ring_positions, self.ring_instances
        start = bisect.bisect_left(positions, chunk_hash) % len(positions)
        seen: set[int] = set()
        for k in range(len(positions)):
            inst = owners[(start + k) % len(positions)]
            if inst not in seen:
                seen.add(inst)
                yield inst
