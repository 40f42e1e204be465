"""What both readers of a topology file share (the pydantic models of simroute.network.schema_models and the
plain reader of shipped files, simroute/records.py): the bounds on sizes, the default kind, and the defaults a
kind's `network:` section takes from its other fields."""

from __future__ import annotations

from typing import Any

MAX_HOSTS = 16_384          # bounds on what sizes memory and work: a typo of 1e8 hosts must not hang
MAX_GPUS = 131_072
MAX_SWITCHES = 1_024        # spines, hosts per leaf
MAX_K = 128
DEFAULT_KIND = "fattree"    # a file without `kind:` is a fat-tree (2 or 3 tiers), as every file was before kinds


def rail_group_is_the_domain(data: Any) -> Any:
    """An NVLink-domain `network:` section's `hosts_per_leaf` (hosts per rail group) defaults to its
    `hosts_per_domain`: a rack's NICs join that rack's rail leaves (`NvlinkDomain.network_input`, and its model's
    own validator, simroute.network.schema_models.DomainNetwork)."""
    if isinstance(data, dict) and "hosts_per_leaf" not in data and "hosts_per_domain" in data:
        return {**data, "hosts_per_leaf": data["hosts_per_domain"]}
    return data
