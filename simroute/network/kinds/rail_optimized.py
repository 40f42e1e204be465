"""The rail-optimised kind: NIC r of every host of a rail group joins that group's rail-r leaf, so GPUs of the
same rank in different hosts are one switch hop apart; a leaf-spine joins the rail leaves."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from simroute.errors import ConfigurationError
from simroute.network.kinds.base import KINDS, LazyModel, TopologyKind
from simroute.network.schema import TopologySpec


@KINDS.register("rail-optimized")
class RailOptimized(TopologyKind):
    """Rail-optimised: NIC r of each host of a group (hosts_per_leaf hosts) on the group's rail-r leaf; leaf-spine."""

    Network = LazyModel("simroute.network.schema_models:RailNetwork")
    single_host_network: ClassVar[dict[str, Any]] = {"hosts_per_leaf": 1, "spines": 1}

    @classmethod
    def check(cls, spec: TopologySpec, *, file: str | Path) -> None:
        if spec.nic_per != "gpu":
            raise ConfigurationError(f"a {cls.name} fabric has one rail per GPU: nic.per must be gpu", file=file,
                                     field="nic.per")

    @property
    def rails(self) -> int:
        """Rails: one per GPU of a host (its NIC number)."""
        return self.spec.gpus_per_host

    @property
    def rail_groups(self) -> int:
        return -(-self.spec.hosts // self.spec.hosts_per_leaf)

    def leaf_of(self, gpu: int) -> int:
        """Leaf `group * rails + rail`: the rail leaf of the GPU's NIC in its host's rail group."""
        return self.host_of(gpu) // self.spec.hosts_per_leaf * self.rails + self.rail_of(gpu)

    @property
    def n_leaves(self) -> int:
        return self.rail_groups * self.rails

    def leaf_down_Bps(self) -> float:
        """A rail leaf takes one NIC of each host of its group."""
        return self.spec.hosts_per_leaf * self.spec.nic_Bps

    def across_planes(self, tp: int) -> tuple[bool, str]:
        """Rank r of an instance whose first GPU is GPU o of its host sends on rail o + r; instances start at
        multiples of tp, so the ranks' rails (and every link of a rail leaf: NICs, uplinks, spine downlinks)
        never meet, and each plane of rails mirrors rank 0's."""
        return True, "each rank on its own rails (NIC links, rail leaves and their spine links)"

    def summary(self) -> dict[str, object]:
        return {"kind": self.name, "rails": self.rails, "rail_groups": self.rail_groups}
