"""The topology file's pydantic models (the schema): validated at the file boundary only, where a file is not a
shipped one that hashes as recorded (simroute/records.py); the shipped kinds' `network:` models live here too, so
that importing a kind (its registry's discovery) imports no pydantic. Kept apart from simroute.network.schema
(the frozen dataclasses a run holds, the loader) for start-up: importing pydantic and building these models is
part of the ~0.1 CPU s the default run no longer pays (docs/PERFORMANCE.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simroute.network.file_limits import (DEFAULT_KIND, MAX_GPUS, MAX_HOSTS, MAX_K, MAX_SWITCHES,
                                          rail_group_is_the_domain)


class _Strict(BaseModel):
    """No bool for a number, no numeric strings, no NaN or inf, no unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class IntraModel(_Strict):
    kind: Literal["nvlink-mesh", "nvswitch", "pcie"]
    link_GBps: float = Field(gt=0, description="per GPU pair (mesh) or per GPU port (nvswitch, pcie), per direction")
    latency_us: float = Field(default=0.5, ge=0)
    fabric: str = Field(min_length=1)
    sockets: int = Field(default=1, ge=1, le=8)
    xsocket_GBps: float | None = Field(default=None, gt=0)
    xsocket_latency_us: float = Field(default=1.0, ge=0)
    xsocket_fabric: str | None = None

    @model_validator(mode="after")
    def _sockets(self) -> "IntraModel":
        if self.sockets > 1:
            if self.kind != "pcie":
                raise ValueError("sockets > 1 needs kind: pcie")
            if self.xsocket_GBps is None:
                raise ValueError("xsocket_GBps is required when sockets > 1")
        return self


class HostsModel(_Strict):
    count: int = Field(ge=1, le=MAX_HOSTS)
    gpus_per_host: int = Field(ge=1, le=64)
    gpu: str = "h100"
    intra: IntraModel

    @model_validator(mode="after")
    def _even_sockets(self) -> "HostsModel":
        if self.count * self.gpus_per_host > MAX_GPUS:
            raise ValueError(f"{self.count} hosts x {self.gpus_per_host} GPUs is more than {MAX_GPUS:,} GPUs")
        if self.gpus_per_host % self.intra.sockets:
            raise ValueError(f"gpus_per_host ({self.gpus_per_host}) must divide evenly over "
                             f"{self.intra.sockets} sockets")
        return self


class NicModel(_Strict):
    per: Literal["gpu", "host"]
    rate_GBps: float = Field(gt=0)
    latency_us: float = Field(default=1.0, ge=0)
    fabric: str = Field(min_length=1)
    pcie_GBps: float = Field(default=64.0, gt=0, description="GPU<->host NIC PCIe link (per: host)")


class SwitchNetwork(_Strict):
    """What every topology kind's `network:` section holds: the leaves the NICs join and the switch links
    above them. A kind's own model (its class's `Network`, simroute/network/kinds/) adds its fields."""

    hosts_per_leaf: int = Field(ge=1, le=MAX_SWITCHES)
    uplink_GBps: float | None = Field(default=None, gt=0)
    oversubscription: float | None = Field(default=None, gt=0)
    latency_us: float = Field(default=0.6, ge=0)

    @model_validator(mode="after")
    def _uplink_or_ratio(self) -> "SwitchNetwork":
        if self.uplink_GBps is not None and self.oversubscription is not None:
            raise ValueError("give either uplink_GBps or oversubscription, not both")
        return self


class TopologyModel(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    kind: str = Field(default=DEFAULT_KIND, min_length=1,
                      description="the topology kind (simroute/network/kinds/): fattree, rail-optimized, nvlink-domain")
    hosts: HostsModel
    nic: NicModel
    network: dict[str, Any] | None = None     # validated by the kind's own `Network` model


# ---- the shipped kinds' `network:` sections (simroute/network/kinds/: each kind's `Network`) ----------------
class FatTreeNetwork(SwitchNetwork):
    tiers: Literal[2, 3] = 2
    spines: int | None = Field(default=None, ge=1, le=MAX_SWITCHES)
    k: int | None = Field(default=None, ge=2, le=MAX_K)

    @model_validator(mode="after")
    def _shape(self) -> "FatTreeNetwork":
        if self.tiers == 2 and self.spines is None:
            raise ValueError("a 2-tier leaf-spine needs 'spines'")
        if self.tiers == 3:
            if self.k is None or self.k % 2:
                raise ValueError("a 3-tier fat-tree needs an even 'k'")
            if self.spines is not None:
                raise ValueError("'spines' is for tiers: 2; a 3-tier fat-tree derives them from k")
        return self


class RailNetwork(SwitchNetwork):
    """`hosts_per_leaf`: hosts per rail group (a scalable unit): each of its rail leaves takes one NIC of each."""

    spines: int = Field(ge=1, le=MAX_SWITCHES)


class DomainNetwork(RailNetwork):
    """`hosts_per_domain`: hosts (compute trays) per NVLink domain; `hosts_per_leaf` (hosts per rail group)
    defaults to it: one rail group per domain, as a rack's NICs join that rack's rail leaves
    (`file_limits.rail_group_is_the_domain`, which the plain reader applies too, as the kind's `network_input`)."""

    hosts_per_domain: int = Field(ge=1, le=MAX_HOSTS)

    @model_validator(mode="before")
    @classmethod
    def _rail_group_is_the_domain(cls, data: Any) -> Any:
        if isinstance(data, dict) and "hosts_per_leaf" not in data and "hosts_per_domain" not in data:
            raise ValueError("an NVLink domain needs 'hosts_per_domain' (hosts per NVLink domain)")
        return rail_group_is_the_domain(data)
