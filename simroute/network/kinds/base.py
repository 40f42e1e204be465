"""The topology kind contract: one interface for every kind of cluster fabric (as SimGrid's zones put FatTree,
Dragonfly, Torus and Star behind one), and the host-attached defaults the shipped kinds share.

A kind answers, in one place, where each GPU sits (`host_of`, `domain_of`: its NVLink domain, `rail_of`,
`leaf_of`, by GPU index), builds the links (the scale-up links of each host or NVLink domain, each NIC to its
leaf, the switch layers above the leaves) and says which scale-up path joins two GPUs of one domain and what
calibrated fabric that is. `Topology` (simroute/network/topology.py) asks these once per GPU at construction
and assembles every path from them: within a domain `intra_path`, across domains up to the source's leaf, a
middle path of the switch layer between the two leaves, and down from the destination's leaf.

Adding a kind is one module in this package: a `TopologyKind` subclass decorated `@KINDS.register("name")`
with its `Network` model (the fields of the file's `network:` section); docs/NETWORK.md walks through one.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from simroute.network.schema import TopologySpec
from simroute.network.switches import Fabric, LeafSpineFabric, SwitchHost
from simroute.registry import registry

KINDS = registry("topology")


class LazyModel:
    """A kind's `Network` model named by "module:name" and imported on first use: the shipped kinds' models live
    in simroute.network.schema_models, so discovering the kinds imports no pydantic (a shipped topology file is
    read by the field table, simroute/records.py). A kind of one's own may set `Network` to its model itself."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __get__(self, instance: object, owner: type) -> Any:
        import importlib
        module, _, name = self.key.partition(":")
        return getattr(importlib.import_module(module), name)


class KindHost(SwitchHost, Protocol):
    """What a kind reads and writes of the topology it builds (`Topology` implements it): the GPUs and links
    so far, where each GPU sits (the kind's own answers, cached per GPU), and where to record each GPU's NIC
    paths."""

    gpus: list[str]
    oversubscription: float

    def leaf_of(self, gpu: str | int) -> int: ...

    def domain_index(self, gpu: int) -> int: ...

    def set_nic_paths(self, paths: Sequence[tuple[int, str, tuple[int, ...], tuple[int, ...]]]) -> None: ...


@dataclass(frozen=True)
class RankPlanes:
    """Whether one rank pair's flow stands for every rank's on a topology (the simulator's tensor-parallel
    shortcut: a transfer between two instances of `tp` GPUs goes on the fabric as one flow of 1/tp of its
    bytes between the instances' first GPUs, and the other tp - 1 rank pairs are taken to ride parallel links).

    It holds for a class of transfers (`within_domain`: between instances of one NVLink domain or host;
    `across_domains`: through the NICs) when the links each rank's flow can cross form tp disjoint planes that
    mirror each other: rank r of every transfer (GPU r of each instance: instances are `tp` consecutive GPUs of a
    host, starting at a multiple of tp) can cross only links no other rank's flow can cross, and plane r's links
    map one to one onto plane 0's with the same capacities, in the same places on every path. Then every rank's
    flows load plane r as the rank-0 flows load plane 0, and the one-pair flow's rate and link loads are every
    rank's (flow for flow where each pair has one path or the path index is pinned for all ranks; in
    distribution under ECMP, which hashes each rank's 5-tuple on its own). Where it does not hold (a host's
    GPUs share a leaf's uplinks, a host NIC, a cross-socket link), the shortcut understates the shared links'
    load by up to tp-fold. `why` says which links decide it."""

    tp: int
    within_domain: bool
    across_domains: bool
    why: str


