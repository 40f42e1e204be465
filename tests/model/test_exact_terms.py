"""Exact values of the step model's and the closed form's terms, worked by hand from their definitions
(docs/STEP_TIME.md, docs/MODEL.md), so a wrong constant factor or rounding fails here and not only a
comparison by order. DeepSeek-V2-Lite: hidden 2048, 16 query heads, MLA d_qk 576 / d_v 512, c_KV 1152 bytes
per token-layer, 27 layers; a synthetic GPU with round numbers (no operator tables: the roofline alone)."""

from __future__ import annotations

import dataclasses

import math

import pytest

from simroute.calib import load_profile
from simroute.model.cost import FLOATS, step_parts
from simroute.model.geometry import get_model
from simroute.model.opstep import MeasuredStep
from simroute.model.steptime import BatchShape, GpuSpec, StepTimeModel, causal_pairs

V2_LITE = get_model("deepseek-v2-lite")
GPU = GpuSpec(name="round", peak_flops=100e12, hbm_Bps=1e12, hbm_bytes=80e9, hbm_efficiency=0.5,
              gemm_efficiency=0.5, attention_efficiency=0.25, iteration_overhead_s=10e-6)
REL = 1e-12


def _model(tp: int = 1, **kw) -> StepTimeModel:
    return StepTimeModel(V2_LITE, kw.pop("gpu", GPU), tp, **kw)


# ---- the tensor-parallel all-reduce -------------------------------------------------------------------------
def test_ring_allreduce_per_layer_by_hand():
    # two all-reduces per layer, each a ring of 2 (tp - 1) = 6 steps: 6 latencies and 2 (tp - 1) / tp = 1.5 of
    # the message (1000 tokens x 2048 x 2 bytes = 4.096 MB) per GPU over the 100 GB/s fabric:
    # 2 x (6 x 5 us + 1.5 x 4.096e6 / 100e9 s) = 60 us + 122.88 us
    model = _model(4, allreduce_Bps=100e9, allreduce_latency_s=5e-6)
    terms = model.iteration(BatchShape.uniform(prefill_tokens=1000))
    assert terms.allreduce_s_per_layer == pytest.approx(182.88e-6, rel=REL)
    assert terms.bounds["allreduce"] == "bandwidth"
    assert _model(1, allreduce_Bps=100e9, allreduce_latency_s=5e-6).iteration(
        BatchShape.uniform(prefill_tokens=1000)).allreduce_s_per_layer == 0.0          # tp 1: no all-reduce


def test_switched_board_allreduce_is_one_latency_each():
    # NVSwitch: one 3 us latency per all-reduce, 2 x 7/8 of the 10-token message (40,960 bytes) over 400 GB/s
    gpu = GpuSpec(**{**GPU.__dict__, "allreduce_bus_Bps": 400e9, "allreduce_latency_s": 3e-6})
    terms = _model(8, gpu=gpu, allreduce_Bps=1.0).iteration(BatchShape.uniform(decode_seqs=10, context=100))
    assert terms.allreduce_s_per_layer == pytest.approx(2 * (3e-6 + 1.75 * 40_960 / 400e9), rel=REL)
    assert terms.bounds["allreduce"] == "latency"


# ---- attention and the holder's partial --------------------------------------------------------------------
def test_attention_roofline_by_hand():
    model = _model()
    # memory: 1e6 KV tokens x 1152 bytes at 0.5 TB/s achievable = 2.304 ms per layer
    assert model.attention_s(1e6, 1.0, layers=1) == pytest.approx(1e6 * 1152 / 0.5e12, rel=REL)
    # compute: 1e8 (row, key) pairs x 2 FLOPs x 16 heads x (576 + 512) at 25 TFLOP/s = 13.9264 ms per layer
    assert model.attention_s(1.0, 1e8, layers=1) == pytest.approx(1e8 * 2 * 16 * 1088 / 25e12, rel=REL)
    assert model.attention_s(1.0, 1e8) == pytest.approx(27 * 1e8 * 2 * 16 * 1088 / 25e12, rel=REL)


def test_holder_partial_splits_its_rows_over_tp():
    # attention at 2 TFLOP/s achievable, so the call is compute-bound up to tp 4: 4 queries of 16 rows over 1e5
    # keys each, 6.4e6 pairs x 2 x 1088 FLOPs / tp (the keys' 4e5 x 1152 bytes take 0.9216 ms at 0.5 TB/s)
    slow = GpuSpec(**{**GPU.__dict__, "attention_efficiency": 0.02})
    for tp in (1, 2, 4):
        assert _model(tp, gpu=slow).holder_partial_s(4, 16, 1e5) == pytest.approx(6.4e6 * 2 * 1088 / tp / 2e12,
                                                                                  rel=REL)
    assert _model(8, gpu=slow).holder_partial_s(4, 16, 1e5) == pytest.approx(4e5 * 1152 / 0.5e12, rel=REL)


