"""An example topology kind in one module (docs/NETWORK.md, "Adding a topology kind"): a star, every NIC on one
switch, as SimGrid's Star zone. tests/network/test_kinds.py drops it into simroute/network/kinds/ and loads a
file that says `kind: star`; nothing else is edited."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from simroute.errors import ConfigurationError
from simroute.network.kinds.base import KINDS, TopologyKind
from simroute.network.schema import SwitchNetwork, TopologySpec


class StarNetwork(SwitchNetwork):
    """The file's `network:` section: the kind's own fields beside the shared ones."""

    hosts_per_leaf: int = Field(default=1, ge=1)              # not used: the one switch takes every NIC
    switch_latency_us: float = Field(default=0.5, ge=0)       # a NIC's one hop to the switch


@KINDS.register("star")
class Star(TopologyKind):
    """Every GPU's NIC on one switch (SimGrid's Star zone): any two hosts are one switch hop apart."""

    Network = StarNetwork
    single_host_network: ClassVar[dict[str, Any]] = {}

    @classmethod
    def check(cls, spec: TopologySpec, *, file: str | Path) -> None:
        if spec.nic_per != "gpu":
            raise ConfigurationError("a star joins GPUs' own NICs: nic.per must be gpu", file=file, field="nic.per")

    def leaf_of(self, gpu: int) -> int:
        return 0                                                # the one switch is every GPU's leaf

    @property
    def n_leaves(self) -> int:
        return 1

    def build_nics(self, host: int) -> None:
        topo, spec = self.topology, self.spec
        latency_s = spec.network.switch_latency_us * 1e-6
        paths = []
        for gpu in range(host * spec.gpus_per_host, (host + 1) * spec.gpus_per_host):
            name = topo.gpus[gpu]
            topo.add_link(name, "star", spec.nic_Bps, latency_s, "nic-leaf", spec.nic_fabric)
            paths.append((gpu, name, (topo.link_ids[(name, "star")],), (topo.link_ids[("star", name)],)))
        topo.set_nic_paths(paths)

    def build_switches(self) -> None:
        self.topology.uplink_Bps = 0.0                          # nothing above the one switch

    def summary(self) -> dict[str, object]:
        return {"kind": self.name}
