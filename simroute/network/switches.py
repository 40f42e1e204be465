"""The switch layers above the leaves: a 2-tier leaf-spine and a 3-tier k-ary fat-tree.

A `Fabric` builds the switch links above a topology's leaves, enumerates the equal-cost middle paths between
two leaves and hashes a flow onto one (hop-by-hop ECMP). It sees the leaves as numbers (`topology.n_leaves`)
and never asks which GPUs sit below them: a topology kind (simroute/network/kinds/) decides that, and picks
the switch layer it stands on (the fat-tree kind by its tiers, the rail-optimised and NVLink-domain kinds a
leaf-spine over their rail leaves).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Protocol

from simroute.network.hashing import mix64
from simroute.network.schema import TopologySpec


class SwitchHost(Protocol):
    """What a switch layer reads and writes of the topology it stands in (`Topology` implements it)."""

    spec: TopologySpec
    n_leaves: int
    n_spines: int
    n_pods: int
    uplink_Bps: float
    link_ids: dict[tuple[str, str], int]

    def add_link(self, a: str, b: str, cap: float, lat: float, tier: str, fabric: str, *,
                 both: bool = True) -> None: ...

    def switch_id(self, name: str) -> int: ...


class Fabric(ABC):
    """The switch layers above the leaves: builds their links, enumerates the equal-cost middle paths between
    two leaves and hashes a flow onto one (hop-by-hop ECMP)."""

    tiers: ClassVar[int]

    def __init__(self, topology: SwitchHost) -> None:
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
