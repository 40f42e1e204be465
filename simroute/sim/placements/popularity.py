"""Popularity-aware replication: the most attended chunks get `replicas` copies, the rest one (hash order)."""

from __future__ import annotations

import numpy as np

from simroute.sim.placements.base import PLACEMENTS, ChunkTable
from simroute.sim.placements.hashed import HashPlacement


@PLACEMENTS.register("popularity")
class PopularityPlacement(HashPlacement):
    """Hash placement plus `replicas` copies of the hottest `hot_fraction` of chunks (by attendance)."""

    needs_popularity = True

    def copies_wanted(self, chunks: ChunkTable, n_instances: int, popularity: np.ndarray | None) -> np.ndarray:
        wanted = super().copies_wanted(chunks, n_instances, popularity)
        if popularity is None or self.replicas <= 1:
            return wanted
        n_hot = int(np.ceil(self.hot_fraction * np.count_nonzero(chunks.canonical)))
        order = np.argsort(-popularity, kind="stable")
        hot = [i for i in order[:n_hot] if chunks.canonical[i] and popularity[i] > 0]
        wanted[hot] = min(self.replicas, n_instances)
        self.replicated = len(hot)
        return wanted
