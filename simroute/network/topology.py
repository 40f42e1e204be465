"""Topologies built from a TopologySpec: directed links, a networkx graph and cheap equal-cost paths.

What a topology is made of is its kind's (simroute/network/kinds/: fat-tree, rail-optimised, NVLink domain;
one registered class each, named by the file's `kind`): where each GPU sits (host, NVLink domain, rail, leaf),
the links, the switch layer above the leaves. `Topology` asks the kind once per GPU and keeps the answers in
lists, so every lookup and path below reads them and none recomputes a GPU's place.

Within an NVLink domain (a host, unless the kind spans hosts) a path is the kind's `intra_path`; across
domains it is `up[src] + middle[src_leaf, dst_leaf][choice] + down[dst]`, the middle (switch) choices
computed once per leaf pair, so no flow ever runs a graph search. Node names: GPUs `h{i}.g{j}`, `h{i}.nvs`
(NVSwitch), `nvl{d}.nvs` (a multi-host NVLink domain's switch), `h{i}.s{k}` (PCIe socket), `h{i}.nic` (a host
NIC), `leaf{l}` (leaf / edge / rail switch), `spine{s}` (2-tier), `agg{p}.{a}` and `core{c}` (3-tier).
With one NIC per GPU the NIC is folded into the GPU node (GPUDirect; its PCIe hop is never the bottleneck).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from simroute.errors import UnknownNameError
from simroute.network.kinds.base import KINDS, RankPlanes, TopologyKind
from simroute.network.schema import TopologySpec, load_topology_spec
from simroute.network.switches import Fabric, FatTreeFabric, LeafSpineFabric

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["TIERS", "EngineTopology", "Fabric", "FatTreeFabric", "LeafSpineFabric", "Link", "Topology",
           "load_topology"]

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
        self.n_spines = 0
        self.n_pods = 0
        self.uplink_Bps = 0.0
        self.oversubscription = 1.0
        self.kind: TopologyKind = KINDS.get(spec.kind)(self)
        self.fabric: Fabric = self.kind.switches
        self.n_leaves = self.kind.n_leaves
        # where each GPU sits, asked of the kind once (the one place) and read everywhere below
        every = range(len(self.gpus))
        self._host = [self.kind.host_of(gpu) for gpu in every]
        self._domain = [self.kind.domain_of(gpu) for gpu in every]
        self._rail = [self.kind.rail_of(gpu) for gpu in every]
        self._leaf = [self.kind.leaf_of(gpu) for gpu in every]
        self._tables_ready = False
        self._up: list[tuple[int, ...]] = [()] * len(self.gpus)      # per GPU: links from it to its leaf
        self._down: list[tuple[int, ...]] = [()] * len(self.gpus)    # per GPU: links from its leaf to it
        self._nic_of: list[str] = [""] * len(self.gpus)              # per GPU: the NIC node it sends through
        self.kind.build()
        self._middle: dict[tuple[int, int], list[tuple[tuple[int, ...], str | None]]] = {}
        nodes = sorted({link.src for link in self.links} | {link.dst for link in self.links})
        self._switch_ids = {node: i for i, node in enumerate(nodes)}

    @functools.cached_property
    def graph(self) -> "nx.DiGraph":
        """The links as a networkx graph, built on first use (drawing, analysis): a run never asks for it, and
        importing networkx was a quarter of `simroute run`'s start-up."""
        import networkx as nx
        graph = nx.DiGraph()
        for link in self.links:
            graph.add_edge(link.src, link.dst, id=link.id, capacity_Bps=link.capacity_Bps, latency_s=link.latency_s,
                           tier=link.tier, fabric=link.fabric)
        return graph

    # ---- construction (called by the kind while it builds) ------------------------------------------
    def add_link(self, a: str, b: str, cap: float, lat: float, tier: str, fabric: str, *, both: bool = True) -> None:
        """Add the directed link a -> b (and b -> a unless both=False)."""
        for src, dst in ((a, b), (b, a)) if both else ((a, b),):
            link_id = len(self.links)
            self.links.append(Link(link_id, src, dst, cap, lat, tier, fabric))
            self.link_ids[(src, dst)] = link_id

    def set_nic_paths(self, paths: Sequence[tuple[int, str, tuple[int, ...], tuple[int, ...]]]) -> None:
        """Record, per GPU index, the NIC node it sends through and its links up to its leaf and down from it."""
        for gpu, nic, up, down in paths:
            self._nic_of[gpu], self._up[gpu], self._down[gpu] = nic, up, down

    # ---- where a GPU sits (its kind's answers) ------------------------------------------------------
    def index(self, gpu: str) -> int:
        try:
            return self.gpu_index[gpu]
        except KeyError:
            raise UnknownNameError("gpu", gpu, self.gpus[:8] + (["..."] if len(self.gpus) > 8 else [])) from None

    def _at(self, gpu: str | int) -> int:
        return gpu if isinstance(gpu, int) else self.index(gpu)

    def host_of(self, gpu: str | int) -> int:
        """The GPU's host (server, compute tray)."""
        return self._host[self._at(gpu)]

    def domain_of(self, gpu: str | int) -> int:
        """The GPU's NVLink domain: the GPUs it reaches without a NIC (its host, unless NVLink spans hosts)."""
        return self._domain[self._at(gpu)]

    def domain_index(self, gpu: int) -> int:
        """`domain_of` for a GPU index, without the name check (the kinds' and the paths' hot lookups)."""
        return self._domain[gpu]

    def rail_of(self, gpu: str | int) -> int:
        """Which of its host's NICs the GPU sends through (its rail on a rail-optimised fabric)."""
        return self._rail[self._at(gpu)]

    def leaf_of(self, gpu: str | int) -> int:
        """The leaf (edge, rail) switch the GPU's NIC joins."""
        return self._leaf[self._at(gpu)]

    def nic_of(self, gpu: str | int) -> str:
        """The NIC node the GPU sends through: the GPU itself with a NIC per GPU (GPUDirect), its host's NIC
        otherwise ("" on a one-host topology)."""
        return self._nic_of[self._at(gpu)]

    def link(self, src: str, dst: str) -> Link:
        return self.links[self.link_ids[(src, dst)]]

    def fabric_between(self, a: str, b: str) -> str:
        """The calibration fabric of the path class between two GPUs (NVLink within a domain, the NIC's across)."""
        return self.kind.fabric_between(self.index(a), self.index(b))

    def rank_planes(self, tp: int) -> RankPlanes:
        """Whether one rank pair's flow of 1/tp of a transfer's bytes stands for all tp rank pairs' flows on this
        topology, within an NVLink domain and across domains (`simroute.network.kinds.RankPlanes`)."""
        if tp < 1 or self.spec.gpus_per_host % tp:
            raise ValueError(f"tp = {tp} does not divide the {self.spec.gpus_per_host} GPUs of a host")
        return self.kind.rank_planes(tp)

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
        """Number of equal-cost paths between GPU indices (1 inside an NVLink domain or a leaf)."""
        if self._domain[ia] == self._domain[ib]:
            return 1
        return self.n_middle(self._leaf[ia], self._leaf[ib])

    def path_ids(self, ia: int, ib: int, choice: int = 0) -> tuple[tuple[int, ...], str | None]:
        """Links (ids) and spine of one equal-cost path between GPU indices; choice wraps modulo the count."""
        if ia == ib:
            return (), None
        if self._domain[ia] == self._domain[ib]:
            return self.kind.intra_path(ia, ib), None
        src_leaf, dst_leaf = self._leaf[ia], self._leaf[ib]
        middle, spine = self.middle_at(src_leaf, dst_leaf, choice % self.n_middle(src_leaf, dst_leaf))
        return self._up[ia] + middle + self._down[ib], spine

    def path_latency_s(self, ia: int, ib: int) -> float:
        """Summed link latency of the first equal-cost path between GPU indices (the reference, per pair)."""
        links, _spine = self.path_ids(ia, ib)
        return sum(self.links[link].latency_s for link in links)

    def latency_row(self, ia: int, targets: Sequence[int]) -> list[float]:
        """`path_latency_s(ia, ib)` for every GPU index ib in `targets`, equal to it bit for bit.

        Across domains a path is up[ia] + middle(leaf pair, choice 0) + down[ib], so its latencies are the
        concatenation of three segments' sequences, and there are few distinct segments (on the fat-tree: one
        up and one down per GPU kind, one middle per tier: same leaf, same pod, across cores). Targets are
        grouped by (middle, down) segment, and each group's sum is taken once over the very sequence the
        per-pair sum adds, in its order, so it is the same float. Same-domain targets take the per-pair path.
        A 1024-GPU row costs ~0.1 ms instead of ~1024 path walks."""
        targets = np.asarray(targets, dtype=np.int64)
        if not len(targets):
            return []
        row = np.zeros(len(targets))
        domains, leaves = self._place_arrays()
        near = domains[targets] == domains[ia]
        far = np.flatnonzero(~near)
        if len(far):
            segments = self._segments()
            far_leaves = leaves[targets[far]]
            src_leaf = self._leaf[ia]
            middle = np.array([segments.middle_id(self, src_leaf, leaf) for leaf in range(self.n_leaves)])
            down = segments.down_of[targets[far]]
            _groups, first, inverse = np.unique(middle[far_leaves] * segments.n_down + down, return_index=True,
                                               return_inverse=True)
            up = segments.up[segments.up_of[ia]]
            sums = [sum(up + segments.middle[middle[far_leaves[at]]] + segments.down[down[at]]) for at in first]
            row[far] = np.asarray(sums)[inverse.reshape(-1)]
        for at in np.flatnonzero(near).tolist():
            row[at] = self.path_latency_s(ia, int(targets[at]))
        return row.tolist()

    def _place_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Each GPU's domain and leaf as arrays (built once, for `latency_row`)."""
        arrays = getattr(self, "_place_array_cache", None)
        if arrays is None:
            arrays = self._place_array_cache = (np.array(self._domain, dtype=np.int64),
                                                np.array(self._leaf, dtype=np.int64))
        return arrays

    def _segments(self) -> "_LatencySegments":
        segments = getattr(self, "_latency_segments", None)
        if segments is None:
            segments = self._latency_segments = _LatencySegments(self)
        return segments

    def path_choices(self, ia: int, ib: int) -> list[tuple[tuple[int, ...], str | None]]:
        """All equal-cost paths between GPU indices as (link ids, spine)."""
        return [self.path_ids(ia, ib, i) for i in range(self.n_choices(ia, ib))]

    def path(self, a: str, b: str, choice: int = 0) -> list[Link]:
        path, _spine = self.path_ids(self.index(a), self.index(b), choice)
        return [self.links[link] for link in path]

    def paths(self, a: str, b: str) -> list[list[Link]]:
        """Every equal-cost path between two GPUs."""
        return [[self.links[link] for link in path] for path, _spine in self.path_choices(self.index(a), self.index(b))]

    def ecmp_choice(self, ia: int, ib: int, flow_key: int, seed: int) -> int:
        """Hop-by-hop ECMP: each upward switch hashes the flow key with its own seed mod its next hops."""
        src_leaf, dst_leaf = self._leaf[ia], self._leaf[ib]
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
            "oversubscription": self.oversubscription,
            **self.kind.summary(),
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
