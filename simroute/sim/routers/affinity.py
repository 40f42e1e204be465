"""Load-aware affinity: stay where the request's chunks (and copies) are unless that instance is overloaded."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from simroute.network.hashing import mix64
from simroute.sim.request_spec import RequestSpec
from simroute.sim.routers.base import ROUTERS, ClusterView, InstanceRef, Router


@ROUTERS.register("affinity")
class AffinityRouter(Router):
    """Where most of the request's chunk tokens are resident unless loaded past a threshold, else the less
    loaded of two hashed choices; a trace's requester hint is obeyed.

    A conversation's turns and an agent's sub-requests share prefix chunks, and every fetched or re-prefilled
    copy stays resident where it was made, so affinity to resident tokens keeps a session where its copies
    are. Pure affinity hot-spots one instance (the `locality` and `hash` routers); here an instance's load is
    its requests in flight plus the work on or waiting for its GPU (prefill, splice, attends), and the affine
    instance is skipped once its load exceeds the least loaded instance's by more than `HEADROOM`; the
    request then goes to the less loaded of two instances drawn by a hash of its id (power of two choices:
    near-least-loaded balance without herding, deterministic). Extend by subclassing and overriding
    `load`, `overloaded` or `spill`.
    """

    HEADROOM: ClassVar[int] = 1

    def pick(self, request: RequestSpec, cluster: ClusterView) -> InstanceRef | None:
        hint = request.requester_hint
        if hint >= 0:
            return cluster.instances[hint] if hint < len(cluster.instances) else None
        score = self.resident_tokens(request, cluster)
        if score.max() > 0:
            best = np.flatnonzero(score == score.max())
            inst = int(best[np.argmin(cluster.active[best])])
            if not self.overloaded(inst, cluster):
                return cluster.instances[inst]
            score[inst] = -1.0          # the spill goes elsewhere
        return self.spill(request, cluster, score)

    @staticmethod
    def resident_tokens(request: RequestSpec, cluster: ClusterView) -> np.ndarray:
        """Per instance, the request's chunk tokens it already holds (canonical or copy)."""
        chunks = cluster.chunks
        score = np.zeros(len(cluster.instances))
        for ci in request.chunk_indices:
            for holder in chunks.holders[ci]:
                score[holder] += chunks.tokens[ci]
        return score

    @staticmethod
    def load(cluster: ClusterView) -> np.ndarray:
        """Per instance: requests in flight."""
        return cluster.active.copy()

    def overloaded(self, inst: int, cluster: ClusterView) -> bool:
        load = self.load(cluster)
        return bool(load[inst] > load.min() + self.HEADROOM)

    def spill(self, request: RequestSpec, cluster: ClusterView, score: np.ndarray) -> InstanceRef:
        """Power of two choices by a hash of the request id: fewer in flight wins, then more resident tokens."""
        n = len(cluster.instances)
        allowed = np.flatnonzero(score >= 0) if (score >= 0).any() else np.arange(n)
        h = mix64(request.request_id)
        a, b = int(allowed[h % len(allowed)]), int(allowed[(h >> 32) % len(allowed)])
        load = self.load(cluster)
        key = lambda i: (load[i], -score[i])
        return cluster.instances[min((a, b), key=key)]
