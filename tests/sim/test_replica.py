"""The replica choice (`ReplicaChoice`): which holder of a replicated chunk a request uses, read from the
holder engines' state (`HolderLoad`): on the nearest replica's fabric, the least loaded, then the nearest, ties
spread."""

from __future__ import annotations

import pytest

from simroute.calib import default_profile_path
from simroute.network import shipped_topology
from simroute.scenarios.traces import single_chunk_trace
from simroute.sim import RunConfig, Simulation
from simroute.sim.engine.serving import serve
from simroute.sim.holder import ReplicaChoice, holder_load
from simroute.defaults import PAPER_DEPLOYMENT


@pytest.fixture
def sim(tmp_path):
    """The paper testbed (hosts 0-3 and 4-7), chunk 0 held by 5 and 6 (requester 4's host)."""
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=4, holder=0)
    sim = Simulation(RunConfig(**PAPER_DEPLOYMENT, topology=str(shipped_topology("paper-testbed")), trace=str(trace),
                               calib=str(default_profile_path())))
    _hold(sim.ctx, 0, [5, 6])
    return sim


def _hold(ctx, chunk: int, instances: list[int]) -> None:
    """`chunk` held by exactly `instances`: the chunk table's list and the per-instance held sets agree, as
    ChunkCopies keeps them (the replica choice reads both)."""
    holders = ctx.cluster.chunks.holders
    while len(holders) <= chunk:
        holders.append([])
    for held_here in ctx.copies.held_at:
        held_here.discard(chunk)
    holders[chunk] = list(instances)
    for h in instances:
        ctx.copies.held_at[h].add(chunk)


def _pick(sim, requester: int) -> int | None:
    return ReplicaChoice(sim.ctx, sim.instances[requester]).pick(0)


def test_a_same_host_replica_is_nearest_nobody_none_and_idle_ties_spread_over_replicas(sim):
    _hold(sim.ctx, 0, [1, 5, 6])
    assert _pick(sim, 0) == 1 and _pick(sim, 4) in (5, 6)
    _hold(sim.ctx, 0, [5, 6])                 # both remote for host 0's requesters, all engines idle
    assert {_pick(sim, r) for r in range(4)} == {5, 6}
    _hold(sim.ctx, 0, [6])
    assert _pick(sim, 4) == 6
    _hold(sim.ctx, 0, [])
    assert _pick(sim, 4) is None


def test_a_holder_engine_busy_with_its_own_batch_is_avoided(sim):
    first = _pick(sim, 4)
    other = 11 - first                        # the other of 5 and 6
    for rid in range(8):                      # its own sequences: it is mid-iteration when the choice is made
        serve(sim.ctx.engines, first, rid, prompt=2048, output=64)
    sim.env.run(until=1e-4)
    busy, idle = holder_load(sim.ctx, sim.instances[first], 4), holder_load(sim.ctx, sim.instances[other], 4)
    assert busy.sequences == 8 and idle.sequences == 0 and busy.wait_s > idle.wait_s == 0.0
    assert _pick(sim, 4) == other


def test_queued_partials_of_other_requesters_are_avoided_the_requesters_own_are_not(sim):
    first = _pick(sim, 4)
    partials = sim.ctx.engines[first].partials
    now = sim.env.now
    partials.add(1e-4, 1000.0, 1.0, now, 1.0, False, requester=4)     # requester 4 itself routing there
    assert _pick(sim, 4) == first             # its own queries share the holder's kernel calls
    partials.add(1e-4, 5000.0, 1.0, now, 1.0, False, requester=7)     # another requester: half its GPU
    assert holder_load(sim.ctx, sim.instances[first], 4).wait_s > 0
    assert _pick(sim, 4) == 11 - first


def test_without_a_requester_nobodys_demand_is_left_out(sim):
    """`holder_wait_s`, `holder_load` and `holder_loads` read every requester's demand unless told whose to
    leave out (the default, -1, is nobody: instance 1's demand counts)."""
    from simroute.sim.holder import holder_loads, holder_wait_s
    partials = sim.ctx.engines[5].partials
    partials.add(1e-4, 5000.0, 1.0, sim.env.now, 1.0, False, requester=1)
    holder = sim.instances[5]
    assert holder_wait_s(sim.ctx, holder) > 0 and holder_load(sim.ctx, holder).wait_s > 0
    assert holder_loads(sim.ctx, [5])[0].wait_s > 0
    assert holder_wait_s(sim.ctx, holder, 1) == holder_load(sim.ctx, holder, 1).wait_s == 0.0


