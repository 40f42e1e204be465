"""DeepSeek Sparse Attention as the model runs it (docs/STEP_TIME.md, "Sparse attention"): the lightning indexer
charged per token over the whole context, by hand; the top-k attention reading the dense kernel at the keys it
selects; the indexer's one fitted constant judged on measured rows it was not fitted to."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from simroute.calib import load_profile
from simroute.calib.profile import shipped_dir
from simroute.model.geometry import get_model
from simroute.model.steptime import INDEXER_ROW_TOKENS_PER_S, BatchShape, causal_pairs, selected_pairs

V32 = get_model("deepseek-v3.2")


@pytest.fixture(scope="module")
def h200():
    profile = load_profile("paper-all")
    return profile, profile.find_gpu_spec("h200-sxm")


def _step(h200, model="deepseek-v3.2", **kw):
    profile, spec = h200
    return profile.step_model(model, tp=8, intra_host_fabric="h100-nvlink4", gpu_spec=spec, **kw)


def test_the_indexers_geometry_and_cache_by_hand():
    # DeepSeek-V3.2-Exp's config: 64 index heads of 128, top-2048; one FP8 key of 128 + one fp32 scale per token-layer
    assert (V32.index_n_heads, V32.index_head_dim, V32.index_topk) == (64, 128, 2048) and V32.has_indexer
    assert V32.index_key_bytes == 128 + 4
    assert V32.b_kv == 576 * 2 + 132 and V32.with_cache_dtype("fp8").b_kv == 576 + 132
    assert get_model("deepseek-v3").index_key_bytes == 0 and not get_model("deepseek-v3").has_indexer
    # the projections: wq_b 1536 -> 64 x 128 and wk 7168 -> 128 in FP8 (block scales), weights_proj 7168 -> 64 bf16
    ops = {op.name: op for op in V32.indexer_ops()}
    assert (ops["index_q"].k, ops["index_q"].n, ops["index_q"].weight_dtype) == (1536, 8192, "fp8")
    assert (ops["index_k"].k, ops["index_k"].n) == (7168, 128) and ops["index_weights"].weight_dtype == "bf16"
    assert sum(op.weight_bytes for op in ops.values()) == pytest.approx(
        (1536 * 8192 + 7168 * 128) * (1 + 4 / 128 ** 2) + 7168 * 64 * 2)


def test_indexer_term_by_hand(h200):
    """One decode sequence over 131,072 tokens on H200 at TP 8 (the indexer replicated on every rank)."""
    _, spec = h200
    step = _step(h200)
    bw = spec.achievable_hbm_Bps
    assert bw == pytest.approx(4800e9 * 0.736)                         # the H200 entry's datasheet x STREAM
    weights = (1536 * 8192 + 7168 * 128) * (1 + 4 / 128 ** 2) + 7168 * 64 * 2            # 14.4 MB a layer
    context = 131_072
    mem = (weights + context * 132 + context * 8) / bw                 # keys read, fp32 logits written and read
    fp8_rate, bf16_rate = 1979e12 * 0.667, 989e12 * 0.667              # attention efficiency of the H200 entry
    comp = 2 * (1536 * 8192 + 7168 * 128) / fp8_rate + 2 * 7168 * 64 / bf16_rate + context * 2 * 64 * 128 / fp8_rate
    assert mem > comp and mem > 3 * spec.kernel_floor_s                # the scores are memory-bound at one token
    expected = mem + context / INDEXER_ROW_TOKENS_PER_S                # + the top-k's one row
    terms = step.iteration(BatchShape.uniform(1, context))
    assert terms.indexer_s_per_layer == pytest.approx(expected, rel=1e-12)
    assert terms.indexer_s_per_layer * 1e6 == pytest.approx(9.28 + 70.85, abs=0.01)
    assert terms.sources["indexer"] == "roofline" and terms.bounds["indexer"] == "roofline"
    assert terms.iteration_s == pytest.approx(
        terms.layers * (terms.linear_s_per_layer + terms.attention_s_per_layer + terms.indexer_s_per_layer
                        + terms.allreduce_s_per_layer + terms.elementwise_s_per_layer) + terms.lm_head_s
        + terms.overhead_s, rel=1e-12)
    assert step.iteration_s(1, 1, context, context, 0.0, 1) == pytest.approx(terms.iteration_s, rel=1e-12)
    # replicated: the indexer's weights are on every rank, 61 layers of them beside V3's
    v3 = _step(h200, "deepseek-v3")
    assert step.weight_bytes_per_gpu - v3.weight_bytes_per_gpu == pytest.approx(61 * weights)


def test_prefill_indexer_scores_the_causal_pairs(h200):
    """A 4,096-token prefill: 4096 x 4097 / 2 pairs scored, 4,096 keys read, FLOP-bound on FP8."""
    _, spec = h200
    step = _step(h200)
    pairs = causal_pairs(4096)
    weights = (1536 * 8192 + 7168 * 128) * (1 + 4 / 128 ** 2) + 7168 * 64 * 2
    mem = (weights + 4096 * 132 + pairs * 8) / spec.achievable_hbm_Bps
    fp8_rate, bf16_rate = 1979e12 * 0.667, 989e12 * 0.667
    comp = 4096 * (2 * (1536 * 8192 + 7168 * 128) / fp8_rate + 2 * 7168 * 64 / bf16_rate) + pairs * 16384 / fp8_rate
    terms = step.iteration(BatchShape.uniform(0, 0, prefill_tokens=4096))
    assert terms.indexer_s_per_layer == pytest.approx(max(mem, comp), rel=1e-12)     # no decode row to wait for


def test_top_k_attention_reads_the_dense_kernel_at_the_selected_keys(h200):
    step, dense = _step(h200), _step(h200, "deepseek-v3")
    at_k = dense.iteration(BatchShape.uniform(8, 2048)).attention_s_per_layer
    # past k a decode token attends k keys: the same kernel time at any longer context
    for context in (4096, 32_768, 131_072):
        assert step.iteration(BatchShape.uniform(8, context)).attention_s_per_layer == pytest.approx(at_k)
        assert dense.iteration(BatchShape.uniform(8, context)).attention_s_per_layer > at_k
    # within k it is the dense model's attention
    assert step.iteration(BatchShape.uniform(8, 1024)).attention_s_per_layer == pytest.approx(
        dense.iteration(BatchShape.uniform(8, 1024)).attention_s_per_layer)
    # a prefill token attends at most k keys: the first k their causal prefix, the rest k each
    assert selected_pairs(causal_pairs(1000), 2048) == causal_pairs(1000)
    assert selected_pairs(causal_pairs(8192), 2048) == pytest.approx(2048 * 2049 / 2 + (8192 - 2048) * 2048)
    # the whole iteration at long context: the indexer grows with the context, the attention does not
    short, long = (step.iteration(BatchShape.uniform(8, ctx)) for ctx in (4096, 65_536))
    assert long.attention_s_per_layer == short.attention_s_per_layer
    assert long.indexer_s_per_layer > 4 * short.indexer_s_per_layer


def _measured_module_us(batch: int, context: int, kv: str = "bf16") -> float:
    """aiconfigurator-core 0.12.0's measured DeepSeek-V3.2 decode attention module (SGLang 0.5.14, H200, 16 heads
    per rank), as shipped in the dsa_decode table (latency in us, context = isl + step)."""
    table = pq.read_table(shipped_dir() / "ops" / "h200-sxm" / "sglang-0.5.14" / "dsa_decode.parquet").to_pandas()
    rows = table[(table.architecture == "DeepseekV32ForCausalLM") & (table.heads == 16) & (table.kv_dtype == kv)
                 & (table.batch == batch) & (table.context == context + 1)]
    assert len(rows) >= 1, (batch, context)
    return float(rows.latency_us.mean())


def test_the_indexers_fitted_rate_against_rows_it_was_not_fitted_to(h200):
    """Past k only the indexer grows: the module's growth from 2,048 tokens of context is the indexer's. The one
    fitted constant (the top-k row rate) reproduces batch 1 at 131,072 (its fit) and, within 0.75-1.35x where the
    growth is large and within 6 us per layer everywhere, the other batches and contexts."""
    step = _step(h200)

    def growth(batch, context):
        at = lambda ctx: sum(getattr(step.iteration(BatchShape.uniform(batch, ctx)), term)
                             for term in ("attention_s_per_layer", "indexer_s_per_layer")) * 1e6
        return at(context) - at(2048), _measured_module_us(batch, context) - _measured_module_us(batch, 2048)

    model, measured = growth(1, 131_072)
    assert model == pytest.approx(measured, rel=0.02)                                     # the fit
    for batch, context in ((2, 131_072), (4, 65_536), (8, 32_768), (16, 16_384)):
        model, measured = growth(batch, context)
        assert 0.75 <= model / measured <= 1.35, (batch, context, model, measured)
    for batch, context in ((1, 65_536), (1, 16_384), (2, 65_536), (4, 32_768), (8, 16_384), (16, 8192), (32, 4096),
                           (64, 4096)):
        model, measured = growth(batch, context)
        assert abs(model - measured) <= 6.0, (batch, context, model, measured)


def test_the_sparse_model_is_charged_when_named_and_model_step_shows_it(cli):
    import json
    code, out, err = cli("model", "step", "--model", "deepseek-v3.2", "--tokens", "16", "--decode-seqs", "16",
                         "--context", "32768", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["indexer_ms_per_layer"] > 0 and d["term_sources"]["indexer"] == "roofline"
    assert any("lightning indexer runs on the roofline" in note for note in d["notes"])
    code, text, _ = cli("model", "step", "--model", "deepseek-v3.2", "--tokens", "16", "--decode-seqs", "16",
                        "--context", "32768")
    assert code == 0 and "indexer (per layer)" in text
    dense = json.loads(cli("model", "step", "--tokens", "16", "--decode-seqs", "16", "--context", "32768",
                           "--json")[1])
    assert dense["indexer_ms_per_layer"] == 0 and "indexer" not in dense["term_sources"]
