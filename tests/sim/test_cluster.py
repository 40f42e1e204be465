"""Cluster components one at a time: chunk store pins, placements, routers, the fabric check, the
routed-exchange service."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from simroute.calib import default_profile_path
from simroute.errors import ConfigurationError
from simroute.network import shipped_topology
from simroute.scenarios.traces import single_chunk_trace
from simroute.sim import RunConfig, Simulation
from simroute.sim.request_spec import RequestSpec
from simroute.sim.cluster import ChunkStore, Instance
from simroute.network.hashing import mix64
from simroute.sim.placements.base import ChunkTable, mix64_array
from simroute.sim.placements import PLACEMENTS
from simroute.sim.routers import ROUTERS
from simroute.defaults import PAPER_DEPLOYMENT


def _instance():
    return Instance(id=0, gpu="h0.g0", host=0, staging=None)


def test_chunk_pins_count_the_requests_relying_on_a_copy():
    store = ChunkStore(np.arange(4, dtype=np.int64), np.full(4, 100), np.zeros(4, np.int64), np.zeros(4, bool),
                       np.full(4, -1), 1.0)
    store.pin(0, 0)
    store.pin(0, 0)
    store.unpin(0, 0)
    assert store.pins == {(0, 0): 1}
    store.unpin(0, 0)
    assert not store.pins


def test_a_batch_of_chunk_ids_maps_to_the_stores_dense_indices():
    """Ids in any order (the store's are not sorted), repeated or absent: each known id gets its index in the
    store, an absent one (beyond either end or between two ids) is marked unknown."""
    ids = np.array([40, 7, 19, 3], dtype=np.int64)
    store = ChunkStore(ids, np.full(4, 100), np.zeros(4, np.int64), np.zeros(4, bool), np.full(4, -1), 1.0)
    index, known = store.indices_of(np.array([19, 3, 3, 40, 7, 8, 99, 1], dtype=np.int64))
    assert known.tolist() == [True] * 5 + [False] * 3
    assert index[:5].tolist() == [2, 3, 3, 0, 1]
    empty = ChunkStore(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0), 1.0)
    assert empty.indices_of(np.array([5], dtype=np.int64))[1].tolist() == [False]


# ---- placements --------------------------------------------------------------------------------------
def test_vectorised_mix64_equals_the_network_hash():
    xs = np.array([0, 1, 2, 12345, 2**40 + 7], dtype=np.uint64)
    assert [int(v) for v in mix64_array(xs)] == [mix64(int(x)) for x in xs]


def _table(n, size=1.0, hint=-1):
    return ChunkTable(np.arange(n, dtype=np.int64), np.full(n, size), np.ones(n, bool), np.full(n, hint))


@pytest.mark.parametrize("kind", ["hash", "consistent-hash", "popularity"])
def test_placement_never_exceeds_an_instances_hbm(kind):
    pop = np.arange(100, dtype=float)
    res = PLACEMENTS.get(kind)(seed=0, replicas=2, hot_fraction=0.1).place(_table(100, size=10.0), 4, 100.0, pop)
    assert res.used_bytes.max() <= 100.0 and res.used_bytes.sum() == 400.0
    assert res.overflow_chunks == 100 - sum(len(h) for h in res.holders) and res.overflow_bytes == \
        10.0 * res.overflow_chunks


def test_hinted_home_comes_first_and_non_canonical_chunks_are_not_placed():
    table = ChunkTable(np.arange(4, dtype=np.int64), np.ones(4), np.array([True, True, False, True]),
                       np.array([5, -1, 5, 2]))
    res = PLACEMENTS.get("hash")(seed=0).place(table, 8, 1e9)
    assert res.holders[0] == [5] and res.holders[3] == [2] and res.holders[2] == []


def test_placement_is_a_function_of_the_seed():
    place = lambda seed: PLACEMENTS.get("hash")(seed=seed).place(_table(500), 16, 1e9).holders
    assert place(3) == place(3) and place(3) != place(4)


def test_consistent_hash_moves_few_chunks_when_an_instance_joins():
    n = 4000
    before = PLACEMENTS.get("consistent-hash")(seed=1).place(_table(n), 16, 1e12).holders
    after = PLACEMENTS.get("consistent-hash")(seed=1).place(_table(n), 17, 1e12).holders
    moved = sum(a != b for a, b in zip(before, after))
    assert 0 < moved < 0.15 * n                        # ~1/17 of the chunks, not a reshuffle
    hashed = [PLACEMENTS.get("hash")(seed=1).place(_table(n), k, 1e12).holders for k in (16, 17)]
    assert sum(a != b for a, b in zip(*hashed)) > 0.5 * n


def test_popularity_replicates_only_the_hottest_chunks():
    pop = np.zeros(100)
    pop[[7, 42]] = [50, 40]
    res = PLACEMENTS.get("popularity")(seed=0, replicas=3, hot_fraction=0.02).place(_table(100), 8, 1e9, pop)
    assert len(res.holders[7]) == len(res.holders[42]) == 3 and res.replicated_chunks == 2
    assert all(len(h) == 1 for i, h in enumerate(res.holders) if i not in (7, 42))


# ---- routers -----------------------------------------------------------------------------------------
class _Cluster:
    """The part of `Cluster` a router reads."""

    def __init__(self, n, holders=None, tokens=None):
        self.instances = [_instance() for _ in range(n)]
        for i, inst in enumerate(self.instances):
            inst.id = i
        self.active = np.zeros(n, dtype=np.int64)
        self.chunks = type("Chunks", (), {"holders": holders or [], "tokens": np.array(tokens or [])})()


def _spec(hint=-1, chunks=()):
    return RequestSpec(0, hint, -1, 16, 2, list(chunks), [True] * len(chunks), 0, 0)


def test_hint_router_uses_the_hint_and_drops_an_out_of_range_one():
    router, cluster = ROUTERS.get("hint")(), _Cluster(4)
    assert router.pick(_spec(hint=2), cluster).id == 2
    assert router.pick(_spec(hint=9), cluster) is None
    cluster.active[:] = [3, 0, 2, 1]
    assert router.pick(_spec(), cluster).id == 1       # no hint: least loaded


def test_round_robin_cycles_and_ignores_hints():
    router, cluster = ROUTERS.get("round-robin")(), _Cluster(3)
    assert [router.pick(_spec(hint=0), cluster).id for _ in range(4)] == [1, 2, 0, 1]


def test_least_loaded_picks_the_idlest_and_rotates_ties():
    router, cluster = ROUTERS.get("least-loaded")(), _Cluster(4)
    cluster.active[:] = [1, 0, 1, 0]
    assert {router.pick(_spec(hint=0), cluster).id for _ in range(4)} == {1, 3}


def test_locality_router_goes_where_most_chunk_tokens_are():
    cluster = _Cluster(4, holders=[[2], [3], [3]], tokens=[500, 100, 100])
    assert ROUTERS.get("locality")().pick(_spec(chunks=[0, 1, 2]), cluster).id == 2   # 500 > 100 + 100
    cluster.chunks.holders = [[2], [3], [3]]
    cluster.chunks.tokens = np.array([100, 100, 100])
    assert ROUTERS.get("locality")().pick(_spec(chunks=[0, 1, 2]), cluster).id == 3


# ---- the cluster as built by a run ---------------------------------------------------------------------
def _testbed_cfg(trace, **kw):
    return RunConfig(topology=str(shipped_topology("paper-testbed")), trace=str(trace),
                     calib=str(default_profile_path()), **{**PAPER_DEPLOYMENT, **kw})


def test_a_fabric_the_profile_lacks_fails_at_construction(tmp_path):
    """The topology's NIC fabric is missing from the profile: the run refuses to build, naming it."""
    spec = yaml.safe_load(shipped_topology("paper-testbed").read_text())
    spec["nic"]["fabric"] = "no-such-fabric"
    topo = tmp_path / "t.yaml"
    topo.write_text(yaml.safe_dump(spec))
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=4, holder=0)
    cfg = RunConfig(**PAPER_DEPLOYMENT, topology=str(topo), trace=str(trace), calib=str(default_profile_path()))
    with pytest.raises(ConfigurationError, match="no-such-fabric") as err:
        Simulation(cfg)
    assert "fabrics.no-such-fabric" in str(err.value)


