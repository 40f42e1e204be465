"""The network layer by hand and by invariant: where a GPU sits on small topologies of every kind, paths as chains
of links from one GPU to the other through the switch they name, cuts and uplink rates worked out, ARK's and
least-loaded's scores, message waits and NIC queue pairs, and telemetry's windows and percentiles.

Every expectation is worked out from the topology file or the documented rule (docs/NETWORK.md), or is an
invariant any correct layer keeps (a path is a chain of links; the same bytes whatever the windowing); none is
read back from the code under test.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import simpy
import yaml

from simroute.network import FlowEngine, Link, MessageModel, MessageModelParams, load_topology, shipped_topology
from simroute.network.paths import PathService
from simroute.network.routing import ArkRouting, ArkSettings, LeastLoadedRouting


def _doc(name: str) -> dict:
    return yaml.safe_load(Path(shipped_topology(name)).read_text())


def _write(tmp_path: Path, doc: dict, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**doc, "name": name}))
    return path


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Small topologies of every kind, each with a partial last group (hosts not a multiple of the group)."""
    tmp = tmp_path_factory.mktemp("kinds")
    out = {}
    doc = _doc("fattree")                      # 2-tier, 2 hosts per leaf: 5 hosts on 3 leaves
    doc["hosts"]["count"], doc["network"]["spines"] = 5, 4
    out["leafspine-5"] = load_topology(_write(tmp, doc, "leafspine-5"))
    doc = _doc("fattree")                      # 3-tier k = 4: 1 host per leaf, 2 leaves per pod, 5 leaves: 3 pods
    doc["hosts"]["count"] = 5
    doc["network"] = {"tiers": 3, "k": 4, "hosts_per_leaf": 1, "latency_us": 0.6}
    doc["nic"]["per"] = "host"
    doc["hosts"]["gpus_per_host"] = 2
    out["fattree-k4"] = load_topology(_write(tmp, doc, "fattree-k4"))
    doc = _doc("rail-optimized")               # 5 hosts x 4 GPUs, rail groups of 2 hosts: 3 groups x 4 rails
    doc["hosts"]["count"], doc["hosts"]["gpus_per_host"] = 5, 4
    doc["network"].update(hosts_per_leaf=2, spines=2)
    out["rail-5"] = load_topology(_write(tmp, doc, "rail-5"))
    doc = _doc("gb200-nvl72")                  # 5 trays x 4 GPUs, 2 trays per NVLink domain: 3 domains
    doc["hosts"]["count"] = 5
    doc["network"].update(hosts_per_domain=2, spines=2)
    out["nvl-5"] = load_topology(_write(tmp, doc, "nvl-5"))
    doc = _doc("fattree")                      # PCIe hosts of 2 sockets, one host NIC each, 2 hosts on 2 leaves
    doc["hosts"]["count"], doc["hosts"]["gpus_per_host"] = 2, 4
    doc["hosts"]["intra"] = {"kind": "pcie", "link_GBps": 25, "fabric": "a40-pcie4", "sockets": 2,
                             "xsocket_GBps": 20, "xsocket_fabric": "a40-pcie4-xsocket"}
    doc["nic"]["per"] = "host"
    doc["network"].update(hosts_per_leaf=1, spines=2)
    out["pcie-2"] = load_topology(_write(tmp, doc, "pcie-2"))
    return out


def test_where_each_gpu_sits_by_hand(small):
    ls, ft, rail, nvl = small["leafspine-5"], small["fattree-k4"], small["rail-5"], small["nvl-5"]
    # leaf-spine: host // 2; the fifth host alone on leaf 2
    assert [ls.leaf_of(f"h{host}.g0") for host in range(5)] == [0, 0, 1, 1, 2] and ls.n_leaves == 3
    assert ft.n_leaves == 5 and ft.n_pods == 3 and ft.n_spines == 4
    # rail: leaf = group * 4 + rail, group = host // 2
    assert [rail.leaf_of(f"h{host}.g{gpu}") for host, gpu in ((0, 0), (1, 3), (2, 1), (3, 2), (4, 3))] == \
        [0, 3, 5, 6, 11]
    assert rail.n_leaves == 12 and rail.summary()["rail_groups"] == 3
    # NVLink domains of 2 trays: tray // 2, the fifth tray its own (partial) domain; its rail group is its domain
    assert [nvl.domain_of(f"h{host}.g3") for host in range(5)] == [0, 0, 1, 1, 2]
    assert nvl.summary()["nvlink_domains"] == 3 and nvl.summary()["gpus_per_domain"] == 8
    assert [nvl.leaf_of(f"h{host}.g1") for host in range(5)] == [1, 1, 5, 5, 9]


