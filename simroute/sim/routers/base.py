"""Which instance serves a request as its requester: the `Router` interface, the read-only view of the cluster
it sees, and its registry.

To add a router: a module in `simroute/sim/routers/` with a `Router` subclass decorated by
`@ROUTERS.register("name")`; the package discovers its modules, so nothing else changes. A router that
needs the run's settings or randomness overrides `from_run(config, rng)` (rng: the run's stream for routers).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np

from simroute.sim.registry import Registry, registry
from simroute.sim.request_spec import RequestSpec

if TYPE_CHECKING:
    from simroute.sim.config import RunConfig


class InstanceRef(Protocol):
    """What a router reads of one instance (the simulator's `Instance` has these and more)."""

    @property
    def id(self) -> int: ...

    @property
    def host(self) -> int: ...


class ChunkView(Protocol):
    """What a router reads of the chunks: per chunk index, its instances holding it and its tokens."""

    @property
    def holders(self) -> Sequence[Sequence[int]]: ...

    @property
    def tokens(self) -> np.ndarray: ...


class ClusterView(Protocol):
    """The cluster as a router sees it, read-only: the instances, the requests in flight per instance
    (`active`) and who holds which chunk. The simulator's `Cluster` satisfies it; a router never changes it."""

    @property
    def instances(self) -> Sequence[InstanceRef]: ...

    @property
    def active(self) -> np.ndarray: ...

    @property
    def chunks(self) -> ChunkView: ...


class Router(ABC):
    """Picks a request's requester instance when it starts.

    Contract: `pick` sees the request and a read-only view of the live cluster and returns one of
    `cluster.instances`, or None to drop the request (a hint naming an instance the cluster lacks). One
    router object lives for one run, so it may keep state (a rotation counter); it must stay deterministic
    (randomness only from the `rng` `from_run` is given).
    """

    name: ClassVar[str]

    def __init__(self) -> None:
        self.rotation = 0

    @classmethod
    def from_run(cls, config: RunConfig, rng: np.random.Generator) -> Router:
        """The router for one run (the built-ins need neither the config nor randomness)."""
        return cls()

    @abstractmethod
    def pick(self, request: RequestSpec, cluster: ClusterView) -> InstanceRef | None: ...

    def least_loaded(self, cluster: ClusterView) -> InstanceRef:
        """The instance with the fewest requests in flight; ties rotate so an idle cluster still spreads."""
        self.rotation += 1
        index = getattr(cluster, "least_active", None)      # the run's cluster keeps them (`LeastActive`)
        if index is not None and len(index.counts) == len(cluster.instances):
            least = index.ids()
            return cluster.instances[least[self.rotation % len(least)]]
        active = cluster.active
        least = (active == _least(active)).nonzero()[0]     # flatnonzero(a == a.min()) without numpy's wrappers
        return cluster.instances[int(least[self.rotation % len(least)])]


_least = np.minimum.reduce      # `ndarray.min` without its Python-level wrapper (one call per request)

ROUTERS: Registry[type[Router]] = registry("router")
