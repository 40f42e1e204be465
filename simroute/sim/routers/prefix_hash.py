"""A hash of the request's first chunk: prefix-hash routing, the load-blind baseline of affinity routing."""

from __future__ import annotations

from simroute.network.hashing import mix64
from simroute.sim.request_spec import RequestSpec
from simroute.sim.routers.base import ROUTERS, ClusterView, InstanceRef, Router


@ROUTERS.register("hash")
class PrefixHashRouter(Router):
    """Instance = hash(first chunk) mod instances, ignoring load and hints (requests with no chunk: hash of
    the request id). Turns that share a prefix land together, whatever the load there."""

    def pick(self, request: RequestSpec, cluster: ClusterView) -> InstanceRef | None:
        key = request.chunk_indices[0] if request.chunk_indices else request.request_id
        return cluster.instances[mix64(int(key) + 0x5EED) % len(cluster.instances)]
