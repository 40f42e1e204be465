"""The NVLink-domain kind: NVLink spans several hosts (a GB200 / GB300 NVL72 rack: 18 compute trays of 4 GPUs on
one NVLink switch fabric), and a rail-optimised RDMA fabric joins the domains."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from simroute.errors import ConfigurationError
from simroute.network.kinds.base import KINDS, LazyModel
from simroute.network.kinds.rail_optimized import RailOptimized
from simroute.network.file_limits import rail_group_is_the_domain
from simroute.network.schema import TopologySpec


@KINDS.register("nvlink-domain")
class NvlinkDomain(RailOptimized):
    """NVLink domains of hosts_per_domain hosts (GB200 NVL72: 18 trays of 4 GPUs); rail-optimised RDMA across."""

    Network = LazyModel("simroute.network.schema_models:DomainNetwork")
    single_host_network: ClassVar[dict[str, Any]] = {"hosts_per_domain": 1, "spines": 1}

    @classmethod
    def network_input(cls, data: Any) -> Any:
        return rail_group_is_the_domain(data)

    @classmethod
    def check(cls, spec: TopologySpec, *, file: str | Path) -> None:
        super().check(spec, file=file)
        if spec.intra.kind != "nvswitch":
            raise ConfigurationError(f"an NVLink domain joins its GPUs through NVLink switches: hosts.intra.kind "
                                     f"must be nvswitch, not {spec.intra.kind}", file=file, field="hosts.intra.kind")

    @property
    def hosts_per_domain(self) -> int:
        return self.spec.network.hosts_per_domain     # type: ignore[union-attr]

    @property
    def n_domains(self) -> int:
        return -(-self.spec.hosts // self.hosts_per_domain)

    def domain_of(self, gpu: int) -> int:
        return self.host_of(gpu) // self.hosts_per_domain

    def switch_of(self, gpu: int) -> str:
        """The domain's NVLink switch node (the NVLink switch trays taken as one switch, as a host's NVSwitch
        chips are): each GPU has one port of `intra.link_GBps` per direction to it."""
        return f"nvl{self.domain_of(gpu)}.nvs"

    def build_scale_up(self, host: int) -> None:
        topo, intra, per_host = self.topology, self.spec.intra, self.spec.gpus_per_host
        for gpu in range(host * per_host, (host + 1) * per_host):
            topo.add_link(topo.gpus[gpu], self.switch_of(gpu), intra.link_Bps, intra.latency_s / 2, "nvlink",
                          intra.fabric)

    def intra_path(self, src: int, dst: int) -> tuple[int, ...]:
        ids, gpus, switch = self.topology.link_ids, self.topology.gpus, self.switch_of(src)
        return (ids[(gpus[src], switch)], ids[(switch, gpus[dst])])

    def fabric_between(self, src: int, dst: int) -> str:
        """NVLink (the GPU's NVLink fabric) anywhere in one domain, across hosts too; the NIC's across domains."""
        same = self.topology.domain_index(src) == self.topology.domain_index(dst)
        return self.spec.intra.fabric if same else self.spec.nic_fabric

    def within_planes(self, tp: int) -> tuple[bool, str]:
        return True, "each rank's own port on the domain's NVLink switch"

    def summary(self) -> dict[str, object]:
        return {**super().summary(), "nvlink_domains": self.n_domains,
                "gpus_per_domain": self.hosts_per_domain * self.spec.gpus_per_host}
