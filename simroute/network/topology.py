"""Topologies built from a TopologySpec: directed links, a networkx graph and cheap equal-cost paths.

A path between GPUs on different hosts is `up[src] + middle[src_leaf, dst_leaf][choice] + down[dst]`;
the middle (spine) choices are computed once per leaf pair, so no flow ever runs a graph search.
Node names: GPUs `h{i}.g{j}`, `h{i}.nvs` (NVSwitch), `h{i}.s{k}` (PCIe socket), `h{i}.nic` (a host
NIC), `leaf{l}` (leaf / edge switch), `spine{s}` (2-tier), `agg{p}.{a}` and `core{c}` (3-tier).
With one NIC per GPU the NIC is folded into the GPU node (GPUDirect; its PCIe hop is never the bottleneck).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

import networkx as nx
import numpy as np

from simroute.errors import UnknownNameError
from simroute.network.hashing import mix64
from simroute.network.registry import registrar
from simroute.network.schema import TopologySpec, load_topology_spec

TIERS = ("nvlink", "pcie", "xsocket", "nic-leaf", "leaf-spine", "spine-core")


@dataclass(frozen=True)
class Link:
    """One directed link."""

    id: int
    src: str
    dst: str
    capacity_Bps: float
    latency_s: float
    tier: str
    fabric: str


class EngineTopology(Protocol):
    """What FlowEngine needs from a topology (the shipped `Topology` implements it; tests use stubs).

    `links[i].capacity_Bps` / `.latency_s` / `.tier`; `index(gpu)` -> int; `n_choices(a, b)` equal-cost paths
    between GPU indices; `path_ids(a, b, choice)` -> (link ids, spine or None); `ecmp_choice(a, b, key, seed)`
    the path index a flow key hashes to; for ARK / least-loaded also `leaf_of(index)` and
    `middle(src_leaf, dst_leaf)`; optional `spine_of(links)`.
    """

    links: list[Link]
    gpus: list[str]

    def index(self, gpu: str) -> int: ...

    def n_choices(self, src_index: int, dst_index: int) -> int: ...

    def path_ids(self, src_index: int, dst_index: int, choice: int = 0) -> tuple[tuple[int, ...], str | None]: ...

    def ecmp_choice(self, src_index: int, dst_index: int, flow_key: int, seed: int) -> int: ...


class Fabric(ABC):
    """The switch layers above the leaves: builds their links, enumerates the equal-cost middle paths between
    two leaves and hashes a flow onto one (hop-by-hop ECMP). One registered class per kind, keyed by the
    topology file's `network.tiers`; to add one, subclass, set `tiers`, decorate with `@register_fabric`."""

    tiers: ClassVar[int]

    def __init__(self, topology: "Topology") -> None:
        self.topology = topology
        self.spec = topology.spec
        self._salts: dict[tuple[str, int], int] = {}

    @property
    @abstractmethod
    def uplinks_per_leaf(self) -> int:
        """Links from one leaf upward (sets the default uplink rate from the oversubscription)."""

    @abstractmethod
    def build(self, uplink_Bps: float, latency_s: float, fabric: str) -> None:
        """Add this fabric's switch links to the topology and set `n_spines`."""

    @abstractmethod
    def tables(self) -> None:
        """Integer link tables so a middle path is a few list lookups (called once, lazily)."""

    @abstractmethod
    def n_middle(self, src_leaf: int, dst_leaf: int) -> int:
        """How many equal-cost switch paths join two different leaves."""

    @abstractmethod
    def middle_at(self, src_leaf: int, dst_leaf: int, choice: int) -> tuple[tuple[int, ...], str]:
        """The choice-th middle path between two different leaves: (link ids, top switch)."""

    @abstractmethod
    def ecmp_choice(self, src_leaf: int, dst_leaf: int, flow_key: int, seed: int) -> int:
        """The middle path index the switches' hashes give a flow key."""

    @abstractmethod
    def bisection_cuts(self, n_leaves: int) -> list[float]:
        """Per-direction capacities of this fabric's cuts (the topology takes the least)."""

    @abstractmethod
    def top_switches(self) -> list[str]:
        """Names of the switches a middle path turns at (spines; cores for a 3-tier fabric)."""

    def hash_at(self, switch: str, flow_key: int, seed: int, ports: int) -> int:
        """One switch's ECMP hash of a flow key over `ports` next hops (the switch's salt is kept per seed)."""
        salt = self._salts.get((switch, seed))
        if salt is None:
            salt = self._salts[(switch, seed)] = mix64(seed ^ self.topology.switch_id(switch))
        return mix64(flow_key ^ salt) % ports


