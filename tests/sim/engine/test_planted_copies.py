"""Copies' KV accounting by hand, when the copy already exists: a fetched copy that is already resident takes no
second set of blocks; a re-prefilled chunk another request already copied frees its new blocks; a copy that
arrives twice is one holder; an evicted copy stops being a holder; room that cannot be made evicts nothing; the
request's own KV is kept free beside a fetch; pinned copies are not room. Budgets of 64-token blocks, one byte a
token (a block is 64 bytes)."""

from __future__ import annotations

import simpy

from simroute.sim.engine import HbmBudget
from simroute.sim.engine.serving import ChunkCopies
from simroute.sim.vocab import Primitive


def _budget(blocks: int) -> HbmBudget:
    return HbmBudget(hbm_bytes=1000.0 + blocks * 64, weight_bytes=1000.0, kv_bytes_per_token=1.0)


def test_a_fetch_of_a_resident_copy_takes_no_blocks_even_with_none_free():
    """10 blocks: copy 7 (3 blocks), KV 7 blocks: nothing free. Asking for copy 7 again (with room for 2 blocks of
    the request's own KV) succeeds at once: no new blocks, nothing evicted or refused, and 7 is now the most
    recently used."""
    hbm = _budget(10)
    assert hbm.add_copy(5, 0) and hbm.add_copy(7, 3) and hbm.reserve_kv(7)
    assert hbm.add_copy(7, 3, keep_free=2)
    assert (hbm.copy_blocks, hbm.kv_blocks, hbm.free_blocks, hbm.evictions, hbm.refused) == (3, 7, 0, 0, 0)
    hbm.add_copy(5, 0)                  # a zero-block copy: refreshed the same way
    assert list(hbm.copies) == [7, 5]
    assert hbm.add_copy(7, 3)
    assert list(hbm.copies) == [5, 7]
    hbm.check()


def test_a_re_prefilled_chunk_that_is_already_a_copy_frees_its_new_blocks():
    """10 blocks: copy 7 (3 blocks) made by another request; this request re-prefilled chunk 7 too (3 KV blocks)
    and chunk 8 (1 block). Handing its KV over: chunk 7's 3 blocks are freed (the copy stays one copy of 3
    blocks, refreshed), chunk 8's block becomes a copy: copies 3 + 1, KV 0, free 6."""
    hbm = _budget(10)
    assert hbm.add_copy(7, 3) and hbm.add_copy(6, 1) and hbm.reserve_kv(4)
    assert hbm.free_blocks == 2
    hbm.kv_to_copy(7, 3)
    assert (hbm.kv_blocks, hbm.copy_blocks, hbm.free_blocks) == (1, 4, 5)
    assert list(hbm.copies) == [6, 7]
    hbm.kv_to_copy(8, 1)
    assert (hbm.kv_blocks, hbm.copy_blocks, hbm.free_blocks) == (0, 5, 5)
    assert hbm.copies == {6: 1, 7: 3, 8: 1}
    hbm.check()


def test_room_that_cannot_be_made_evicts_nothing():
    """4 blocks: two unpinned one-block copies and 2 blocks of KV. 3 more blocks of KV cannot be had (0 free + 2
    evictable): refused, both copies stay. 2 can: both copies go, counted as two evictions."""
    hbm = _budget(4)
    evicted = []
    hbm.on_evict = evicted.append
    assert hbm.add_copy("a", 1) and hbm.add_copy("b", 1) and hbm.reserve_kv(2)
    assert not hbm.reserve_kv(3)
    assert (hbm.kv_blocks, list(hbm.copies), hbm.evictions, evicted) == (2, ["a", "b"], 0, [])
    assert hbm.reserve_kv(2)
    assert (hbm.kv_blocks, list(hbm.copies), hbm.evictions, evicted) == (4, [], 2, ["a", "b"])
    hbm.check()


# ---- ChunkCopies: the holder lists, pins and HBM budgets kept together ----------------------------------------------
class _Engines:
    """What ChunkCopies reads of an EngineSet: the engines (eid, hbm, env, submit) by instance id."""

    def __init__(self, engines) -> None:
        self.engines = list(engines)

    def __getitem__(self, eid: int):
        return self.engines[eid]


