"""Which instance serves a request as its requester: the `Router` interface and its registry.

To add a router: a module in `simroute/sim/routers/` with a `Router` subclass decorated by
`@ROUTERS.register("name")`, plus its name on the import line of `simroute/sim/routers/__init__.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from simroute.sim.registry import Registry

if TYPE_CHECKING:
    from simroute.sim.arrivals import RequestSpec
    from simroute.sim.cluster import Cluster, Instance


class Router(ABC):
    """Picks a request's requester instance when it starts.

    Contract: `pick` sees the request and the live cluster (`cluster.instances`, `cluster.active` = requests in
    flight per instance, `cluster.chunks.holders`) and returns an `Instance`, or None to drop the request
    (a hint naming an instance the cluster lacks). One router object lives for one run, so it may keep state
    (a rotation counter); it must stay deterministic.
    """

    name: ClassVar[str]

    def __init__(self) -> None:
        self.rotation = 0

    @abstractmethod
    def pick(self, request: RequestSpec, cluster: Cluster) -> Instance | None: ...

    def least_loaded(self, cluster: Cluster) -> Instance:
        """The instance with the fewest requests in flight; ties rotate so an idle cluster still spreads."""
        active = cluster.active
        least = np.flatnonzero(active == active.min())
        self.rotation += 1
        return cluster.instances[int(least[self.rotation % len(least)])]


ROUTERS: Registry[type[Router]] = Registry("router")
