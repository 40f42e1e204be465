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

from simroute.errors import UnknownNameError
from simroute.network.hashing import mix64
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
        """One switch's ECMP hash of a flow key over `ports` next hops."""
        return mix64(flow_key ^ mix64(seed ^ self.topology.switch_id(switch))) % ports


FABRICS: dict[int, type[Fabric]] = {}


def register_fabric(cls: type[Fabric]) -> type[Fabric]:
    if cls.tiers in FABRICS:
        raise ValueError(f"fabric for {cls.tiers} tiers registered twice")
    FABRICS[cls.tiers] = cls
    return cls


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

    def n_middle(self, src_leaf: int, dst_leaf: int) -> int:
        return self.spec.spines

    def middle_at(self, src_leaf: int, dst_leaf: int, choice: int) -> tuple[tuple[int, ...], str]:
        return (self._up[src_leaf][choice], self._down[dst_leaf][choice]), f"spine{choice}"

    def ecmp_choice(self, src_leaf: int, dst_leaf: int, flow_key: int, seed: int) -> int:
        return self.hash_at(f"leaf{src_leaf}", flow_key, seed, self.spec.spines)

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

    def n_middle(self, src_leaf: int, dst_leaf: int) -> int:
        half = self.half
        return half if src_leaf // half == dst_leaf // half else half * half

    def middle_at(self, src_leaf: int, dst_leaf: int, choice: int) -> tuple[tuple[int, ...], str]:
        half = self.half
        src_pod, dst_pod = src_leaf // half, dst_leaf // half
        if src_pod == dst_pod:
            return (self._up[src_leaf][choice], self._down[dst_leaf][choice]), f"agg{src_pod}.{choice}"
        agg, core = divmod(choice, half)
        return (self._up[src_leaf][agg], self._to_core[src_pod][agg][core], self._from_core[dst_pod][agg][core],
                self._down[dst_leaf][agg]), f"core{choice}"

    def ecmp_choice(self, src_leaf: int, dst_leaf: int, flow_key: int, seed: int) -> int:
        half = self.half
        agg = self.hash_at(f"leaf{src_leaf}", flow_key, seed, half)
        if src_leaf // half == dst_leaf // half:
            return agg
        return agg * half + self.hash_at(f"agg{src_leaf // half}.{agg}", flow_key, seed, half)

    def bisection_cuts(self, n_leaves: int) -> list[float]:
        topo, half = self.topology, self.half
        cuts = [n_leaves / 2 * half * topo.uplink_Bps] if n_leaves > 1 else []
        if topo.n_pods > 1:
            cuts.append(topo.n_pods / 2 * half * half * topo.uplink_Bps)
        return cuts

    def top_switches(self) -> list[str]:
        return [f"core{c}" for c in range(self.half * self.half)]