class _Budgeted:
    def __init__(self, eid: int, blocks: int) -> None:
        self.eid, self.hbm = eid, _budget(blocks)


def _copies(blocks: int, tokens: list[int], holders: list[list[int]], pins: dict[int, dict[int, int]]):
    engines = _Engines(_Budgeted(eid, blocks) for eid in range(2))
    return ChunkCopies(engines, holders, lambda eid: pins.setdefault(eid, {}), tokens), engines


def test_a_copy_that_arrives_again_is_still_one_holder():
    holders = [[0], [0]]
    copies, _ = _copies(8, [64, 128], holders, {})
    copies.arrived(1, 1)
    copies.arrived_all([0, 1], 1)
    assert holders == [[0, 1], [0, 1]] and copies.held == {(0, 0), (1, 0), (0, 1), (1, 1)}


def test_an_evicted_copy_stops_being_a_holder_and_a_pinned_one_is_never_room():
    """Instance 1 has 4 blocks: copies of chunks 0 and 1 (2 blocks each: 128 tokens). Chunk 0 is pinned (a running
    request reads it). Room for 2 blocks: chunk 1's copy goes and instance 1 stops holding it; room for 4 more:
    not there (chunk 0 is pinned), and nothing changes."""
    holders, pins = [[0], [0], [0]], {1: {0: 1}}
    copies, engines = _copies(4, [128, 128, 128], holders, pins)
    assert copies.reserve(0, 1) and copies.reserve(1, 1)
    copies.arrived_all([0, 1], 1)
    assert copies.fits_blocks(2, 1) and not copies.fits_blocks(3, 1)      # chunk 1's 2 blocks are room; 0's are not
    assert copies.reserve(2, 1)                                            # evicts chunk 1, LRU and unpinned
    copies.arrived(2, 1)
    assert holders == [[0, 1], [0], [0, 1]] and not copies.holds(1, 1) and copies.holds(2, 1)
    pins[1][2] = 1
    assert not copies.fits(1, 1) and not copies.reserve(1, 1)
    hbm = engines[1].hbm
    assert hbm.copies == {0: 2, 2: 2} and hbm.refused == 1 and hbm.evictions == 1
    assert (hbm.copy_blocks, hbm.free_blocks) == (4, 0)       # the evicted copy's 2 blocks went to chunk 2's
    hbm.check()


def test_a_fetch_keeps_room_for_the_requests_own_kv():
    """6 free blocks: a 2-block copy fits beside 4 blocks (256 tokens) of the request's own KV, not beside 5."""
    copies, engines = _copies(6, [128], [[0]], {})
    assert not copies.reserver(1, keep_free_tokens=257)(0)
    assert not copies.reserve(0, 1, keep_free_tokens=257) and engines[1].hbm.refused == 2
    assert copies.reserver(1, keep_free_tokens=256)(0) and engines[1].hbm.copy_blocks == 2


def test_a_re_prefill_hands_its_kv_to_the_copies_and_frees_the_rest_once(make_engine):
    """Chunks 0 and 1 (100 tokens each: 2 blocks each) re-prefilled on instance 0 as one 200-token sequence (4
    blocks); chunk 0 was already copied there by another request (2 blocks). At the end: copies of 0 and 1, 2
    blocks each, no KV left (the duplicate's 2 blocks freed), the instance holds both."""
    env = simpy.Environment()
    engine = make_engine(env, eid=0, hbm_tokens=64 * 10)
    holders = [[1], [1]]
    holder = make_engine(env, eid=1, hbm_tokens=64 * 10)          # where the chunks' canonical copies are
    copies = ChunkCopies(_Engines([engine, holder]), holders, lambda eid: {}, [100, 100])
    assert copies.reserve(0, 0)
    copies.arrived(0, 0)
    done = copies.reprefill([0, 1], 0, rid=9)
    env.run(until=done)
    hbm = engine.hbm
    assert hbm.copies == {0: 2, 1: 2} and (hbm.copy_blocks, hbm.kv_blocks, hbm.free_blocks) == (4, 0, 6)
    assert holders == [[1, 0], [1, 0]]
    hbm.check()


