"""The fat-tree kind: hosts on leaves, a 2-tier leaf-spine or a 3-tier k-ary fat-tree above them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from simroute.errors import ConfigurationError
from simroute.network.kinds.base import KINDS, LazyModel, TopologyKind
from simroute.network.schema import TopologySpec
from simroute.network.switches import Fabric, FatTreeFabric, LeafSpineFabric


@KINDS.register("fattree")
class FatTree(TopologyKind):
    """Hosts on leaves (hosts_per_leaf each), a 2-tier leaf-spine (spines) or a 3-tier k-ary fat-tree (k)."""

    Network = LazyModel("simroute.network.schema_models:FatTreeNetwork")
    single_host_network: ClassVar[dict[str, Any]] = {"tiers": 2, "hosts_per_leaf": 1, "spines": 1}

    @classmethod
    def switch_tiers(cls, network: Any) -> int:
        return network.tiers

    @classmethod
    def check(cls, spec: TopologySpec, *, file: str | Path) -> None:
        if spec.tiers != 3:
            return
        half = spec.k // 2
        if spec.hosts_per_leaf * spec.nics_per_host > half:
            raise ConfigurationError(
                f"hosts_per_leaf x NICs per host = {spec.hosts_per_leaf * spec.nics_per_host} exceeds the k/2 = "
                f"{half} down ports of an edge switch", file=file, field="network.hosts_per_leaf")
        leaves = -(-spec.hosts // spec.hosts_per_leaf)
        if leaves > spec.k * half:
            raise ConfigurationError(f"{leaves} edge switches exceed the k*k/2 = {spec.k * half} of a k={spec.k} "
                                     "fat-tree", file=file, field="network.k")

    def make_switches(self) -> Fabric:
        return FatTreeFabric(self.topology) if self.spec.tiers == 3 else LeafSpineFabric(self.topology)
