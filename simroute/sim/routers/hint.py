"""The trace's requester hint, falling back to least-loaded when the trace gives none."""

from __future__ import annotations

from simroute.sim.request_spec import RequestSpec
from simroute.sim.routers.base import ROUTERS, ClusterView, InstanceRef, Router


@ROUTERS.register("hint")
class HintRouter(Router):
    """The trace's requester_hint; least-loaded where it gives none (an out-of-range hint drops the request)."""

    def pick(self, request: RequestSpec, cluster: ClusterView) -> InstanceRef | None:
        hint = request.requester_hint
        if hint >= 0:
            return cluster.instances[hint] if hint < len(cluster.instances) else None
        return self.least_loaded(cluster)