def test_each_holder_load_is_read_once_per_request(sim, monkeypatch):
    """Holders that requesters route to are read from their engines (their wait at the others' demand): once
    per request. Without demand the choice reads the run's `LoadBoard` and no holder's engine."""
    import simroute.sim.holder as holder
    reads = []
    real = holder.holder_loads
    monkeypatch.setattr(holder, "holder_loads", lambda ctx, hs, r=-1: reads.extend(hs) or real(ctx, hs, r))
    assert len({ReplicaChoice(sim.ctx, sim.instances[4]).pick(0) for _ in range(3)}) == 1 and reads == []
    sim.ctx.engines[5].partials.add(1e-4, 5000.0, 1.0, sim.env.now, 1.0, False, requester=1)
    choice = ReplicaChoice(sim.ctx, sim.instances[4])
    assert len({choice.pick(0) for _ in range(5)}) == 1
    assert sorted(reads) == [5, 6]


def test_requests_already_routing_to_a_holder_come_before_its_engine_state(sim):
    first = _pick(sim, 4)
    other = 11 - first
    for rid in range(8):                      # `other` is the busier engine ...
        serve(sim.ctx.engines, other, rid, prompt=2048, output=64)
    sim.env.run(until=1e-4)
    assert _pick(sim, 4) == first
    sim.ctx.routing[first] = 2                # ... but two requests are committed to routing to `first`
    assert holder_load(sim.ctx, sim.instances[first], 4).routing == 2
    assert _pick(sim, 4) == other


def test_the_routing_count_follows_requests_from_decision_to_finish(tmp_path, monkeypatch):
    """Under always-route every request that routes is counted on its holders while it runs, and nothing is
    left counted once the run is over."""
    from simroute.sim.request import DenseRequest
    from simroute.workload import generate
    trace = generate("agents", tmp_path / "a.parquet", seed=0, params={
        "documents": 1, "doc_tokens": 8192, "subagents": 8, "requests_per_agent": 1})
    counted = []
    real = DenseRequest.start_first_pass

    def spy(self, plan):
        counted.append(all(self.ctx.routing[h] > 0 for h in self.routes) and bool(self.routes))
        return real(self, plan)
    monkeypatch.setattr(DenseRequest, "start_first_pass", spy)
    cfg = RunConfig(**PAPER_DEPLOYMENT, topology=str(shipped_topology("paper-testbed")), trace=str(trace),
                    calib=str(default_profile_path()), policy="always-route")
    run = Simulation(cfg)
    res = run.run()
    assert res.summary["primitive_counts"]["route"] > 0 and any(counted)
    assert set(run.ctx.routing.values()) == {0}


def test_on_one_fabric_the_less_loaded_replica_first_across_fabrics_the_nearest(tmp_path):
    """Fat-tree: from h0, h1 shares the leaf (2 links), h2 and h3 are across a spine (4 links), all over the
    NICs; instance 1 shares h0 (NVLink). A busy replica on the leaf loses to idle ones across the spine (a
    routed exchange's cost does not see the hops; finding P8); between those two, load, then the hash; a busy
    same-host replica is still taken before idle ones over the NICs (another fabric)."""
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=0, holder=8)
    sim = Simulation(RunConfig(**PAPER_DEPLOYMENT, topology=str(shipped_topology("fattree")), trace=str(trace),
                               calib=str(default_profile_path())))
    ctx, inst = sim.ctx, sim.instances
    assert inst[1].host == 0 and inst[8].host == 1 and inst[16].host == 2 and inst[24].host == 3
    assert ctx.path_latency_s(inst[0], inst[8]) < ctx.path_latency_s(inst[0], inst[16]) \
        == ctx.path_latency_s(inst[0], inst[24])
    fabrics = ctx.cluster.fabric_row(inst[0])
    assert fabrics[8] == fabrics[16] != fabrics[1]
    _hold(ctx, 0, [16, 24, 8])
    assert _pick(sim, 0) == 8                  # all idle: the nearest
    for rid in range(8):
        serve(ctx.engines, 8, rid, prompt=2048, output=64)
        serve(ctx.engines, 1, rid, prompt=2048, output=64)
    sim.env.run(until=1e-4)
    assert holder_load(ctx, inst[8], 0).wait_s > 0 and holder_load(ctx, inst[1], 0).wait_s > 0
    first = _pick(sim, 0)
    assert first in (16, 24)
    ctx.routing[first] = 1
    assert _pick(sim, 0) == 40 - first
    _hold(ctx, 0, [16, 24, 8, 1])
    assert _pick(sim, 0) == 1


