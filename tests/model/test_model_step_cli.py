"""`simroute model step` for every shipped GPU and model: the terms, their bounds, the sources they cite."""

from __future__ import annotations

import json

import pytest

from simroute.model.geometry import MODELS

GPUS = ["h100-sxm", "h200-sxm", "a100-80gb", "a40", "rtxpro6000"]
TERMS = ("iteration_ms", "linear_ms_per_layer", "attention_ms_per_layer", "allreduce_ms_per_layer", "overhead_ms")


def _step(cli, *args):
    code, out, err = cli("model", "step", *args, "--json")
    assert code == 0, (args, out, err)
    return json.loads(out)


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("model", list(MODELS))
def test_every_gpu_and_model_prints_its_terms(cli, gpu, model):
    d = _step(cli, "--model", model, "--gpu", gpu, "--tp", "1", "--tokens", "32", "--decode-seqs", "32",
              "--context", "2048")
    for term in TERMS:
        assert d[term] >= 0, term
    assert d["iteration_ms"] > d["overhead_ms"] > 0
    assert d["iteration_ms"] == pytest.approx(d["layers"] * (d["linear_ms_per_layer"] + d["attention_ms_per_layer"]
                                                            + d["allreduce_ms_per_layer"]
                                                            + d["elementwise_ms_per_layer"])
                                              + d["lm_head_ms"] + d["overhead_ms"])
    assert set(d["bounds"]) >= {"linear", "attention", "allreduce"}
    assert d["bounds"]["linear"] in ("memory", "compute", "measured", "roofline")
    assert d["bounds"]["allreduce"] in ("none", "measured")
    # every term names its source: an operator table of this GPU, or the roofline
    assert set(d["term_lookups"]) >= {"linear", "attention", "allreduce", "lm_head"}
    assert all(v in ("measured", "interpolated", "extrapolated", "roofline", "none")
               for v in d["term_lookups"].values())
    assert d["term_lookups"]["allreduce"] == "none"           # tp 1: no all-reduce launches
    src = d["gpu_sources"]
    assert src["hbm_GBps"].startswith("datasheet: NVIDIA")
    assert src["peak_bf16_TFLOPs"].startswith(("datasheet: NVIDIA", "fitted: derived from the NVIDIA"))
    for frac in ("hbm_efficiency", "gemm_efficiency", "attention_efficiency"):
        assert src[frac].split(":")[0] in ("paper", "default", "measured"), frac


def test_table_output_names_bounds_and_sources(cli):
    code, out, _ = cli("model", "step", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "8",
                       "--tokens", "64", "--decode-seqs", "64", "--context", "4096")
    assert code == 0
    for word in ("iteration", "linear", "attention", "all-reduce", "overhead", "memory", "FlashMLA", "datasheet"):
        assert word in out, word


def test_tp_uses_the_gpus_own_fabric(cli):
    d8 = _step(cli, "--model", "llama-3.1-70b", "--gpu", "a100-80gb", "--tp", "8", "--tokens", "64",
               "--decode-seqs", "64", "--context", "4096")
    assert d8["inputs"]["allreduce_fabric"] == "a100-nvlink3" and d8["allreduce_ms_per_layer"] > 0
    d1 = _step(cli, "--model", "llama-3.1-70b", "--gpu", "a100-80gb", "--tp", "1", "--tokens", "64",
               "--decode-seqs", "64",
               "--context", "4096")
    assert d8["weight_GB_per_gpu"] == pytest.approx(d1["weight_GB_per_gpu"] / 8, rel=0.01)
    assert d8["weights_fit"] and not d1["weights_fit"]          # 141 GB of weights on one 80 GB A100


