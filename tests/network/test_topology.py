"""Topology files: schema validation, shipped files, paths, fabrics, summary."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from simroute.errors import ConfigurationError
from simroute.network import default_topology_path, load_topology, shipped_topology
from simroute.shipped import shipped_names

from simroute.network import DATA_DIR as TOPO_DIR

SHIPPED = shipped_names("topology")        # every file of topologies/, a new one included


def test_the_default_topology_is_the_shipped_fattree():
    assert default_topology_path() == TOPO_DIR / "fattree.yaml" and default_topology_path().is_file()


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_topologies_load(name):
    t = load_topology(shipped_topology(name))
    s = t.summary()
    assert s["gpus"] == len(t.gpus) and s["bisection_GBps"] > 0
    assert sum(s["links_per_tier"].values()) == len(t.links) == t.graph.number_of_edges()
    assert set(s["links_per_tier"]) <= {"nvlink", "pcie", "xsocket", "nic-leaf", "leaf-spine", "spine-core"}


def test_paper_testbed_shape():
    t = load_topology(TOPO_DIR / "paper-testbed.yaml")
    assert len(t.gpus) == 8 and t.host_of("h1.g3") == 1
    assert t.fabric_between("h0.g0", "h0.g3") == "h100-nvlink4"
    assert t.fabric_between("h0.g0", "h1.g0") == "h100-ibgda"
    nv = t.path("h0.g0", "h0.g1")
    assert [l.tier for l in nv] == ["nvlink"] and nv[0].capacity_Bps == 125e9
    cross = t.path("h0.g0", "h1.g2")
    assert [l.tier for l in cross] == ["nic-leaf", "nic-leaf"] and cross[0].capacity_Bps == 25e9
    assert t.n_paths("h0.g0", "h1.g2") == 1          # same leaf: no spine


@pytest.fixture(scope="module")
def fat_tree_1024():
    return load_topology(TOPO_DIR / "fattree-1024.yaml")


def test_fat_tree_1024_paths(fat_tree_1024):
    t = fat_tree_1024
    assert len(t.gpus) == 1024 and t.summary()["oversubscription"] == pytest.approx(1.0)
    inter_pod = t.paths("h0.g0", "h127.g7")
    assert len(inter_pod) == 64
    assert [l.tier for l in inter_pod[5]] == ["nic-leaf", "leaf-spine", "spine-core", "spine-core",
                                             "leaf-spine", "nic-leaf"]
    assert len({tuple(l.id for l in p) for p in inter_pod}) == 64
    assert len(t.paths("h0.g0", "h1.g0")) == 8       # same pod: one per aggregation switch
    for p in inter_pod[:3]:                           # consecutive, directed links
        assert all(a.dst == b.src for a, b in zip(p, p[1:]))
        assert p[0].src == "h0.g0" and p[-1].dst == "h127.g7"


def _write(tmp_path: Path, doc: dict) -> Path:
    p = tmp_path / "t.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _base() -> dict:
    return yaml.safe_load((TOPO_DIR / "paper-testbed.yaml").read_text())


def test_pcie_sockets_and_host_nic(tmp_path):
    doc = _base()
    doc["hosts"]["intra"] = {"kind": "pcie", "link_GBps": 25, "fabric": "a40-pcie4", "sockets": 2,
                             "xsocket_GBps": 20, "xsocket_fabric": "a40-pcie4-xsocket"}
    doc["nic"]["per"] = "host"
    t = load_topology(_write(tmp_path, doc))
    assert [l.tier for l in t.path("h0.g0", "h0.g3")] == ["pcie", "xsocket", "pcie"]
    assert t.fabric_between("h0.g0", "h0.g3") == "a40-pcie4-xsocket"
    assert t.fabric_between("h0.g0", "h0.g1") == "a40-pcie4"
    assert [l.tier for l in t.path("h0.g3", "h1.g3")] == ["pcie", "xsocket", "pcie", "nic-leaf", "nic-leaf",
                                                          "pcie", "xsocket", "pcie"]


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["hosts"].__setitem__("count", 0), "hosts.count"),
    (lambda d: d["nic"].__setitem__("rate_GBps", -1), "nic.rate_GBps"),
    (lambda d: d["hosts"]["intra"].__setitem__("kind", "carrier-pigeon"), "hosts.intra.kind"),
    (lambda d: d["network"].pop("spines"), "network"),
    (lambda d: d["network"].__setitem__("colour", "blue"), "network.colour"),
    (lambda d: d["nic"].pop("fabric"), "nic.fabric"),
    (lambda d: d.pop("network"), "network"),
])
def test_malformed_yaml_names_file_and_field(tmp_path, mutate, field):
    doc = _base()
    mutate(doc)
    p = _write(tmp_path, doc)
    with pytest.raises(ConfigurationError) as ei:
        load_topology(p)
    assert ei.value.file == str(p) and ei.value.field == field
    assert str(p) in str(ei.value) and field in str(ei.value)


def test_not_yaml_and_missing_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("hosts: [1, 2\n")
    with pytest.raises(ConfigurationError, match="bad.yaml"):
        load_topology(p)
    with pytest.raises(ConfigurationError, match="file not found"):
        load_topology(tmp_path / "none.yaml")


def test_fat_tree_too_many_hosts_per_edge(tmp_path):
    doc = yaml.safe_load((TOPO_DIR / "fattree-1024.yaml").read_text())
    doc["network"]["hosts_per_leaf"] = 2
    with pytest.raises(ConfigurationError) as ei:
        load_topology(_write(tmp_path, doc))
    assert ei.value.field == "network.hosts_per_leaf"


def _kind(tiers: int, intra: str, nic_per: str, hosts: int = 12) -> dict:
    """A small topology of one registered fabric, intra-host kind and NIC placement, with latencies whose
    float sums depend on the order they are added in."""
    doc = _base()
    doc["hosts"]["count"] = hosts
    doc["hosts"]["intra"] = {"kind": intra, "link_GBps": 25, "fabric": "f-intra", "latency_us": 0.7}
    if intra == "pcie":
        doc["hosts"]["intra"].update(sockets=2, xsocket_GBps=20, xsocket_fabric="f-x", xsocket_latency_us=1.3)
    doc["nic"].update(per=nic_per, latency_us=1.1)
    per_leaf = 1 if nic_per == "gpu" else 2
    doc["network"] = ({"tiers": 2, "hosts_per_leaf": per_leaf, "spines": 3, "latency_us": 0.3} if tiers == 2 else
                      {"tiers": 3, "k": 8, "hosts_per_leaf": per_leaf, "latency_us": 0.3})
    return doc


def _per_pair(t, src: int, targets) -> list[float]:
    return [sum(t.links[link].latency_s for link in t.path_ids(src, dst)[0]) for dst in targets]


@pytest.mark.parametrize("tiers", [2, 3])
@pytest.mark.parametrize("intra", ["nvlink-mesh", "nvswitch", "pcie"])
@pytest.mark.parametrize("nic_per", ["gpu", "host"])
def test_latency_row_equals_the_per_pair_sum_bit_for_bit_on_every_kind(tmp_path, tiers, intra, nic_per):
    """The row groups targets by path segment and sums each group once; it must equal the per-pair walk
    exactly (the replica choice compares latencies with ==), here and with every link's latency made distinct
    (so the grouping relies on no tier being uniform)."""
    t = load_topology(_write(tmp_path, _kind(tiers, intra, nic_per)))
    everyone, every_other = range(len(t.gpus)), range(0, len(t.gpus), 2)      # all GPUs; TP-2 instances
    for src in (0, 3, len(t.gpus) - 1):
        row = t.latency_row(src, everyone)
        assert row == _per_pair(t, src, everyone) and t.latency_row(src, every_other) == row[::2]
        assert row[src] == 0 and len(set(row)) >= 3             # itself, its host, its leaf and beyond
    mixed = load_topology(_write(tmp_path, _kind(tiers, intra, nic_per)))
    mixed.links = [replace(link, latency_s=link.latency_s * (1 + 1e-3 * (link.id % 7))) for link in mixed.links]
    for src in (0, 5):
        assert mixed.latency_row(src, everyone) == _per_pair(mixed, src, everyone)
    assert mixed.latency_row(0, everyone) != t.latency_row(0, everyone)


def test_latency_row_on_one_host_and_for_no_targets(tmp_path):
    t = load_topology(_write(tmp_path, _kind(2, "nvswitch", "gpu", hosts=1)))
    row = t.latency_row(1, range(4))
    assert row == _per_pair(t, 1, range(4)) and row[1] == 0 and row[0] == row[3] == pytest.approx(0.7e-6)
    assert t.latency_row(1, []) == []


def test_fat_tree_1024_latency_tiers(fat_tree_1024):
    """Same host < same pod < across pods (one host per edge switch): NVSwitch 0.7 us; 2 NIC hops of 1 us
    and 2 or 4 switch hops of 0.6 us."""
    t = fat_tree_1024
    row = t.latency_row(0, range(len(t.gpus)))
    assert row[1:8] == [pytest.approx(0.7e-6)] * 7
    assert row[8] == pytest.approx(3.2e-6) and row[63] == row[8]           # pod 0: hosts 0-7
    assert row[64] == pytest.approx(4.4e-6) and row[1023] == row[64]
    assert sorted(set(row)) == [0, row[1], row[8], row[64]]