@pytest.mark.parametrize("only", [5, 6])
def test_a_request_keeps_its_chunks_on_a_holder_it_already_uses(sim, only):
    """A routed request ships its query block once per distinct holder: a chunk that a holder this request
    already uses also holds goes there, whichever of two idle, equally near copies the hash would pick."""
    _hold(sim.ctx, 0, [only])
    _hold(sim.ctx, 1, [5, 6])                 # a second chunk, held by both
    choice = ReplicaChoice(sim.ctx, sim.instances[4])
    assert choice.pick(0) == only and choice.pick(1) == only
    alone = {ReplicaChoice(sim.ctx, sim.instances[r]).pick(1) for r in range(8)}
    assert alone == {5, 6}                    # without the first chunk, requesters spread over both


def _reference_pick(ctx, requester, holders: list[int]) -> int:
    """The rule as documented, every holder's fabric, distance and load read: the nearest holder's fabric, then
    least HolderLoad, then nearest, then the hash."""
    from simroute.network.hashing import mix64
    inst = ctx.cluster.instances
    latency = {h: ctx.path_latency_s(requester, inst[h]) for h in holders}
    fabric = {h: ctx.cluster.fabric_id(requester, inst[h]) for h in holders}
    nearest_fabric = fabric[min(holders, key=lambda h: (latency[h], holders.index(h)))]
    on = [h for h in holders if fabric[h] == nearest_fabric]
    loads = {h: holder_load(ctx, inst[h], requester.id) for h in on}
    least = min(loads.values())
    tied = [h for h in on if loads[h] == least]
    nearest = min(latency[h] for h in tied)
    return min((h for h in tied if latency[h] == nearest), key=lambda h: mix64(h * 1_000_003 + requester.id))


@pytest.mark.parametrize("busy", [0, 24])
def test_the_choice_equals_the_documented_rule_on_random_holder_sets(tmp_path, busy):
    """The nearest holder's fabric, then least HolderLoad, then nearest, then the hash: on random holder sets (2
    to all 64 instances of the fat-tree, same-host ones among them: the choice settles those from the
    requester's host alone), random routing counts and `busy` engines mid-batch with their own sequences, the
    choice is the rule's with every holder's fabric, distance and load read."""
    import random
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=0, holder=8)
    sim = Simulation(RunConfig(**PAPER_DEPLOYMENT, topology=str(shipped_topology("fattree")), trace=str(trace),
                               calib=str(default_profile_path())))
    ctx, rng = sim.ctx, random.Random(7 + busy)
    n = len(sim.instances)
    for engine in rng.sample(range(n), busy):
        for rid in range(rng.randrange(1, 4)):
            serve(ctx.engines, engine, 1000 * engine + rid, prompt=2048, output=64)
    if busy:
        sim.env.run(until=1e-4)
        assert sum(ctx.engines[e].busy for e in range(n)) == busy
    for _ in range(300):
        holders = rng.sample(range(n), rng.choice([2, 3, 8, 20, 40, 60, n]))
        _hold(ctx, 0, holders)
        ctx.routing.clear()
        ctx.routing.update({h: rng.choice([0, 0, 1, 2]) for h in rng.sample(range(n), 10)})
        requester = sim.instances[rng.randrange(n)]
        if requester.id in holders:
            continue                              # a resident chunk never reaches the replica choice
        assert ReplicaChoice(ctx, requester).pick(0) == _reference_pick(ctx, requester, holders)


@pytest.mark.parametrize("busy", [0, 1])
def test_among_two_used_holders_of_a_chunk_the_rule_picks_and_a_nearer_unused_copy_loses(sim, busy):
    """A request already using holders 0 and 1 (host 0) for two chunks: a third chunk that both hold, and
    instance 5 on the requester's own host too, goes to one of the two (one query block fewer than a third
    holder), the less loaded of them: the rule over the used holders only."""
    _hold(sim.ctx, 0, [0])
    _hold(sim.ctx, 1, [1])
    _hold(sim.ctx, 2, [0, 1, 5])
    for rid in range(8):                      # one of the two is busy with its own sequences
        serve(sim.ctx.engines, busy, rid, prompt=2048, output=64)
    sim.env.run(until=1e-4)
    choice = ReplicaChoice(sim.ctx, sim.instances[4])
    assert choice.pick(0) == 0 and choice.pick(1) == 1
    assert choice.pick(2) == 1 - busy
    assert _reference_pick(sim.ctx, sim.instances[4], [0, 1]) == 1 - busy