def test_fanout_moves_tp_minus_one_shares_of_the_copy():
    model = _model(4, allreduce_Bps=100e9, allreduce_latency_s=5e-6)
    # each GPU receives 3/4 of a 1 GB copy over 100 GB/s, after one 5 us latency
    assert model.fanout_s(1e9) == pytest.approx(5e-6 + 0.75 * 1e9 / 100e9, rel=REL)
    assert model.fanout_bytes(1e9) == 3e9
    assert _model(4, allreduce_Bps=100e9, kv_layout="tpla").fanout_s(1e9) == 0.0     # nothing to spread


def test_kv_capacity_is_the_floor_of_free_bytes_over_bytes_per_token():
    model = _model()
    free = GPU.hbm_bytes - model.weight_bytes_per_gpu - 1e9
    assert model.kv_bytes_per_token_per_gpu == 31_104.0                       # 27 layers x 1152 bytes
    assert model.kv_capacity_tokens(1e9) == math.floor(free / 31_104.0)
    exact = model.weight_bytes_per_gpu + 31_104.0 * 1000                       # room for exactly 1000 tokens
    assert _model(gpu=GpuSpec(**{**GPU.__dict__, "hbm_bytes": exact})).kv_capacity_tokens() == 1000


def test_elementwise_kernels_read_the_hidden_state_four_times_per_norm():
    # per token and layer, roofline: 2 norms x 4 accesses x 2048 + RoPE 2 x (16 + 1) x 64 + MLA latent norms
    # 2 x (0 + 512) + the dense FFN activation 3 x 10944 (SwiGLU: gate, up in, out), each x 2 bytes at 0.5 TB/s;
    # V2-Lite's first layer is dense, the other 26 MoE (2 shared experts of 1408, 6 routed of 1408)
    g = V2_LITE
    attn_side = 2 * 4 * g.hidden + 2 * (16 + 1) * 64 + 2 * (0 + 512)
    kinds = g.layer_kinds()
    moe_widths = [g.shared_experts * g.expert_intermediate, g.experts_per_token * g.expert_intermediate]
    per_token = (kinds.get("dense", 0) * (attn_side + 3 * g.intermediate)
                 + kinds.get("moe", 0) * (attn_side + sum(3 * w for w in moe_widths))) * 2 / 0.5e12
    terms = _model().iteration(BatchShape.uniform(prefill_tokens=1000))
    assert terms.elementwise_s_per_layer * g.layers == pytest.approx(1000 * per_token, rel=REL)


def test_causal_pairs_by_hand():
    assert causal_pairs(4) == 10                         # 1 + 2 + 3 + 4
    assert causal_pairs(3, earlier=100) == 3 * 100 + 6


# ---- the measured step: its all-reduce and the prefill length it reads ------------------------------------
class _Surface:
    """Seconds = the coordinate asked for (so a test reads back what the model asked the table)."""

    table = "stub"

    def seconds(self, sequences, length):
        return length


def test_measured_prefill_reads_the_table_at_the_length_whose_causal_pairs_match():
    step = load_profile("h100-ibgda").step_model("deepseek-v2-lite")
    measured = step._measured
    assert measured is not None                                 # the shipped H100 entry has operator tables
    measured._prefill = _Surface()
    for length in (1, 7, 512, 4096):
        assert measured.attention_s(0, 0, 1, causal_pairs(length), length) == pytest.approx(length, rel=1e-12)


def test_measured_allreduce_is_two_table_all_reduces_per_layer():
    profile = load_profile("h100-ibgda")
    step = profile.step_model("deepseek-v2-lite", tp=2)
    measured = step._measured
    tokens = 64.0
    curve = measured._ar_curve(True, tokens * V2_LITE.hidden)
    if curve is None:
        pytest.skip("the shipped H100 tables hold no tp-2 all-reduce rows")
    _, allreduce, _ = measured.token_terms_s(tokens, tokens, tokens)
    assert allreduce == pytest.approx(2 * curve.seconds(tokens * V2_LITE.hidden), rel=REL)
    assert isinstance(measured, MeasuredStep)


# ---- the closed form's route wire and host return ---------------------------------------------------------
def test_route_wire_is_rows_times_q_and_p_bytes_over_the_single_block_rate_per_rank():
    params = load_profile("h100-ibgda").cost_params()
    fabric = params.fabric_id("h100-ibgda")                    # single-block 25 GB/s, probe 16 + 9 us
    for tp in (1, 4):
        parts = step_parts(16.0, 2048.0, fabric, 0, 1, tp, True, params, FLOATS)
        assert parts.wire == pytest.approx(16 * 2184 / 25e9 / tp, rel=REL)     # q + p = 2184 bytes a row
        assert parts.probe == pytest.approx(25e-6, rel=REL)
        assert parts.ret_extra == 0.0


