"""DP attention, expert parallelism and MTP arithmetic (simroute.model.parallel), pinned by hand counts: the
all-to-all bytes of a MoE layer between every pair of ranks, the DP padding SGLang applies, the HBM of a GPU of the
group, the MTP tokens per step. No tables: docs/STEP_TIME.md, "DP attention and expert parallelism"."""

from __future__ import annotations

import math

import pytest

from simroute.errors import ConfigurationError
from simroute.model.geometry import get_model
from simroute.model.limits import Fields, check_parallel
from simroute.model.parallel import (A2A, Deployment, Mtp, a2a_layer_traffic, combine_row_bytes, dispatch_row_bytes,
                                     gathered_tokens, hbm_per_gpu, power_law_hottest, rank_hit_probability,
                                     skewed_shares)
from simroute.model.steptime import GpuSpec, StepTimeModel

V3 = get_model("deepseek-v3")


def _problem(deployment: Deployment, geometry=V3, mtp: Mtp | None = None) -> str | None:
    """simroute.model.limits.check_parallel's refusal (one line, as the command line names it), or None."""
    try:
        check_parallel(geometry, deployment, mtp, Fields.flags())
    except ConfigurationError as error:
        return str(error)
    return None


def _group(hosts: int, **extra) -> Deployment:
    gpus = 8 * hosts
    return Deployment(tp=gpus, dp=gpus, ep=gpus, **extra)


# ---- bytes per layer by hand --------------------------------------------------------------------------------
def test_row_bytes_by_hand():
    # FP8 dispatch: 7168 one-byte values + 7168 / 128 = 56 fp32 scales; combine: 7168 bf16 values
    assert dispatch_row_bytes(V3) == 7168 + 56 * 4 == 7392
    assert combine_row_bytes(V3) == 7168 * 2 == 14336


@pytest.mark.parametrize("hosts", [1, 2, 4, 8])
def test_deepep_decode_bytes_per_layer_by_hand(hosts):
    """Low-latency mode: every (token, expert) pair is one message. 64 tokens per GPU x 8 experts each, spread
    evenly over ep GPUs: a GPU keeps 1/ep of its copies, sends 7/ep to its own host's other GPUs over NVLink and
    the rest across the fabric."""
    group = _group(hosts, a2a=A2A.DEEPEP)
    gpus = group.tp
    traffic = a2a_layer_traffic(V3, group, [64.0] * gpus)
    per_gpu = 64 * 8 * 7392                      # dispatch bytes one GPU sends, all destinations
    split = traffic.by_link()
    assert split["dispatch"]["local"] == pytest.approx(gpus * per_gpu * 1 / gpus)
    assert split["dispatch"]["nvlink"] == pytest.approx(gpus * per_gpu * 7 / gpus)
    assert split["dispatch"]["rdma"] == pytest.approx(gpus * per_gpu * (gpus - 8) / gpus)
    back = 64 * 8 * 14336
    assert sum(split["combine"].values()) == pytest.approx(gpus * back)
    assert split["combine"]["rdma"] == pytest.approx(gpus * back * (gpus - 8) / gpus)
    # one pair of GPUs on different hosts (when there are two): 64 x 8 / gpus rows each way
    if hosts > 1:
        assert traffic.dispatch[0][8] == pytest.approx(64 * 8 / gpus * 7392)
        assert traffic.combine[8][0] == pytest.approx(64 * 8 / gpus * 14336)


def test_placement_decides_which_bytes_cross_the_fabric():
    """The same 16 GPUs placed alternately over two hosts: GPU 0's peers on its own host are the even ones."""
    group = _group(2, a2a=A2A.DEEPEP)
    spread = a2a_layer_traffic(V3, group, [64.0] * 16, placement=["h0", "h1"] * 8)
    assert spread.hosts[:4] == (0, 1, 0, 1)
    flat = a2a_layer_traffic(V3, group, [64.0] * 16)
    assert spread.by_link() == flat.by_link()          # 8 per host either way: the same split
    assert spread.dispatch[0][2] == flat.dispatch[0][2]
    one_host = a2a_layer_traffic(V3, group, [64.0] * 16, placement=["h0"] * 16)
    assert one_host.by_link()["dispatch"]["rdma"] == 0.0
    with pytest.raises(ValueError):
        a2a_layer_traffic(V3, group, [64.0] * 16, placement=["h0"] * 15)


