"""Topology files: validated at the file boundary (the pydantic models of simroute.network.schema_models), frozen
dataclasses inside. A shipped file that hashes as recorded is read by the models' field table instead
(simroute/records.py), without importing pydantic; either way the kind's `network:` section is a record of its
model.

Units in the YAML are the human ones (GB/s as `_GBps`, microseconds as `_us`); the dataclasses
hold bytes/second and seconds, as everywhere else in the code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simroute.errors import ConfigurationError
from simroute.ioutil import load_yaml
# the bounds and defaults both readers share, re-exported where they were defined before
from simroute.network.file_limits import DEFAULT_KIND, MAX_GPUS, MAX_HOSTS, MAX_K, MAX_SWITCHES  # noqa: F401

GB = 1e9
US = 1e-6


@dataclass(frozen=True)
class IntraSpec:
    kind: str
    link_Bps: float
    latency_s: float
    fabric: str
    sockets: int
    xsocket_Bps: float | None
    xsocket_latency_s: float
    xsocket_fabric: str


@dataclass(frozen=True)
class TopologySpec:
    """A validated topology description (what the YAML said, in SI units)."""

    name: str
    description: str
    hosts: int
    gpus_per_host: int
    gpu: str
    intra: IntraSpec
    nic_per: str
    nic_Bps: float
    nic_latency_s: float
    nic_fabric: str
    nic_pcie_Bps: float
    tiers: int
    hosts_per_leaf: int
    spines: int
    k: int
    uplink_Bps: float | None
    oversubscription: float | None
    switch_latency_s: float
    source: str = ""
    kind: str = DEFAULT_KIND
    network: Any = None         # the kind's validated `network:` section: a record of its model (simroute/records.py)

    @property
    def nics_per_host(self) -> int:
        return self.gpus_per_host if self.nic_per == "gpu" else 1


def _field_of(err: dict, prefix: str = "") -> str:
    return ".".join([prefix] * bool(prefix) + [str(p) for p in err.get("loc", ())])


MODEL = "simroute.network.schema_models:TopologyModel"
# the models, for code that validates by them (imported with pydantic on first use)
_MODELS = ("IntraModel", "HostsModel", "NicModel", "SwitchNetwork", "TopologyModel")


def __getattr__(name: str) -> Any:
    if name in _MODELS:
        from simroute.network import schema_models
        return getattr(schema_models, name)
    raise AttributeError(f"module 'simroute.network.schema' has no attribute {name!r}")


def _invalid(exc: Any, file: str | Path, prefix: str = "") -> ConfigurationError:
    err = exc.errors()[0]
    got = f", got {err['input']!r}"[:80] if "input" in err and not isinstance(err["input"], dict) else ""
    return ConfigurationError(err["msg"] + got, file=file, field=_field_of(err, prefix) or None)


def _validated(model: Any, raw: object, file: str | Path, prefix: str = "") -> Any:
    """`raw` validated by pydantic model `model`, as records; a ConfigurationError naming the file and field."""
    from pydantic import ValidationError

    from simroute.records import to_record
    try:
        return to_record(model.model_validate(raw))
    except ValidationError as exc:
        raise _invalid(exc, file, prefix) from None


def parse_topology(raw: object, *, file: str | Path = "<topology>", shipped: bool = False) -> TopologySpec:
    """Validate a parsed YAML document; raise ConfigurationError naming the file and field.

    The `network:` section is validated by the model of the file's `kind` (a registered class,
    simroute/network/kinds/), which then checks what joins sections (`TopologyKind.check`). `shipped`: `raw` is
    file's own content, read by the field table where the file is shipped and hashes as recorded."""
    if not isinstance(raw, dict):
        raise ConfigurationError("a topology file must be a mapping", file=file)
    from simroute import records
    m = records.read_shipped(file, MODEL, raw) if shipped else None
    plain = m is not None                   # a shipped file as recorded: its network section too
    if m is None:
        from simroute.network.schema_models import TopologyModel
        m = _validated(TopologyModel, raw, file)
    from simroute.registry import registry
    kinds = registry("topology")
    if m.kind not in kinds:
        raise ConfigurationError(f"unknown topology kind {m.kind!r} (known: {', '.join(kinds)})", file=file,
                                 field="kind")
    kind = kinds.get(m.kind)
    h, n, raw_net = m.hosts, m.nic, m.network
    if raw_net is None:
        if h.count > 1:
            raise ConfigurationError("more than one host needs a 'network' section", file=file, field="network")
        raw_net = kind.single_host_network
    net = records.read_plain(kind.network_key(), kind.network_input(raw_net)) if plain else None
    if net is None:
        net = _validated(kind.Network, raw_net, file, "network")
    i = h.intra
    intra = IntraSpec(kind=i.kind, link_Bps=i.link_GBps * GB, latency_s=i.latency_us * US, fabric=i.fabric,
                      sockets=i.sockets, xsocket_Bps=None if i.xsocket_GBps is None else i.xsocket_GBps * GB,
                      xsocket_latency_s=i.xsocket_latency_us * US, xsocket_fabric=i.xsocket_fabric or i.fabric)
    spec = TopologySpec(
        name=m.name, description=m.description, hosts=h.count, gpus_per_host=h.gpus_per_host, gpu=h.gpu,
        intra=intra, nic_per=n.per, nic_Bps=n.rate_GBps * GB, nic_latency_s=n.latency_us * US,
        nic_fabric=n.fabric, nic_pcie_Bps=n.pcie_GBps * GB, tiers=kind.switch_tiers(net),
        hosts_per_leaf=net.hosts_per_leaf, spines=getattr(net, "spines", None) or 0, k=getattr(net, "k", None) or 0,
        uplink_Bps=None if net.uplink_GBps is None else net.uplink_GBps * GB,
        oversubscription=net.oversubscription, switch_latency_s=net.latency_us * US, source=str(file),
        kind=m.kind, network=net)
    kind.check(spec, file=file)
    return spec