def test_the_python_client_regime_returns_over_two_probes():
    params = load_profile("h100-ibgda").cost_params().with_(host_overhead=True, collapsed_response=False)
    parts = step_parts(16.0, 2048.0, params.fabric_id("h100-ibgda"), 0, 1, 1, True, params, FLOATS)
    assert parts.ret_extra == pytest.approx(2 * 25e-6, rel=REL)


def test_lm_head_reads_its_weights_once_and_writes_each_sequences_logits():
    # vocab 102,400 x hidden 2048 x 2 bytes of weights, plus 102,400 x 2 bytes of logits per sequence, at
    # 0.5 TB/s; compute: 2 x 2048 x 102,400 FLOPs per sequence at 50 TFLOP/s (gemm 0.5): memory-bound at 8
    model = _model()
    terms = model.iteration(BatchShape.uniform(decode_seqs=8, context=10))
    assert terms.lm_head_s == pytest.approx((102_400 * 2048 * 2 + 8 * 102_400 * 2) / 0.5e12, rel=REL)
    assert terms.bounds["lm_head"] == "memory"
    assert _model(4).iteration(BatchShape.uniform(decode_seqs=8, context=10)).lm_head_s == pytest.approx(
        (25_600 * 2048 * 2 + 8 * 25_600 * 2) / 0.5e12, rel=REL)                     # a quarter of the vocab


def test_iteration_overhead_is_charged_once():
    terms = _model().iteration(BatchShape.uniform(decode_seqs=1, context=1))
    assert terms.overhead_s == 10e-6
    assert terms.iteration_s == pytest.approx(
        terms.layers * (terms.linear_s_per_layer + terms.attention_s_per_layer + terms.allreduce_s_per_layer
                        + terms.elementwise_s_per_layer) + terms.lm_head_s + 10e-6, rel=1e-12)


def test_closed_form_fetch_and_local_parts_by_hand():
    params = load_profile("h100-ibgda").cost_params()
    fabric = params.fabric_id("h100-ibgda")
    parts = step_parts(16.0, 2048.0, fabric, 0, 1, 2, True, params, FLOATS)
    # pull: 2048 tokens x 1152 bytes x 27 layers over the 25 GB/s bulk rate, half per rank at tp 2
    assert parts.pull == pytest.approx(2048 * 1152 * 27 / 25e9 / 2, rel=REL)
    assert parts.splice == 0.0                                          # at its cached offset
    # local: re-prefill 2048 tokens x 27 layers at the profile's per token-layer cost
    assert parts.prefill == pytest.approx(2048 * 27 * params.prefill_s_per_token_layer, rel=REL)
    sparse = step_parts(16.0, 2048.0, fabric, 512, 4, 1, True, params, FLOATS)
    # a selection's gather, every step: 27 layers x (base x 512 / 2048 + per holder x 4)
    assert sparse.gather == pytest.approx(27 * (params.gather_base_s * 512 / 2048 + params.gather_per_holder_s * 4),
                                          rel=REL)


def test_a_selections_gather_is_floored_at_its_bytes_over_the_bulk_rate():
    """The fitted gather (host-copy-bound on the testbed, paper §6.3) where the wire is faster; on a fabric at
    1/1000 of the rate the selection's bytes bind: 2048 entries x 1152 bytes x 27 layers over 25 MB/s, this
    rank's half at tp 2."""
    params = load_profile("h100-ibgda").cost_params()
    fabric = params.fabric_id("h100-ibgda")
    fitted = 27 * (params.gather_base_s * 2048 / 2048 + params.gather_per_holder_s * 4)
    assert fitted > 2048 * 1152 * 27 / 25e9 / 2            # on the measured fabric the curve binds
    parts = step_parts(16.0, 0.0, fabric, 2048, 4, 2, True, params, FLOATS)
    assert parts.gather == pytest.approx(fitted, rel=REL)
    slow = params.with_(fabrics=tuple(dataclasses.replace(f, bulk_Bps=f.bulk_Bps / 1000) for f in params.fabrics))
    parts = step_parts(16.0, 0.0, fabric, 2048, 4, 2, True, slow, FLOATS)
    assert parts.gather == pytest.approx(2048 * 1152 * 27 / 25e6 / 2, rel=REL)
    assert parts.gather > fitted