FABRICS: dict[int, type[Fabric]] = {}


register_fabric = registrar(FABRICS, lambda cls: cls.tiers, "fabric for tiers")


@register_fabric
class LeafSpineFabric(Fabric):
    """2-tier leaf-spine: every leaf joins every spine; a middle path is leaf -> spine s -> leaf."""

    tiers = 2

    @property
    def uplinks_per_leaf(self) -> int:
        return self.spec.spines

    def build(self, uplink_Bps: float, latency_s: float, fabric: str) -> None:
        topo = self.topology
        topo.n_spines = self.spec.spines
        for leaf in range(topo.n_leaves):
            for spine in range(self.spec.spines):
                topo.add_link(f"leaf{leaf}", f"spine{spine}", uplink_Bps, latency_s, "leaf-spine", fabric)

    def tables(self) -> None:
        lid, spines, leaves = self.topology.link_ids, range(self.spec.spines), range(self.topology.n_leaves)
        self._up = [[lid[(f"leaf{leaf}", f"spine{s}")] for s in spines] for leaf in leaves]
        self._down = [[lid[(f"spine{s}", f"leaf{leaf}")] for s in spines] for leaf in leaves]
        self._leaf_names = [f"leaf{leaf}" for leaf in leaves]
        self._spine_names = [f"spine{s}" for s in spines]

    def n_middle(self, src_leaf: int, dst_leaf: int) -> int:
        return self.spec.spines

    def middle_at(self, src_leaf: int, dst_leaf: int, choice: int) -> tuple[tuple[int, ...], str]:
        return (self._up[src_leaf][choice], self._down[dst_leaf][choice]), self._spine_names[choice]

    def ecmp_choice(self, src_leaf: int, dst_leaf: int, flow_key: int, seed: int) -> int:
        return self.hash_at(self._leaf_names[src_leaf], flow_key, seed, self.spec.spines)

    def bisection_cuts(self, n_leaves: int) -> list[float]:
        return [n_leaves / 2 * self.spec.spines * self.topology.uplink_Bps] if n_leaves > 1 else []

    def top_switches(self) -> list[str]:
        return [f"spine{s}" for s in range(self.spec.spines)]