def test_the_fabric_between_two_gpus_by_hand(small):
    nvl, pcie = small["nvl-5"], small["pcie-2"]
    assert nvl.fabric_between("h0.g0", "h1.g3") == "gb200-nvlink5"        # two trays of one domain: NVLink
    assert nvl.fabric_between("h1.g0", "h2.g0") == "h100-ibgda"           # neighbouring trays, two domains
    # PCIe: GPUs 0-1 on socket 0, 2-3 on socket 1
    assert [pcie.fabric_between("h0.g0", f"h0.g{gpu}") for gpu in (1, 2, 3)] == \
        ["a40-pcie4", "a40-pcie4-xsocket", "a40-pcie4-xsocket"]
    assert pcie.fabric_between("h0.g2", "h0.g3") == "a40-pcie4"


@pytest.mark.parametrize("name", ["leafspine-5", "fattree-k4", "rail-5", "nvl-5", "pcie-2"])
def test_every_path_is_a_chain_of_links_from_one_gpu_to_the_other_through_its_named_switch(small, name):
    """For every ordered GPU pair and every equal-cost path: the links chain (each starts where the last ended)
    from the source GPU to the destination GPU, the named top switch is on the way, and no two paths of a pair are
    the same."""
    topo = small[name]
    for a, b in itertools.permutations(range(len(topo.gpus)), 2):
        seen = set()
        for choice in range(topo.n_choices(a, b)):
            links, top = topo.path_ids(a, b, choice)
            hops = [topo.links[link] for link in links]
            assert hops and hops[0].src == topo.gpus[a] and hops[-1].dst == topo.gpus[b], (name, a, b, choice)
            assert all(x.dst == y.src for x, y in zip(hops, hops[1:])), (name, a, b, choice)
            if top is not None:
                assert top in {hop.dst for hop in hops[:-1]}, (name, a, b, choice, top)
            seen.add(links)
        assert len(seen) == topo.n_choices(a, b)


def test_a_fat_tree_path_index_is_aggregation_switch_times_half_plus_core(small):
    """Across pods path a * k/2 + c goes up through aggregation switch a and turns at core a * k/2 + c
    (docs: FatTreeFabric)."""
    ft = small["fattree-k4"]
    src, dst = ft.index("h0.g0"), ft.index("h4.g0")       # pod 0 to pod 2
    for choice in range(4):
        agg, core = divmod(choice, 2)
        hops = [ft.links[link] for link in ft.path_ids(src, dst, choice)[0]]
        assert [hop.dst for hop in hops if hop.tier in ("leaf-spine", "spine-core")] == \
            [f"agg0.{agg}", f"core{choice}", f"agg2.{agg}", "leaf4"]


def test_uplink_rate_and_oversubscription_by_hand(tmp_path):
    """2 hosts x 8 NICs x 50 GB/s = 800 GB/s into a leaf over 16 spines at 2:1: 25 GB/s uplinks."""
    doc = _doc("fattree")
    doc["network"]["oversubscription"] = 2.0
    summary = load_topology(_write(tmp_path, doc, "over")).summary()
    assert summary["uplink_GBps"] == pytest.approx(25.0) and summary["oversubscription"] == pytest.approx(2.0)
    doc = _doc("rail-optimized")               # a rail leaf takes one NIC of each of its 8 hosts: 400 GB/s
    doc["network"]["oversubscription"] = 4.0
    summary = load_topology(_write(tmp_path, doc, "rail-over")).summary()
    assert summary["uplink_GBps"] == pytest.approx(400 / 8 / 4) and summary["oversubscription"] == pytest.approx(4.0)


