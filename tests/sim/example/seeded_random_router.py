"""An example router, the whole of it: a uniformly random instance per request, drawn from the run's seed.

Adding it to simroute is this file in simroute/sim/routers/ (the package discovers its modules); the test
drops it into the package's search path instead. `from_run` takes the random stream the run hands routers
(derived from `--seed`), so two runs with one seed pick the same requesters.
"""

from __future__ import annotations

import numpy as np

from simroute.sim.request_spec import RequestSpec
from simroute.sim.routers.base import ROUTERS, ClusterView, InstanceRef, Router


@ROUTERS.register("seeded-random")
class SeededRandomRouter(Router):
    """A uniformly random instance per request (the run's seed), ignoring hints and load."""

    def __init__(self, rng: np.random.Generator) -> None:
        super().__init__()
        self.rng = rng

    @classmethod
    def from_run(cls, config, rng: np.random.Generator) -> SeededRandomRouter:
        return cls(rng)

    def pick(self, request: RequestSpec, cluster: ClusterView) -> InstanceRef | None:
        return cluster.instances[int(self.rng.integers(len(cluster.instances)))]