def test_weight_dtype_shown_and_overridable(cli):
    args = ("--model", "deepseek-v3", "--gpu", "h200-sxm", "--tp", "8", "--tokens", "1", "--decode-seqs", "1",
            "--context", "1")
    fp8, bf16 = _step(cli, *args, "--roofline"), _step(cli, *args, "--weights", "bf16", "--roofline")
    assert fp8["inputs"]["allreduce_fabric"] == "h100-nvlink4"     # HGX H200 hosts (the default topology's)
    assert fp8["weight_dtype"] == "fp8" and fp8["linear_fp8_rate"] and fp8["notes"] == []
    assert "quantization_config" in fp8["weight_dtype_source"]
    assert bf16["weight_dtype"] == "bf16" and bf16["weight_dtype_source"].startswith("override: bf16")
    assert fp8["weight_GB_per_gpu"] < 0.51 * bf16["weight_GB_per_gpu"]
    assert fp8["weights_fit"] and not bf16["weights_fit"] and fp8["kv_capacity_tokens"] > 0
    assert fp8["linear_ms_per_layer"] == pytest.approx(bf16["linear_ms_per_layer"] / 2, rel=0.05)
    # the measured tables hold DeepSeek-V3's FP8 block-scaled fused MoE at TP 8 but no bf16 one: the FP8 linear
    # term is read from the tables, the bf16 one falls back to the roofline and says why
    fp8_t, bf16_t = _step(cli, *args), _step(cli, *args, "--weights", "bf16")
    assert fp8_t["term_lookups"]["linear"] in ("measured", "interpolated") and fp8_t["notes"] == []
    assert bf16_t["term_lookups"]["linear"] == "roofline"
    assert any("no fused-MoE rows" in note for note in bf16_t["notes"])
    a100 = _step(cli, "--model", "deepseek-v3", "--gpu", "a100-80gb", "--tp", "1", "--tokens", "4")
    assert not a100["linear_fp8_rate"] and "bf16 rate" in a100["notes"][0]


def test_prefill_tokens_cost_more_than_decode(cli):
    one_gpu = ("--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "1", "--roofline")
    decode = _step(cli, *one_gpu, "--tokens", "1", "--decode-seqs", "1", "--context", "8192")
    prefill = _step(cli, *one_gpu, "--tokens", "8192")
    assert prefill["iteration_ms"] > 5 * decode["iteration_ms"]
    assert prefill["bounds"]["linear"] == "compute" and decode["bounds"]["linear"] == "memory"


@pytest.mark.parametrize("args", [
    ("--gpu", "nope", "--tokens", "4"), ("--model", "nope", "--tokens", "4"), ("--tokens", "0"),
    ("--tokens", "4", "--decode-seqs", "5"),
    ("--calib", "h100-ibgda", "--gpu", "a100-80gb", "--tp", "8", "--tokens", "4"),   # no fabric for its all-reduce
    ("--model", "deepseek-v3", "--weights", "int4", "--tokens", "4"),
])
def test_bad_input_one_line_exit_2(cli, args):
    code, out, err = cli("model", "step", *args)
    assert code == 2 and "Traceback" not in out + err and (err or out).strip()


@pytest.mark.parametrize("args, field, words", [
    (("--tp", "3", "--tokens", "1"), "tp", "does not divide deepseek-v3's 128 query heads"),
    (("--model", "llama-3.1-8b", "--tp", "6", "--tokens", "1"), "tp", "does not divide llama-3.1-8b's 32 query"),
    (("--tokens", "20000000"), "tokens", "past any serving engine's context"),
    (("--tokens", "1", "--decode-seqs", "1", "--context", "99999999"), "context", "past any serving engine"),
    (("--tokens", "1", "--kv-layout", "striped"), "kv-layout", "unknown layout 'striped'"),
])
def test_shapes_that_cannot_exist_are_refused(cli, args, field, words):
    code, out, err = cli("model", "step", *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"field '{field}'" in err and words in err


def test_kv_beyond_hbm_is_flagged_not_hidden(cli):
    args = ("--model", "deepseek-v3", "--gpu", "h200-sxm", "--tp", "8", "--tokens", "64", "--decode-seqs", "64")
    fits, too_big = _step(cli, *args, "--context", "4096"), _step(cli, *args, "--context", "20000")
    assert fits["kv_fits"] and fits["kv_tokens"] == 64 * 4096 and fits["notes"] == []
    assert not too_big["kv_fits"] and too_big["kv_tokens"] == 64 * 20_000 > too_big["kv_capacity_tokens"]
    assert any("exceeds" in note and "no engine could hold" in note for note in too_big["notes"])
    # the tpla layout holds 1/8 of the latent per rank: the same batch fits
    tpla = _step(cli, *args, "--context", "20000", "--kv-layout", "tpla")
    assert tpla["kv_fits"] and tpla["kv_capacity_tokens"] > 7.9 * too_big["kv_capacity_tokens"]
