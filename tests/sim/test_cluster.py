"""Cluster components one at a time: chunk store and LRU, placements, routers, the fabric check, the
routed-exchange service."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import yaml

from simroute.calib import default_profile_path
from simroute.errors import ConfigurationError
from simroute.network import shipped_topology
from simroute.scenarios.traces import single_chunk_trace
from simroute.sim import RunConfig, Simulation
from simroute.sim.arrivals import RequestSpec
from simroute.sim.cluster import ChunkStore, Instance
from simroute.network.hashing import mix64
from simroute.sim.placement import ChunkTable, mix64_array
from simroute.sim.placements import PLACEMENTS
from simroute.sim.routers import ROUTERS


# ---- ChunkStore and LRU ---------------------------------------------------------------------------------
def _store(n=6, tokens=100, kv=1.0):
    return ChunkStore(np.arange(n, dtype=np.int64), np.full(n, tokens), np.zeros(n, np.int64), np.zeros(n, bool),
                      np.full(n, -1), kv)


def _instance(capacity):
    return Instance(id=0, gpu="h0.g0", host=0, capacity_bytes=capacity, compute=None, holder_server=None,
                    staging=None)


def test_lru_evicts_the_least_recently_used_copy():
    store, inst = _store(), _instance(300.0)          # room for three 100-byte copies
    for chunk in (0, 1, 2):
        assert store.add_copy(chunk, inst)
    store.touch(0, inst)                               # 1 is now the least recently used
    assert store.add_copy(3, inst)
    assert list(inst.copies) == [2, 0, 3]
    assert not store.resident_on(1, 0) and store.resident_on(0, 0) and store.resident_on(3, 0)
    assert inst.evictions == 1 and inst.copy_bytes == 300.0


def test_readding_a_resident_copy_refreshes_it_without_a_second_copy():
    store, inst = _store(), _instance(300.0)
    for chunk in (0, 1, 2):
        store.add_copy(chunk, inst)
    assert store.add_copy(0, inst)
    assert list(inst.copies) == [1, 2, 0] and inst.copy_bytes == 300.0 and store.holders[0] == [0]


def test_pinned_copies_are_never_evicted_and_a_copy_that_cannot_fit_is_refused():
    store, inst = _store(), _instance(200.0)
    store.add_copy(0, inst)
    store.add_copy(1, inst)
    store.pin(0, 0)
    assert store.add_copy(2, inst)                     # evicts 1 (unpinned), not 0
    assert list(inst.copies) == [0, 2]
    store.pin(2, 0)
    assert not store.add_copy(3, inst)                 # both resident copies pinned
    assert inst.refused == 1 and not store.resident_on(3, 0)
    store.unpin(0, 0)
    store.unpin(2, 0)
    assert not store.pins


def test_eviction_frees_only_as_many_copies_as_needed():
    store, inst = _store(tokens=100), _instance(400.0)
    for chunk in range(4):
        store.add_copy(chunk, inst)
    assert store.add_copy(4, inst)
    assert list(inst.copies) == [1, 2, 3, 4] and inst.evictions == 1


def test_pinned_bytes_reduce_free_hbm():
    inst = _instance(1000.0)
    inst.pinned_bytes = 600.0
    inst.copies, inst.copy_bytes = OrderedDict({0: 100.0}), 100.0
    assert inst.free_bytes == 300.0


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
        self.instances = [_instance(1.0) for _ in range(n)]
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
                     calib=str(default_profile_path()), **kw)


def test_a_fabric_the_profile_lacks_fails_at_construction(tmp_path):
    """The topology's NIC fabric is missing from the profile: the run refuses to build, naming it."""
    spec = yaml.safe_load(shipped_topology("paper-testbed").read_text())
    spec["nic"]["fabric"] = "no-such-fabric"
    topo = tmp_path / "t.yaml"
    topo.write_text(yaml.safe_dump(spec))
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=4, holder=0)
    cfg = RunConfig(topology=str(topo), trace=str(trace), calib=str(default_profile_path()))
    with pytest.raises(ConfigurationError, match="no-such-fabric") as err:
        Simulation(cfg)
    assert "fabrics.no-such-fabric" in str(err.value)


def _exchanges(tmp_path, window_us):
    sim = Simulation(_testbed_cfg(single_chunk_trace(tmp_path / "t.parquet", requester=4, holder=0),
                                  dispatch_window_us=window_us, batch_window_us=0.0))
    return sim.ctx, sim.ctx.cluster.instances


def test_dispatcher_coalesces_same_chunk_queries_within_its_window(tmp_path):
    ctx, inst = _exchanges(tmp_path, 5.0)
    ends = []

    def query(t, rows):
        yield ctx.env.timeout(t)
        yield ctx.exchanges.exchange(inst[4], inst[0], rows, 2048.0, 0, 1)
        ends.append(ctx.env.now)
    for t in (0.0, 2e-6):
        ctx.env.process(query(t, 16))
    ctx.env.process(query(20e-6, 16))                  # after the window: a second message
    ctx.env.run()
    assert ctx.exchanges.queries == 3 and ctx.exchanges.messages == 2
    assert ends[0] == ends[1] < ends[2]
    assert inst[0].holder_server.queries == 2          # one holder query per message


def test_dispatcher_keeps_other_chunks_and_holders_apart_and_window_zero_sends_at_once(tmp_path):
    ctx, inst = _exchanges(tmp_path, 5.0)
    ctx.exchanges.exchange(inst[4], inst[0], 16, 2048.0, 0, 1)
    ctx.exchanges.exchange(inst[4], inst[0], 16, 1024.0, 0, 1)
    ctx.exchanges.exchange(inst[4], inst[1], 16, 2048.0, 0, 1)
    assert ctx.exchanges.messages == 3
    ctx, inst = _exchanges(tmp_path, 0.0)
    done = ctx.exchanges.exchange(inst[4], inst[0], 16, 2048.0, 0, 1)
    assert not ctx.exchanges.open                      # nothing held back
    ctx.env.run()
    assert done.triggered


def test_exchange_round_trip_is_message_out_holder_batch_message_back(tmp_path):
    ctx, inst = _exchanges(tmp_path, 0.0)
    fabric = ctx.cluster.fabric(inst[4], inst[0])
    g, rows = ctx.params.geometry, 64
    done = ctx.exchanges.exchange(inst[4], inst[0], rows, 2048.0, 0, 1)
    ctx.env.run()
    work, premium = ctx.compute.partial_work(rows, 2048.0, 0)
    out = fabric.t_probe_s + rows * g.q_bytes / fabric.single_block_Bps
    back = fabric.turnaround_s + rows * g.p_bytes / fabric.single_block_Bps
    assert done.triggered
    assert ctx.env.now == pytest.approx(out + ctx.compute.batch_s(work) * premium + back, rel=1e-6)
    assert ctx.exchanges.wire_bytes(rows, 1) == rows * g.qp_bytes