# ---- a request's chunks: one already here is never fetched again -------------------------------------------------
def _testbed(tmp_path):
    """The paper testbed (instances 0-7) with two requests for requester 4 reading chunk 0 (2048 tokens), whose
    canonical copy is on instance 0."""
    from simroute.calib import default_profile_path
    from simroute.defaults import PAPER_DEPLOYMENT
    from simroute.network import shipped_topology
    from simroute.scenarios.traces import write_trace
    from simroute.sim import RunConfig, Simulation
    chunk = {"chunk_id": 0, "tokens": 2048, "canonical": True, "holder_hint": 0, "cached_offset": 0}
    reqs = [{"arrival_s": 0.0, "requester_hint": 4, "prompt_tokens": 16, "output_tokens": 1, "chunk_ids": [0]}] * 2
    trace = write_trace(tmp_path / "t.parquet", reqs, [chunk])
    return Simulation(RunConfig(**PAPER_DEPLOYMENT, topology=str(shipped_topology("paper-testbed")),
                                trace=str(trace), calib=str(default_profile_path())))


def _classify(sim, request_id: int = 0):
    from simroute.sim.request import DenseRequest
    from simroute.sim.request_spec import RequestSpec
    spec = RequestSpec(request_id, 4, -1, 16, 1, [0], [True], 0, 0)
    request = DenseRequest(sim.ctx, spec, sim.instances[4], None)
    return request, request.classify_chunks()


def test_a_chunk_already_copied_to_the_requester_is_resident_not_fetched_again(tmp_path):
    """Chunk 0 held by instance 0 (canonical) and by the requester, 4 (a copy another request fetched): the
    request reads it where it is (resident, noted on instance 4), pins that copy once and asks no holder for it."""
    sim = _testbed(tmp_path)
    chunks, copies = sim.ctx.cluster.chunks, sim.ctx.copies
    assert copies.reserve(0, 4)
    copies.arrived(0, 4)
    assert chunks.holders[0] == [0, 4]
    request, plan = _classify(sim)
    assert plan.remote.chunks == [] and plan.prefill_here == [] and plan.joining == []
    chunk, holder, primitive = (list(column) for column in request.decided)
    assert (chunk, holder) == ([0], [4]) and primitive[0] == int(Primitive.RESIDENT)
    assert chunks.pins_at(4) == {0: 1} and request.resident_tokens == chunks.token_list[0]


def test_a_chunk_being_copied_to_the_requester_is_waited_for_not_fetched_again(tmp_path):
    """Chunk 0 held by instance 0 only, its copy to instance 4 on the way (pending): the request joins that copy
    (resident once it lands) instead of fetching a second one."""
    sim = _testbed(tmp_path)
    chunks = sim.ctx.cluster.chunks
    landed = sim.env.event()
    chunks.pending_at(4)[0] = landed
    request, plan = _classify(sim)
    assert plan.remote.chunks == [] and plan.joining == [landed]
    assert chunks.pins_at(4) == {0: 1}


def test_a_copy_two_requests_read_stays_pinned_until_the_second_finishes(tmp_path):
    """Requests 0 and 1 both read instance 4's copy of chunk 0: two pins. The first finishing leaves one (the copy
    cannot be evicted under the second); the second finishing leaves none (evictable again)."""
    sim = _testbed(tmp_path)
    chunks, copies = sim.ctx.cluster.chunks, sim.ctx.copies
    assert copies.reserve(0, 4)
    copies.arrived(0, 4)
    (first, _), (second, _) = _classify(sim, 0), _classify(sim, 1)
    assert chunks.pins_at(4) == {0: 2}
    first.finish()
    assert chunks.pins_at(4) == {0: 1} and not copies.budget(4).evictable(0)
    second.finish()
    assert chunks.pins_at(4) == {} and copies.budget(4).evictable(0)