class Topology:
    """Hosts, GPUs, directed links and path enumeration (see module docstring)."""

    def __init__(self, spec: TopologySpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.links: list[Link] = []
        self.link_ids: dict[tuple[str, str], int] = {}       # (src node, dst node) -> link id
        G, H = spec.gpus_per_host, spec.hosts
        self.gpus: list[str] = [f"h{h}.g{g}" for h in range(H) for g in range(G)]
        self.gpu_index: dict[str, int] = {name: i for i, name in enumerate(self.gpus)}
        self.n_leaves = -(-H // spec.hosts_per_leaf)
        self.n_spines = 0
        self.n_pods = 0
        self.fabric: Fabric = FABRICS[spec.tiers](self)
        self._tables_ready = False
        self._build_hosts()
        self._build_fabric()
        self._middle: dict[tuple[int, int], list[tuple[tuple[int, ...], str | None]]] = {}
        self._switch_ids = {n: i for i, n in enumerate(sorted({l.src for l in self.links} | {l.dst for l in self.links}))}
        self.graph = nx.DiGraph()
        for l in self.links:
            self.graph.add_edge(l.src, l.dst, id=l.id, capacity_Bps=l.capacity_Bps, latency_s=l.latency_s,
                                tier=l.tier, fabric=l.fabric)

    # ---- construction -------------------------------------------------------------------------
    def add_link(self, a: str, b: str, cap: float, lat: float, tier: str, fabric: str, *, both: bool = True) -> None:
        """Add the directed link a -> b (and b -> a unless both=False)."""
        for s, d in ((a, b), (b, a)) if both else ((a, b),):
            lid = len(self.links)
            self.links.append(Link(lid, s, d, cap, lat, tier, fabric))
            self.link_ids[(s, d)] = lid

    def _build_hosts(self) -> None:
        sp, it = self.spec, self.spec.intra
        G = sp.gpus_per_host
        per_socket = G // it.sockets
        self._up: list[tuple[int, ...]] = []
        self._down: list[tuple[int, ...]] = []
        self._nic_of: list[str] = []
        for h in range(sp.hosts):
            gpus = [f"h{h}.g{g}" for g in range(G)]
            if it.kind == "nvlink-mesh":
                for a in range(G):
                    for b in range(a + 1, G):
                        self.add_link(gpus[a], gpus[b], it.link_Bps, it.latency_s, "nvlink", it.fabric)
            elif it.kind == "nvswitch":
                for g in gpus:
                    self.add_link(g, f"h{h}.nvs", it.link_Bps, it.latency_s / 2, "nvlink", it.fabric)
            else:
                for g in range(G):
                    self.add_link(gpus[g], f"h{h}.s{g // per_socket}", it.link_Bps, it.latency_s / 2, "pcie", it.fabric)
                for a in range(it.sockets):
                    for b in range(a + 1, it.sockets):
                        self.add_link(f"h{h}.s{a}", f"h{h}.s{b}", it.xsocket_Bps or 0.0, it.xsocket_latency_s,
                                  "xsocket", it.xsocket_fabric)
            leaf = f"leaf{h // sp.hosts_per_leaf}"
            if sp.hosts == 1:
                self._nic_of.extend([""] * G)
                self._up.extend([()] * G)
                self._down.extend([()] * G)
                continue
            if sp.nic_per == "gpu":
                for g in gpus:
                    self.add_link(g, leaf, sp.nic_Bps, sp.nic_latency_s, "nic-leaf", sp.nic_fabric)
                    self._nic_of.append(g)
                    self._up.append((self.link_ids[(g, leaf)],))
                    self._down.append((self.link_ids[(leaf, g)],))
            else:
                nic = f"h{h}.nic"
                self.add_link(nic, leaf, sp.nic_Bps, sp.nic_latency_s, "nic-leaf", sp.nic_fabric)
                attach = None if it.kind != "pcie" else f"h{h}.s0"
                if attach:
                    self.add_link(attach, nic, sp.nic_pcie_Bps, it.latency_s / 2, "pcie", it.fabric)
                for g in range(G):
                    gname = gpus[g]
                    if attach:
                        up = self._host_path(h, g, None) + (self.link_ids[(attach, nic)],)
                        down = (self.link_ids[(nic, attach)],) + self._host_path(h, None, g)
                    else:
                        self.add_link(gname, nic, sp.nic_pcie_Bps, it.latency_s / 2, "pcie", it.fabric)
                        up, down = (self.link_ids[(gname, nic)],), (self.link_ids[(nic, gname)],)
                    self._nic_of.append(nic)
                    self._up.append(up + (self.link_ids[(nic, leaf)],))
                    self._down.append((self.link_ids[(leaf, nic)],) + down)

    def _host_path(self, h: int, a: int | None, b: int | None) -> tuple[int, ...]:
        """PCIe path inside host h between GPU a and GPU b; None stands for socket 0 (the host NIC)."""
        per_socket = self.spec.gpus_per_host // self.spec.intra.sockets
        sa = 0 if a is None else a // per_socket
        sb = 0 if b is None else b // per_socket
        ids: list[int] = []
        if a is not None:
            ids.append(self.link_ids[(f"h{h}.g{a}", f"h{h}.s{sa}")])
        if sa != sb:
            ids.append(self.link_ids[(f"h{h}.s{sa}", f"h{h}.s{sb}")])
        if b is not None:
            ids.append(self.link_ids[(f"h{h}.s{sb}", f"h{h}.g{b}")])
        return tuple(ids)

    def _build_fabric(self) -> None:
        sp = self.spec
        if sp.hosts == 1:
            self.uplink_Bps = 0.0
            return
        down = sp.hosts_per_leaf * sp.nics_per_host * sp.nic_Bps
        n_up = self.fabric.uplinks_per_leaf
        over = sp.oversubscription or 1.0
        self.uplink_Bps = sp.uplink_Bps if sp.uplink_Bps is not None else down / (n_up * over)
        self.oversubscription = down / (n_up * self.uplink_Bps)
        self.fabric.build(self.uplink_Bps, sp.switch_latency_s, sp.nic_fabric)

    # ---- lookups ------------------------------------------------------------------------------
    def index(self, gpu: str) -> int:
        try:
            return self.gpu_index[gpu]
        except KeyError:
            raise UnknownNameError("gpu", gpu, self.gpus[:8] + (["..."] if len(self.gpus) > 8 else [])) from None

    def host_of(self, gpu: str) -> int:
        return self.index(gpu) // self.spec.gpus_per_host

    def leaf_of(self, gpu: str | int) -> int:
        i = gpu if isinstance(gpu, int) else self.index(gpu)
        return (i // self.spec.gpus_per_host) // self.spec.hosts_per_leaf

    def link(self, src: str, dst: str) -> Link:
        return self.links[self.link_ids[(src, dst)]]

    def fabric_between(self, a: str, b: str) -> str:
        """The calibration fabric of the path class between two GPUs."""
        ia, ib = self.index(a), self.index(b)
        G, it = self.spec.gpus_per_host, self.spec.intra
        if ia // G != ib // G:
            return self.spec.nic_fabric
        per_socket = G // it.sockets
        return it.xsocket_fabric if (ia % G) // per_socket != (ib % G) // per_socket else it.fabric

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
        if not self._tables_ready:
            self.fabric.tables()
            self._tables_ready = True
        return self.fabric.middle_at(la, lb, i)

    def middle(self, src_leaf: int, dst_leaf: int) -> list[tuple[tuple[int, ...], str | None]]:
        """All equal-cost switch paths between two leaves, each (link ids, spine node or None); cached."""
        key = (src_leaf, dst_leaf)
        m = self._middle.get(key)
        if m is None:
            m = [self.middle_at(src_leaf, dst_leaf, i) for i in range(self.n_middle(src_leaf, dst_leaf))]
            self._middle[key] = m
        return m

    def n_paths(self, src: str, dst: str) -> int:
        return self.n_choices(self.index(src), self.index(dst))

    def n_choices(self, ia: int, ib: int) -> int:
        """Number of equal-cost paths between GPU indices (1 inside a host or behind one NIC)."""
        G = self.spec.gpus_per_host
        ha, hb = ia // G, ib // G
        if ha == hb or self._nic_of[ia] == self._nic_of[ib]:
            return 1
        hpl = self.spec.hosts_per_leaf
        return self.n_middle(ha // hpl, hb // hpl)

    def path_ids(self, ia: int, ib: int, choice: int = 0) -> tuple[tuple[int, ...], str | None]:
        """Links (ids) and spine of one equal-cost path between GPU indices; choice wraps modulo the count."""
        G = self.spec.gpus_per_host
        if ia == ib:
            return (), None
        ha, hb = ia // G, ib // G
        if ha == hb:
            return self._intra(ha, ia % G, ib % G), None
        up, down = self._up[ia], self._down[ib]
        if self._nic_of[ia] == self._nic_of[ib]:
            return up + down, None
        hpl = self.spec.hosts_per_leaf
        la, lb = ha // hpl, hb // hpl
        mid, spine = self.middle_at(la, lb, choice % self.n_middle(la, lb))
        return up + mid + down, spine

    def path_choices(self, ia: int, ib: int) -> list[tuple[tuple[int, ...], str | None]]:
        """All equal-cost paths between GPU indices as (link ids, spine)."""
        return [self.path_ids(ia, ib, i) for i in range(self.n_choices(ia, ib))]

    def _intra(self, h: int, a: int, b: int) -> tuple[int, ...]:
        kind, L = self.spec.intra.kind, self.link_ids
        if kind == "nvlink-mesh":
            return (L[(f"h{h}.g{a}", f"h{h}.g{b}")],)
        if kind == "nvswitch":
            return (L[(f"h{h}.g{a}", f"h{h}.nvs")], L[(f"h{h}.nvs", f"h{h}.g{b}")])
        return self._host_path(h, a, b)

    def path(self, a: str, b: str, choice: int = 0) -> list[Link]:
        ids, _ = self.path_ids(self.index(a), self.index(b), choice)
        return [self.links[i] for i in ids]

    def paths(self, a: str, b: str) -> list[list[Link]]:
        """Every equal-cost path between two GPUs."""
        return [[self.links[i] for i in ids] for ids, _ in self.path_choices(self.index(a), self.index(b))]

    def ecmp_choice(self, ia: int, ib: int, flow_key: int, seed: int) -> int:
        """Hop-by-hop ECMP: each upward switch hashes the flow key with its own seed mod its next hops."""
        G, hpl = self.spec.gpus_per_host, self.spec.hosts_per_leaf
        la, lb = ia // G // hpl, ib // G // hpl
        return 0 if la == lb else self.fabric.ecmp_choice(la, lb, flow_key, seed)

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
        sp = self.spec
        if sp.hosts == 1:
            return 0.0
        return min([sp.hosts * sp.nics_per_host * sp.nic_Bps / 2] + self.fabric.bisection_cuts(self.n_leaves))

    def summary(self) -> dict[str, object]:
        tiers: dict[str, int] = {}
        for l in self.links:
            tiers[l.tier] = tiers.get(l.tier, 0) + 1
        sp = self.spec
        return {
            "name": self.name, "hosts": sp.hosts, "gpus": len(self.gpus), "gpus_per_host": sp.gpus_per_host,
            "intra": sp.intra.kind, "nic_per": sp.nic_per, "nic_GBps": sp.nic_Bps / 1e9,
            "tiers": sp.tiers if sp.hosts > 1 else 0, "leaves": self.n_leaves if sp.hosts > 1 else 0,
            "spines": self.n_spines, "uplink_GBps": self.uplink_Bps / 1e9,
            "links": len(self.links), "links_per_tier": tiers,
            "bisection_GBps": self.bisection_Bps() / 1e9,
            "oversubscription": getattr(self, "oversubscription", 1.0),
        }


def load_topology(path: str | Path) -> Topology:
    """Load, validate and build a topology YAML (ConfigurationError names file and field)."""
    return Topology(load_topology_spec(path))
