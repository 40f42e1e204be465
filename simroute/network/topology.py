"""Topologies built from a TopologySpec: directed links, a networkx graph and cheap equal-cost paths.

A path between GPUs on different hosts is `up[src] + middle[src_leaf, dst_leaf][choice] + down[dst]`;
the middle (spine) choices are computed once per leaf pair, so no flow ever runs a graph search.
Node names: GPUs `h{i}.g{j}`, `h{i}.nvs` (NVSwitch), `h{i}.s{k}` (PCIe socket), `h{i}.nic` (a host
NIC), `leaf{l}` (leaf / edge switch), `spine{s}` (2-tier), `agg{p}.{a}` and `core{c}` (3-tier).
With one NIC per GPU the NIC is folded into the GPU node (GPUDirect; its PCIe hop is never the bottleneck).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


class Topology:
    """Hosts, GPUs, directed links and path enumeration (see module docstring)."""

    def __init__(self, spec: TopologySpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.links: list[Link] = []
        self._lid: dict[tuple[str, str], int] = {}
        G, H = spec.gpus_per_host, spec.hosts
        self.gpus: list[str] = [f"h{h}.g{g}" for h in range(H) for g in range(G)]
        self.gpu_index: dict[str, int] = {name: i for i, name in enumerate(self.gpus)}
        self.n_leaves = -(-H // spec.hosts_per_leaf)
        self._build_hosts()
        self._build_fabric()
        self._middle: dict[tuple[int, int], list[tuple[tuple[int, ...], str | None]]] = {}
        self._switch_ids = {n: i for i, n in enumerate(sorted({l.src for l in self.links} | {l.dst for l in self.links}))}
        self.graph = nx.DiGraph()
        for l in self.links:
            self.graph.add_edge(l.src, l.dst, id=l.id, capacity_Bps=l.capacity_Bps, latency_s=l.latency_s,
                                tier=l.tier, fabric=l.fabric)

    # ---- construction -------------------------------------------------------------------------
    def _add(self, a: str, b: str, cap: float, lat: float, tier: str, fabric: str, *, both: bool = True) -> None:
        for s, d in ((a, b), (b, a)) if both else ((a, b),):
            lid = len(self.links)
            self.links.append(Link(lid, s, d, cap, lat, tier, fabric))
            self._lid[(s, d)] = lid

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
                        self._add(gpus[a], gpus[b], it.link_Bps, it.latency_s, "nvlink", it.fabric)
            elif it.kind == "nvswitch":
                for g in gpus:
                    self._add(g, f"h{h}.nvs", it.link_Bps, it.latency_s / 2, "nvlink", it.fabric)
            else:
                for g in range(G):
                    self._add(gpus[g], f"h{h}.s{g // per_socket}", it.link_Bps, it.latency_s / 2, "pcie", it.fabric)
                for a in range(it.sockets):
                    for b in range(a + 1, it.sockets):
                        self._add(f"h{h}.s{a}", f"h{h}.s{b}", it.xsocket_Bps or 0.0, it.xsocket_latency_s,
                                  "xsocket", it.xsocket_fabric)
            leaf = f"leaf{h // sp.hosts_per_leaf}"
            if sp.hosts == 1:
                self._nic_of.extend([""] * G)
                self._up.extend([()] * G)
                self._down.extend([()] * G)
                continue
            if sp.nic_per == "gpu":
                for g in gpus:
                    self._add(g, leaf, sp.nic_Bps, sp.nic_latency_s, "nic-leaf", sp.nic_fabric)
                    self._nic_of.append(g)
                    self._up.append((self._lid[(g, leaf)],))
                    self._down.append((self._lid[(leaf, g)],))
            else:
                nic = f"h{h}.nic"
                self._add(nic, leaf, sp.nic_Bps, sp.nic_latency_s, "nic-leaf", sp.nic_fabric)
                attach = None if it.kind != "pcie" else f"h{h}.s0"
                if attach:
                    self._add(attach, nic, sp.nic_pcie_Bps, it.latency_s / 2, "pcie", it.fabric)
                for g in range(G):
                    gname = gpus[g]
                    if attach:
                        up = self._host_path(h, g, None) + (self._lid[(attach, nic)],)
                        down = (self._lid[(nic, attach)],) + self._host_path(h, None, g)
                    else:
                        self._add(gname, nic, sp.nic_pcie_Bps, it.latency_s / 2, "pcie", it.fabric)
                        up, down = (self._lid[(gname, nic)],), (self._lid[(nic, gname)],)
                    self._nic_of.append(nic)
                    self._up.append(up + (self._lid[(nic, leaf)],))
                    self._down.append((self._lid[(leaf, nic)],) + down)

    def _host_path(self, h: int, a: int | None, b: int | None) -> tuple[int, ...]:
        """PCIe path inside host h between GPU a and GPU b; None stands for socket 0 (the host NIC)."""
        per_socket = self.spec.gpus_per_host // self.spec.intra.sockets
        sa = 0 if a is None else a // per_socket
        sb = 0 if b is None else b // per_socket
        ids: list[int] = []
        if a is not None:
            ids.append(self._lid[(f"h{h}.g{a}", f"h{h}.s{sa}")])
        if sa != sb:
            ids.append(self._lid[(f"h{h}.s{sa}", f"h{h}.s{sb}")])
        if b is not None:
            ids.append(self._lid[(f"h{h}.s{sb}", f"h{h}.g{b}")])
        return tuple(ids)

    def _build_fabric(self) -> None:
        sp = self.spec
        if sp.hosts == 1:
            self.uplink_Bps, self.n_spines = 0.0, 0
            return
        down = sp.hosts_per_leaf * sp.nics_per_host * sp.nic_Bps
        n_up = sp.spines if sp.tiers == 2 else sp.k // 2
        over = sp.oversubscription or 1.0
        self.uplink_Bps = sp.uplink_Bps if sp.uplink_Bps is not None else down / (n_up * over)
        self.oversubscription = down / (n_up * self.uplink_Bps)
        lat, fab = sp.switch_latency_s, sp.nic_fabric
        if sp.tiers == 2:
            self.n_spines = sp.spines
            for l in range(self.n_leaves):
                for s in range(sp.spines):
                    self._add(f"leaf{l}", f"spine{s}", self.uplink_Bps, lat, "leaf-spine", fab)
        else:
            half = sp.k // 2
            self.n_pods = -(-self.n_leaves // half)
            self.n_spines = half * half
            for l in range(self.n_leaves):
                for a in range(half):
                    self._add(f"leaf{l}", f"agg{l // half}.{a}", self.uplink_Bps, lat, "leaf-spine", fab)
            for p in range(self.n_pods):
                for a in range(half):
                    for c in range(half):
                        self._add(f"agg{p}.{a}", f"core{a * half + c}", self.uplink_Bps, lat, "spine-core", fab)

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
        return self.links[self._lid[(src, dst)]]

    def fabric_between(self, a: str, b: str) -> str:
        """The calibration fabric of the path class between two GPUs."""
        ia, ib = self.index(a), self.index(b)
        G, it = self.spec.gpus_per_host, self.spec.intra
        if ia // G != ib // G:
            return self.spec.nic_fabric
        per_socket = G // it.sockets
        return it.xsocket_fabric if (ia % G) // per_socket != (ib % G) // per_socket else it.fabric

    # ---- paths --------------------------------------------------------------------------------
    def _tables(self) -> None:
        """Integer link tables so a middle path is a few list lookups (no strings, no graph search)."""
        L, sp = self._lid, self.spec
        if sp.tiers == 2:
            self._lsp = [[L[(f"leaf{l}", f"spine{s}")] for s in range(sp.spines)] for l in range(self.n_leaves)]
            self._spl = [[L[(f"spine{s}", f"leaf{l}")] for s in range(sp.spines)] for l in range(self.n_leaves)]
        else:
            half = sp.k // 2
            self._lsp = [[L[(f"leaf{l}", f"agg{l // half}.{x}")] for x in range(half)] for l in range(self.n_leaves)]
            self._spl = [[L[(f"agg{l // half}.{x}", f"leaf{l}")] for x in range(half)] for l in range(self.n_leaves)]
            self._ac = [[[L[(f"agg{p}.{x}", f"core{x * half + c}")] for c in range(half)] for x in range(half)]
                        for p in range(self.n_pods)]
            self._ca = [[[L[(f"core{x * half + c}", f"agg{p}.{x}")] for c in range(half)] for x in range(half)]
                        for p in range(self.n_pods)]

    def n_middle(self, src_leaf: int, dst_leaf: int) -> int:
        """How many equal-cost switch paths join two leaves."""
        if src_leaf == dst_leaf:
            return 1
        if self.spec.tiers == 2:
            return self.spec.spines
        half = self.spec.k // 2
        return half if src_leaf // half == dst_leaf // half else half * half

    def middle_at(self, la: int, lb: int, i: int) -> tuple[tuple[int, ...], str | None]:
        """The i-th equal-cost switch path between leaves la and lb: (link ids, spine node)."""
        if la == lb:
            return (), None
        if not hasattr(self, "_lsp"):
            self._tables()
        if self.spec.tiers == 2:
            return (self._lsp[la][i], self._spl[lb][i]), f"spine{i}"
        half = self.spec.k // 2
        pa, pb = la // half, lb // half
        if pa == pb:
            return (self._lsp[la][i], self._spl[lb][i]), f"agg{pa}.{i}"
        x, c = divmod(i, half)
        return (self._lsp[la][x], self._ac[pa][x][c], self._ca[pb][x][c], self._spl[lb][x]), f"core{i}"

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
        kind, L = self.spec.intra.kind, self._lid
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
        if la == lb:
            return 0
        sw = self._switch_ids
        if self.spec.tiers == 2:
            return mix64(flow_key ^ mix64(seed ^ sw[f"leaf{la}"])) % self.spec.spines
        half = self.spec.k // 2
        x = mix64(flow_key ^ mix64(seed ^ sw[f"leaf{la}"])) % half
        if la // half == lb // half:
            return x
        c = mix64(flow_key ^ mix64(seed ^ sw[f"agg{la // half}.{x}"])) % half
        return x * half + c

    # ---- summary ------------------------------------------------------------------------------
    def bisection_Bps(self) -> float:
        """Per-direction bisection bandwidth of the inter-host network (min over the tier cuts)."""
        sp = self.spec
        if sp.hosts == 1:
            return 0.0
        cuts = [sp.hosts * sp.nics_per_host * sp.nic_Bps / 2]
        if self.n_leaves > 1:
            n_up = sp.spines if sp.tiers == 2 else sp.k // 2
            cuts.append(self.n_leaves / 2 * n_up * self.uplink_Bps)
            if sp.tiers == 3 and self.n_pods > 1:
                half = sp.k // 2
                cuts.append(self.n_pods / 2 * half * half * self.uplink_Bps)
        return min(cuts)

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
