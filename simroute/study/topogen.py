"""Small topologies a study writes for itself, so one fabric class sits on every requester-holder path.

`fabric-pair` puts G instances on one fabric: an intra-host fabric (NVLink, PCIe) becomes one host of G GPUs
joined by that fabric; a network fabric (IBGDA) becomes G single-GPU hosts on one leaf. Link rates are the
profile's link peak for the fabric, so the simulated path is the one the profile's constants were measured on.
Every remote chunk then travels that one fabric: the simulated counterpart of the paper's per-fabric sweep.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from simroute.errors import ConfigurationError, UnknownNameError
from simroute.ioutil import write_text_atomic

NETWORK_FABRICS = ("ibgda", "roce", "ib")
TOPOLOGY_GENERATORS = ("fabric-pair",)


def fabric_pair(fabric: str, gpus: int = 8, calib: str = "paper-all") -> dict[str, Any]:
    """Topology document for G instances whose every pairwise path is of `fabric`."""
    from simroute.calib import load_profile, resolve_profile_path
    prof = load_profile(resolve_profile_path(calib))
    spec = prof.fabric(fabric)
    peak = float(spec.link_peak_GBps.value)
    if gpus < 2:
        raise ConfigurationError("needs at least 2 GPUs", field="topology.params.gpus")
    if any(tag in fabric for tag in NETWORK_FABRICS):
        return {"name": f"pair-{fabric}", "description": f"{gpus} single-GPU hosts on one leaf over {fabric}",
                "hosts": {"count": gpus, "gpus_per_host": 1, "gpu": fabric.split("-")[0],
                          "intra": {"kind": "nvswitch", "link_GBps": 450.0, "fabric": "h100-nvlink4"}},
                "nic": {"per": "gpu", "rate_GBps": peak, "latency_us": 1.0, "fabric": fabric},
                "network": {"tiers": 2, "hosts_per_leaf": gpus, "spines": 1, "latency_us": 0.6}}
    kind = "pcie" if "pcie" in fabric else ("nvlink-mesh" if "nvlink4" in fabric else "nvswitch")
    return {"name": f"pair-{fabric}", "description": f"one host of {gpus} GPUs joined by {fabric}",
            "hosts": {"count": 1, "gpus_per_host": gpus, "gpu": fabric.split("-")[0],
                      "intra": {"kind": kind, "link_GBps": peak, "latency_us": 0.6, "fabric": fabric}},
            "nic": {"per": "gpu", "rate_GBps": 25.0, "latency_us": 1.0, "fabric": "h100-ibgda"}}


def check_topology_spec(kind: str, params: dict[str, Any]) -> None:
    if kind not in TOPOLOGY_GENERATORS:
        raise UnknownNameError("topology generator", kind, TOPOLOGY_GENERATORS)
    bad = set(params) - {"fabric", "gpus", "calib"}
    if bad or "fabric" not in params:
        raise ConfigurationError(f"fabric-pair takes fabric (required), gpus, calib; got {sorted(params)}")


def write_topology(kind: str, params: dict[str, Any], path: Path) -> Path:
    """Write the generated topology YAML atomically (idempotent: same spec, same bytes)."""
    check_topology_spec(kind, params)
    doc = fabric_pair(**params)
    write_text_atomic(path, "# written by simroute study (fabric-pair)\n" + yaml.safe_dump(doc, sort_keys=True))
    return path
