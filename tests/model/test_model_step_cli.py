"""`simroute model step` for every shipped GPU and model: the terms, their bounds, the sources they cite."""

from __future__ import annotations

import json
from dataclasses import replace

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
    """At the least TP (of 1, 2, 4, 8) where the weights and the batch's KV fit the GPU: a deployment that fits at
    no TP is refused at every one, one line naming the weights, the KV or (block-FP8 weights on an Ampere GPU) the
    missing FP8 tensor cores (model limits: docs/MODEL.md)."""
    shape = ("--tokens", "32", "--decode-seqs", "32", "--context", "2048")
    refusals = []
    for tp in (1, 2, 4, 8):
        code, out, err = cli("model", "step", "--model", model, "--gpu", gpu, "--tp", str(tp), *shape, "--json")
        if code == 0:
            break
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        refusals.append(err)
    else:
        assert model not in ("llama-2-7b", "llama-3.1-8b", "deepseek-v2-lite")     # these fit one GPU anywhere
    fit_words = (("field '--tp'", "GB of weights per GPU"), ("field '--decode-seqs'", "tokens of KV"),
                 ("field '--gpu'", "needs FP8 tensor cores"))
    assert all(any(all(word in err for word in words) for words in fit_words) for err in refusals), refusals
    if MODELS[model].weight_dtype == "fp8" and gpu in ("a100-80gb", "a40"):          # no FP8 tensor cores
        assert code == 2 and all("needs FP8 tensor cores" in err for err in refusals)
    if code != 0:
        return
    d = json.loads(out)
    assert d["inputs"]["tp"] == tp and d["kv_tokens"] == 32 * 2048 <= d["kv_capacity_tokens"]
    for term in TERMS:
        assert d[term] >= 0, term
    assert d["iteration_ms"] > d["overhead_ms"] > 0
    assert d["iteration_ms"] == pytest.approx(d["layers"] * (d["linear_ms_per_layer"] + d["attention_ms_per_layer"]
                                                            + d["allreduce_ms_per_layer"]
                                                            + d["elementwise_ms_per_layer"]
                                                            + d["indexer_ms_per_layer"])
                                              + d["lm_head_ms"] + d["overhead_ms"])
    assert set(d["bounds"]) >= {"linear", "attention", "allreduce"}
    assert d["bounds"]["linear"] in ("memory", "compute", "measured", "roofline")
    assert d["bounds"]["allreduce"] in (("none", "measured") if tp == 1 else ("measured", "latency", "bandwidth"))
    # every term names its source: an operator table of this GPU, or the roofline
    assert set(d["term_lookups"]) >= {"linear", "attention", "allreduce", "lm_head"}
    assert all(v in ("measured", "interpolated", "extrapolated", "roofline", "none")
               for v in d["term_lookups"].values())
    assert (d["term_lookups"]["allreduce"] == "none") == (tp == 1)      # tp 1: no all-reduce launches
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
    d4 = _step(cli, "--model", "llama-3.1-70b", "--gpu", "a100-80gb", "--tp", "4", "--tokens", "64",
               "--decode-seqs", "64", "--context", "4096")
    assert d8["weight_GB_per_gpu"] == pytest.approx(d4["weight_GB_per_gpu"] / 2, rel=0.01)
    # 141 GB of weights on one 80 GB A100: no such deployment, refused in one line
    code, out, err = cli("model", "step", "--model", "llama-3.1-70b", "--gpu", "a100-80gb", "--tp", "1", "--tokens",
                         "64")
    assert code == 2 and out == "" and "field '--tp'" in err and "141.1 GB of weights per GPU" in err