class TopologyKind(ABC):
    """A kind of cluster fabric: where each GPU sits, the links, and the switch layers above the leaves.

    Defaults (the fat-tree's): a host is `gpus_per_host` consecutive GPUs and is its own NVLink domain, its
    NICs (one per GPU, or one per host) join leaf `host // hosts_per_leaf`, and a leaf-spine (`spines`) or a
    k-ary fat-tree (`k`) joins the leaves. A kind overrides what differs; every method takes GPU indices."""

    name: ClassVar[str]
    Network: ClassVar[Any] = LazyModel("simroute.network.schema_models:SwitchNetwork")   # the `network:` model
    single_host_network: ClassVar[dict[str, Any]] = {"hosts_per_leaf": 1}   # a one-host file may omit `network`

    @classmethod
    def network_key(cls) -> str:
        """The key of the kind's `Network` model (simroute/records.py), without importing it where it is lazy."""
        for klass in cls.__mro__:
            if "Network" in vars(klass):
                attr = vars(klass)["Network"]
                return attr.key if isinstance(attr, LazyModel) else f"{attr.__module__}:{attr.__qualname__}"
        raise AttributeError(f"{cls.__name__} has no Network model")

    @classmethod
    def network_input(cls, data: Any) -> Any:
        """The `network:` section as the model reads it: a kind whose fields default from others fills them here
        (both readers apply it: the validating one through the model, the plain one directly)."""
        return data

    def __init__(self, topology: KindHost) -> None:
        self.topology = topology
        self.spec: TopologySpec = topology.spec
        self.switches: Fabric = self.make_switches()

    # ---- the file: what the schema cannot check alone -----------------------------------------------------
    @classmethod
    def switch_tiers(cls, network: Any) -> int:
        """Switch tiers above the NICs (`TopologySpec.tiers`, the summary's `tiers`)."""
        return 2

    @classmethod
    def check(cls, spec: TopologySpec, *, file: str | Path) -> None:
        """Refuse what joins sections (NICs against switch ports, ...): ConfigurationError naming the field."""

    def make_switches(self) -> Fabric:
        """The switch layer above the leaves (built by `build`, after the hosts)."""
        return LeafSpineFabric(self.topology)

    # ---- where a GPU sits: the one place every lookup reads (Topology caches the answers per GPU) ---------
    def host_of(self, gpu: int) -> int:
        """The host (a server, a compute tray) of a GPU index."""
        return gpu // self.spec.gpus_per_host

    def domain_of(self, gpu: int) -> int:
        """The GPU's scale-up domain: the GPUs it reaches without a NIC (NVLink, or its host's PCIe). A host
        here; a kind whose NVLink spans hosts says otherwise."""
        return self.host_of(gpu)

    def rail_of(self, gpu: int) -> int:
        """Which of its host's NICs the GPU sends through (its rail number): its own with a NIC per GPU, the
        host's one NIC (0) otherwise."""
        return gpu % self.spec.gpus_per_host if self.spec.nic_per == "gpu" else 0

    def leaf_of(self, gpu: int) -> int:
        """The leaf switch the GPU's NIC joins."""
        return self.host_of(gpu) // self.spec.hosts_per_leaf

    @property
    def n_leaves(self) -> int:
        return -(-self.spec.hosts // self.spec.hosts_per_leaf)

    def leaf_down_Bps(self) -> float:
        """NIC bandwidth into one full leaf (the default uplink rate divides it by uplinks x oversubscription)."""
        spec = self.spec
        return spec.hosts_per_leaf * spec.nics_per_host * spec.nic_Bps

    # ---- building -------------------------------------------------------------------------------------------
    def build(self) -> None:
        """Every link, in id order: per host its scale-up links then its NIC links, then the switch layer."""
        for host in range(self.spec.hosts):
            self.build_scale_up(host)
            self.build_nics(host)
        self.build_switches()

    def build_scale_up(self, host: int) -> None:
        """A host's own GPU links: an NVLink mesh, an NVSwitch, or PCIe through its sockets."""
        topo, intra, per_host = self.topology, self.spec.intra, self.spec.gpus_per_host
        gpus = [f"h{host}.g{gpu}" for gpu in range(per_host)]
        if intra.kind == "nvlink-mesh":
            for a in range(per_host):
                for b in range(a + 1, per_host):
                    topo.add_link(gpus[a], gpus[b], intra.link_Bps, intra.latency_s, "nvlink", intra.fabric)
        elif intra.kind == "nvswitch":
            for gpu in gpus:
                topo.add_link(gpu, f"h{host}.nvs", intra.link_Bps, intra.latency_s / 2, "nvlink", intra.fabric)
        else:
            per_socket = per_host // intra.sockets
            for gpu in range(per_host):
                topo.add_link(gpus[gpu], f"h{host}.s{gpu // per_socket}", intra.link_Bps, intra.latency_s / 2,
                              "pcie", intra.fabric)
            for a in range(intra.sockets):
                for b in range(a + 1, intra.sockets):
                    topo.add_link(f"h{host}.s{a}", f"h{host}.s{b}", intra.xsocket_Bps or 0.0,
                                  intra.xsocket_latency_s, "xsocket", intra.xsocket_fabric)

    def build_nics(self, host: int) -> None:
        """A host's NIC links to their leaves, and each GPU's way up to its leaf and down from it."""
        topo, spec = self.topology, self.spec
        first = host * spec.gpus_per_host
        if spec.hosts == 1:
            topo.set_nic_paths([(first + gpu, "", (), ()) for gpu in range(spec.gpus_per_host)])
        elif spec.nic_per == "gpu":
            self._build_gpu_nics(host, first)
        else:
            self._build_host_nic(host, first)

    def _build_gpu_nics(self, host: int, first: int) -> None:
        """One NIC per GPU, folded into the GPU node (GPUDirect; its PCIe hop is never the bottleneck)."""
        topo, spec, ids = self.topology, self.spec, self.topology.link_ids
        paths = []
        for gpu in range(spec.gpus_per_host):
            name, leaf = f"h{host}.g{gpu}", f"leaf{topo.leaf_of(first + gpu)}"
            topo.add_link(name, leaf, spec.nic_Bps, spec.nic_latency_s, "nic-leaf", spec.nic_fabric)
            paths.append((first + gpu, name, (ids[(name, leaf)],), (ids[(leaf, name)],)))
        topo.set_nic_paths(paths)

    def _build_host_nic(self, host: int, first: int) -> None:
        """One NIC per host: each GPU reaches it over PCIe (through socket 0 on a multi-socket PCIe host)."""
        topo, spec, intra, ids = self.topology, self.spec, self.spec.intra, self.topology.link_ids
        nic, leaf = f"h{host}.nic", f"leaf{topo.leaf_of(first)}"
        topo.add_link(nic, leaf, spec.nic_Bps, spec.nic_latency_s, "nic-leaf", spec.nic_fabric)
        attach = None if intra.kind != "pcie" else f"h{host}.s0"
        if attach:
            topo.add_link(attach, nic, spec.nic_pcie_Bps, intra.latency_s / 2, "pcie", intra.fabric)
        paths = []
        for index in range(spec.gpus_per_host):
            gpu = f"h{host}.g{index}"
            if attach:
                up = self._host_path(host, index, None) + (ids[(attach, nic)],)
                down = (ids[(nic, attach)],) + self._host_path(host, None, index)
            else:
                topo.add_link(gpu, nic, spec.nic_pcie_Bps, intra.latency_s / 2, "pcie", intra.fabric)
                up, down = (ids[(gpu, nic)],), (ids[(nic, gpu)],)
            paths.append((first + index, nic, up + (ids[(nic, leaf)],), (ids[(leaf, nic)],) + down))
        topo.set_nic_paths(paths)

    def build_switches(self) -> None:
        """The switch layer above the leaves, its uplink rate given or derived from the oversubscription."""
        topo, spec = self.topology, self.spec
        if spec.hosts == 1:
            topo.uplink_Bps = 0.0
            return
        down = self.leaf_down_Bps()
        n_up = self.switches.uplinks_per_leaf
        over = spec.oversubscription or 1.0
        topo.uplink_Bps = spec.uplink_Bps if spec.uplink_Bps is not None else down / (n_up * over)
        topo.oversubscription = down / (n_up * topo.uplink_Bps)
        self.switches.build(topo.uplink_Bps, spec.switch_latency_s, spec.nic_fabric)

    # ---- within a domain ------------------------------------------------------------------------------------
    def intra_path(self, src: int, dst: int) -> tuple[int, ...]:
        """Link ids from one GPU to another of its domain (a host here)."""
        per_host = self.spec.gpus_per_host
        host, src_gpu, dst_gpu = src // per_host, src % per_host, dst % per_host
        kind, ids = self.spec.intra.kind, self.topology.link_ids
        src_name, dst_name = f"h{host}.g{src_gpu}", f"h{host}.g{dst_gpu}"
        if kind == "nvlink-mesh":
            return (ids[(src_name, dst_name)],)
        if kind == "nvswitch":
            return (ids[(src_name, f"h{host}.nvs")], ids[(f"h{host}.nvs", dst_name)])
        return self._host_path(host, src_gpu, dst_gpu)

    def _host_path(self, host: int, src_gpu: int | None, dst_gpu: int | None) -> tuple[int, ...]:
        """PCIe path inside a host between two GPUs (local numbers); None stands for socket 0 (the host NIC)."""
        per_socket = self.spec.gpus_per_host // self.spec.intra.sockets
        src_socket = 0 if src_gpu is None else src_gpu // per_socket
        dst_socket = 0 if dst_gpu is None else dst_gpu // per_socket
        ids = self.topology.link_ids
        path: list[int] = []
        if src_gpu is not None:
            path.append(ids[(f"h{host}.g{src_gpu}", f"h{host}.s{src_socket}")])
        if src_socket != dst_socket:
            path.append(ids[(f"h{host}.s{src_socket}", f"h{host}.s{dst_socket}")])
        if dst_gpu is not None:
            path.append(ids[(f"h{host}.s{dst_socket}", f"h{host}.g{dst_gpu}")])
        return tuple(path)

    def fabric_between(self, src: int, dst: int) -> str:
        """The calibration fabric of the path class between two GPUs: the NIC's across domains; within a host
        its intra fabric, or the cross-socket one between sockets."""
        if self.topology.domain_index(src) != self.topology.domain_index(dst):
            return self.spec.nic_fabric
        per_host, intra = self.spec.gpus_per_host, self.spec.intra
        per_socket = per_host // intra.sockets
        same_socket = (src % per_host) // per_socket == (dst % per_host) // per_socket
        return intra.fabric if same_socket else intra.xsocket_fabric

    # ---- the tensor-parallel shortcut (RankPlanes) -----------------------------------------------------------
    def rank_planes(self, tp: int) -> RankPlanes:
        """Whether one rank pair's flow stands for all `tp` (see `RankPlanes`), from this kind's links."""
        within, within_why = self.within_planes(tp)
        across, across_why = self.across_planes(tp)
        return RankPlanes(tp, within, across, f"within a domain: {within_why}; across: {across_why}")

    def within_planes(self, tp: int) -> tuple[bool, str]:
        """`RankPlanes.within_domain` and why: a host's NVSwitch ports, NVLink pairs and single-socket PCIe
        links are each one GPU's; two sockets share one cross-socket link."""
        intra = self.spec.intra
        if tp == 1:
            return True, "one rank per instance"
        if intra.kind in ("nvswitch", "nvlink-mesh") or intra.sockets == 1:
            return True, f"each rank's own {intra.kind} links"
        return False, "ranks on different sockets share the cross-socket link"

    def across_planes(self, tp: int) -> tuple[bool, str]:
        """`RankPlanes.across_domains` and why: hosts on leaves hold it only where no flow leaves its leaf."""
        if tp == 1:
            return True, "one rank per instance"
        if self.spec.nic_per != "gpu":
            return False, "a host's GPUs share its one NIC"
        if self.n_leaves == 1:
            return True, "every host on one leaf: each rank's flow crosses only its own GPUs' NIC links"
        return False, "a host's GPUs share their leaf's uplinks to the switches above"

    # ---- summary ---------------------------------------------------------------------------------------------
    def summary(self) -> dict[str, object]:
        """What this kind adds to `Topology.summary` (the fat-tree adds nothing: its runs' summaries stay)."""
        return {}
