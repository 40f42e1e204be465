"""FP8 weights in the step-time model: hand counts of the bytes and the rates they change, and what stays."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simroute.calib import load_profile
from simroute.calib.profile import shipped_dir
from simroute.model.geometry import FP8_BLOCK, MODELS, WEIGHT_DTYPE_BYTES, get_model
from simroute.model.steptime import BatchShape, StepTimeModel

FP8_BYTES = 1.0 + 4.0 / (128 * 128)          # e4m3 + one fp32 scale per 128 x 128 block (hand count)


def _spec(gpu: str):
    # the bare roofline (no operator tables, no kernel floor): these tests pin its FP8 arithmetic
    return replace(load_profile(shipped_dir() / "gpus" / f"{gpu}.yaml").gpu_spec(gpu, tables=False), kernel_floor_s=0.0)


def _pair(model="deepseek-v3", gpu="h200-sxm", tp=8):
    g = get_model(model)
    return (StepTimeModel(g.with_weight_dtype("fp8"), _spec(gpu), tp),
            StepTimeModel(g.with_weight_dtype("bf16"), _spec(gpu), tp))


def test_checkpoints_that_ship_fp8_say_so_with_a_source():
    fp8 = {m.name for m in MODELS.values() if m.weight_dtype == "fp8"}
    assert {"deepseek-v3", "deepseek-r1", "deepseek-v3.2", "kimi-k2"} <= fp8
    assert get_model("deepseek-v2-lite").weight_dtype == "bf16" and get_model("llama-3.1-70b").weight_dtype == "bf16"
    for name in fp8:
        src = get_model(name).sources["weight_dtype"]
        assert src.startswith("fp8: HF config.json") and "128, 128" in src
    assert "Technical Report §3.3" in get_model("deepseek-v3").sources["weight_dtype"]
    assert WEIGHT_DTYPE_BYTES["fp8"] == pytest.approx(FP8_BYTES) and FP8_BLOCK == 128


def test_fp8_stamps_every_gemm_but_the_router():
    ops = get_model("deepseek-v3").linear_ops(8, "moe")
    assert {op.name for op in ops if not op.fp8} == {"router"}
    q_a = next(op for op in ops if op.name == "q_a")
    assert q_a.weight_bytes == pytest.approx(7168 * 1536 * FP8_BYTES)                 # hand count
    bf = get_model("deepseek-v3").with_weight_dtype("bf16").linear_ops(8, "moe")
    assert next(op for op in bf if op.name == "q_a").weight_bytes == 7168 * 1536 * 2


def test_weight_bytes_halve_and_kv_room_grows_by_what_they_free():
    fp8, bf16 = _pair()
    g = fp8.geometry
    head_and_embedding = 2 * -(-g.vocab // 8) * g.hidden * 2                          # stay bf16
    router = (g.layers - g.dense_layers) * g.hidden * g.routed_experts * 2            # stays bf16
    bf16_rest = bf16.weight_bytes_per_gpu - head_and_embedding - router
    assert fp8.weight_bytes_per_gpu == pytest.approx(head_and_embedding + router + bf16_rest * FP8_BYTES / 2)
    assert 0.50 < fp8.weight_bytes_per_gpu / bf16.weight_bytes_per_gpu < 0.51
    # 671B parameters in FP8 over 8 GPUs: ~85 GB each, which fits a 141 GB H200 (bf16 does not)
    assert 84e9 < fp8.weight_bytes_per_gpu < 86e9 < 141e9 < bf16.weight_bytes_per_gpu
    assert bf16.kv_capacity_tokens() == 0
    assert fp8.kv_bytes_per_token_per_gpu == bf16.kv_bytes_per_token_per_gpu == 576 * 2 * 61   # KV unchanged
    free = 141e9 - fp8.weight_bytes_per_gpu
    assert fp8.kv_capacity_tokens() == int(free // fp8.kv_bytes_per_token_per_gpu)


def test_weight_bound_decode_iteration_roughly_halves():
    fp8, bf16 = _pair()
    one = BatchShape.uniform(decode_seqs=1, context=1)          # one decode: all weight reads, no KV to speak of
    t8, t16 = fp8.iteration(one), bf16.iteration(one)
    assert t8.bounds["linear"] == t16.bounds["linear"] == "memory"
    assert t8.linear_s_per_layer / t16.linear_s_per_layer == pytest.approx(0.5, abs=0.02)
    # the bf16 LM head, attention, the elementwise kernels and the overhead stay
    assert 0.5 < t8.iteration_s / t16.iteration_s < 0.65


def test_flop_bound_prefill_runs_at_the_fp8_rate():
    g = get_model("llama-3.1-70b")                             # dense: FLOP-bound at a large chunk
    spec = _spec("h100-sxm")
    fp8 = StepTimeModel(g.with_weight_dtype("fp8"), spec, 8)
    bf16 = StepTimeModel(g, spec, 8)
    chunk = BatchShape.uniform(prefill_tokens=8192)
    assert fp8.fp8_rate and not bf16.fp8_rate
    assert fp8.iteration(chunk).bounds["linear"] == bf16.iteration(chunk).bounds["linear"] == "compute"
    flops = 8192 * sum(2 * op.k * op.n for op in g.linear_ops(8, "dense"))     # hand count, per layer
    rate = spec.gemm_fraction(8192)
    assert bf16.iteration(chunk).linear_s_per_layer == pytest.approx(flops / (989e12 * rate))
    assert fp8.iteration(chunk).linear_s_per_layer == pytest.approx(flops / (1979e12 * rate))


def test_a_gpu_without_fp8_reads_fp8_bytes_at_the_bf16_rate_and_says_so():
    g = get_model("llama-3.1-70b").with_weight_dtype("fp8")
    a100 = StepTimeModel(g, _spec("a100-80gb"), 8)
    as_bf16 = StepTimeModel(get_model("llama-3.1-70b"), _spec("a100-80gb"), 8)
    assert not a100.fp8_rate and a100.notes and "bf16 rate" in a100.notes[0]
    chunk = BatchShape.uniform(prefill_tokens=8192)
    assert a100.iteration(chunk).linear_s_per_layer == pytest.approx(as_bf16.iteration(chunk).linear_s_per_layer)
    assert a100.weight_bytes_per_gpu < 0.55 * as_bf16.weight_bytes_per_gpu      # embedding + LM head stay bf16
    assert not StepTimeModel(get_model("llama-3.1-70b"), _spec("a100-80gb"), 8).notes   # bf16: nothing to say


@pytest.mark.parametrize("gpu,fp8", [("h100-sxm", 1979e12), ("h200-sxm", 1979e12), ("rtxpro6000", 1000e12),
                                     ("a100-80gb", None), ("a40", None)])
def test_fp8_peaks_of_the_gpu_entries(gpu, fp8):
    s = _spec(gpu)
    assert s.peak_fp8_flops == fp8
    if fp8 is not None:
        assert s.peak_fp8_flops >= 1.9 * s.peak_flops        # tensor cores double per precision step
        kind = "fitted: derived" if gpu == "rtxpro6000" else "datasheet: NVIDIA"
        assert s.sources["peak_fp8_TFLOPs"].startswith(kind)


def test_override_records_itself_and_rejects_unknown_dtypes():
    from simroute.errors import UnknownNameError
    g = get_model("deepseek-v3").with_weight_dtype("bf16")
    assert g.weight_dtype == "bf16" and g.sources["weight_dtype"].startswith("override: bf16 (the checkpoint's: fp8")
    with pytest.raises(UnknownNameError):
        get_model("deepseek-v3").with_weight_dtype("int4")
    prof = load_profile(shipped_dir() / "gpus" / "h200-sxm.yaml")
    assert prof.step_model("deepseek-v3", gpu="h200-sxm", tp=8, weight_dtype="bf16").geometry.weight_dtype == "bf16"


def test_holder_floor_is_per_gpu_under_tp_in_the_engine_and_the_closed_form():
    """The measured holder curve is one GPU's: a TP group's ranks split the query heads, so a batch's work on
    the curve is rows / tp, both in the step-time model's floor and in the closed form (which must agree)."""
    from simroute.calib import default_profile_path
    from simroute.model.cost import holder_compute_s
    from simroute.model.scalar import ScalarModel
    prof = load_profile(default_profile_path())
    params = prof.cost_params("deepseek-v3")
    step1 = prof.step_model("deepseek-v3", gpu_spec=_spec("h200-sxm"), tp=1)
    step8 = prof.step_model("deepseek-v3", gpu_spec=_spec("h200-sxm"), tp=8)
    rows, keys = 128 * 16, 65536.0                       # a 16-token first pass of 128 heads over 64k tokens
    curve8 = holder_compute_s(rows / 8, keys, 0, params, query_tokens=16)
    assert step8.holder_partial_s(1, rows, keys) == pytest.approx(curve8, rel=1e-9)     # the curve beats the roofline
    assert step8.holder_partial_s(1, rows, keys) < step1.holder_partial_s(1, rows, keys) / 4
    m = ScalarModel(params)
    parts1 = m.step(rows, keys, 0, True, tp=1, query_tokens=16)
    parts8 = m.step(rows, keys, 0, True, tp=8, query_tokens=16)
    assert parts8[0] < parts1[0]                            # route: wire and holder work split over the ranks
    assert holder_compute_s(rows, keys, 0, params, query_tokens=16) == \
        pytest.approx(step1.holder_partial_s(1, rows, keys), rel=1e-9)
