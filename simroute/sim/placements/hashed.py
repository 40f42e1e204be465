"""Hash partitioning: each chunk's home is its hash modulo the instances, then a double-hashing probe."""

from __future__ import annotations

from collections.abc import Iterator
from math import gcd

from simroute.network.hashing import mix64
from simroute.sim.placements.base import PLACEMENTS, Placement


@PLACEMENTS.register("hash")
class HashPlacement(Placement):
    """Hash partitioning: home = hash mod instances, then a double-hashing probe when full."""

    def candidates(self, chunk_hash: int, n_instances: int) -> Iterator[int]:
        home = chunk_hash % n_instances
        # A second hash gives the stride so replicas land on well-spread instances (double hashing).
        stride = 1 + (mix64(chunk_hash) % max(n_instances - 1, 1)) if n_instances > 1 else 1
        step = stride if gcd(stride, n_instances) == 1 else 1
        for k in range(n_instances):
            yield (home + k * step) % n_instances