def test_weight_dtype_shown_and_overridable(cli):
    args = ("--model", "deepseek-v3", "--gpu", "h200-sxm", "--tp", "8", "--tokens", "1", "--decode-seqs", "1",
            "--context", "1")
    fp8 = _step(cli, *args, "--roofline")
    assert fp8["inputs"]["allreduce_fabric"] == "h100-nvlink4"     # HGX H200 hosts (the default topology's)
    assert fp8["weight_dtype"] == "fp8" and fp8["linear_fp8_rate"] and fp8["notes"] == []
    assert "quantization_config" in fp8["weight_dtype_source"]
    assert fp8["kv_capacity_tokens"] > 0
    # bf16 weights (169.6 GB per GPU at TP 8) fit no 141 GB H200: refused, one line naming --tp
    code, out, err = cli("model", "step", *args, "--weights", "bf16")
    assert code == 2 and out == "" and "field '--tp'" in err and "169.6 GB of weights per GPU (bf16)" in err
    # the same iteration's terms in bf16, from the step model itself (no such deployment, but the FP8 halving)
    from simroute.calib import load_profile
    prof = load_profile("paper-all")
    bf16 = prof.step_model("deepseek-v3", tp=8, intra_host_fabric="h100-nvlink4", weight_dtype="bf16",
                           gpu_spec=replace(prof.find_gpu_spec("h200-sxm"), operator_tables=None))
    assert bf16.geometry.weight_dtype == "bf16"
    assert bf16.geometry.sources["weight_dtype"].startswith("override: bf16")
    assert fp8["weight_GB_per_gpu"] < 0.51 * bf16.weight_bytes_per_gpu / 1e9
    from simroute.model.steptime import BatchShape
    bf16_terms = bf16.iteration(BatchShape.uniform(1, 1))
    assert fp8["linear_ms_per_layer"] == pytest.approx(bf16_terms.linear_s_per_layer * 1e3 / 2, rel=0.05)
    # the measured tables hold DeepSeek-V3's FP8 block-scaled fused MoE at TP 8 but no bf16 one: the FP8 linear
    # term is read from the tables, the bf16 one falls back to the roofline and says why
    fp8_t = _step(cli, *args)
    bf16_t = prof.step_model("deepseek-v3", tp=8, intra_host_fabric="h100-nvlink4", weight_dtype="bf16",
                             gpu_spec=prof.find_gpu_spec("h200-sxm"))
    assert fp8_t["term_lookups"]["linear"] in ("measured", "interpolated") and fp8_t["notes"] == []
    assert bf16_t.iteration(BatchShape.uniform(1, 1)).lookups["linear"] == "roofline"
    assert any("no fused-MoE rows" in note for note in bf16_t.notes)
    # block-FP8 weights on an A100 (no FP8 tensor cores): no engine runs them, refused naming what made them
    code, out, err = cli("model", "step", "--model", "deepseek-v3", "--gpu", "a100-80gb", "--tokens", "4")
    assert code == 2 and "needs FP8 tensor cores" in err and "field '--gpu'" in err      # the checkpoint's
    code, out, err = cli("model", "step", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--tp", "1",
                         "--weights", "fp8", "--tokens", "4")
    assert code == 2 and "needs FP8 tensor cores" in err and "field '--weights'" in err     # asked for