@register_fabric
class FatTreeFabric(Fabric):
    """3-tier k-ary fat-tree: pods of k/2 edge (leaf) and k/2 aggregation switches, (k/2)^2 cores. Inside a
    pod a middle path is leaf -> agg a -> leaf (k/2 choices); across pods leaf -> agg a -> core (a, c) ->
    agg a -> leaf ((k/2)^2 choices, index a * k/2 + c)."""

    tiers = 3

    @property
    def half(self) -> int:
        return self.spec.k // 2

    @property
    def uplinks_per_leaf(self) -> int:
        return self.half

    def build(self, uplink_Bps: float, latency_s: float, fabric: str) -> None:
        topo, half = self.topology, self.half
        topo.n_pods = -(-topo.n_leaves // half)
        topo.n_spines = half * half
        for leaf in range(topo.n_leaves):
            for agg in range(half):
                topo.add_link(f"leaf{leaf}", f"agg{leaf // half}.{agg}", uplink_Bps, latency_s, "leaf-spine", fabric)
        for pod in range(topo.n_pods):
            for agg in range(half):
                for core in range(half):
                    topo.add_link(f"agg{pod}.{agg}", f"core{agg * half + core}", uplink_Bps, latency_s,
                                  "spine-core", fabric)

    def tables(self) -> None:
        lid, half, topo = self.topology.link_ids, self.half, self.topology
        leaves, aggs = range(topo.n_leaves), range(half)
        self._up = [[lid[(f"leaf{leaf}", f"agg{leaf // half}.{a}")] for a in aggs] for leaf in leaves]
        self._down = [[lid[(f"agg{leaf // half}.{a}", f"leaf{leaf}")] for a in aggs] for leaf in leaves]
        self._to_core = [[[lid[(f"agg{p}.{a}", f"core{a * half + c}")] for c in aggs] for a in aggs]
                         for p in range(topo.n_pods)]
        self._from_core = [[[lid[(f"core{a * half + c}", f"agg{p}.{a}")] for c in aggs] for a in aggs]
                           for p in range(topo.n_pods)]
        self._half = half
        self._leaf_names = [f"leaf{leaf}" for leaf in leaves]
        self._agg_names = [[f"agg{p}.{a}" for a in aggs] for p in range(topo.n_pods)]
        self._core_names = [f"core{c}" for c in range(half * half)]

    def n_middle(self, src_leaf: int, dst_leaf: int) -> int:
        half = self.half
        return half if src_leaf // half == dst_leaf // half else half * half

    def middle_at(self, src_leaf: int, dst_leaf: int, choice: int) -> tuple[tuple[int, ...], str]:
        half = self._half
        src_pod, dst_pod = src_leaf // half, dst_leaf // half
        if src_pod == dst_pod:
            return (self._up[src_leaf][choice], self._down[dst_leaf][choice]), self._agg_names[src_pod][choice]
        agg, core = divmod(choice, half)
        return (self._up[src_leaf][agg], self._to_core[src_pod][agg][core], self._from_core[dst_pod][agg][core],
                self._down[dst_leaf][agg]), self._core_names[choice]

    def ecmp_choice(self, src_leaf: int, dst_leaf: int, flow_key: int, seed: int) -> int:
        half = self._half
        agg = self.hash_at(self._leaf_names[src_leaf], flow_key, seed, half)
        if src_leaf // half == dst_leaf // half:
            return agg
        return agg * half + self.hash_at(self._agg_names[src_leaf // half][agg], flow_key, seed, half)

    def bisection_cuts(self, n_leaves: int) -> list[float]:
        topo, half = self.topology, self.half
        cuts = [n_leaves / 2 * half * topo.uplink_Bps] if n_leaves > 1 else []
        if topo.n_pods > 1:
            cuts.append(topo.n_pods / 2 * half * half * topo.uplink_Bps)
        return cuts

    def top_switches(self) -> list[str]:
        return [f"core{c}" for c in range(self.half * self.half)]


class Topology:
    """Hosts, GPUs, directed links and path enumeration (see module docstring); implements EngineTopology."""

    def __init__(self, spec: TopologySpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.links: list[Link] = []
        self.link_ids: dict[tuple[str, str], int] = {}       # (src node, dst node) -> link id
        per_host = spec.gpus_per_host
        self.gpus: list[str] = [f"h{host}.g{gpu}" for host in range(spec.hosts) for gpu in range(per_host)]
        self.gpu_index: dict[str, int] = {name: i for i, name in enumerate(self.gpus)}
        self.n_leaves = -(-spec.hosts // spec.hosts_per_leaf)
        self.n_spines = 0
        self.n_pods = 0
        self.fabric: Fabric = FABRICS[spec.tiers](self)
        self._tables_ready = False
        self._up: list[tuple[int, ...]] = []            # per GPU: links from it to its leaf
        self._down: list[tuple[int, ...]] = []          # per GPU: links from its leaf to it
        self._nic_of: list[str] = []                    # per GPU: the NIC node it sends through
        for host in range(spec.hosts):
            self._build_host(host)
        self._build_fabric()
        self._middle: dict[tuple[int, int], list[tuple[tuple[int, ...], str | None]]] = {}
        nodes = sorted({link.src for link in self.links} | {link.dst for link in self.links})
        self._switch_ids = {node: i for i, node in enumerate(nodes)}
        self.graph = nx.DiGraph()
        for link in self.links:
            self.graph.add_edge(link.src, link.dst, id=link.id, capacity_Bps=link.capacity_Bps,
                                latency_s=link.latency_s, tier=link.tier, fabric=link.fabric)

    # ---- construction -------------------------------------------------------------------------
    def add_link(self, a: str, b: str, cap: float, lat: float, tier: str, fabric: str, *, both: bool = True) -> None:
        """Add the directed link a -> b (and b -> a unless both=False)."""
        for src, dst in ((a, b), (b, a)) if both else ((a, b),):
            link_id = len(self.links)
            self.links.append(Link(link_id, src, dst, cap, lat, tier, fabric))
            self.link_ids[(src, dst)] = link_id

    def _build_host(self, host: int) -> None:
        spec, intra = self.spec, self.spec.intra
        per_host = spec.gpus_per_host
        gpus = [f"h{host}.g{gpu}" for gpu in range(per_host)]
        if intra.kind == "nvlink-mesh":
            for a in range(per_host):
                for b in range(a + 1, per_host):
                    self.add_link(gpus[a], gpus[b], intra.link_Bps, intra.latency_s, "nvlink", intra.fabric)
        elif intra.kind == "nvswitch":
            for gpu in gpus:
                self.add_link(gpu, f"h{host}.nvs", intra.link_Bps, intra.latency_s / 2, "nvlink", intra.fabric)
        else:
            per_socket = per_host // intra.sockets
            for gpu in range(per_host):
                self.add_link(gpus[gpu], f"h{host}.s{gpu // per_socket}", intra.link_Bps, intra.latency_s / 2,
                              "pcie", intra.fabric)
            for a in range(intra.sockets):
                for b in range(a + 1, intra.sockets):
                    self.add_link(f"h{host}.s{a}", f"h{host}.s{b}", intra.xsocket_Bps or 0.0,
                                  intra.xsocket_latency_s, "xsocket", intra.xsocket_fabric)
        if spec.hosts == 1:
            self._nic_of.extend([""] * per_host)
            self._up.extend([()] * per_host)
            self._down.extend([()] * per_host)
        elif spec.nic_per == "gpu":
            self._build_gpu_nics(host, gpus)
        else:
            self._build_host_nic(host, gpus)

    def _build_gpu_nics(self, host: int, gpus: list[str]) -> None:
        """One NIC per GPU, folded into the GPU node (GPUDirect)."""
        spec, ids = self.spec, self.link_ids
        leaf = f"leaf{host // spec.hosts_per_leaf}"
        for gpu in gpus:
            self.add_link(gpu, leaf, spec.nic_Bps, spec.nic_latency_s, "nic-leaf", spec.nic_fabric)
            self._nic_of.append(gpu)
            self._up.append((ids[(gpu, leaf)],))
            self._down.append((ids[(leaf, gpu)],))

    def _build_host_nic(self, host: int, gpus: list[str]) -> None:
        """One host NIC, reached over PCIe (through socket 0 on PCIe hosts)."""
        spec, intra, ids = self.spec, self.spec.intra, self.link_ids
        leaf, nic = f"leaf{host // spec.hosts_per_leaf}", f"h{host}.nic"
        self.add_link(nic, leaf, spec.nic_Bps, spec.nic_latency_s, "nic-leaf", spec.nic_fabric)
        attach = None if intra.kind != "pcie" else f"h{host}.s0"
        if attach:
            self.add_link(attach, nic, spec.nic_pcie_Bps, intra.latency_s / 2, "pcie", intra.fabric)
        for index, gpu in enumerate(gpus):
            if attach:
                up = self._host_path(host, index, None) + (ids[(attach, nic)],)
                down = (ids[(nic, attach)],) + self._host_path(host, None, index)
            else:
                self.add_link(gpu, nic, spec.nic_pcie_Bps, intra.latency_s / 2, "pcie", intra.fabric)
                up, down = (ids[(gpu, nic)],), (ids[(nic, gpu)],)
            self._nic_of.append(nic)
            self._up.append(up + (ids[(nic, leaf)],))
            self._down.append((ids[(leaf, nic)],) + down)

    def _host_path(self, host: int, src_gpu: int | None, dst_gpu: int | None) -> tuple[int, ...]:
        """PCIe path inside a host between two GPUs (local numbers); None stands for socket 0 (the host NIC)."""
        per_socket = self.spec.gpus_per_host // self.spec.intra.sockets
        src_socket = 0 if src_gpu is None else src_gpu // per_socket
        dst_socket = 0 if dst_gpu is None else dst_gpu // per_socket
        path: list[int] = []
        if src_gpu is not None:
            path.append(self.link_ids[(f"h{host}.g{src_gpu}", f"h{host}.s{src_socket}")])
        if src_socket != dst_socket:
            path.append(self.link_ids[(f"h{host}.s{src_socket}", f"h{host}.s{dst_socket}")])
        if dst_gpu is not None:
            path.append(self.link_ids[(f"h{host}.s{dst_socket}", f"h{host}.g{dst_gpu}")])
        return tuple(path)

    def _build_fabric(self) -> None:
        spec = self.spec
        if spec.hosts == 1:
            self.uplink_Bps = 0.0
            return
        down = spec.hosts_per_leaf * spec.nics_per_host * spec.nic_Bps
        n_up = self.fabric.uplinks_per_leaf
        over = spec.oversubscription or 1.0
        self.uplink_Bps = spec.uplink_Bps if spec.uplink_Bps is not None else down / (n_up * over)
        self.oversubscription = down / (n_up * self.uplink_Bps)
        self.fabric.build(self.uplink_Bps, spec.switch_latency_s, spec.nic_fabric)

    # ---- lookups ------------------------------------------------------------------------------
    def index(self, gpu: str) -> int:
        try:
            return self.gpu_index[gpu]
        except KeyError:
            raise UnknownNameError("gpu", gpu, self.gpus[:8] + (["..."] if len(self.gpus) > 8 else [])) from None

    def host_of(self, gpu: str) -> int:
        return self.index(gpu) // self.spec.gpus_per_host

    def leaf_of(self, gpu: str | int) -> int:
        index = gpu if isinstance(gpu, int) else self.index(gpu)
        return (index // self.spec.gpus_per_host) // self.spec.hosts_per_leaf

    def link(self, src: str, dst: str) -> Link:
        return self.links[self.link_ids[(src, dst)]]

    def fabric_between(self, a: str, b: str) -> str:
        """The calibration fabric of the path class between two GPUs."""
        src, dst = self.index(a), self.index(b)
        per_host, intra = self.spec.gpus_per_host, self.spec.intra
        if src // per_host != dst // per_host:
            return self.spec.nic_fabric
        per_socket = per_host // intra.sockets
        same_socket = (src % per_host) // per_socket == (dst % per_host) // per_socket
        return intra.fabric if same_socket else intra.xsocket_fabric

    # ---- paths --------------------------------------------------------------------------------
    def switch_id(self, name: str) -> int:
        """A switch's stable integer id (its ECMP hash seed)."""
        return self._switch_ids[name]

    def n_middle(self, src_leaf: int, dst_leaf: int) -> int:
        """How many equal-cost switch paths join two leaves."""
        return 1 if src_leaf == dst_leaf else self.fabric.n_middle(src_leaf, dst_leaf)

    def middle_at(self, la: int, lb: int, i: int) -> tuple[tuple[int, ...], str | None]:
        """The i-th equal-cost switch path between leaves la and lb: (link ids, spine node)."""
        if la == lb:
            return (), None
        return self._fabric().middle_at(la, lb, i)

    def _fabric(self) -> Fabric:
        """The fabric with its link tables built (lazily, on the first path or hash asked for)."""
        if not self._tables_ready:
            self.fabric.tables()
            self._tables_ready = True
        return self.fabric

    def middle(self, src_leaf: int, dst_leaf: int) -> list[tuple[tuple[int, ...], str | None]]:
        """All equal-cost switch paths between two leaves, each (link ids, spine node or None); cached."""
        key = (src_leaf, dst_leaf)
        paths = self._middle.get(key)
        if paths is None:
            paths = [self.middle_at(src_leaf, dst_leaf, i) for i in range(self.n_middle(src_leaf, dst_leaf))]
            self._middle[key] = paths
        return paths

    def n_paths(self, src: str, dst: str) -> int:
        return self.n_choices(self.index(src), self.index(dst))

    def n_choices(self, ia: int, ib: int) -> int:
        """Number of equal-cost paths between GPU indices (1 inside a host or behind one NIC)."""
        per_host = self.spec.gpus_per_host
        src_host, dst_host = ia // per_host, ib // per_host
        if src_host == dst_host or self._nic_of[ia] == self._nic_of[ib]:
            return 1
        per_leaf = self.spec.hosts_per_leaf
        return self.n_middle(src_host // per_leaf, dst_host // per_leaf)

    def path_ids(self, ia: int, ib: int, choice: int = 0) -> tuple[tuple[int, ...], str | None]:
        """Links (ids) and spine of one equal-cost path between GPU indices; choice wraps modulo the count."""
        per_host = self.spec.gpus_per_host
        if ia == ib:
            return (), None
        src_host, dst_host = ia // per_host, ib // per_host
        if src_host == dst_host:
            return self._intra(src_host, ia % per_host, ib % per_host), None
        up, down = self._up[ia], self._down[ib]
        if self._nic_of[ia] == self._nic_of[ib]:
            return up + down, None
        per_leaf = self.spec.hosts_per_leaf
        src_leaf, dst_leaf = src_host // per_leaf, dst_host // per_leaf
        middle, spine = self.middle_at(src_leaf, dst_leaf, choice % self.n_middle(src_leaf, dst_leaf))
        return up + middle + down, spine

    def path_latency_s(self, ia: int, ib: int) -> float:
        """Summed link latency of the first equal-cost path between GPU indices (the reference, per pair)."""
        links, _spine = self.path_ids(ia, ib)
        return sum(self.links[link].latency_s for link in links)

    def latency_row(self, ia: int, targets: Sequence[int]) -> list[float]:
        """`path_latency_s(ia, ib)` for every GPU index ib in `targets`, equal to it bit for bit.

        Across hosts a path is up[ia] + middle(leaf pair, choice 0) + down[ib], so its latencies are the
        concatenation of three segments' sequences, and there are few distinct segments (on the fat-tree: one
        up and one down per GPU kind, one middle per tier: same leaf, same pod, across cores). Targets are
        grouped by (middle, down) segment, and each group's sum is taken once over the very sequence the
        per-pair sum adds, in its order, so it is the same float. Same-host or shared-NIC targets (at most a
        host's GPUs) take the per-pair path. A 1024-GPU row costs ~0.1 ms instead of ~1024 path walks."""
        targets = np.asarray(targets, dtype=np.int64)
        if not len(targets):
            return []
        row = np.zeros(len(targets))
        per_host, per_leaf = self.spec.gpus_per_host, self.spec.hosts_per_leaf
        src_host = ia // per_host
        hosts = targets // per_host
        nics = self._nic_ids()
        near = (hosts == src_host) | (nics[targets] == nics[ia])
        far = np.flatnonzero(~near)
        if len(far):
            segments = self._segments()
            leaves = hosts[far] // per_leaf
            src_leaf = src_host // per_leaf
            middle = np.array([segments.middle_id(self, src_leaf, leaf) for leaf in range(self.n_leaves)])
            down = segments.down_of[targets[far]]
            _groups, first, inverse = np.unique(middle[leaves] * segments.n_down + down, return_index=True,
                                               return_inverse=True)
            up = segments.up[segments.up_of[ia]]
            sums = [sum(up + segments.middle[middle[leaves[at]]] + segments.down[down[at]]) for at in first]
            row[far] = np.asarray(sums)[inverse.reshape(-1)]
        for at in np.flatnonzero(near).tolist():
            row[at] = self.path_latency_s(ia, int(targets[at]))
        return row.tolist()

    def _nic_ids(self) -> np.ndarray:
        ids = getattr(self, "_nic_id_array", None)
        if ids is None:
            names: dict[str, int] = {}
            ids = self._nic_id_array = np.array([names.setdefault(nic, len(names)) for nic in self._nic_of])
        return ids

    def _segments(self) -> "_LatencySegments":
        segments = getattr(self, "_latency_segments", None)
        if segments is None:
            segments = self._latency_segments = _LatencySegments(self)
        return segments

    def path_choices(self, ia: int, ib: int) -> list[tuple[tuple[int, ...], str | None]]:
        """All equal-cost paths between GPU indices as (link ids, spine)."""
        return [self.path_ids(ia, ib, i) for i in range(self.n_choices(ia, ib))]

    def _intra(self, host: int, src_gpu: int, dst_gpu: int) -> tuple[int, ...]:
        kind, ids = self.spec.intra.kind, self.link_ids
        src, dst = f"h{host}.g{src_gpu}", f"h{host}.g{dst_gpu}"
        if kind == "nvlink-mesh":
            return (ids[(src, dst)],)
        if kind == "nvswitch":
            return (ids[(src, f"h{host}.nvs")], ids[(f"h{host}.nvs", dst)])
        return self._host_path(host, src_gpu, dst_gpu)

    def path(self, a: str, b: str, choice: int = 0) -> list[Link]:
        path, _spine = self.path_ids(self.index(a), self.index(b), choice)
        return [self.links[link] for link in path]

    def paths(self, a: str, b: str) -> list[list[Link]]:
        """Every equal-cost path between two GPUs."""
        return [[self.links[link] for link in path] for path, _spine in self.path_choices(self.index(a), self.index(b))]

    def ecmp_choice(self, ia: int, ib: int, flow_key: int, seed: int) -> int:
        """Hop-by-hop ECMP: each upward switch hashes the flow key with its own seed mod its next hops."""
        per_host, per_leaf = self.spec.gpus_per_host, self.spec.hosts_per_leaf
        src_leaf, dst_leaf = ia // per_host // per_leaf, ib // per_host // per_leaf
        return 0 if src_leaf == dst_leaf else self._fabric().ecmp_choice(src_leaf, dst_leaf, flow_key, seed)

    def spine_of(self, links: Sequence[int]) -> str | None:
        """The top switch a path turns at (None inside a leaf or a host)."""
        if not links or self.spec.hosts == 1:
            return None
        tops = self._top_set()
        for link in links:
            if self.links[link].dst in tops:
                return self.links[link].dst
        for link in links:                      # a pod-local 3-tier path turns at an aggregation switch
            if self.links[link].tier == "leaf-spine" and not self.links[link].dst.startswith("leaf"):
                return self.links[link].dst
        return None

    def _top_set(self) -> frozenset[str]:
        tops = getattr(self, "_tops", None)
        if tops is None:
            tops = self._tops = frozenset(self.fabric.top_switches())
        return tops

    # ---- summary ------------------------------------------------------------------------------
    def bisection_Bps(self) -> float:
        """Per-direction bisection bandwidth of the inter-host network (min over the tier cuts)."""
        spec = self.spec
        if spec.hosts == 1:
            return 0.0
        return min([spec.hosts * spec.nics_per_host * spec.nic_Bps / 2] + self.fabric.bisection_cuts(self.n_leaves))

    def summary(self) -> dict[str, object]:
        tiers: dict[str, int] = {}
        for link in self.links:
            tiers[link.tier] = tiers.get(link.tier, 0) + 1
        spec = self.spec
        return {
            "name": self.name, "hosts": spec.hosts, "gpus": len(self.gpus), "gpus_per_host": spec.gpus_per_host,
            "intra": spec.intra.kind, "nic_per": spec.nic_per, "nic_GBps": spec.nic_Bps / 1e9,
            "tiers": spec.tiers if spec.hosts > 1 else 0, "leaves": self.n_leaves if spec.hosts > 1 else 0,
            "spines": self.n_spines, "uplink_GBps": self.uplink_Bps / 1e9,
            "links": len(self.links), "links_per_tier": tiers,
            "bisection_GBps": self.bisection_Bps() / 1e9,
            "oversubscription": getattr(self, "oversubscription", 1.0),
        }


class _LatencySegments:
    """The distinct latency sequences of the three segments of a cross-host path, interned to small ids:
    per GPU its up (to its leaf) and down (from its leaf) sequence, per leaf pair its first middle path's."""

    def __init__(self, topology: Topology) -> None:
        latency = [link.latency_s for link in topology.links]
        self.up: list[tuple[float, ...]] = []
        self.down: list[tuple[float, ...]] = []
        self.up_of = self._intern([tuple(latency[link] for link in links) for links in topology._up], self.up)
        self.down_of = self._intern([tuple(latency[link] for link in links) for links in topology._down], self.down)
        self.n_down = len(self.down)
        self.middle: list[tuple[float, ...]] = []
        self._middle_ids: dict[tuple[float, ...], int] = {}
        self._middle_of: dict[tuple[int, int], int] = {}
        self._latency = latency

    @staticmethod
    def _intern(sequences: list[tuple[float, ...]], distinct: list[tuple[float, ...]]) -> np.ndarray:
        ids: dict[tuple[float, ...], int] = {}
        of = [ids.setdefault(seq, len(ids)) for seq in sequences]
        distinct.extend(ids)
        return np.array(of, dtype=np.int64)

    def middle_id(self, topology: Topology, src_leaf: int, dst_leaf: int) -> int:
        key = (src_leaf, dst_leaf)
        found = self._middle_of.get(key)
        if found is None:
            links, _top = topology.middle_at(src_leaf, dst_leaf, 0)
            seq = tuple(self._latency[link] for link in links)
            found = self._middle_ids.get(seq)
            if found is None:
                found = self._middle_ids[seq] = len(self.middle)
                self.middle.append(seq)
            self._middle_of[key] = found
        return found


def load_topology(path: str | Path, *, hosts: int | None = None) -> Topology:
    """Load, validate and build a topology YAML (ConfigurationError names file and field); `hosts` resizes it
    (`load_topology_spec`)."""
    return Topology(load_topology_spec(path, hosts=hosts))
