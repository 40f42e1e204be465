"""Exact values of the simulator's small formulas: summary percentiles against numpy, the token-weighted
inter-token latency percentiles, KV blocks, the affinity router's headroom, the adaptive policy's path
penalty, and the hash placement's probe order. A wrong factor, rounding or threshold fails here."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simroute.calib import load_profile
from simroute.model.scalar import ScalarModel
from simroute.sim.engine.hbm import BLOCK_TOKENS, blocks_for
from simroute.sim.engine.log import IterationLog
from simroute.sim.metrics import percentiles
from simroute.sim.placements.hashed import HashPlacement
from simroute.sim.policies.adaptive import AdaptivePolicy
from simroute.sim.policies.base import DecisionContext, LiveState, RequestShape
from simroute.sim.request_spec import RequestSpec
from simroute.sim.routers.affinity import AffinityRouter

PARAMS = load_profile("h100-ibgda").cost_params()
IB = PARAMS.fabric_id("h100-ibgda")       # single-block and bulk both 25 GB/s


# ---- summary percentiles ---------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e3, allow_nan=False), min_size=1, max_size=200),
       st.integers(min_value=0, max_value=5))
def test_summary_percentiles_are_numpys_of_the_finite_values_in_ms(values, missing):
    x = np.array(values + [np.nan] * missing + [np.inf] * (missing // 2))
    finite = np.array(values)
    out = percentiles(x)
    p50, p95, p99 = np.percentile(finite, [50, 95, 99]) * 1e3
    assert out == {"mean": float(finite.mean() * 1e3), "p50": float(p50), "p95": float(p95), "p99": float(p99),
                   "max": float(finite.max() * 1e3)}


def test_summary_percentiles_by_hand():
    out = percentiles(np.arange(1, 101) / 1e3)          # 1 .. 100 ms
    assert (out["p50"], out["p95"], out["p99"], out["max"]) == pytest.approx((50.5, 95.05, 99.01, 100.0))
    assert percentiles(np.array([np.nan]))["p95"] is None


def test_inter_token_percentiles_weigh_each_gap_by_its_tokens():
    log = IterationLog()
    for seconds, tokens in ((0.001, 3.0), (0.002, 1.0), (0.003, 1.0)):     # 3 tokens saw 1 ms, 1 saw 2, 1 saw 3
        log.gap(seconds, tokens)
    out = log.itl_percentiles()      # numpy's linear interpolation over the 5 tokens' gaps [1, 1, 1, 2, 3] ms
    assert out["p50"] == 1.0 and out["p95"] == pytest.approx(2.8) and out["max"] == 3.0    # p95 at 3.8: 2 + 0.8
    assert out["mean"] == pytest.approx((3 * 1 + 2 + 3) / 5)


# ---- KV blocks ---------------------------------------------------------------------------------------
def test_a_partly_filled_block_is_a_whole_block():
    assert BLOCK_TOKENS == 64
    assert [blocks_for(t) for t in (0, 1, 63, 64, 65, 96, 127.9, 128, 129)] == [0, 1, 1, 1, 2, 2, 2, 2, 3]


@given(st.integers(min_value=1, max_value=10**7))
def test_blocks_hold_the_tokens_with_less_than_one_block_to_spare(tokens):
    blocks = blocks_for(tokens)
    assert (blocks - 1) * BLOCK_TOKENS < tokens <= blocks * BLOCK_TOKENS


# ---- thresholds ----------------------------------------------------------------------------------------
class _Cluster:
    def __init__(self, active):
        self.active = np.array(active, dtype=np.int64)
        self.instances = list(range(len(active)))


def test_affinity_spills_only_past_its_headroom():
    router = AffinityRouter()
    assert AffinityRouter.HEADROOM == 1
    assert not router.overloaded(0, _Cluster([2, 1, 1]))        # 2 <= 1 + 1: stays
    assert router.overloaded(0, _Cluster([3, 1, 1]))            # 3 > 1 + 1: spills
    assert not router.overloaded(1, _Cluster([3, 1, 1]))


def test_affinity_spill_is_two_hashed_choices_by_request_id():
    from simroute.network.hashing import mix64
    router, cluster = AffinityRouter(), _Cluster([0, 0, 0, 0, 0])
    spec = RequestSpec(12345, -1, -1, 16, 2, [], [], 0, 0)
    key = mix64(12345)
    first, second = key % 5, (key >> 32) % 5
    cluster.active[[first, second]] = [1, 2] if first != second else [1, 1]
    picked = router.spill(spec, cluster, np.zeros(5))
    assert picked == first                                       # the less loaded of the two


def _ctx(live, tp=1):
    shape = RequestShape(mq_first=256.0, mq_step=16.0, steps=1, tokens=2048.0, fabric=IB, cached=False, tp=tp)
    return DecisionContext(shape, live, PARAMS, ScalarModel(PARAMS))


@pytest.mark.parametrize("tp", [1, 2])
def test_adaptive_path_penalty_by_hand(tp):
    # a path sharing 0.1 GB/s instead of the fabric's 25 GB/s: route's 27 exchanges x 272 query rows x 2184
    # bytes, and fetch's 2048 tokens x 1152 bytes x 27 layers, each per rank (1/tp), at 1/0.1e9 - 1/25e9 s/B
    base = _ctx(None, tp).horizon()
    crowded = AdaptivePolicy.adjusted(_ctx(LiveState(0.0, 0.1e9, True), tp))
    per_byte = 1 / 0.1e9 - 1 / 25e9
    assert crowded.route - base.route == pytest.approx(27 * 272 * 2184 / tp * per_byte, rel=1e-9)
    assert crowded.fetch - base.fetch == pytest.approx(2048 * 1152 * 27 / tp * per_byte, rel=1e-9)
    queued = AdaptivePolicy.adjusted(_ctx(LiveState(1e-3, None, True), tp))
    assert queued.route - base.route == pytest.approx(1e-3 * 2 * 27, rel=1e-9)     # (1 + steps) x exchanges


# ---- hash placement's probe -------------------------------------------------------------------------------
@given(st.integers(min_value=2, max_value=40), st.integers(min_value=0, max_value=2**64 - 1))
def test_the_hash_probe_visits_every_instance_once(instances, chunk_hash):
    order = list(HashPlacement(seed=0).candidates(chunk_hash, instances))
    assert sorted(order) == list(range(instances))
    assert order[0] == chunk_hash % instances


# ---- HBM block accounting --------------------------------------------------------------------------------
def test_hbm_budget_counts_blocks_by_hand():
    from simroute.sim.engine.hbm import HbmBudget
    # 1 GB of HBM, 0.2 GB of weights, 1000 bytes of KV a token: 64,000-byte blocks, 12,500 of them
    hbm = HbmBudget(1e9, 0.2e9, 1000.0)
    assert (hbm.block_bytes, hbm.capacity_blocks, hbm.free_blocks) == (64_000, 12_500, 12_500)
    assert hbm.pin(500) and hbm.reserve_kv(10_000) and hbm.add_copy("a", 1_000) and hbm.add_copy("b", 900)
    assert hbm.free_blocks == 100 and hbm.free_bytes == 100 * 64_000
    assert not hbm.pin(101) and hbm.pinned_blocks == 500            # a pin never evicts
    assert hbm.add_copy("c", 1_050)                                 # evicts "a" alone (LRU): 1,100 free
    assert list(hbm.copies) == ["b", "c"] and hbm.free_blocks == 50 and hbm.evictions == 1
    assert not hbm.reserve_kv(2_001) and hbm.kv_blocks == 10_000    # 50 + 900 + 1,050 < 2,001: nothing moves
    hbm.release_kv(4_000)
    hbm.check()
    assert hbm.free_blocks == 4_050 and hbm.peak_kv_blocks == 10_000


# ---- a holder's queue ------------------------------------------------------------------------------------
def test_holder_queue_wait_is_md1_plus_half_a_layer_inline():
    from simroute.sim.engine.exchange import MAX_UTILISATION, HolderPartials
    inline, stream = HolderPartials("inline"), HolderPartials("stream")
    # M/D/1: a 40 us kernel at rho 0.5 waits 40 x 0.5 / (2 x 0.5) = 20 us; inline, plus half a 100 us layer
    assert stream.queue_wait_s(40e-6, 0.5, True, 100e-6) == pytest.approx(20e-6, rel=1e-12)
    assert inline.queue_wait_s(40e-6, 0.5, True, 100e-6) == pytest.approx(70e-6, rel=1e-12)
    assert inline.queue_wait_s(40e-6, 0.5, False, 100e-6) == pytest.approx(20e-6, rel=1e-12)
    capped = MAX_UTILISATION * 40e-6 / (2 * (1 - MAX_UTILISATION))                 # rho capped at 0.95
    assert stream.queue_wait_s(40e-6, 3.0, False, 0.0) == pytest.approx(capped, rel=1e-12)
    assert stream.queue_wait_s(40e-6, 0.0, True, 100e-6) == 0.0


# ---- the summary's SLO, throughput and counts --------------------------------------------------------------
def test_summary_attainment_goodput_and_throughput_by_hand():
    from simroute.sim.metrics import Recorder, summarise
    from simroute.sim.vocab import DropReason
    rec = Recorder(4)
    rec.ttft[:] = [0.1, 0.6, 0.2, np.nan]          # s; SLOs below: TTFT 500 ms, TPOT 100 ms
    rec.tpot[:] = [0.05, 0.05, 0.2, np.nan]
    rec.e2e[:] = [1.0, 2.0, 3.0, np.nan]
    rec.output_tokens[:] = [10, 20, 30, 40]
    for request in range(3):
        rec.complete(request)
    rec.drop(3, DropReason.UNFINISHED)
    config = {"slo": "p99 ttft_ms <= 500 and p99 tpot_ms <= 100", "seed": 7}
    out = summarise(rec, config=config, inputs={}, sim_time_s=2.0, extra={})
    assert (out["completed"], out["dropped"], out["dropped_by_reason"]) == (3, 1, {"unfinished at --until": 1})
    assert out["slo"]["attainment"] == pytest.approx(1 / 3)                # only request 0 meets both
    assert out["throughput"]["goodput_requests_per_s"] == pytest.approx(1 / 2.0)
    assert out["throughput"]["output_tokens_per_s"] == pytest.approx((10 + 20 + 30) / 2.0)
    assert out["ttft_ms"]["mean"] == pytest.approx(300.0) and out["e2e_ms"]["max"] == pytest.approx(3000.0)


# ---- one request's bytes, end to end ---------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["always-route", "always-fetch", "always-local"])
def test_one_requests_bytes_by_hand(tmp_path, policy):
    from simroute.calib import default_profile_path
    from simroute.defaults import PAPER_DEPLOYMENT
    from simroute.network import shipped_topology
    from simroute.scenarios.traces import single_chunk_trace
    from simroute.sim import RunConfig, simulate
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=4, holder=0, prompt_tokens=16, output_tokens=4)
    summary = simulate(RunConfig(topology=str(shipped_topology("paper-testbed")), trace=str(trace),
                                 calib=str(default_profile_path()), policy=policy, **PAPER_DEPLOYMENT)).summary
    # route: (16 prompt tokens + 3 decode steps) x 16 heads = 304 query rows, each q + p = 2184 bytes, once per
    # layer (27 exchanges); fetch: the 2048-token chunk's c_KV, 1152 bytes a token-layer x 27 layers, once
    expected = {"always-route": (304 * 2184 * 27, 0.0), "always-fetch": (0.0, 2048 * 1152 * 27),
                "always-local": (0.0, 0.0)}[policy]
    assert (summary["bytes"]["route"], summary["bytes"]["fetch"]) == expected
