"""The cluster: instances (a GPU or a tensor-parallel group) with their staging pools, the chunks and who holds
them, and the calibrated fabric between any two instances.

Canonical chunks are pinned where placement put them; fetched or re-prefilled copies live in the instance
engines' HBM budgets (`sim.engine.serving.ChunkCopies` keeps `ChunkStore.holders` consistent with them) and,
while resident, serve other requesters too (a holder is whoever has the chunk in HBM).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

import numpy as np
import simpy

from simroute.errors import ConfigurationError
from simroute.model.cost import FabricParams
from simroute.model.staging import StagingParams
from simroute.network import FlowEngine, Topology
from simroute.sim.calibration import RunCalibration
from simroute.sim.compute import ComputeModel
from simroute.sim.config import RunConfig
from simroute.sim.placements.base import ChunkTable, PlacementResult
from simroute.sim.pools import PoolLayout
from simroute.sim.registry import registry, run_rng
from simroute.sim.staging import StagingPool


@dataclass(eq=False)
class Instance:
    """One serving instance: requester for the requests routed to it, holder of the chunks in its HBM (the
    HBM itself, its iterations and the partial attention it runs for others are its engine's:
    `SimContext.engines[id]`)."""

    id: int
    gpu: str                      # the GPU whose NIC / links carry this instance's traffic (its rank 0)
    host: int
    staging: StagingPool          # D2D staging of the chunks fetched from this instance
    gpus: tuple[str, ...] = ()    # every rank's GPU, rank order (rank r's flows go to rank r's)
    prefill: bool = False         # a prefill-pool instance under --disagg (sim/pools.py): prefills, ships, holds none


class ChunkStore:
    """Chunk attributes as arrays (indexed by a dense chunk index), who holds each chunk, and the copies being
    made or relied on. A copy that a running request attends or routes to is pinned (`pins_at`) and never
    evicted from its engine's HBM budget."""

    def __init__(self, chunk_ids: np.ndarray, tokens: np.ndarray, cached_offset: np.ndarray,
                 canonical: np.ndarray, holder_hint: np.ndarray, kv_bytes_per_token: float) -> None:
        self.ids = chunk_ids
        self._by_id: tuple[np.ndarray, np.ndarray] | None = None      # `indices_of`'s sorted view, built once
        self.tokens = tokens
        self.cached_offset = cached_offset
        self.canonical = canonical
        self.holder_hint = holder_hint
        self.kv_bytes_per_token = kv_bytes_per_token
        self.bytes = tokens.astype(np.float64) * kv_bytes_per_token
        # the same as Python lists: a request reads them per chunk, and a numpy scalar read costs more
        self.token_list: list[int] = tokens.tolist()
        self.byte_list: list[float] = self.bytes.tolist()
        self.holders: list[list[int]] = [[] for _ in range(len(chunk_ids))]
        # instance -> {chunk: the event its copy there fires when made}: copies being made
        self.pending: dict[int, dict[int, simpy.Event]] = {}
        # instance -> {chunk: requests relying on its copy there}: per instance, as the evictors ask it
        self.pinned: dict[int, dict[int, int]] = {}

    def indices_of(self, chunk_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the dense index of each of `chunk_ids`, whether the store has it): one search per batch of requests'
        chunks, not a lookup per chunk (the ids are unique: `check_chunks`)."""
        if self._by_id is None:
            order = np.argsort(self.ids, kind="stable")
            self._by_id = (order, self.ids[order])
        order, sorted_ids = self._by_id
        if not len(sorted_ids):
            return np.zeros(len(chunk_ids), dtype=np.int64), np.zeros(len(chunk_ids), dtype=bool)
        at = np.minimum(np.searchsorted(sorted_ids, chunk_ids), len(sorted_ids) - 1)
        return order[at], sorted_ids[at] == chunk_ids

    def table(self) -> ChunkTable:
        return ChunkTable(self.ids, self.bytes, self.canonical, self.holder_hint)

    def pending_at(self, instance: int) -> dict[int, simpy.Event]:
        """The copies being made on `instance` (chunk -> the event that fires when it is made), to read or add to."""
        pending = self.pending.get(instance)
        if pending is None:
            pending = self.pending[instance] = {}
        return pending

    def pins_at(self, instance: int) -> dict[int, int]:
        """The pin counts of the copies on `instance` (chunk -> requests relying on it), to read or change."""
        pins = self.pinned.get(instance)
        if pins is None:
            pins = self.pinned[instance] = {}
        return pins

    @property
    def pins(self) -> dict[tuple[int, int], int]:
        """Every pinned copy as (chunk, instance) -> requests relying on it (a view built on request: for checks,
        not the hot path)."""
        return {(chunk, instance): count for instance, pins in self.pinned.items() for chunk, count in pins.items()}

    def pin(self, chunk: int, instance: int) -> None:
        """Count one more reader of `chunk`'s copy on `instance` (an evictor skips pinned copies). The request
        flow's hot path (`sim/request.py`: the per-chunk decisions and `finish`) inlines this and `unpin`: a
        change to the pin count's meaning goes there too (tests/sim/test_semantics.py and test_decisions.py
        check the counts a run leaves)."""
        pins = self.pins_at(instance)
        pins[chunk] = pins.get(chunk, 0) + 1

    def unpin(self, chunk: int, instance: int) -> None:
        pins = self.pinned[instance]
        left = pins[chunk] - 1
        if left:
            pins[chunk] = left
        else:
            del pins[chunk]


class LeastActive:
    """The requesters with the fewest requests in flight, kept as requests begin and end: the ids at each
    count in sorted lists, and the least count. The least-loaded router asks on every request; finding them in
    the whole `Cluster.active` array cost three numpy passes over every instance per request (~2% of a
    1024-instance run); here a request moves one id between two neighbouring lists. Equal to
    `flatnonzero(active == active.min())` over the requesters at every instant (tests/sim/test_cluster.py)."""

    __slots__ = ("counts", "levels", "least")

    def __init__(self, n: int) -> None:
        self.counts = [0] * n
        self.levels: list[list[int]] = [list(range(n))]     # count -> the ids with it, ascending
        self.least = 0

    def began(self, instance: int) -> None:
        counts, levels = self.counts, self.levels
        count = counts[instance]
        counts[instance] = count + 1
        level = levels[count]
        del level[bisect_left(level, instance)]
        if count + 1 == len(levels):
            levels.append([])
        insort(levels[count + 1], instance)
        if count == self.least and not level:
            self.least = count + 1

    def ended(self, instance: int) -> None:
        counts, levels = self.counts, self.levels
        count = counts[instance]
        counts[instance] = count - 1
        level = levels[count]
        del level[bisect_left(level, instance)]
        insort(levels[count - 1], instance)
        if count - 1 < self.least:
            self.least = count - 1

    def ids(self) -> list[int]:
        """The requesters with the fewest requests in flight, ascending (do not change the list)."""
        return self.levels[self.least]


class RequesterView:
    """The serving instances as the run's router sees them (a `ClusterView`): under --disagg the decode pool only
    (ids 0..D-1, so `active` is the front of the cluster's array, read live)."""

    def __init__(self, cluster: "Cluster") -> None:
        self.cluster, self.instances = cluster, cluster.requesters

    @property
    def active(self) -> np.ndarray:
        return self.cluster.active[:len(self.instances)]

    @property
    def least_active(self) -> LeastActive | None:
        return self.cluster.least_active

    @property
    def chunks(self) -> "ChunkStore":
        return self.cluster.chunks


class Cluster:
    """Instances, chunks, placement and the fabric lookup of one run.

    Built before the simulation starts; every fabric the topology can put between two instances is checked
    against the profile here, so a missing one is a load-time error naming the fabric, not a failure at some
    simulated time.
    """

    def __init__(self, env: simpy.Environment, topology: Topology, calibration: RunCalibration,
                 config: RunConfig, compute: ComputeModel, chunks: ChunkStore,
                 popularity: np.ndarray | None = None, *, chunk_capacity_bytes: float,
                 layout: PoolLayout | None = None) -> None:
        self.topology, self.calibration, self.params, self.config = topology, calibration, calibration.params, config
        self.chunk_capacity_bytes = chunk_capacity_bytes   # what placement may pin per instance (engine HBM)
        self.layout = layout
        # the holders' staging mechanisms (simroute.model.staging), resolved for the run's GPU (sim/calibration.py)
        if layout is None:
            self.instances = self._build_instances(env, topology, config, compute, calibration.staging)
        else:
            self.instances = self._pool_instances(env, topology, config, compute, calibration.staging, layout)
        # the instances that serve requests (requesters, holders): all of them, or the decode pool under --disagg
        # (ids 0..n-1: the decode pool is built first)
        self.requesters = [inst for inst in self.instances if not inst.prefill]
        self.rank_flows = self._rank_flows()
        self.active = np.zeros(len(self.instances), dtype=np.int64)   # requests in flight per requester
        # the same counts over the requesters, for the least-loaded choice (ids 0..n-1, as built above)
        ids_in_order = [inst.id for inst in self.requesters] == list(range(len(self.requesters)))
        self.least_active = LeastActive(len(self.requesters)) if ids_in_order else None
        self._fabric_ids: dict[tuple[int, int], int] = {}
        self._fabric_rows: dict[int, list[int]] = {}           # `fabric_row`'s rows, per requester
        self._near_views: dict[int, tuple[list[int], int, float]] = {}   # `near_view`, per requester
        self._domains: dict[int, list[Instance]] | None = None  # NVLink domain -> its instances
        self._check_fabrics()
        self.chunks = chunks
        from simroute.workload.validate import check_holder_hints      # before placement indexes by them
        check_holder_hints(config.trace, chunks.holder_hint, len(self.requesters))
        self.placement = self._place(popularity)

    @staticmethod
    def _build_instances(env: simpy.Environment, topology: Topology, config: RunConfig, compute: ComputeModel,
                         staging: StagingParams) -> list[Instance]:
        gpus = topology.gpus
        per_host = len(gpus) // max(1, len({topology.host_of(gpu) for gpu in gpus}))
        from simroute.model.limits import check_tp_fits_host
        width = config.instance_gpus            # a TP group, or one DP attention rank (its group: sim/engine/group.py)
        check_tp_fits_host(width, per_host)
        instances = []
        for i, gpu in enumerate(gpus[::width]):
            instances.append(Instance(
                id=i, gpu=gpu, host=topology.host_of(gpu),
                staging=StagingPool(env, config.staging_streams, staging, layers=compute.params.geometry.layers,
                                    record=config.telemetry),
                gpus=tuple(gpus[i * width:(i + 1) * width])))
        return instances

    @staticmethod
    def _pool_instances(env: simpy.Environment, topology: Topology, config: RunConfig, compute: ComputeModel,
                        staging: StagingParams, layout: PoolLayout) -> list[Instance]:
        """The decode pool's instances (ids 0..D-1: TP groups, or each group's DP attention ranks), then the
        prefill pool's, on the GPUs `layout` gives them."""
        gpus, instances = topology.gpus, []
        prefill_tp = layout.prefill_pool.tp
        for places, prefill in ((layout.decode_instances, False),
                                (tuple((first, prefill_tp) for first in layout.prefill), True)):
            for first, tp in places:
                gpu = gpus[first]
                instances.append(Instance(
                    id=len(instances), gpu=gpu, host=topology.host_of(gpu),
                    staging=StagingPool(env, config.staging_streams, staging,
                                        layers=compute.params.geometry.layers, record=config.telemetry),
                    gpus=tuple(gpus[first:first + tp]), prefill=prefill))
        return instances

    def _rank_flows(self) -> tuple[bool, bool]:
        """(within a domain, across domains): whether a bulk transfer of that class goes on the fabric as every
        rank's flow. `auto` asks the topology's kind whether one rank pair's flow stands for all
        (`Topology.rank_planes`): where the ranks share links it does not, and the shortcut would understate the
        shared links' load up to tp-fold (issue 36, item 5; tests/network/test_rank_shortcut.py)."""
        mode, tp = self.config.rank_flows, self.config.instance_gpus     # a DP rank of one GPU: its own flow
        if tp == 1 or mode == "shortcut":
            return False, False
        if mode == "every":
            return True, True
        planes = self.topology.rank_planes(tp)
        return not planes.within_domain, not planes.across_domains

    def request_began(self, requester: int) -> None:
        """One more request in flight on `requester` (`active`, and the least-loaded index)."""
        self.active[requester] += 1
        if self.least_active is not None:
            self.least_active.began(requester)

    def request_ended(self, requester: int) -> None:
        self.active[requester] -= 1
        index = self.least_active
        if index is not None:
            if index.counts[requester] > 0:
                index.ended(requester)
            else:       # an end without its begin (a test driving `finish`): the router reads `active` from now on
                self.least_active = None

    @property
    def router_view(self) -> "Cluster | RequesterView":
        """What the run's router picks a requester from: the cluster, or its decode pool under --disagg."""
        return self if self.layout is None else RequesterView(self)

    def every_rank(self, a: Instance, b: Instance) -> bool:
        """Whether a bulk transfer between `a` and `b` goes on the fabric as every rank's flow."""
        within, across = self.rank_flows
        return within if self._domain_of(a) == self._domain_of(b) else across

    def bulk_transfer(self, network: FlowEngine, src: Instance, dst: Instance, nbytes: float, *,
                      rate_cap_Bps: float, tag: str) -> simpy.Event:
        """A transfer of `nbytes` between two instances: each of the tp rank pairs moves 1/tp of them on its own
        NIC (rank r to rank r). The event fires when the last rank's flow ends. Where one pair stands for all
        (`every_rank` false), only rank 0's flow is simulated and the summary scales its links' bytes by tp."""
        share = nbytes / self.config.instance_gpus          # each rank pair's
        if not self.every_rank(src, dst):
            return network.transfer(src.gpu, dst.gpu, share, rate_cap_Bps=rate_cap_Bps, tag=tag)
        return network.env.all_of([network.transfer(a, b, share, rate_cap_Bps=rate_cap_Bps, tag=tag)
                                   for a, b in zip(src.gpus, dst.gpus)])

    def pd_transfer(self, network: FlowEngine, src: Instance, dst: Instance, nbytes: float, *, replicated: bool,
                    rate_cap_Bps: float, tag: str = "pd") -> tuple[simpy.Event, float, float]:
        """A prompt's KV (`nbytes`) from its prefill instance to its decode instance, rank by rank as SGLang's
        disaggregation maps them (mooncake `KVReceiver`: `target_tp_rank`, `required_dst_info_num`): where every
        decode rank holds the whole latent (`replicated`: MLA under TP attention) decode rank r receives all of it
        from prefill rank r x ptp // dtp; where the KV is split over ranks (GQA heads, the tpla layout) each of
        n = max(ptp, dtp) flows carries 1/n, flow i from prefill rank i x ptp // n to decode rank i x dtp // n.
        A decode instance of one GPU (a DP attention rank) is `replicated` too under MLA: it receives the whole
        latent from one prefill rank (SGLang's MLA path sends from `target_tp_ranks[0]` only, the other prefill
        ranks' replies being dummies), and GQA's 1/ptp from each prefill rank.
        Where one rank pair stands for all (`every_rank` false, instances of several GPUs) only rank 0's flow is
        simulated, carrying the per-decode-rank share the summary scales by tp. Returns (the event when the last
        flow ends, the bytes on the fabric over all ranks, the largest flow's bytes: the transfer's uncongested
        floor)."""
        ptp, dtp = len(src.gpus) or 1, len(dst.gpus) or 1
        if replicated:
            pairs = [(src.gpus[rank * ptp // dtp], dst.gpus[rank]) for rank in range(dtp)]
            share = nbytes
        else:
            n = max(ptp, dtp)
            pairs = [(src.gpus[i * ptp // n], dst.gpus[i * dtp // n]) for i in range(n)]
            share = nbytes / n
        wire = share * len(pairs)
        if len(pairs) == 1 or (self.config.instance_gpus > 1 and not self.every_rank(src, dst)):
            per_plane = wire / self.config.instance_gpus
            return (network.transfer(src.gpu, dst.gpu, per_plane, rate_cap_Bps=rate_cap_Bps, tag=tag), wire,
                    per_plane)
        return (network.env.all_of([network.transfer(a, b, share, rate_cap_Bps=rate_cap_Bps, tag=tag)
                                    for a, b in pairs]), wire, share)

    def tier_planes(self) -> dict[str, int]:
        """Per link tier, how many rank pairs each simulated byte stands for: tp where that tier's transfers go
        as one rank pair's flow, 1 where every rank's flow is simulated. A tier both classes cross (none of the
        shipped kinds has one) takes the class that simulates every rank only if both do."""
        tp, topo = self.config.instance_gpus, self.topology
        within, across = self.rank_flows
        first = self.instances[0]
        classes: list[tuple[bool, Instance]] = []
        same = next((inst for inst in self.instances[1:] if self._domain_of(inst) == self._domain_of(first)), None)
        # the farthest instance of another domain: its path climbs every switch tier of the fabric
        other = next((inst for inst in reversed(self.instances) if self._domain_of(inst) != self._domain_of(first)),
                     None)
        if same is not None:
            classes.append((within, same))
        if other is not None:
            classes.append((across, other))
        planes: dict[str, int] = {}
        for every, inst in classes:
            links, _spine = topo.path_ids(topo.index(first.gpu), topo.index(inst.gpu), 0)
            for link in links:
                tier = topo.links[link].tier
                factor = 1 if every else tp
                planes[tier] = max(planes.get(tier, factor), factor)
        return planes

    def _check_fabrics(self) -> None:
        """Look up every instance pair's fabric class once: all pairs within the first NVLink domain (domains
        are alike: a topology declares one host type) and one pair across domains."""
        first = self.instances[0]
        in_domain = self._in_domain(self._domain_of(first))
        pairs = [(a, b) for a in in_domain for b in in_domain if a is not b]
        other = next((inst for inst in self.instances if self._domain_of(inst) != self._domain_of(first)), None)
        if other is not None:
            pairs.append((first, other))
        for a, b in pairs:
            self.fabric_id(a, b)

    def _place(self, popularity: np.ndarray | None) -> PlacementResult:
        cfg = self.config
        placement = registry("placement").create(cfg.placement, cfg, run_rng(cfg.seed, "placement"))
        result = placement.place(self.chunks.table(), len(self.requesters), self.chunk_capacity_bytes,
                                 popularity=popularity)
        for chunk, holders in enumerate(result.holders):
            self.chunks.holders[chunk] = list(holders)
        return result

    # ---- lookups ---------------------------------------------------------------------------------------
    def fabric_id(self, a: Instance, b: Instance) -> int:
        """Index (in the cost parameters) of the calibrated fabric between two instances."""
        key = (a.id, b.id)
        fabric = self._fabric_ids.get(key)
        if fabric is None:
            name = self.topology.fabric_between(a.gpu, b.gpu)
            if name not in self.params.fabric_index:
                raise ConfigurationError(
                    f"topology {self.config.topology} puts {a.gpu} -> {b.gpu} on fabric '{name}', which profile "
                    f"'{self.calibration.profile}' lacks (it has: {', '.join(self.params.fabric_index)}); fix the "
                    f"topology's fabric names or use a profile that calibrates '{name}'",
                    file=self.config.calib, field=f"fabrics.{name}")
            fabric = self._fabric_ids[key] = self.params.fabric_index[name]
        return fabric

    def fabric_row(self, src: Instance) -> list[int]:
        """`fabric_id` from `src` to every instance, indexed by instance id (one row per requester, kept): one
        fabric across NVLink domains (`Topology.fabric_between`: the NIC fabric), each instance of its own domain
        (its host, unless NVLink spans hosts) its own (NVLink or the cross-socket fabric)."""
        row = self._fabric_rows.get(src.id)
        if row is None:
            instances, domain = self.instances, self._domain_of(src)
            other = next((inst for inst in instances if self._domain_of(inst) != domain), None)
            row = [self.fabric_id(src, other) if other is not None else -1] * len(instances)
            for inst in self._in_domain(domain):
                if inst is not src:
                    row[inst.id] = self.fabric_id(src, inst)
            self._fabric_rows[src.id] = row
        return row

    def near_view(self, src: Instance, latency: list[float]) -> tuple[list[int], int, float]:
        """What the replica choice needs to settle a chunk's nearest fabric from `src`'s own domain (kept per
        requester): the other instances of its NVLink domain (ids, in id order), the fabric across domains
        (`fabric_row`'s entry outside the domain; -1 when there is no other domain) and the least of `latency`
        (`src`'s latency row) outside the domain (inf when there is none)."""
        view = self._near_views.get(src.id)
        if view is None:
            domain = self._domain_of(src)
            members = self._in_domain(domain)
            inside = {inst.id for inst in members}
            outside = [lat for i, lat in enumerate(latency) if i not in inside]
            peers = [inst.id for inst in members if inst is not src]
            fabric = next((self.fabric_row(src)[i] for i in range(len(self.instances)) if i not in inside), -1)
            view = self._near_views[src.id] = (peers, fabric, min(outside, default=float("inf")))
        return view

    def _domain_of(self, inst: Instance) -> int:
        return self.topology.domain_of(inst.gpu)

    def _in_domain(self, domain: int) -> list[Instance]:
        """The instances of one NVLink domain (`Topology.domain_of` their GPU), in id order."""
        by_domain = self._domains
        if by_domain is None:
            by_domain = self._domains = {}
            for inst in self.instances:
                by_domain.setdefault(self._domain_of(inst), []).append(inst)
        return by_domain.get(domain, [])

    def fabric(self, a: Instance, b: Instance) -> FabricParams:
        return self.params.fabrics[self.fabric_id(a, b)]
