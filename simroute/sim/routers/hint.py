"""The trace's requester hint, falling back to least-loaded when the trace gives none."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.router import ROUTERS, Router

if TYPE_CHECKING:
    from simroute.sim.arrivals import RequestSpec
    from simroute.sim.cluster import Cluster, Instance


@ROUTERS.register("hint")
class HintRouter(Router):
    """The trace's requester_hint; least-loaded where it gives none (an out-of-range hint drops the request)."""

    def pick(self, request: RequestSpec, cluster: Cluster) -> Instance | None:
        hint = request.requester_hint
        if hint >= 0:
            return cluster.instances[hint] if hint < len(cluster.instances) else None
        return self.least_loaded(cluster)
