"""Round-robin over the instances, ignoring the trace's hints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.router import ROUTERS, Router

if TYPE_CHECKING:
    from simroute.sim.arrivals import RequestSpec
    from simroute.sim.cluster import Cluster, Instance


@ROUTERS.register("round-robin")
class RoundRobinRouter(Router):
    """Instances in turn, ignoring hints."""

    def pick(self, request: RequestSpec, cluster: Cluster) -> Instance | None:
        self.rotation = (self.rotation + 1) % len(cluster.instances)
        return cluster.instances[self.rotation]
