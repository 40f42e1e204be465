"""Round-robin over the instances, ignoring the trace's hints."""

from __future__ import annotations

from simroute.sim.request_spec import RequestSpec
from simroute.sim.routers.base import ROUTERS, ClusterView, InstanceRef, Router


@ROUTERS.register("round-robin")
class RoundRobinRouter(Router):
    """Instances in turn, ignoring hints."""

    def pick(self, request: RequestSpec, cluster: ClusterView) -> InstanceRef | None:
        self.rotation = (self.rotation + 1) % len(cluster.instances)
        return cluster.instances[self.rotation]