def load_topology_spec(path: str | Path, *, hosts: int | None = None) -> TopologySpec:
    """The topology of a file; `hosts` resizes its family (the same hosts, NICs, leaves and spines per leaf) to
    that many hosts, checked like a file that said so (`simroute run --hosts`, a study's `hosts` axis)."""
    raw = load_yaml(path)
    if hosts is not None and isinstance(raw, dict) and isinstance(raw.get("hosts"), dict):
        raw = {**raw, "hosts": {**raw["hosts"], "count": hosts}}
    return parse_topology(raw, file=path, shipped=hosts is None)


# ---- flow tables -------------------------------------------------------------------------------------------
# A run's net_flows.parquet and a telemetry export's flows.parquet: one row per finished bulk flow. The columns
# `simroute flows replay` reads are marked; with them a run's flows replay on the run's topology as they ran.
FLOWS_SCHEMA = "simroute.flows/1"
FLOW_COLUMNS: dict[str, str] = {
    "fid": "flow id (engine order)", "src": "source GPU", "dst": "destination GPU",
    "nbytes": "bytes (replay)", "start_s": "transfer() called (replay)", "end_s": "last byte arrived",
    "fct_s": "end_s - start_s", "spine": "spine crossed (None within a leaf)", "sport": "5-tuple source port",
    "n_links": "links of its path", "tag": "what the simulation moved (fetch, pd, gather)",
    "links": "the pinned path: link ids of the topology, in path order (replay)",
    "rate_cap_Bps": "rate cap, inf for none (replay)",
    "delay_s": "routing controller's time before it entered the network at start_s + delay_s (replay)",
}


def topology_fingerprint(links: list) -> str:
    """sha256 (16 hex) of a topology's directed links (id, endpoints, capacity, latency): link ids recorded on
    one topology mean the same links on another only if these agree."""
    import hashlib
    h = hashlib.sha256()
    for link in links:
        h.update(f"{link.id} {link.src} {link.dst} {float(link.capacity_Bps)!r} {float(link.latency_s)!r}\n".encode())
    return h.hexdigest()[:16]


def flows_metadata(topology_name: str, links: list, unfinished: int = 0) -> dict[bytes, bytes]:
    """Key-value metadata of a flow table: its schema, the topology its link ids belong to, and how many flows
    were still running when the run stopped (they are not in the table, so a replay lacks their load)."""
    return {b"simroute.schema": FLOWS_SCHEMA.encode(), b"simroute.topology": topology_name.encode(),
            b"simroute.topology_links": str(len(links)).encode(),
            b"simroute.topology_fingerprint": topology_fingerprint(links).encode(),
            b"simroute.flows_unfinished": str(int(unfinished)).encode()}


def unfinished_flows(metadata: dict[bytes, bytes] | None) -> int:
    """Flows a run left running (0 for tables without the metadata)."""
    value = (metadata or {}).get(b"simroute.flows_unfinished", b"0")
    return int(value) if value.isdigit() else 0


def check_flows_topology(metadata: dict[bytes, bytes] | None, topology_name: str, links: list, *,
                         file: str | Path) -> None:
    """Raise ConfigurationError (field `links`) when a flow table's link ids were recorded on another topology
    than the one given; tables without the metadata (a user's own file) are taken as they are."""
    meta = metadata or {}
    recorded = meta.get(b"simroute.topology_fingerprint")
    if recorded is None or recorded.decode() == topology_fingerprint(links):
        return
    name = meta.get(b"simroute.topology", b"?").decode()
    count = meta.get(b"simroute.topology_links", b"?").decode()
    raise ConfigurationError(f"link ids recorded on topology '{name}' ({count} links), not on '{topology_name}' "
                             f"({len(links)} links, other capacities or endpoints); replay with that topology",
                             file=file, field="links")
