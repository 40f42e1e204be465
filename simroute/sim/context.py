"""`SimContext`: everything one run's components share, passed explicitly (no attributes set elsewhere).

Built once by `Simulation` (runner.py); the request flow, the arrivals and the policies read it. A new
component gets what it needs from here as a constructor argument rather than reaching into `Simulation`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import simpy

from simroute.model.cost import CostParams
from simroute.model.scalar import ScalarModel
from simroute.network import FlowEngine, Topology
from simroute.sim.calibration import RunCalibration
from simroute.sim.compute import ComputeModel
from simroute.sim.config import RunConfig
from simroute.sim.metrics import Recorder
from simroute.sim.policies.base import Policy
from simroute.sim.routers.base import Router

if TYPE_CHECKING:
    from simroute.sim.cluster import Cluster, Instance
    from simroute.sim.engine.build import EngineSet
    from simroute.sim.engine.serving import ChunkCopies
    from simroute.sim.pools import PrefillPool


@dataclass(eq=False)
class SimContext:
    """The run's shared state.

    - `env`, `network`, `topology`: the SimPy clock and the flow engine on the topology.
    - `calibration`, `params`, `compute`: the profile resolved for this run (`sim/calibration.py`: GPU entry,
      step model, staging pool, NIC constants, its files), its cost parameters, the GPU-time formulas.
    - `model` (decisions) and `floor_model` (the uncongested TTFT floor: no host overhead, which the
      simulator does not charge).
    - `cluster`: instances, chunks and placement.
    - `policy`, `router`: the registered variants this run uses.
    - `recorder`: per-request columns and the decision log.
    - `engines`, `copies`: every instance's serving engine (iterations, HBM budget, holder partials) and the
      chunk copies kept in those budgets.
    - `prefill_pool`: under --disagg, the prefill instances and their queued prompt tokens (sim/pools.py).
    - `routing`: per holder, the dense requests that route to it and have not finished (partials it will be
      asked for; the replica choice reads it).
    """

    config: RunConfig
    env: simpy.Environment
    topology: Topology
    network: FlowEngine
    calibration: RunCalibration
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
    prefill_pool: PrefillPool | None = None     # --disagg: the prefill pool (sim/pools.py); None: aggregated
    completed: int = 0
    routing: dict[int, int] = field(default_factory=dict)   # holder -> dense requests routing there, not done
    _done: dict[int, simpy.Event] = field(default_factory=dict)
    _latency_rows: dict[int, list[float]] = field(default_factory=dict)
    _instance_gpus: list[int] | None = None          # each instance's GPU index (the rows' targets)
    _query_kernel_s: float | None = None
    _prefill_alone: dict[float, float] = field(default_factory=dict)          # tokens -> s (`prefill_alone_s`)
    _chunk_floor: dict[tuple[float, float, int], float] = field(default_factory=dict)   # (`chunk_floor_s`)
    _prices: dict[int, tuple] = field(default_factory=dict)     # requester -> its decision prices

    @property
    def query_kernel_s(self) -> float:
        """One routed query's kernel on a holder (the calibrated curve at one reference requester; fixed for
        the run, read by every holder-load reading)."""
        if self._query_kernel_s is None:
            self._query_kernel_s = self.compute.batch_s(1.0)
        return self._query_kernel_s

    def prefill_alone_s(self, tokens: float) -> float:
        """One engine iteration over `tokens` of prompt alone (no chunking, no batch: a TTFT floor), kept per
        token count: a pure function of the run's step model, asked for by every request (prompt lengths repeat
        across a trace, so most requests find theirs)."""
        seconds = self._prefill_alone.get(tokens)
        if seconds is None:
            from simroute.sim.policies.base import engine_reprefill_s
            seconds = self._prefill_alone[tokens] = engine_reprefill_s(self.engines.step, float("inf"), tokens)
        return seconds

    def chunk_floor_s(self, mq_first: float, heads: int, tokens: float, fabric: int) -> float:
        """The uncongested TTFT floor of attending a remote chunk of `tokens` over `fabric` in a first pass of
        `mq_first` query rows: the cheapest of route, fetch's move and prefilling it alone (the floor model's
        step, pure for the run), kept per (rows, tokens, fabric) as `prefill_alone_s` is."""
        key = (mq_first, tokens, fabric)
        seconds = self._chunk_floor.get(key)
        if seconds is None:
            route, _, move, _, _ = self.floor_model.step(mq_first, tokens, fabric, True, tp=self.config.instance_gpus,
                                                         query_tokens=mq_first / heads)
            seconds = self._chunk_floor[key] = min(route, move, self.prefill_alone_s(tokens))
        return seconds

    def latency_row(self, src: Instance) -> list[float]:
        """Path latency from `src` to every instance, indexed by instance id: the summed link latency of the
        topology's first equal-cost path between their GPUs (how near a holder is, before any load). One row
        per requester, computed at once and kept (the topology does not change during a run)."""
        row = self._latency_rows.get(src.id)
        if row is None:
            topology = self.topology
            if self._instance_gpus is None:
                self._instance_gpus = [topology.index(instance.gpu) for instance in self.cluster.instances]
            row = self._latency_rows[src.id] = topology.latency_row(topology.index(src.gpu), self._instance_gpus)
        return row

    def path_latency_s(self, src: Instance, dst: Instance) -> float:
        """The path latency between two instances (`latency_row`'s entry)."""
        return self.latency_row(src)[dst.id]

    def done_event(self, request: int) -> simpy.Event:
        """Fires when request `request` completes or is dropped (closed-loop children wait on it)."""
        event = self._done.get(request)
        if event is None:
            event = self._done[request] = self.env.event()
        return event