@pytest.mark.parametrize("topology", ["fattree", "paper-testbed", "rail-optimized"])
def test_a_fabric_row_is_each_pairs_fabric(tmp_path, topology):
    """`Cluster.fabric_row` (one fabric across hosts, each same-host instance its own) equals `fabric_id` pair
    by pair, and the row names both fabrics the topology has (NVLink in the host, the NICs across)."""
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=0, holder=1)
    sim = Simulation(RunConfig(**PAPER_DEPLOYMENT, topology=str(shipped_topology(topology)), trace=str(trace),
                               calib=str(default_profile_path())))
    cluster = sim.ctx.cluster
    for src in cluster.instances[::5]:
        row = cluster.fabric_row(src)
        assert row == [cluster.fabric_id(src, dst) if dst is not src else row[src.id] for dst in cluster.instances]
        assert len({fabric for dst, fabric in zip(cluster.instances, row) if dst is not src}) == 2


def test_instances_on_two_trays_of_one_nvlink_domain_are_on_nvlink(tmp_path):
    """An NVLink domain of 2 hosts (trays) of 2 GPUs, two domains: the fabric between instances follows the
    domain, not the host: tray 0 to tray 1 is NVLink (never the NIC), tray 0 to tray 2 the NIC fabric."""
    doc = {"name": "two-domains", "kind": "nvlink-domain",
           "hosts": {"count": 4, "gpus_per_host": 2, "gpu": "h100", "intra": {"kind": "nvswitch", "link_GBps": 450,
                                                                             "fabric": "h100-nvlink4"}},
           "nic": {"per": "gpu", "rate_GBps": 25, "fabric": "h100-ibgda"},
           "network": {"hosts_per_domain": 2, "spines": 2}}
    topo = tmp_path / "domains.yaml"
    topo.write_text(yaml.safe_dump(doc))
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=0, holder=1)
    sim = Simulation(RunConfig(**{**PAPER_DEPLOYMENT, "tp": 1}, topology=str(topo), trace=str(trace),
                               calib=str(default_profile_path())))
    cluster, params = sim.ctx.cluster, sim.ctx.params
    by_gpu = {inst.gpu: inst for inst in cluster.instances}
    nvlink, nic = params.fabric_index["h100-nvlink4"], params.fabric_index["h100-ibgda"]
    row = cluster.fabric_row(by_gpu["h0.g0"])
    assert [row[by_gpu[gpu].id] for gpu in ("h0.g1", "h1.g0", "h1.g1", "h2.g0", "h3.g1")] == [nvlink] * 3 + [nic] * 2
    assert (by_gpu["h1.g0"].host, by_gpu["h2.g0"].host) == (1, 2)      # hosts stay the trays