def test_a_used_holder_that_lacks_the_chunk_is_not_taken(sim):
    """The one holder a request uses so far does not hold the next chunk: the choice is the nearest holder
    that does, never the used one."""
    _hold(sim.ctx, 0, [0])                    # across the hosts from requester 4
    _hold(sim.ctx, 1, [5, 6])                 # on requester 4's host
    choice = ReplicaChoice(sim.ctx, sim.instances[4])
    assert choice.pick(0) == 0 and choice.pick(1) in (5, 6)


def test_classify_notes_every_holder_its_chunks_use_so_later_chunks_stay_there(sim):
    """`classify_chunks` adds each remote chunk's holder to the request's used holders (once per run of one
    holder): a chunk held by two equally near copies goes to the one an earlier chunk uses, even when that
    holder was not the request's first."""
    from simroute.sim.request import DenseRequest
    from simroute.sim.request_spec import RequestSpec
    _hold(sim.ctx, 0, [0])
    _hold(sim.ctx, 2, [5, 6])
    alone = ReplicaChoice(sim.ctx, sim.instances[4]).pick(2)
    other = 11 - alone                        # the copy chunk 2 would not go to on its own
    _hold(sim.ctx, 1, [other])
    spec = RequestSpec(0, 4, -1, 16, 4, [0, 1, 2], [True, True, True], 0, 0)
    plan = DenseRequest(sim.ctx, spec, sim.instances[4], None).classify_chunks()
    assert plan.remote.chunks == [0, 1, 2] and plan.remote.holders == [0, other, other]


def test_the_choice_equals_the_rule_when_a_host_peer_is_not_the_nearest_or_its_fabrics_differ(tmp_path, monkeypatch):
    """The choice settles a chunk from the requester's own host only when a holder there is nearer than any
    instance off it and the nearest there are on one fabric that is not the one across hosts. Distances and
    fabrics drawn at random (same-host peers farther than remote instances, on several fabrics, on the NIC
    fabric's id), half the engines busy, must give the rule's answer too."""
    import random
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=0, holder=8)
    sim = Simulation(RunConfig(**PAPER_DEPLOYMENT, topology=str(shipped_topology("fattree")), trace=str(trace),
                               calib=str(default_profile_path())))
    ctx, cluster, rng = sim.ctx, sim.ctx.cluster, random.Random(3)
    n = len(sim.instances)
    for engine in rng.sample(range(n), n // 2):       # half the engines mid-batch: loads differ
        for rid in range(rng.randrange(1, 4)):
            serve(ctx.engines, engine, 1000 * engine + rid, prompt=2048, output=64)
    sim.env.run(until=1e-4)
    rows: dict[int, list[float]] = {}
    fabric_rows: dict[int, list[int]] = {}
    for inst in sim.instances:
        far = cluster.fabric_row(inst)[next(i for i in range(n) if sim.instances[i].host != inst.host)]
        same = [sim.instances[i].host == inst.host for i in range(n)]
        rows[inst.id] = [rng.choice([1e-6, 2e-6]) if same[i] else rng.choice([2e-6, 3e-6]) for i in range(n)]
        if rng.random() < 0.3:                      # a remote instance as near as the nearest peers can be
            rows[inst.id][rng.choice([i for i in range(n) if not same[i]])] = 1e-6
        fabric_rows[inst.id] = [far if sim.instances[i].host != inst.host else rng.choice([far, 0, 1, 2])
                                for i in range(n)]
    monkeypatch.setattr(type(ctx), "latency_row", lambda self, src: rows[src.id])
    monkeypatch.setattr(type(cluster), "fabric_row", lambda self, src: fabric_rows[src.id])
    monkeypatch.setattr(type(cluster), "fabric_id", lambda self, a, b: fabric_rows[a.id][b.id])
    cluster._near_views.clear()
    for _ in range(1500):
        holders = rng.sample(range(n), rng.choice([2, 3, 8, 20, 40, n]))
        _hold(ctx, 0, holders)
        requester = sim.instances[rng.randrange(n)]
        if requester.id in holders:
            continue
        assert ReplicaChoice(ctx, requester).pick(0) == _reference_pick(ctx, requester, holders)