def test_allgather_bytes_by_hand():
    """SGLang's all-gather: each of 8 ranks' 64 rows (bf16) reach the 7 others before the MLP; the reduce-scatter
    returns each rank its 64 rows from each of the 7 others after it."""
    traffic = a2a_layer_traffic(V3, Deployment(tp=8, dp=8, ep=8), [64.0] * 8)
    assert traffic.mode is A2A.ALLGATHER
    row = 64 * 14336
    assert traffic.dispatch[2][5] == traffic.combine[5][2] == row
    assert traffic.dispatch[3][3] == 0.0
    assert traffic.by_link()["dispatch"] == {"local": 0.0, "nvlink": 8 * 7 * row, "rdma": 0.0}


def test_uneven_ranks_send_their_own_tokens():
    traffic = a2a_layer_traffic(V3, Deployment(tp=8, dp=8, ep=8), [10.0, 0, 0, 0, 0, 0, 0, 30.0])
    assert traffic.dispatch[0][1] == 10 * 14336 and traffic.dispatch[7][1] == 30 * 14336
    assert traffic.dispatch[1][0] == 0.0


def test_normal_mode_sends_a_token_once_per_gpu_it_hits():
    """Normal (prefill) mode de-duplicates: a token reaches a GPU once if any of its 8 experts lives there,
    probability 1 - C(256 - 16, 8) / C(256, 8) at 16 experts per GPU."""
    by_hand = 1.0 - math.prod((240 - index) / (256 - index) for index in range(8))
    assert rank_hit_probability(256, 16, 8) == pytest.approx(by_hand)
    assert rank_hit_probability(256, 256, 8) == 1.0 and rank_hit_probability(256, 0, 8) == 0.0
    group = _group(2, a2a=A2A.DEEPEP)
    traffic = a2a_layer_traffic(V3, group, [4096.0] * 16, prefill=True)
    assert traffic.relay
    assert traffic.dispatch[0][9] == pytest.approx(4096 * by_hand * 7392)
    # fewer bytes than one message per (token, expert): 16 GPUs x P(hit) < 8 copies
    assert sum(traffic.dispatch[0]) < 4096 * 8 * 7392


def test_skew_moves_bytes_to_the_hot_rank():
    shares = skewed_shares(16, 3.0)
    assert sum(shares) == pytest.approx(1.0) and shares[0] == pytest.approx(3.0 / 16)
    assert shares[1] == pytest.approx((1 - 3.0 / 16) / 15)
    group = _group(2, a2a=A2A.DEEPEP)
    flat = a2a_layer_traffic(V3, group, [64.0] * 16)
    hot = a2a_layer_traffic(V3, group, [64.0] * 16, shares)
    received = lambda traffic, dst: sum(row[dst] for row in traffic.dispatch)
    assert received(hot, 0) == pytest.approx(3.0 * received(flat, 0))
    # the same bytes in all: skew moves them, it does not make them
    assert sum(map(sum, hot.dispatch)) == pytest.approx(sum(map(sum, flat.dispatch)))
    with pytest.raises(ValueError):
        skewed_shares(16, 17.0)


def test_power_law_hottest_rank():
    """The database's skewed routing as a number: the busiest rank's load over the mean, seeded and repeatable."""
    hot = power_law_hottest(1.01, 512, 256, 8, 8)
    assert hot == power_law_hottest(1.01, 512, 256, 8, 8) and 1.0 < hot < 8.0
    assert power_law_hottest(1.01, 512, 256, 8, 1) == 1.0
    # an expert sees each token at most once: with one expert per rank the hottest holds at most T = 64 of the
    # 64 x 8 / 256 = 2 pairs the mean rank holds
    assert power_law_hottest(1.2, 64, 256, 8, 256) <= 64 / (64 * 8 / 256)
    shares = skewed_shares(8, hot)
    assert shares[0] == pytest.approx(hot / 8)