# ---- ARK and least-loaded: a path's score is (most reserved link, reserved flows summed), least first --------
def _three_tier_paths(small) -> tuple[PathService, int, int, list[tuple[int, ...]]]:
    ft = small["fattree-k4"]
    paths = PathService(ft, seed=0)
    src, dst = ft.index("h0.g0"), ft.index("h4.g0")
    middles = [links for links, _top in ft.middle(ft.leaf_of(src), ft.leaf_of(dst))]
    return paths, src, dst, middles


@pytest.mark.parametrize("strategy", [ArkRouting, LeastLoadedRouting])
def test_the_least_reserved_path_is_the_one_whose_busiest_link_is_emptiest(small, strategy):
    """Four cross-pod paths of four middle links each (k = 4: paths 0 and 1 share their leaf-to-aggregation and
    aggregation-to-leaf links, as do 2 and 3). Reserved flows: path 0 has one link with 2 (max 2, sum 2), path 1
    one with 3 (3, 3), path 2 one on each of its four links (1, 4), path 3 one with 3 beside path 2's shared two
    (3, 5). The least reserved is path 2: its busiest link is the emptiest, though its total is the largest but
    one."""
    paths, src, dst, middles = _three_tier_paths(small)
    wanted = {middles[0][1]: 2, middles[1][1]: 3, middles[3][1]: 3, **{link: 1 for link in middles[2]}}
    # the reservations a set of other flows would leave, written into the table directly
    paths._reserved = [wanted.get(link, 0) for link in range(len(paths.reservations))]
    assert paths.middle_scores(src, dst) == [(2, 2), (3, 3), (1, 4), (3, 5)]
    choice = strategy(paths, ArkSettings(elephant_bytes=1.0, delay_s=0.0, port_search=16384)).choose(
        src, dst, 1e9, 50000)
    assert choice.path_index == 2


# ---- messages: slowest link, wire time at the share bulk flows leave, queue pairs and the context cache ------
@pytest.fixture(scope="module")
def testbed():
    return load_topology(shipped_topology("paper-testbed"))


def test_a_message_behind_another_holds_the_wire_at_the_share_bulk_flows_leave(testbed):
    """Three elephants on h0.g0's 25 GB/s uplink leave a fourth flow 6.25 GB/s: a 250 kB message holds the wire
    40 us, so an equal message sent at the same instant waits those 40 us (not the 10 us at the full rate)."""
    env = simpy.Environment()
    engine = FlowEngine(env, testbed)
    for gpu in ("h1.g0", "h1.g1", "h1.g2"):
        engine.transfer("h0.g0", gpu, 1e12)
    env.run(until=1e-3)
    kw = dict(t_probe_s=0.0, single_block_Bps=25e9, now=1e-3)
    first = engine.message_delay("h0.g0", "h1.g3", 250e3, **kw)
    second = engine.message_delay("h0.g0", "h1.g3", 250e3, **kw)
    assert second - first == pytest.approx(250e3 / 6.25e9, rel=1e-9)


def test_a_query_and_its_reply_share_one_queue_pair(testbed):
    """A requester's NIC keeps 2 queue-pair contexts and talks to two holders, a query out and a reply back each:
    two queue pairs (both directions of a requester-holder pair are one), so nothing ever misses."""
    env = simpy.Environment()
    model = MessageModel(MessageModelParams(nic_context_slots=2, nic_active_window_s=1.0, nic_miss_s=5e-6))
    engine = FlowEngine(env, testbed, message_model=model)
    now = 0.0
    for _round in range(4):
        for holder in ("h1.g0", "h1.g1"):
            for src, dst in (("h0.g0", holder), (holder, "h0.g0")):
                engine.message_delay(src, dst, 1e3, t_probe_s=0.0, single_block_Bps=25e9, now=now)
                now += 1e-6
    assert model.misses == 0
    engine.message_delay("h0.g0", "h1.g2", 1e3, t_probe_s=0.0, single_block_Bps=25e9, now=now)   # a third pair
    assert model.misses == 1


