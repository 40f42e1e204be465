"""The instance with the fewest requests in flight, ignoring the trace's hints."""

from __future__ import annotations

from simroute.sim.request_spec import RequestSpec
from simroute.sim.routers.base import ROUTERS, ClusterView, InstanceRef, Router


@ROUTERS.register("least-loaded")
class LeastLoadedRouter(Router):
    """Fewest requests in flight (ties rotate), ignoring hints."""

    def pick(self, request: RequestSpec, cluster: ClusterView) -> InstanceRef | None:
        return self.least_loaded(cluster)