# ---- DP padding (SGLang's DpPaddingMode) --------------------------------------------------------------------
def test_gathered_tokens_follow_sglang_padding():
    assert gathered_tokens([64.0] * 8, has_prefill=False) == 512           # even: max x dp = sum
    assert gathered_tokens([64, 60, 64, 64, 64, 64, 64, 64], has_prefill=False) == 512   # MAX_LEN: padded
    assert gathered_tokens([64, 1, 1, 1, 1, 1, 1, 1], has_prefill=False) == 71   # padding > 2x traffic: SUM_LEN
    assert gathered_tokens([4096, 10, 10, 10, 10, 10, 10, 10], has_prefill=True) == 4166     # extend: SUM_LEN


# ---- deployments --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    (dict(tp=8, dp=3), "--dp-attention 3 does not divide --tp 8"),
    (dict(tp=8, ep=3), "--ep 3 does not divide --tp 8"),
    (dict(tp=12, dp=12, ep=12), "not a multiple"),
    (dict(tp=8, dp=8, ep=8, redundant_experts=4), "256 routed experts + 4 redundant"),
    (dict(tp=8, dp=8, ep=1, a2a=A2A.DEEPEP), "--a2a deepep needs --ep > 1"),
    (dict(tp=8, dp=8, ep=4, a2a=A2A.DEEPEP), "pure EP"),
    (dict(tp=8, dp=4, ep=8, a2a=A2A.DEEPEP), "not modelled"),
    (dict(tp=16, dp=1, ep=16), "TP attention across hosts"),
    (dict(tp=8, dp=8, ep=8, redundant_experts=8), None),
    (dict(tp=8, dp=8, ep=8, redundant_experts=8, distribution="balanced"), None),
    (dict(tp=8, dp=8, ep=8, distribution="zipf"), "unknown expert load 'zipf'"),
    (dict(tp=8, dp=8, ep=8, distribution="power_law_nan"), "unknown expert load"),
    (dict(tp=8, dp=8, ep=1, redundant_experts=8), "--redundant-experts needs --ep > 1"),
    (dict(tp=8, dp=0), "--dp-attention must be >= 1"),
    (dict(tp=8, ep=2, redundant_experts=0, dp=8, distribution="power_law_1.01"), None),
])
def test_impossible_shapes_are_named(kwargs, words):
    problem = _problem(Deployment(**kwargs))
    if words is None:
        assert problem is None
    else:
        assert problem is not None and words in problem and "\n" not in problem


def test_a2a_defaults_to_deepep_only_across_hosts():
    assert _group(1).a2a_mode is A2A.ALLGATHER
    assert _group(2).a2a_mode is A2A.DEEPEP
    assert _group(2, a2a=A2A.ALLGATHER).a2a_mode is A2A.ALLGATHER
    assert _group(2).hosts == 2 and _group(2).host_of(9) == 1


def test_dense_models_refuse_ep():
    assert "no routed experts" in _problem(Deployment(tp=8, dp=8, ep=8), get_model("llama-3.1-70b"))
    assert "field '--ep'" in _problem(Deployment(tp=8, dp=8, ep=8), get_model("llama-3.1-70b"))


# ---- HBM ------------------------------------------------------------------------------------------------------
FP8 = 1 + 4 / (128 * 128)        # one byte per weight plus a fp32 scale per 128 x 128 block


def test_hbm_per_gpu_by_hand():
    """DeepSeek-V3 FP8 at DP 8 + EP 8 (all-gather): every rank holds all 128 heads' projections, 32 whole experts
    of each of 58 MoE layers, 1/8 of the dense FFNs and shared experts."""
    hbm = hbm_per_gpu(V3, Deployment(tp=8, dp=8, ep=8))
    attention = 61 * (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168) * FP8
    assert hbm.parts["attention"] == pytest.approx(attention)
    assert hbm.parts["routed_experts"] == pytest.approx(58 * 32 * 3 * 7168 * 2048 * FP8)
    assert hbm.parts["dense_ffn"] == pytest.approx(3 * 3 * 7168 * 18432 / 8 * FP8)
    assert hbm.parts["shared_experts"] == pytest.approx(58 * 3 * 7168 * 2048 / 8 * FP8)
    assert hbm.parts["embedding_and_head"] == 2 * 129280 * 7168 * 2
    # the latent of a token lives on the one rank attending it: the TP layout's per-GPU bytes, on one GPU
    assert hbm.kv_bytes_per_token == 61 * 576 * 2
    # DeepEP: shared experts and dense FFNs whole on every GPU (tp 1), experts over 16
    deepep = hbm_per_gpu(V3, _group(2))
    assert deepep.parts["shared_experts"] == pytest.approx(58 * 3 * 7168 * 2048 * FP8)
    assert deepep.parts["routed_experts"] == pytest.approx(58 * 16 * 3 * 7168 * 2048 * FP8)


