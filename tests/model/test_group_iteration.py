"""The simulator's one call per DP-attention group step (simroute.model.dpstep.group_iteration): each rank's own
batch in, the lockstep seconds, the collectives' share, their bytes per pass and the tokens MTP emits out; MTP's
accepted-length arithmetic and the HBM of its draft layer; each DP rank's own latent. Hand counts throughout
(docs/STEP_TIME.md, "DP attention and expert parallelism")."""

from __future__ import annotations

import math

import pytest

from simroute.calib import load_profile, shipped_dir
from simroute.model.dpstep import DeploymentStep, group_iteration
from simroute.model.geometry import get_model
from simroute.model.parallel import Deployment, Mtp
from simroute.model.steptime import BatchShape, StepTimeModel

V3 = get_model("deepseek-v3")
IDLE = BatchShape(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
DISPATCH_ROW, COMBINE_ROW = 7168 + 56 * 4, 7168 * 2       # FP8 + a fp32 scale per 128; bf16
FP8 = 1 + 4 / (128 * 128)                                  # block-FP8 weight bytes per weight


@pytest.fixture(scope="module")
def h200():
    return load_profile(shipped_dir() / "gpus" / "h200-sxm.yaml").gpu_spec("h200-sxm")


def _step(gpu, gpus: int, mtp: Mtp | None = None) -> DeploymentStep:
    return DeploymentStep(V3, gpu, Deployment(tp=gpus, dp=gpus, ep=gpus), mtp=mtp, cuda_graphs=True,
                          inter=(50e9, 10e-6))


def test_one_host_all_gather_pads_to_the_busiest_rank(h200):
    """DP 8 + EP 8 on one host (all-gather): seven ranks decode 32 sequences, one is idle. SGLang pads every rank
    to the busiest (MAX_LEN: 224 x 2 >= 256), so each GPU sends 32 bf16 rows to each of 7 others before the MLP
    and takes 32 back after it, at every one of the 61 layers."""
    step = _step(h200, 8)
    ranks = [BatchShape.uniform(32, 4096)] * 7 + [IDLE]
    out = group_iteration(step, ranks)
    full = step.iteration(ranks)
    assert out.seconds == pytest.approx(full.iteration_s) and out.collective_s == pytest.approx(
        full.terms_s["collective"])
    assert 0 < out.collective_s < out.seconds and out.compute_s == pytest.approx(out.seconds - out.collective_s)
    assert out.emitted == (32.0,) * 7 + (0.0,) and out.tokens_per_decode == 1.0
    (load,) = out.a2a
    assert (load.what, load.layers) == ("target", 61)
    assert load.traffic.by_link()["dispatch"] == {"local": 0.0, "nvlink": 8 * 7 * 32 * COMBINE_ROW, "rdma": 0.0}
    assert load.bytes == 61 * 2 * 8 * 7 * 32 * COMBINE_ROW
    quiet = group_iteration(step, ranks, traffic=False)
    assert quiet.a2a == () and quiet.seconds == out.seconds and quiet.collective_s == out.collective_s


def test_uneven_ranks_are_not_padded_past_twice_the_traffic(h200):
    """One rank of 64 decodes and seven of 1: padding would move 512 rows for 71 (SUM_LEN): each GPU sends its
    own rows only."""
    ranks = [BatchShape.uniform(64, 1024)] + [BatchShape.uniform(1, 1024)] * 7
    (load,) = group_iteration(_step(h200, 8), ranks).a2a
    assert load.traffic.by_link()["dispatch"]["nvlink"] == (64 * 7 + 7 * 1 * 7) * COMBINE_ROW


def test_two_hosts_deepep_with_mtp_by_hand(h200):
    """DP 16 + EP 16 on two hosts (DeepEP low latency), MTP nextn 2 at acceptance 0.6. Fifteen ranks decode 32
    sequences: the verify computes 3 tokens each (96 per rank), every token's 8 experts spread evenly over 16 GPUs
    (15 of 16 off its own). Per MoE layer: 15 x 96 x 8 x 15/16 dispatch rows of 7,392 B and as many combine rows
    of 14,336 B; 58 such layers; then one draft decode pass (nextn - 1) at 32 tokens and one draft extend at 96."""
    mtp = Mtp(2, accept_rate=0.6)
    step = _step(h200, 16, mtp)
    ranks = [BatchShape.uniform(32, 4096)] * 15 + [IDLE]
    out = group_iteration(step, ranks)
    assert out.tokens_per_decode == pytest.approx(1 + 0.6 + 0.36)
    assert out.emitted[:15] == pytest.approx([32 * 1.96] * 15) and out.emitted[15] == 0.0
    per_token = 8 * 15 / 16 * (DISPATCH_ROW + COMBINE_ROW)
    loads = {load.what: load for load in out.a2a}
    assert {what: load.layers for what, load in loads.items()} == {"target": 58, "draft_decode": 1,
                                                                     "draft_extend": 1}
    assert loads["target"].bytes == pytest.approx(58 * 15 * 96 * per_token)
    assert loads["draft_decode"].bytes == pytest.approx(15 * 32 * per_token)
    assert loads["draft_extend"].bytes == pytest.approx(15 * 96 * per_token)
    # 8 of every 16 destinations are on the other host
    assert loads["target"].traffic.by_link()["dispatch"]["rdma"] == pytest.approx(15 * 96 * 8 * 8 / 16 * DISPATCH_ROW)
    # the collectives of the draft passes are in the step's collective share too
    full = step.iteration(ranks)
    assert out.collective_s > full.terms_s["collective"] > 0       # more than the target layers' alone
    # TPOT: the step over the tokens a decoding sequence emits
    assert full.tpot_s == pytest.approx(out.seconds / 1.96)


def test_each_rank_emits_one_token_per_decoding_sequence_down_to_one(h200):
    """DP 8 + EP 8: a rank decoding a single sequence emits its one token, as a rank of two emits two and a rank that
    prefills a 1000-token chunk beside 3 decodes emits 3 (the chunk's first token is the engine's, not a decode
    row); idle ranks emit none."""
    step = _step(h200, 8)
    mixed = BatchShape.uniform(3, 2048, prefill_tokens=1000)
    out = group_iteration(step, [BatchShape.uniform(1, 4096), BatchShape.uniform(2, 4096), mixed] + [IDLE] * 5,
                          traffic=False)
    assert out.emitted == (1.0, 2.0, 3.0) + (0.0,) * 5


def test_an_idle_group_takes_no_time_and_more_work_never_less(h200):
    step = _step(h200, 16)
    assert group_iteration(step, [IDLE] * 16).seconds == 0.0 and group_iteration(step, [IDLE] * 16).a2a == ()
    light = group_iteration(step, [BatchShape.uniform(8, 2048)] * 16).seconds
    one_busy = group_iteration(step, [BatchShape.uniform(64, 2048)] + [BatchShape.uniform(8, 2048)] * 15).seconds
    all_busy = group_iteration(step, [BatchShape.uniform(64, 2048)] * 16).seconds
    assert 0 < light <= one_busy <= all_busy
    with pytest.raises(ValueError, match="one batch per DP rank"):
        group_iteration(step, [IDLE] * 8)


def test_a_tp_group_moves_no_all_to_all(h200):
    """Without DP attention the collectives are the TP all-reduces, which the TP instance already models."""
    step = DeploymentStep(V3, h200, Deployment(tp=8), cuda_graphs=True)
    out = group_iteration(step, [BatchShape.uniform(16, 4096)])
    assert out.a2a == () and out.collective_s > 0


# ---- MTP arithmetic ---------------------------------------------------------------------------------------------
def test_accepted_length_by_hand():
    """A step emits j tokens with probability a^(j-1) (1 - a) below nextn + 1 and a^nextn at it."""
    assert Mtp(2, accept_rate=0.5).length_probabilities() == (0.5, 0.25, 0.25)
    assert Mtp(3, accept_rate=0.8).length_probabilities() == pytest.approx((0.2, 0.16, 0.128, 0.512))
    for mtp in (Mtp(3, accept_rate=0.8), Mtp(1, accept_rate=0.0), Mtp(4, accept_rate=1.0)):
        probabilities = mtp.length_probabilities()
        assert math.fsum(probabilities) == pytest.approx(1.0)
        assert math.fsum(j * p for j, p in enumerate(probabilities, 1)) == pytest.approx(mtp.tokens_per_step)
    # an accepted length given instead: the rate that yields it (1 + a = 1.8; 1 + a + a^2 + a^3 = 2.952 at 0.8)
    assert Mtp(1, accepted_length=1.8).rate == pytest.approx(0.8, abs=1e-12)
    assert Mtp(3, accepted_length=2.952).rate == pytest.approx(0.8, abs=1e-9)
    assert Mtp(2, accepted_length=1.0).rate == pytest.approx(0.0, abs=1e-12)
    assert Mtp(2, accepted_length=3.0).length_probabilities() == pytest.approx((0.0, 0.0, 1.0), abs=1e-9)


def test_the_draft_layer_holds_one_more_moe_layer_and_its_latent(h200):
    """DP 8 + EP 8 (all-gather): MTP adds one MoE layer per GPU (its attention replicated, 32 whole experts, 1/8
    of the shared expert and router), eh_proj (2 x 7168 -> 7168, bf16) and one layer of latent per token."""
    plain, mtp = _step(h200, 8), _step(h200, 8, Mtp(1, accept_rate=0.7))
    attention = (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168) * FP8
    experts = 32 * 3 * 7168 * 2048 * FP8
    shared = 3 * 7168 * 2048 / 8 * FP8
    router = mtp.hbm.parts["router"] - plain.hbm.parts["router"]
    assert router == pytest.approx(plain.hbm.parts["router"] / 58)
    assert mtp.weight_bytes_per_gpu - plain.weight_bytes_per_gpu == pytest.approx(
        attention + experts + shared + router + 2 * 7168 * 7168 * 2)
    assert mtp.kv_bytes_per_token_per_gpu == 62 * 576 * 2 and plain.kv_bytes_per_token_per_gpu == 61 * 576 * 2
    assert mtp.kv_capacity_tokens() < plain.kv_capacity_tokens()


# ---- each DP rank its own latent ---------------------------------------------------------------------------------
def test_dp_holds_eight_times_the_tokens_of_replicated_tp(h200):
    """TP 8 replicates DeepSeek-V3's latent (61 x 576 bf16 = 70,272 B per token) on all 8 GPUs; DP 8 keeps a
    token on the one GPU attending it. With the same free bytes per GPU, the group holds 8x the tokens."""
    tp = StepTimeModel(V3, h200, 8)
    dp = _step(h200, 8)
    assert tp.kv_bytes_per_token_per_gpu == dp.kv_bytes_per_token_per_gpu == 70_272
    free = h200.hbm_bytes - tp.weight_bytes_per_gpu
    reserve = h200.hbm_bytes - dp.weight_bytes_per_gpu - free      # DP's replicated projections taken back
    assert tp.kv_capacity_tokens() == dp.kv_capacity_tokens(reserve) == math.floor(free / 70_272)
    group_tp, group_dp = tp.kv_capacity_tokens(), 8 * dp.kv_capacity_tokens(reserve)
    assert group_dp == 8 * group_tp
    # as deployed (DP's every rank holds all 128 heads' projections): still more than 6x
    assert 6 < 8 * dp.kv_capacity_tokens() / group_tp < 8
