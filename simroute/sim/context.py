"""`SimContext`: everything one run's components share, passed explicitly (no attributes set elsewhere).

Built once by `Simulation` (runner.py); the request flow, the arrivals and the policies read it. A new
component gets what it needs from here as a constructor argument rather than reaching into `Simulation`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import simpy

from simroute.calib.profile import Profile
from simroute.model.cost import CostParams
from simroute.model.scalar import ScalarModel
from simroute.network import FlowEngine, Topology
from simroute.sim.compute import ComputeModel
from simroute.sim.config import RunConfig
from simroute.sim.metrics import Recorder
from simroute.sim.policy import Policy

if TYPE_CHECKING:
    from simroute.sim.cluster import Cluster, Instance
    from simroute.sim.engine.build import EngineSet
    from simroute.sim.engine.serving import ChunkCopies
    from simroute.sim.router import Router


@dataclass(eq=False)
class SimContext:
    """The run's shared state.

    - `env`, `network`, `topology`: the SimPy clock and the flow engine on the topology.
    - `profile`, `params`, `compute`: the calibration, the cost parameters, the GPU-time formulas.
    - `model` (decisions) and `floor_model` (the uncongested TTFT floor: no host overhead, which the
      simulator does not charge).
    - `cluster`: instances, chunks and placement.
    - `policy`, `router`: the registered variants this run uses.
    - `recorder`: per-request columns and the decision log.
    - `engines`, `copies`: every instance's serving engine (iterations, HBM budget, holder partials) and the
      chunk copies kept in those budgets.
    - `routing`: per holder, the dense requests that route to it and have not finished (partials it will be
      asked for; the replica choice reads it).
    """

    config: RunConfig
    env: simpy.Environment
    topology: Topology
    network: FlowEngine
    profile: Profile
    params: CostParams
    compute: ComputeModel
    model: ScalarModel
    floor_model: ScalarModel
    cluster: Cluster
    policy: Policy
    router: Router
    recorder: Recorder
    engines: EngineSet
    copies: ChunkCopies
    completed: int = 0
    routing: dict[int, int] = field(default_factory=dict)   # holder -> dense requests routing there, not done
    _done: dict[int, simpy.Event] = field(default_factory=dict)
    _latency: dict[tuple[int, int], float] = field(default_factory=dict)

    def path_latency_s(self, src: Instance, dst: Instance) -> float:
        """Summed link latency of the topology's (first equal-cost) path between two instances' GPUs: how
        near a holder is, before any load (cached: the topology does not change during a run)."""
        key = (src.id, dst.id)
        latency = self._latency.get(key)
        if latency is None:
            topology = self.topology
            links, _spine = topology.path_ids(topology.index(src.gpu), topology.index(dst.gpu))
            latency = self._latency[key] = sum(topology.links[link].latency_s for link in links)
        return latency

    def done_event(self, request: int) -> simpy.Event:
        """Fires when request `request` completes or is dropped (closed-loop children wait on it)."""
        event = self._done.get(request)
        if event is None:
            event = self._done[request] = self.env.event()
        return event
