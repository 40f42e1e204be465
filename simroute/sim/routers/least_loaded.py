"""The instance with the fewest requests in flight, ignoring the trace's hints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.router import ROUTERS, Router

if TYPE_CHECKING:
    from simroute.sim.arrivals import RequestSpec
    from simroute.sim.cluster import Cluster, Instance


@ROUTERS.register("least-loaded")
class LeastLoadedRouter(Router):
    """Fewest requests in flight (ties rotate), ignoring hints."""

    def pick(self, request: RequestSpec, cluster: Cluster) -> Instance | None:
        return self.least_loaded(cluster)