def test_holder_work_is_rows_times_keys_over_the_reference_requester():
    from simroute.model.cost import holder_work
    assert holder_work(16, 2048) == 1.0                     # one reference requester: h_q 16 x ct 2048
    assert holder_work(32, 4096, 0.5) == 2.0                # twice the rows and keys, half the tokens kept


def test_distinct_experts_and_their_tokens_under_uniform_routing():
    from simroute.model.steptime import expert_load, experts_touched
    assert experts_touched(64, 6, 1) == pytest.approx(6.0, rel=REL)                 # one token: its 6 experts
    assert experts_touched(64, 6, 2) == pytest.approx(64 * (1 - (58 / 64) ** 2), rel=REL)     # 11.4375
    assert experts_touched(64, 6, 0) == 0.0
    touched, per_expert = expert_load(64, 6, 2)
    assert per_expert == pytest.approx(2 * 6 / 11.4375, rel=REL)                   # 12 assignments spread


def test_linear_term_is_two_flops_per_weight_per_token():
    # Llama-2-7B, one layer: q, k, v, o 4 x 4096^2 and the SwiGLU FFN 3 x 4096 x 11008 = 202,375,168 weights;
    # 8192 tokens x 2 FLOPs each at 50 TFLOP/s achievable: compute-bound (the weights read in 0.8 ms)
    terms = StepTimeModel(get_model("llama-2-7b"), GPU).iteration(BatchShape.uniform(prefill_tokens=8192))
    assert terms.linear_s_per_layer == pytest.approx(8192 * 2 * 202_375_168 / 50e12, rel=REL)
    assert terms.bounds["linear"] == "compute"


def test_the_bytes_of_a_row_and_a_token_by_hand():
    # MLA: c_KV is the 512-dim latent + 64 RoPE dims in bf16 (1152 bytes a token-layer); a routed row sends the
    # absorbed query (576 dims, 1152 bytes) and gets back 512 bf16 values + an fp32 max and sum (1032 bytes,
    # "Move the Query, Not the Cache" §3.2)
    for name in ("deepseek-v2-lite", "deepseek-v3"):
        geometry = get_model(name)
        assert (geometry.b_kv, geometry.q_bytes, geometry.p_bytes, geometry.qp_bytes) == (1152, 1152, 1032, 2184)
        assert geometry.kv_bytes_per_token == 1152 * geometry.layers
    # GQA (Llama-3.1-8B): 8 KV heads x 128 dims x K and V x 2 bytes; a row is one head's 128-dim query
    llama = get_model("llama-3.1-8b")
    assert (llama.b_kv, llama.q_bytes, llama.p_bytes) == (8 * 128 * 2 * 2, 256, 264)


def test_parameter_counts_match_the_published_sizes():
    # DeepSeek-V2-Lite 15.7B total; DeepSeek-V3 671B total and 37B activated per token (their model cards)
    assert get_model("deepseek-v2-lite").params() == pytest.approx(15.7e9, rel=5e-3)
    v3 = get_model("deepseek-v3")
    assert v3.params() == pytest.approx(671e9, rel=5e-3)
    assert v3.params(active=True) == pytest.approx(37e9, rel=0.02)


def test_the_calibrated_curves_interpolate_and_extrapolate_by_hand():
    from simroute.model.curves import interp_clamped, interp_extrap
    xs, ys = (1.0, 8.0, 16.0, 256.0), (15.0, 15.0, 37.0, 400.0)
    assert interp_extrap(0.5, xs, ys) == 15.0                                  # flat below the first point
    assert interp_extrap(12.0, xs, ys) == pytest.approx(15.0 + 4 * 22 / 8)     # halfway from 8 to 16: 26
    assert interp_extrap(512.0, xs, ys) == pytest.approx(400.0 + 256 * 363 / 240)   # the last slope beyond
    assert interp_clamped(512.0, xs, ys) == 400.0 and interp_clamped(0.0, xs, ys) == 15.0


def test_the_holder_curve_and_the_splice_as_the_simulator_charges_them():
    from simroute.sim.compute import ComputeModel
    params = load_profile("h100-ibgda").cost_params()
    compute = ComputeModel(params)
    (n0, n1, n2, *_), (s0, s1, s2, *_) = params.holder_n, params.holder_s
    assert compute.batch_s(n0 / 2) == s0                                          # flat below the first point
    middle = (n1 + n2) / 2                                                        # halfway between two points
    assert compute.batch_s(middle) == pytest.approx((s1 + s2) / 2, rel=1e-12)
    (c0, c1, *_), (t0, t1, *_) = params.splice_ct, params.splice_s
    assert compute.splice_s((c0 + c1) / 2) == pytest.approx((t0 + t1) / 2, rel=1e-12)
    assert compute.kv_bytes_per_token == 31_104.0                                 # 27 layers x 1152 bytes
