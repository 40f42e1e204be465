"""`--kv-cache fp8|bf16` (RunConfig.kv_cache) by hand: bytes per token per GPU, the HBM room and the tokens that
fit, the chunks placement may pin, the bytes a fetch carries (the cache's dtype) and a routed query carries (bf16
activations either way), the attention rows it reads, and the default recorded with its source."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simroute.calib import default_profile_path, load_profile
from simroute.model.cost import Shape, costs_scalar
from simroute.model.optables import OpKind
from simroute.model.steptime import BatchShape
from simroute.network import shipped_topology
from simroute.scenarios.traces import write_trace
from simroute.sim import RunConfig, simulate
from simroute.sim.engine import BLOCK_TOKENS
from simroute.sim.runner import Simulation

V3_LAYERS, LATENT = 61, 576                      # DeepSeek-V3: kv_lora_rank 512 + qk_rope_head_dim 64


def _trace(path, chunk_tokens=2048):
    reqs = [{"arrival_s": i * 0.05, "requester_hint": -1, "prompt_tokens": 64, "output_tokens": 8, "chunk_ids": [0]}
            for i in range(4)]
    return write_trace(path, reqs, [{"chunk_id": 0, "tokens": chunk_tokens, "canonical": True, "holder_hint": 0,
                                     "cached_offset": 0}], name="one-chunk")


def _cfg(trace, **kw):
    return RunConfig(topology=str(shipped_topology("fattree")), trace=str(trace), calib=str(default_profile_path()),
                     **kw)


def test_fp8_kv_arithmetic_by_hand(tmp_path):
    """DeepSeek-V3 at TP 8 on H200: the MLA latent is replicated on every rank, 61 x 576 x 2 B = 70,272 B per token
    per GPU in bf16 and 35,136 in fp8; the KV pool (SGLang's default: 0.886 x 138.09 GiB free at start-up less the
    weights, tests/sim/test_frameworks.py) holds twice the tokens."""
    trace = _trace(tmp_path / "t.parquet")
    sims = {dtype: Simulation(_cfg(trace, kv_cache=dtype)) for dtype in ("bf16", "fp8")}
    for dtype, width in (("bf16", 2), ("fp8", 1)):
        step = sims[dtype].ctx.engines.step
        per_token = V3_LAYERS * LATENT * width
        assert step.kv_bytes_per_token_per_gpu == per_token and step.geometry.cache_dtype == dtype
        free = 141e9 - step.weight_bytes_per_gpu                 # the H200 entry's 141 GB less 85.1 GB of weights
        assert step.weight_bytes_per_gpu == pytest.approx(85.14e9, rel=1e-3)
        pool = 0.886 * 138.09 * 2**30 - step.weight_bytes_per_gpu
        hbm = sims[dtype].ctx.engines[0].hbm
        assert hbm.capacity_blocks == int(pool // (per_token * BLOCK_TOKENS))      # 64-token blocks
        assert step.kv_capacity_tokens() == int(free // per_token)   # the step model's room: all after the weights
        # a chunk's bytes (the store, fetches, copies) in the cache's dtype: 2,048 tokens x 61 x 576 x width
        chunks = sims[dtype].ctx.cluster.chunks
        assert chunks.bytes[0] == 2048 * per_token
        # placement may pin half of the KV room: the same bytes, twice the tokens in fp8
        cluster = sims[dtype].ctx.cluster
        assert cluster.chunk_capacity_bytes == pytest.approx(hbm.capacity_blocks * BLOCK_TOKENS * per_token * 0.5)
    bf16, fp8 = (sims[d].ctx.engines.step for d in ("bf16", "fp8"))
    assert fp8.kv_capacity_tokens() in (2 * bf16.kv_capacity_tokens(), 2 * bf16.kv_capacity_tokens() + 1)
    assert fp8.kv_capacity_tokens() == 1_589_877 and bf16.kv_capacity_tokens() == 794_938


def test_what_the_wire_carries(tmp_path):
    """A fetch moves the cache as stored (fp8: half the bytes); a routed query and its partial are bf16
    activations (q = 576 x 2 B, p = 512 x 2 B + two fp32 statistics) whatever the cache."""
    params = {dtype: load_profile("h100-ibgda").cost_params("deepseek-v3", cache_dtype=dtype)
              for dtype in ("bf16", "fp8")}
    shape = Shape(mq=128, ct=2048, fabric=params["bf16"].fabric_id("h100-ibgda"), tp=8)
    wire = {dtype: costs_scalar(shape, p) for dtype, p in params.items()}
    assert wire["bf16"]["fetch"]["wire_bytes"] == 2048 * V3_LAYERS * LATENT * 2
    assert wire["fp8"]["fetch"]["wire_bytes"] == 2048 * V3_LAYERS * LATENT
    assert wire["fp8"]["route"]["wire_bytes"] == wire["bf16"]["route"]["wire_bytes"]
    assert params["fp8"].geometry.q_bytes == 1152 and params["fp8"].geometry.p_bytes == 1032


def test_the_run_records_its_kv_cache_and_the_default_says_why(tmp_path):
    trace = _trace(tmp_path / "t.parquet")
    default = simulate(_cfg(trace)).summary["engine"]
    assert default["kv_cache"] == "bf16" and default["kv_bytes_per_token_per_gpu"] == V3_LAYERS * LATENT * 2
    assert "--kv-cache-dtype auto" in default["kv_cache_source"]
    fp8 = simulate(_cfg(trace, kv_cache="fp8")).summary
    assert fp8["engine"]["kv_cache"] == "fp8" and fp8["engine"]["kv_cache_source"].startswith("override: fp8")
    twice = 2 * default["hbm"]["kv_capacity_tokens"]            # whole 64-token blocks: one block more at most
    assert fp8["engine"]["hbm"]["kv_capacity_tokens"] in (twice, twice + BLOCK_TOKENS)
    assert fp8["config"]["kv_cache"] == "fp8" and fp8["completed"] == 4


def test_fp8_mla_decode_is_no_slower_than_the_bf16_rows():
    """SGLang 0.5.14's fp8-KV MLA decode rows on H200 are 4.5-7x its bf16 ones at large batches (fa3's whole-pool
    dequantisation): the step model reads them no slower than the bf16 rows at the same shape, and says so."""
    profile = load_profile("paper-all")
    spec = profile.find_gpu_spec("h200-sxm")
    step = {d: profile.step_model("deepseek-v3", tp=8, intra_host_fabric="h100-nvlink4", gpu_spec=spec,
                                  cache_dtype=d) for d in ("bf16", "fp8")}
    table = spec.operator_tables.get(OpKind.MLA_DECODE)
    raw = {d: table.curve("context", {"batch": 128, "heads": 16}, {"kv_dtype": d}).seconds(4096) for d in
           ("bf16", "fp8")}
    assert raw["fp8"] > 4 * raw["bf16"]                            # the rows as measured
    shape = BatchShape.uniform(128, 4096)
    terms = {d: s.iteration(shape) for d, s in step.items()}
    assert terms["fp8"].attention_s_per_layer == pytest.approx(terms["bf16"].attention_s_per_layer)
    assert "no slower than its bf16 rows" in terms["fp8"].sources["attention"]
    assert any("fp8 KV: mla_decode" in note for note in step["fp8"].notes) and not step["bf16"].notes
    # on the roofline the fp8 cache reads half the bytes
    roof = {d: profile.step_model("deepseek-v3", tp=8, intra_host_fabric="h100-nvlink4", cache_dtype=d,
                                  gpu_spec=replace(spec, operator_tables=None))
            for d in ("bf16", "fp8")}
    mem = {d: r.iteration(shape) for d, r in roof.items()}
    assert mem["bf16"].bounds["attention"] == "memory"
    assert mem["fp8"].attention_s_per_layer == pytest.approx(mem["bf16"].attention_s_per_layer / 2, rel=0.01) \
        or mem["fp8"].bounds["attention"] == "compute"


def test_a_study_takes_the_kv_cache_as_an_axis(tmp_path):
    from simroute.errors import ConfigurationError
    from simroute.study import load_study
    spec = tmp_path / "s.yaml"
    spec.write_text("name: kv\nbase: {trace: agents-default}\naxes: {kv_cache: [bf16, fp8]}\n")
    study = load_study(spec)
    assert sorted(study.config(labels, 0)["kv_cache"] for labels in study.groups()) == ["bf16", "fp8"]
    spec.write_text("name: kv\nbase: {trace: agents-default}\naxes: {kv_cache: [bf16, int4]}\n")
    with pytest.raises(ConfigurationError, match="kv_cache"):
        load_study(spec)


def test_plan_takes_the_kv_cache_into_its_study(cli, tmp_path):
    from simroute.study.plan import PlanRequest
    doc = PlanRequest(base={"kv_cache": "fp8"}).study_document()
    assert doc["base"]["kv_cache"] == "fp8"
    code, out, err = cli("plan", "--kv-cache", "int4", "--hosts-max", 2, "--seeds", 1, "-o", tmp_path / "p")
    assert code == 2 and out == "" and "field '--kv-cache'" in err and "unknown KV-cache dtype 'int4'" in err
    assert not (tmp_path / "p").exists()
    code, out, err = cli("run", "--kv-cache", "int4", "-o", tmp_path / "r")
    assert code == 2 and out == "" and "kv_cache" in err and not (tmp_path / "r").exists()
