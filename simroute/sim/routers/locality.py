"""The instance already holding most of the request's chunk tokens (least-loaded among ties)."""

from __future__ import annotations

import numpy as np

from simroute.sim.request_spec import RequestSpec
from simroute.sim.routers.base import ROUTERS, ClusterView, InstanceRef, Router


@ROUTERS.register("locality")
class LocalityRouter(Router):
    """Where most of the request's chunk tokens already are (least-loaded among ties and otherwise)."""

    def pick(self, request: RequestSpec, cluster: ClusterView) -> InstanceRef | None:
        chunks = cluster.chunks
        if request.chunk_indices:
            score = np.zeros(len(cluster.instances))
            for ci in request.chunk_indices:
                for holder in chunks.holders[ci]:
                    score[holder] += chunks.tokens[ci]
            if score.max() > 0:
                best = np.flatnonzero(score == score.max())
                return cluster.instances[int(best[np.argmin(cluster.active[best])])]
        return self.least_loaded(cluster)