def test_dp_attention_holds_dp_times_the_tokens_of_tp():
    """Under TP 8 every GPU holds every token's latent; under DP 8 one does: a group of 8 GPUs holds 8x the
    tokens for the same bytes per token on the holding GPU."""
    gpu = GpuSpec("test", 1e15, 4e12, 141e9, 0.8, 0.7, 0.7, 3e-4)
    tp = StepTimeModel(V3, gpu, 8)
    dp = hbm_per_gpu(V3, Deployment(tp=8, dp=8, ep=8))
    assert dp.kv_bytes_per_token == tp.kv_bytes_per_token_per_gpu
    free_tp, free_dp = gpu.hbm_bytes - tp.weight_bytes_per_gpu, gpu.hbm_bytes - dp.weights
    group_tokens_tp = free_tp // tp.kv_bytes_per_token_per_gpu
    group_tokens_dp = 8 * (free_dp // dp.kv_bytes_per_token)
    # 8x the tokens per byte of free HBM; the attention projections every rank replicates (11.4 GB against TP's
    # 1.4) take some of it back: 6.2x here
    assert group_tokens_dp / group_tokens_tp == pytest.approx(8 * free_dp / free_tp, rel=1e-5)
    assert 6 < group_tokens_dp / group_tokens_tp < 8


def test_mtp_adds_a_layer_of_weights_and_latent():
    plain, mtp = hbm_per_gpu(V3, Deployment(tp=8, dp=8, ep=8)), hbm_per_gpu(V3, Deployment(tp=8, dp=8, ep=8),
                                                                             mtp_layers=1)
    assert mtp.kv_bytes_per_token == plain.kv_bytes_per_token * 62 / 61
    assert mtp.parts["routed_experts"] == pytest.approx(plain.parts["routed_experts"] * 59 / 58)
    assert mtp.parts["mtp_eh_proj"] == 2 * 7168 * 7168 * 2


# ---- MTP ------------------------------------------------------------------------------------------------------
def test_mtp_tokens_per_step_by_hand():
    assert Mtp(3, accept_rate=0.8).tokens_per_step == pytest.approx(1 + 0.8 + 0.64 + 0.512)
    assert Mtp(1, accept_rate=0.0).tokens_per_step == 1.0
    assert Mtp(2, accept_rate=1.0).tokens_per_step == 3.0
    assert Mtp(1, accepted_length=1.8).tokens_per_step == 1.8
    assert Mtp(3, accept_rate=0.8).tpot_s(0.0738) == pytest.approx(0.0738 / 2.952)
    assert Mtp(3, accepted_length=2.0).draft_decode_passes == 2 and Mtp(3, accepted_length=2.0).verify_tokens == 4
    assert Mtp(1, accepted_length=1.5).draft_decode_passes == 0


@pytest.mark.parametrize("mtp, words", [
    (Mtp(0), None),
    (Mtp(0, accept_rate=0.5), "--accept-rate needs --nextn >= 1"),
    (Mtp(-1), "--nextn must be >= 0"),
    (Mtp(2), "give one of"),
    (Mtp(2, accept_rate=0.5, accepted_length=1.5), "give one of"),
    (Mtp(2, accept_rate=1.5), "[0, 1]"),
    (Mtp(2, accepted_length=3.5), "nextn + 1 = 3"),
    (Mtp(2, accepted_length=3.0), None),
])
def test_mtp_refusals(mtp, words):
    problem = _problem(Deployment(tp=8, dp=8, ep=8), mtp=mtp)
    assert problem is None if words is None else words in problem
    assert "ships no MTP module" in _problem(Deployment(tp=8), get_model("llama-3.1-70b"), Mtp(1, accept_rate=0.5))