def test_messages_spread_over_every_spine(tmp_path):
    """Each pair's messages take the ECMP path of its queue pair's port: over 8 x 7 x 8 cross-leaf pairs on 4
    spines every spine carries about a quarter of the pairs (448 pairs: 112 each, 5 standard deviations 46)."""
    topo = load_topology(shipped_topology("ark-leafspine"))
    env = simpy.Environment()
    engine = FlowEngine(env, topo)
    counts: dict[str, int] = {}
    for a in range(0, 64, 8):
        for b in range(64):
            if topo.leaf_of(a) != topo.leaf_of(b):
                spine = engine.message_route(topo.gpus[a], topo.gpus[b]).spine
                counts[spine] = counts.get(spine, 0) + 1
    assert sorted(counts) == ["spine0", "spine1", "spine2", "spine3"]
    assert all(abs(count - 112) < 46 for count in counts.values()), counts


# ---- telemetry: utilisation with messages, the tier p99, windows that merge -------------------------------
class OneLink:
    """One 1 GB/s link between 'a' and 'b' (tier nic-leaf), no latency."""

    def __init__(self) -> None:
        self.links = [Link(0, "a", "b", 1e9, 0.0, "nic-leaf", "test")]
        self.gpus = ["a", "b"]

    def index(self, name: str) -> int:
        return self.gpus.index(name)

    def path_ids(self, ia: int, ib: int, choice: int = 0):
        return ((0,), None) if (ia, ib) == (0, 1) else ((), None)

    def ecmp_choice(self, ia: int, ib: int, key: int, seed: int) -> int:
        return 0

    def n_choices(self, ia: int, ib: int) -> int:
        return 1


def test_mean_utilisation_counts_message_bytes():
    """10 messages of 1 MB on a 1 GB/s link over 0.1 s: 10 MB / (1 GB/s x 0.1 s) = 10% mean utilisation."""
    env = simpy.Environment()
    engine = FlowEngine(env, OneLink())
    for i in range(10):
        engine.message_delay("a", "b", 1e6, t_probe_s=0.0, single_block_Bps=1e9, now=i * 1e-2)
    env.run(until=0.1)
    links = engine.telemetry.links_columns()
    assert links["message_bytes"][0] == pytest.approx(10e6)
    assert links["mean_utilisation"][0] == pytest.approx(0.1, rel=1e-9)


def test_the_tier_p99_is_the_99th_percentile_of_its_window_utilisations():
    """A 3 MB flow fills the 1 GB/s link for the first 3 of 100 windows of 1 ms: the tier's window utilisations
    are three 1s and 97 0s, whose 99th percentile (linear) is 1 and whose 95th is 0."""
    env = simpy.Environment()
    engine = FlowEngine(env, OneLink())
    engine.transfer("a", "b", 3e6)
    env.run(until=0.1)
    tier = engine.telemetry.bottlenecks()["tiers"]["nic-leaf"]
    assert tier["p99_utilisation"] == pytest.approx(float(np.percentile([1.0] * 3 + [0.0] * 97, 99)))
    assert tier["p99_utilisation"] == pytest.approx(1.0) and tier["peak_utilisation"] == pytest.approx(1.0)


def test_windows_that_merge_keep_every_byte():
    """0.1 ms windows over a 0.3 s run: 3,000 windows merge (1,024 kept at most, the window doubling), and the
    bytes per window still add up to the 150 MB a 1 GB/s flow carried in its 150 ms."""
    env = simpy.Environment()
    engine = FlowEngine(env, OneLink(), telemetry_window_s=1e-4)
    engine.transfer("a", "b", 150e6)
    env.run(until=0.3)
    matrix, durations, window = engine.telemetry.window_matrix()
    assert window > 1e-4 and durations.sum() == pytest.approx(0.3, rel=1e-9)
    assert float(matrix[:, 0].astype(float).sum()) == pytest.approx(150e6, rel=1e-6)
