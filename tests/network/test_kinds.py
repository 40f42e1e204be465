"""Topology kinds: one interface (simroute/network/kinds/), each kind a registered class named by the file's
`kind`; link counts and capacities by hand, paths, where a GPU sits (host, NVLink domain, rail, leaf), the
files' checks, routing on the new kinds, and a kind dropped in as one module (tests/network/example/)."""

from __future__ import annotations

import importlib
import inspect
import shutil
import sys
from pathlib import Path

import pytest
import simpy
import yaml

from simroute.errors import ConfigurationError
from simroute.network import KINDS, FlowEngine, TopologyKind, load_topology, shipped_topology
from simroute.network.schema import SwitchNetwork
from simroute.registry import discover

EXAMPLE = Path(__file__).parent / "example"


def _write(tmp_path: Path, doc: dict, name: str = "t.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def _shipped(name: str) -> dict:
    return yaml.safe_load(shipped_topology(name).read_text())


def _tiers(path) -> list[str]:
    return [link.tier for link in path]


# ---- the registry -------------------------------------------------------------------------------------------
def test_every_kind_keeps_the_contract():
    assert {"fattree", "rail-optimized", "nvlink-domain"} <= set(KINDS)
    for name in KINDS:
        cls = KINDS.get(name)
        assert issubclass(cls, TopologyKind) and cls.name == name and not inspect.isabstract(cls)
        assert issubclass(cls.Network, SwitchNetwork) and (cls.__doc__ or "").strip()


def test_a_file_without_kind_reads_as_the_fat_tree_it_always_was(tmp_path):
    doc = _shipped("fattree")
    assert "kind" not in doc
    plain = load_topology(shipped_topology("fattree"))
    named = load_topology(_write(tmp_path, {**doc, "kind": "fattree"}))
    assert plain.spec.kind == named.spec.kind == "fattree" and type(plain.kind).__name__ == "FatTree"
    assert plain.links == named.links and plain.summary() == named.summary()
    assert "kind" not in plain.summary()         # a run's summary.json on a fat-tree is what it was


@pytest.mark.parametrize("mutate, field, words", [
    (lambda d: d.__setitem__("kind", "dragonfly"), "kind", "known: fattree"),
    (lambda d: d["nic"].__setitem__("per", "host"), "nic.per", "nic.per must be gpu"),
    (lambda d: d["network"].pop("spines"), "network.spines", "Field required"),
    (lambda d: d["network"].__setitem__("k", 8), "network.k", "Extra inputs"),        # k is the fat-tree's
    (lambda d: d["network"].__setitem__("uplink_GBps", 50), "network", "not both"),
])
def test_a_rail_optimised_file_is_checked_by_its_kind(tmp_path, mutate, field, words):
    doc = _shipped("rail-optimized")
    mutate(doc)
    path = _write(tmp_path, doc)
    with pytest.raises(ConfigurationError) as err:
        load_topology(path)
    assert err.value.field == field and words in str(err.value) and str(path) in str(err.value)


def test_an_nvlink_domain_needs_nvlink_switches(tmp_path):
    doc = _shipped("gb200-nvl72")
    doc["hosts"]["intra"]["kind"] = "nvlink-mesh"
    with pytest.raises(ConfigurationError, match="must be nvswitch") as err:
        load_topology(_write(tmp_path, doc))
    assert err.value.field == "hosts.intra.kind"
    doc = _shipped("gb200-nvl72")
    del doc["network"]["hosts_per_domain"]
    with pytest.raises(ConfigurationError, match="needs 'hosts_per_domain'") as err:
        load_topology(_write(tmp_path, doc))
    assert err.value.field == "network"


# ---- rail-optimised: 16 hosts x 8 GPUs, rail groups of 8 hosts, 8 spines ------------------------------------
@pytest.fixture(scope="module")
def rail():
    return load_topology(shipped_topology("rail-optimized"))


def test_rail_link_counts_and_capacities_by_hand(rail):
    s = rail.summary()
    # per host 8 GPU <-> NVSwitch links; per GPU one NIC to its rail leaf; 2 groups x 8 rails = 16 leaves, each
    # to each of 8 spines; every count x 2 directions
    assert s["links_per_tier"] == {"nvlink": 16 * 8 * 2, "nic-leaf": 128 * 2, "leaf-spine": 16 * 8 * 2}
    assert (s["leaves"], s["spines"], s["rails"], s["rail_groups"], s["kind"]) == (16, 8, 8, 2, "rail-optimized")
    # a rail leaf takes one 50 GB/s NIC from each of its 8 hosts: 400 GB/s down over 8 uplinks at 1:1
    assert s["uplink_GBps"] == 50 and s["oversubscription"] == pytest.approx(1.0)
    assert s["bisection_GBps"] == pytest.approx(min(128 * 50 / 2, 16 / 2 * 8 * 50))       # 3200
    caps = {tier: {link.capacity_Bps for link in rail.links if link.tier == tier} for tier in s["links_per_tier"]}
    assert caps == {"nvlink": {450e9}, "nic-leaf": {50e9}, "leaf-spine": {50e9}}


def test_rail_lookups(rail):
    # h9.g3: host 9, rail 3, rail group 9 // 8 = 1, so leaf 1 * 8 + 3 = 11; its own NVLink domain (the host)
    gpu = "h9.g3"
    assert (rail.host_of(gpu), rail.rail_of(gpu), rail.leaf_of(gpu), rail.domain_of(gpu)) == (9, 3, 11, 9)
    assert [rail.leaf_of(f"h2.g{gpu}") for gpu in range(8)] == list(range(8))         # group 0: one leaf per rail
    assert {rail.leaf_of(f"h{host}.g5") for host in range(8)} == {5}                  # a rail leaf per group
    assert rail.leaf_of(rail.index("h15.g7")) == 15                                   # by index too


def test_same_rail_is_one_hop_through_the_rail_switch(rail):
    path = rail.path("h0.g3", "h5.g3")
    assert _tiers(path) == ["nic-leaf", "nic-leaf"] and path[0].dst == "leaf3" and path[1].dst == "h5.g3"
    assert rail.n_paths("h0.g3", "h5.g3") == 1 and rail.fabric_between("h0.g3", "h5.g3") == "h100-ibgda"
    cross_rail = rail.paths("h0.g3", "h5.g4")                 # rail 3 to rail 4: up to a spine and down (no PXN)
    assert len(cross_rail) == 8 and all(_tiers(p) == ["nic-leaf", "leaf-spine", "leaf-spine", "nic-leaf"]
                                        for p in cross_rail)
    assert cross_rail[2][1].dst == "spine2" and cross_rail[2][2].dst == "leaf4"
    other_group = rail.paths("h0.g3", "h12.g3")                # same rail, other group: leaf 3 -> spine -> leaf 11
    assert len(other_group) == 8 and other_group[0][2].dst == "leaf11"
    inside = rail.path("h0.g3", "h0.g4")
    assert _tiers(inside) == ["nvlink", "nvlink"] and inside[0].dst == "h0.nvs"


# ---- GB200 NVL72: 2 racks of 18 trays x 4 GPUs -----------------------------------------------------------------
@pytest.fixture(scope="module")
def nvl72():
    return load_topology(shipped_topology("gb200-nvl72"))


def test_nvl72_link_counts_and_capacities_by_hand(nvl72):
    s = nvl72.summary()
    # 144 GPUs each with one NVLink port to its rack's switch and one NIC to its rail leaf; 2 racks x 4 rails = 8
    # leaves, each to each of 18 spines; every count x 2 directions
    assert s["links_per_tier"] == {"nvlink": 144 * 2, "nic-leaf": 144 * 2, "leaf-spine": 8 * 18 * 2}
    assert (s["hosts"], s["gpus"], s["leaves"], s["spines"]) == (36, 144, 8, 18)
    assert (s["nvlink_domains"], s["gpus_per_domain"], s["rails"], s["rail_groups"]) == (2, 72, 4, 2)
    assert s["uplink_GBps"] == 50 and s["oversubscription"] == pytest.approx(1.0)     # 18 x 50 down, 18 x 50 up
    assert {link.capacity_Bps for link in nvl72.links if link.tier == "nvlink"} == {900e9}
    assert {link.dst for link in nvl72.links if link.tier == "nvlink" and link.src.startswith("h")} == \
        {"nvl0.nvs", "nvl1.nvs"}


def test_nvl72_lookups(nvl72):
    # h20.g1: tray 20 is the third tray of rack 1 (trays 18-35), NIC 1 on rail 1, rack 1's rail-1 leaf = 1 * 4 + 1
    assert (nvl72.host_of("h20.g1"), nvl72.domain_of("h20.g1"), nvl72.rail_of("h20.g1"), nvl72.leaf_of("h20.g1")) \
        == (20, 1, 1, 5)
    assert {nvl72.domain_of(f"h{tray}.g{gpu}") for tray in range(18) for gpu in range(4)} == {0}


def test_one_nvlink_domain_is_nvlink_across_trays_and_never_the_nic(nvl72):
    for a, b in (("h0.g0", "h17.g3"), ("h3.g1", "h4.g1"), ("h0.g0", "h0.g1")):
        path = nvl72.path(a, b)
        assert _tiers(path) == ["nvlink", "nvlink"] and path[0].dst == "nvl0.nvs", (a, b)
        assert nvl72.fabric_between(a, b) == "gb200-nvlink5" and nvl72.n_paths(a, b) == 1
        assert min(link.capacity_Bps for link in path) == 900e9
    across = nvl72.paths("h0.g2", "h18.g2")                      # rack 0 to rack 1, same rail: through a spine
    assert len(across) == 18 and nvl72.fabric_between("h0.g2", "h18.g2") == "h100-ibgda"
    assert _tiers(across[0]) == ["nic-leaf", "leaf-spine", "leaf-spine", "nic-leaf"]
    assert (across[0][0].dst, across[0][2].dst) == ("leaf2", "leaf6")


def test_the_fat_tree_answers_the_same_questions(tmp_path):
    t = load_topology(shipped_topology("fattree"))          # 2 hosts per leaf, a NIC per GPU
    assert (t.host_of("h5.g6"), t.domain_of("h5.g6"), t.rail_of("h5.g6"), t.leaf_of("h5.g6")) == (5, 5, 6, 2)
    doc = _shipped("fattree")
    doc["nic"]["per"] = "host"
    host_nic = load_topology(_write(tmp_path, doc))
    assert host_nic.rail_of("h5.g6") == 0 and host_nic.leaf_of("h5.g6") == 2
    assert (t.nic_of("h5.g6"), host_nic.nic_of("h5.g6")) == ("h5.g6", "h5.nic")      # GPUDirect NIC, host NIC


@pytest.mark.parametrize("name", ["rail-optimized", "gb200-nvl72"])
def test_latency_row_equals_the_per_pair_sum_on_the_new_kinds(name):
    t = load_topology(shipped_topology(name))
    everyone = range(len(t.gpus))
    for src in (0, 13, len(t.gpus) - 1):
        row = t.latency_row(src, everyone)
        assert row == [sum(t.links[link].latency_s for link in t.path_ids(src, dst)[0]) for dst in everyone]


def test_a_resized_family_keeps_its_kind():
    t = load_topology(shipped_topology("gb200-nvl72"), hosts=54)        # three racks
    assert t.summary()["nvlink_domains"] == 3 and t.summary()["leaves"] == 12 and t.domain_of("h53.g3") == 2


# ---- routing on the new kinds ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name, src, dst", [("rail-optimized", "h0.g0", "h8.g0"), ("gb200-nvl72", "h0.g0", "h18.g0")])
def test_ark_and_ecmp_route_elephants_over_the_spines(name, src, dst):
    """8 elephants from one rail leaf to another group's: ARK reserves a spine each (8 <= spines), so every one
    runs at its NIC's 50 GB/s: 1 GB in 20 ms; ECMP's hashes may collide, never beating ARK."""
    t = load_topology(shipped_topology(name))
    same_rail_src = [g for g in t.gpus if t.leaf_of(g) == t.leaf_of(src)][:8]
    same_rail_dst = [g for g in t.gpus if t.leaf_of(g) == t.leaf_of(dst)][:8]
    fcts = {}
    for routing in ("ark", "ecmp"):
        env = simpy.Environment()
        engine = FlowEngine(env, t, routing=routing, seed=3, ark_elephant_bytes=1.0)
        events = [engine.transfer(a, b, 1e9) for a, b in zip(same_rail_src, same_rail_dst)]
        env.run()
        assert sum(engine.reserved) == 0
        fcts[routing] = [event.value.end - event.value.start for event in events]
        if routing == "ark":
            assert len({event.value.spine for event in events}) == 8
    delay = 4.10e-6 + 0.87e-6                               # ARK's controller time (ARK paper, Table 1)
    latency = t.path_latency_s(t.index(src), t.index(dst))
    assert fcts["ark"] == pytest.approx([1e9 / 50e9 + latency + delay] * 8, rel=1e-9)
    assert max(fcts["ecmp"]) >= max(fcts["ark"]) - delay


# ---- a kind dropped in as one module ---------------------------------------------------------------------------
@pytest.fixture
def star_kind(tmp_path, monkeypatch):
    """tests/network/example/star.py copied into a folder on the kinds package's path and discovered, as a
    module in simroute/network/kinds/ would be; unregistered afterwards."""
    package = importlib.import_module("simroute.network.kinds")
    folder = tmp_path / "kinds"
    folder.mkdir()
    shutil.copy(EXAMPLE / "star.py", folder / "star.py")
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
    discover(package.__name__, package.__path__)
    yield KINDS.get("star")
    KINDS.unregister("star")
    sys.modules.pop("simroute.network.kinds.star", None)


def test_a_kind_is_one_module(tmp_path, star_kind):
    doc = {"name": "star-4", "kind": "star", "hosts": {"count": 4, "gpus_per_host": 2, "gpu": "h100", "intra": {
        "kind": "nvswitch", "link_GBps": 450, "fabric": "h100-nvlink4"}},
        "nic": {"per": "gpu", "rate_GBps": 25, "fabric": "h100-ibgda"}, "network": {"switch_latency_us": 0.4}}
    t = load_topology(_write(tmp_path, doc))
    assert type(t.kind) is star_kind and t.summary()["kind"] == "star"
    # 4 hosts x 2 GPUs: 2 NVSwitch links and 2 NIC links per host, every NIC on the one switch; x 2 directions
    assert t.summary()["links_per_tier"] == {"nvlink": 16, "nic-leaf": 16}
    path = t.path("h0.g1", "h3.g0")
    assert [link.dst for link in path] == ["star", "h3.g0"] and t.n_paths("h0.g1", "h3.g0") == 1
    assert [link.latency_s for link in path] == pytest.approx([0.4e-6, 0.4e-6])
    assert t.leaf_of("h3.g1") == 0 and t.rank_planes(2).across_domains
    env = simpy.Environment()
    event = FlowEngine(env, t).transfer("h0.g1", "h3.g0", 25e6)
    env.run()
    assert event.value.end == pytest.approx(25e6 / 25e9 + 0.8e-6)
    with pytest.raises(ConfigurationError) as err:
        load_topology(_write(tmp_path, {**doc, "network": {"switch_latency_us": -1}}, "bad.yaml"))
    assert err.value.field == "network.switch_latency_us"


def test_topo_show_draws_and_describes_the_new_kinds(cli, tmp_path):
    code, out, err = cli("topo", "show", "gb200-nvl72", "--png", tmp_path / "nvl72.png")
    assert code == 0, err
    assert "nvlink-domain" in out and "NVLink domains     2 x 72 GPUs" in out and "4 per host, 2 rail group" in out
    assert (tmp_path / "nvl72.png").stat().st_size > 5000
    code, out, _ = cli("topo", "show", "rail-optimized")
    assert code == 0 and "rail-optimized" in out and "across: one rank pair stands for all" in out
    code, out, _ = cli("topo", "show", "fattree")
    assert code == 0 and "across: ranks share links" in out and "share their leaf's uplinks" in out