def test_prefill_tokens_cost_more_than_decode(cli):
    one_gpu = ("--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "1", "--roofline")
    decode = _step(cli, *one_gpu, "--tokens", "1", "--decode-seqs", "1", "--context", "8192")
    prefill = _step(cli, *one_gpu, "--tokens", "8192")
    assert prefill["iteration_ms"] > 5 * decode["iteration_ms"]
    assert prefill["bounds"]["linear"] == "compute" and decode["bounds"]["linear"] == "memory"


@pytest.mark.parametrize("args", [
    ("--gpu", "nope", "--tokens", "4"), ("--model", "nope", "--tokens", "4"), ("--tokens", "0"),
    ("--tokens", "4", "--decode-seqs", "5"),
    ("--model", "deepseek-v3", "--weights", "int4", "--tokens", "4"),
])
def test_bad_input_one_line_exit_2(cli, args):
    code, out, err = cli("model", "step", *args)
    assert code == 2 and "Traceback" not in out + err and (err or out).strip()


def test_a_gpu_no_fabric_connects_needs_fabric_for_tp(cli, tmp_path):
    """A profile's own GPU entry that no fabric (the profile's, a shipped topology's or a shipped fabric file's)
    connects: --tp > 1 has no all-reduce fabric, one line naming --fabric."""
    import yaml

    from simroute.calib import shipped_dir
    doc = yaml.safe_load((shipped_dir() / "gpus" / "h100-sxm.yaml").read_text())
    entry = doc["gpus"]["h100-sxm"]
    entry["operator_tables"]["path"] = str((shipped_dir() / "ops" / "h100-sxm" / "sglang-0.5.14").resolve())
    for key in ("allreduce_bus_GBps", "allreduce_latency_us"):
        entry.pop(key)
    profile = tmp_path / "lone.yaml"
    profile.write_text(yaml.safe_dump({"schema": "simroute.calib/1", "name": "lone", "gpus": {"lone-gpu": entry}}))
    code, out, err = cli("model", "step", "--calib", str(profile), "--gpu", "lone-gpu", "--model", "llama-3.1-8b",
                         "--tp", "8", "--tokens", "4")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "field '--fabric'" in err
    # a shipped GPU whose hosts a shipped fabric file connects (HGX B200: b200-nvlink5) needs no --fabric
    code, out, err = cli("model", "step", "--model", "deepseek-v3", "--gpu", "b200-sxm", "--tp", "8", "--tokens", "4",
                         "--json")
    assert code == 0, err
    assert json.loads(out)["inputs"]["allreduce_fabric"] == "b200-nvlink5"


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
    assert f"field '--{field}'" in err and words in err


def test_kv_beyond_hbm_is_refused(cli):
    args = ("--model", "deepseek-v3", "--gpu", "h200-sxm", "--tp", "8", "--tokens", "64", "--decode-seqs", "64")
    fits = _step(cli, *args, "--context", "4096")
    assert fits["kv_tokens"] == 64 * 4096 <= fits["kv_capacity_tokens"] and fits["notes"] == []
    # 64 x 20,000 tokens of bf16 KV (70,272 B each) exceed the 794,9xx tokens the FP8 weights leave: refused
    code, out, err = cli("model", "step", *args, "--context", "20000")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "field '--decode-seqs'" in err and "1,280,000 tokens of KV (89.9 GB per GPU in bf16)" in err
    assert f"the {fits['kv_capacity_tokens']:,} tokens the weights leave" in err
    # the tpla layout holds 1/8 of the latent per rank, fp8 KV half of it: the same batch fits either way
    tpla = _step(cli, *args, "--context", "20000", "--kv-layout", "tpla")
    assert tpla["kv_tokens"] <= tpla["kv_capacity_tokens"] and tpla["kv_capacity_tokens"] > 7.9 * fits[
        "kv_capacity_tokens"]
    fp8 = _step(cli, *args, "--context", "12000", "--kv-cache", "fp8")
    assert fp8["kv_cache"] == "fp8" and fp8["kv_bytes_per_token_per_gpu"] == 61 * 576


def test_the_issues_impossible_shape_is_refused(cli):
    """Issue 38's example: 4096 sequences at 131,072 tokens each: 536,870,912 x 61 x 576 x 2 B = 37.7 TB of bf16
    KV per GPU (the latent is replicated on every rank)."""
    code, out, err = cli("model", "step", "--tokens", "4096", "--decode-seqs", "4096", "--context", "131072")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "field '--decode-seqs'" in err and "536,870,912 tokens of KV (37,727.0 GB per GPU in bf16)" in err


@pytest.mark.parametrize("args, field, words", [
    (("--tokens", "1", "--decode-seqs", "1", "--context", "163840"), "context",
     "163,841 tokens is past deepseek-v3's 163,840-token context window"),
    (("--tokens", "8192", "--prefill-context", "160000"), "prefill-context",
     "168,192 tokens is past deepseek-v3's 163,840-token context window"),
    (("--tokens", "200000"), "tokens", "200,000 tokens is past deepseek-v3's 163,840-token context window"),
    (("--model", "llama-2-7b", "--tp", "1", "--tokens", "1", "--decode-seqs", "1", "--context", "4096"), "context",
     "4,097 tokens is past llama-2-7b's 4,096-token context window (max_position_embeddings 4096"),
])
def test_past_the_context_window_is_refused(cli, args, field, words):
    code, out, err = cli("model", "step", *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"field '--{field}'" in err and words in err
    # the last token inside the window is a shape like any other
    ok = _step(cli, "--tokens", "1", "--decode-seqs", "1", "--context", "163839", "--kv-cache", "fp8")
    assert ok["context_window"] == 163840 and "max_position_embeddings 163840" in ok["context_window_source"]