def test_least_active_index_equals_the_counts_least_at_every_step():
    """`LeastActive` (the least-loaded router's index) names exactly flatnonzero(active == active.min()), in
    order, after every begin and end of a random sequence of requests."""
    from simroute.sim.cluster import LeastActive
    rng = np.random.default_rng(3)
    n, index = 9, LeastActive(9)
    active = np.zeros(n, dtype=np.int64)
    for _ in range(2000):
        busy = np.flatnonzero(active)
        if busy.size and rng.random() < 0.45:
            i = int(rng.choice(busy))
            active[i] -= 1
            index.ended(i)
        else:
            i = int(rng.integers(n))
            active[i] += 1
            index.began(i)
        assert index.ids() == np.flatnonzero(active == active.min()).tolist()
        assert index.counts == active.tolist()


def test_least_loaded_router_reads_the_index_as_it_reads_the_counts():
    """The router's answer from a run cluster's index equals its answer from the counts alone (same rotation)."""
    from simroute.sim.cluster import LeastActive
    indexed, plain = _Cluster(5), _Cluster(5)
    indexed.least_active = LeastActive(5)
    a, b = ROUTERS.get("least-loaded")(), ROUTERS.get("least-loaded")()
    for i in [0, 2, 2, 4, 1, 3, 0]:
        indexed.active[i] += 1
        plain.active[i] += 1
        indexed.least_active.began(i)
        assert a.pick(_spec(), indexed).id == b.pick(_spec(), plain).id


def test_a_run_clusters_least_loaded_answer_follows_active_through_begins_and_ends(tmp_path):
    """A run's cluster keeps its least-loaded index beside `active`: the router's pick from it equals its pick
    from `active` alone after begins and ends, and after an end without its begin (a test driving `finish`),
    where the index is dropped and `active` answers."""
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=0, holder=1)
    cluster = Simulation(_testbed_cfg(trace)).ctx.cluster
    plain = _Cluster(len(cluster.instances))
    assert cluster.least_active is not None
    a, b = ROUTERS.get("least-loaded")(), ROUTERS.get("least-loaded")()
    for instance, began in [(0, True), (3, True), (0, True), (3, False), (1, True), (0, False), (5, False)]:
        if began:
            cluster.request_began(instance)
        else:
            cluster.request_ended(instance)
        plain.active[:] = cluster.active
        assert a.pick(_spec(), cluster.router_view).id == b.pick(_spec(), plain).id
    assert cluster.least_active is None and cluster.active[5] == -1     # the unmatched end at 5
