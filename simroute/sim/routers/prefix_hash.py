"""A hash of the request's first chunk: prefix-hash routing, the load-blind baseline of affinity routing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.network.hashing import mix64
from simroute.sim.router import ROUTERS, Router

if TYPE_CHECKING:
    from simroute.sim.arrivals import RequestSpec
    from simroute.sim.cluster import Cluster, Instance


@ROUTERS.register("hash")
class PrefixHashRouter(Router):
    """Instance = hash(first chunk) mod instances, ignoring load and hints (requests with no chunk: hash of
    the request id). Turns that share a prefix land together, whatever the load there."""

    def pick(self, request: RequestSpec, cluster: Cluster) -> Instance | None:
        key = request.chunk_indices[0] if request.chunk_indices else request.request_id
        return cluster.instances[mix64(int(key) + 0x5EED) % len(cluster.instances)]
