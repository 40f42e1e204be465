"""The step-time model: each term a roofline, the shape of decode vs batch, TP, GPU entries from profiles."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simroute.calib import load_profile
from simroute.model.geometry import MODELS, get_model
from simroute.model.steptime import BatchShape, GpuSpec, StepTimeModel, experts_touched

PAPER_ALL = load_profile("paper-all")
H100 = load_profile("h100-ibgda")
GPUS = ["h100-sxm", "h200-sxm", "a100-80gb", "a40", "rtxpro6000"]
STEP_MODELS = [m.name for m in MODELS.values() if m.has_linear_geometry]


def _h200_profile():
    from simroute.calib.profile import shipped_dir
    return load_profile(shipped_dir() / "gpus" / "h200-sxm.yaml")


def spec(name: str) -> GpuSpec:
    """The bare roofline (no operator tables, no kernel floor): these tests pin its formulas by hand counts;
    tests/model/test_optables.py pins the tables and the floors."""
    prof = _h200_profile() if name == "h200-sxm" else PAPER_ALL
    return replace(prof.gpu_spec(name, tables=False), kernel_floor_s=0.0)


def test_gpu_entries_load_with_datasheet_peaks():
    h100 = H100.gpu_spec("h100-sxm")
    assert (h100.peak_flops, h100.hbm_Bps, h100.hbm_bytes) == (989e12, 3350e9, 80e9)
    assert H100.gpu_spec().name == "h100-sxm"          # the profile names its instance GPU
    assert spec("h200-sxm").hbm_Bps == 4800e9 and spec("h200-sxm").hbm_bytes == 141e9
    assert spec("a100-80gb").peak_flops == 312e12 and spec("a40").hbm_bytes == 48e9
    assert spec("rtxpro6000").hbm_bytes == 96e9


@pytest.mark.parametrize("gpu", GPUS)
def test_every_fraction_cites_its_source(gpu):
    s = spec(gpu)
    for key in ("hbm_efficiency", "gemm_efficiency", "attention_efficiency", "iteration_overhead_us"):
        kind, _, ref = s.sources[key].partition(": ")
        assert kind in ("paper", "measured", "default", "fitted") and len(ref) > 20, (key, s.sources[key])
    for key in ("hbm_GBps", "hbm_GB"):
        assert s.sources[key].startswith("datasheet: NVIDIA"), key
    assert s.sources["peak_bf16_TFLOPs"].startswith("datasheet: NVIDIA" if gpu != "rtxpro6000" else "fitted: derived")


def test_profile_fabric_names_its_gpu():
    assert PAPER_ALL.instance_gpu("a100-nvlink3") == "a100-80gb"
    assert PAPER_ALL.instance_gpu("h100-nvlink4") == "h100-sxm"
    m = H100.step_model("llama-3.1-70b", tp=8, intra_host_fabric="h100-nvlink4")
    nv = H100.fabric_params("h100-nvlink4")
    assert m.gpu.name == "h100-sxm" and m.allreduce_Bps == nv.bulk_Bps and m.allreduce_latency_s == nv.t_probe_s


def _model(name="llama-3.1-8b", gpu="h100-sxm", tp=1, **kw) -> StepTimeModel:
    return StepTimeModel(get_model(name), spec(gpu), tp, **kw)


def test_terms_add_up_and_hot_path_agrees():
    m = _model("deepseek-v3", tp=8, allreduce_Bps=125e9, allreduce_latency_s=1.2e-6)
    for b in (BatchShape.uniform(1, 100), BatchShape.uniform(64, 4096, prefill_tokens=512, prefill_context=1000)):
        t = m.iteration(b)
        assert t.iteration_s == pytest.approx(t.layers * (t.linear_s_per_layer + t.attention_s_per_layer +
                                                          t.allreduce_s_per_layer + t.elementwise_s_per_layer)
                                              + t.lm_head_s + t.overhead_s)
        assert m.iteration_s(b.new_tokens, b.sequences, b.kv_read_tokens, b.attention_pairs, b.prefill_pairs) == \
            pytest.approx(t.iteration_s, rel=1e-12)


def test_decode_flat_while_weight_bound_then_rising_with_kv():
    m = _model("llama-3.1-8b")
    t = [m.iteration(BatchShape.uniform(b, 2048)) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    assert t[1].iteration_s / t[0].iteration_s < 1.05          # weights dominate: ~flat
    assert t[0].bounds["linear"] == "memory"
    assert all(b.iteration_s > a.iteration_s for a, b in zip(t, t[1:]))   # never faster with more load
    # past the knee the increments follow KV bytes: doubling the batch adds ~ the KV read of the added sequences
    kv_s = 128 * 2048 * m.kv_bytes_per_token_per_gpu / m.gpu.achievable_hbm_Bps
    assert t[-1].iteration_s - t[-2].iteration_s == pytest.approx(kv_s, rel=0.25)
    assert t[-1].iteration_s > 3 * t[0].iteration_s


def test_monotone_in_tokens_and_context():
    m = _model("deepseek-v2-lite")
    prev = 0.0
    for tokens in (1, 16, 128, 1024, 8192):
        t = m.iteration_s(tokens, 1, tokens, tokens * (tokens + 1) / 2)
        assert t > prev
        prev = t
    prev = 0.0
    for ctx in (0, 1000, 10_000, 100_000):
        t = m.iteration(BatchShape.uniform(32, ctx)).iteration_s
        assert t > prev
        prev = t


def test_tp_splits_weights_and_kv():
    one, eight = _model("llama-3.1-70b"), _model("llama-3.1-70b", tp=8)
    assert eight.weight_bytes_per_gpu == pytest.approx(one.weight_bytes_per_gpu / 8, rel=0.01)
    assert eight.kv_bytes_per_token_per_gpu == one.kv_bytes_per_token_per_gpu / 8
    assert one.kv_capacity_tokens() == 0                        # 141 GB of weights do not fit in 80 GB
    assert eight.kv_capacity_tokens() > 100_000
    # the MLA latent is replicated on every rank; GQA K/V heads past kv_heads are too
    assert _model("deepseek-v3", tp=8).kv_bytes_per_token_per_gpu == _model("deepseek-v3").kv_bytes_per_token_per_gpu
    b = BatchShape.uniform(1, 1000)
    assert eight.iteration(b).linear_s_per_layer < one.iteration(b).linear_s_per_layer / 6


def test_allreduce_only_with_tp_and_over_the_given_fabric():
    b = BatchShape.uniform(64, 1000)
    assert _model(tp=1).iteration(b).allreduce_s_per_layer == 0.0
    ring = replace(spec("h100-sxm"), allreduce_bus_Bps=None, allreduce_latency_s=None)   # no switched board
    geom = get_model("llama-3.1-8b")
    slow = StepTimeModel(geom, ring, 4, allreduce_Bps=20e9, allreduce_latency_s=8e-6).iteration(b)
    fast = StepTimeModel(geom, ring, 4, allreduce_Bps=125e9, allreduce_latency_s=1.2e-6).iteration(b)
    assert slow.allreduce_s_per_layer > fast.allreduce_s_per_layer > 0
    assert slow.bounds["allreduce"] in ("latency", "bandwidth")
    # ring by hand: 2 all-reduces x 2 (tp - 1) steps of latency + 2 (tp - 1) / tp of 64 x 4096 x 2 B per GPU
    msg = 64 * geom.hidden * 2
    assert fast.allreduce_s_per_layer == pytest.approx(2 * (6 * 1.2e-6 + 6 / 4 * msg / 125e9), rel=1e-12)
    # a switched board (the GPU entry's NVSwitch bus): one latency per all-reduce, the bytes over the bus
    board = replace(ring, allreduce_bus_Bps=365e9, allreduce_latency_s=3.3e-6)
    switched = StepTimeModel(geom, board, 4, allreduce_Bps=20e9, allreduce_latency_s=8e-6).iteration(b)
    assert switched.allreduce_s_per_layer == pytest.approx(2 * (3.3e-6 + 6 / 4 * msg / 365e9), rel=1e-12)


def test_measured_constants_override_datasheet_derived_ones():
    base = spec("h100-sxm")
    b = BatchShape.uniform(1, 1000)
    t0 = StepTimeModel(get_model("llama-3.1-8b"), base).iteration(b)
    slower = StepTimeModel(get_model("llama-3.1-8b"), replace(base, hbm_efficiency=0.45)).iteration(b)
    assert slower.linear_s_per_layer == pytest.approx(2 * t0.linear_s_per_layer, rel=0.01)
    # and through a profile: a measured file overriding the GPU entry wins over the shipped one
    big = StepTimeModel(get_model("llama-3.1-8b"), replace(base, iteration_overhead_s=2e-3)).iteration(b)
    assert big.overhead_s == 2e-3 and big.iteration_s > t0.iteration_s
    graphs = replace(base, iteration_overhead_graph_s=5e-5)
    assert StepTimeModel(get_model("llama-3.1-8b"), graphs, cuda_graphs=True).iteration(b).overhead_s == 5e-5
    assert StepTimeModel(get_model("llama-3.1-8b"), graphs).iteration(b).overhead_s == base.iteration_overhead_s
    assert StepTimeModel(get_model("llama-3.1-8b"), base, cuda_graphs=True).iteration(b).overhead_s == \
        base.iteration_overhead_s       # no graph figure measured: the eager one stands


def test_moe_reads_only_the_experts_it_touches():
    assert experts_touched(256, 8, 1) == pytest.approx(8)
    assert experts_touched(256, 8, 10_000) == pytest.approx(256)
    m = _model("deepseek-v3", "h200-sxm", tp=8)
    one = m.iteration(BatchShape.uniform(1, 1000)).linear_s_per_layer
    many = m.iteration(BatchShape.uniform(256, 1000)).linear_s_per_layer
    assert many > 5 * one          # 256 tokens touch most of the 256 experts


def _compute_bound(gpu: GpuSpec) -> GpuSpec:
    """The GPU with a GEMM curve that separates small from large M, and HBM so fast every linear op is
    compute-bound (the linear term is then its FLOPs over the rate, countable by hand)."""
    return replace(gpu, hbm_Bps=1e30, gemm_efficiency=((1.0, 4096.0), (0.1, 0.9)))


def test_each_routed_expert_gemm_runs_at_its_own_token_count():
    """Uniform top-k routing: an iteration of T tokens gives each touched expert T k / touched tokens, and that
    M, not T, sets the expert GEMMs' fraction of peak; shared experts and projections see all T."""
    g = get_model("deepseek-v2-lite")                          # E = 64, k = 6, 2 shared experts, bf16
    gpu = _compute_bound(spec("h100-sxm"))
    m = StepTimeModel(g, gpu)
    frac = lambda tokens: 0.1 + 0.8 * (tokens - 1) / 4095
    for tokens in (1, 16, 2048):
        ops = g.linear_ops(1, "moe")
        routed = sum(2 * op.k * op.n * op.active for op in ops if op.experts > 1)
        every = sum(2 * op.k * op.n for op in ops if op.experts == 1)
        touched = 64 * (1 - (1 - 6 / 64) ** tokens)
        per_expert = tokens * 6 / touched                     # 1 at T = 1, ~192 at T = 2048
        moe = tokens * (every / frac(tokens) + routed / frac(per_expert)) / gpu.peak_flops
        dense_ops = g.linear_ops(1, "dense")
        dense = tokens * sum(2 * op.k * op.n for op in dense_ops) / frac(tokens) / gpu.peak_flops
        linear = m.iteration(BatchShape(tokens, 1, 0, 0)).linear_s_per_layer * g.layers
        assert linear == pytest.approx(26 * moe + 1 * dense, rel=1e-9), tokens
    assert 6 * 2048 / (64 * (1 - (58 / 64) ** 2048)) == pytest.approx(192)


def test_routed_expert_rate_changes_nothing_for_a_dense_model_and_keeps_more_tokens_slower():
    gpu = _compute_bound(spec("h100-sxm"))
    llama = StepTimeModel(get_model("llama-3.1-8b"), gpu)
    flops = sum(2 * op.k * op.n for op in get_model("llama-3.1-8b").linear_ops(1, "dense"))
    got = llama.iteration(BatchShape(512, 1, 0, 0)).linear_s_per_layer
    assert got == pytest.approx(512 * flops / (0.1 + 0.8 * 511 / 4095) / gpu.peak_flops, rel=1e-9)
    for name, tp, gpu_name in (("deepseek-v3", 8, "h200-sxm"), ("deepseek-v2-lite", 1, "h100-sxm")):
        m = _model(name, gpu_name, tp=tp)
        times = [m.iteration(BatchShape(t, 1, 0, 0)).iteration_s for t in range(1, 9000, 97)]
        assert all(b >= a for a, b in zip(times, times[1:])), name


def test_attention_is_one_kernel_over_the_whole_context():
    m = _model("deepseek-v2-lite")
    whole = m.attention_s(8192, 8192)
    assert whole == pytest.approx(m.attention_s(4096, 4096) * 2, rel=1e-9)
    assert m.attention_s(8192, 8192, layers=1) * m.geometry.layers == pytest.approx(whole)


def test_holder_partial_floored_by_the_measured_curve():
    m = H100.step_model("deepseek-v2-lite")
    # idle holder, one requester's decode query (16 rows) over a 2048-token chunk: the measured 15 us
    assert m.holder_partial_s(1, 16, 2048) == pytest.approx(15e-6)
    assert m.holder_partial_s(256, 16, 2048) == pytest.approx(400e-6)
    assert m.holder_partial_s(4, [16, 16, 16, 16], [2048, 2048, 2048, 2048]) == m.holder_partial_s(4, 16, 2048)
    bare = StepTimeModel(m.geometry, m.gpu)      # no curve: the roofline alone, below the measurement
    assert 0 < bare.holder_partial_s(1, 16, 2048) < 15e-6


@pytest.mark.parametrize("model", STEP_MODELS)
def test_active_parameters_match_the_published_count(model):
    g = get_model(model)
    if g.published_active_params:
        assert g.active_params == pytest.approx(g.published_active_params, rel=0.12)
    for dim in ("hidden", "vocab", "layers", "heads_q"):
        assert dim in g.sources, dim


def test_linear_ops_shapes_for_tp():
    g = get_model("llama-3.1-70b")
    ops = {op.name: op for op in g.linear_ops(tp=8)}
    assert (ops["qkv"].k, ops["qkv"].n) == (8192, (64 // 8 + 2 * 1) * 128)
    assert (ops["ffn_up"].k, ops["ffn_up"].n) == (8192, 2 * 28672 // 8)
    assert (ops["ffn_down"].k, ops["ffn_down"].n) == (28672 // 8, 8192)
    moe = {op.name: op for op in get_model("deepseek-v3").linear_ops(tp=8, kind="moe")}
    assert moe["expert_up"].experts == 256 and moe["expert_up"].active == 8 and moe["expert_up"].n == 2 * 2048 // 8
    assert moe["kv_a"].n == 576       # the latent + rope key, replicated


_MODELS = [_model(name, gpu, tp, allreduce_Bps=125e9, allreduce_latency_s=1.2e-6)
           for name, gpu, tp in (("llama-3.1-8b", "a40", 1), ("deepseek-v3", "h200-sxm", 8),
                                 ("llama-2-70b", "a100-80gb", 4), ("deepseek-v4-flash", "rtxpro6000", 8))]
_batches = st.tuples(st.integers(0, 512), st.integers(0, 200_000), st.integers(0, 8192), st.integers(0, 100_000))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(_MODELS), _batches, st.integers(1, 64), st.integers(1, 50_000), st.integers(1, 2048))
def test_more_load_is_never_faster(m, batch, more_seqs, more_context, more_prefill):
    seqs, ctx, pre, pre_ctx = batch
    if seqs + pre == 0:
        seqs = 1
    base = m.iteration(BatchShape.uniform(seqs, ctx, pre, pre_ctx)).iteration_s
    for bigger in (BatchShape.uniform(seqs + more_seqs, ctx, pre, pre_ctx),
                   BatchShape.uniform(seqs, ctx + more_context, pre, pre_ctx),
                   BatchShape.uniform(seqs, ctx, pre + more_prefill, pre_ctx),
                   BatchShape.uniform(seqs, ctx, pre, pre_ctx + more_context)):
        assert m.iteration(bigger).iteration_s >= base * (1 - 1e-12)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(_MODELS), _batches)
def test_iteration_is_the_sum_of_its_terms_and_each_a_roofline(m, batch):
    b = BatchShape.uniform(*batch)
    t = m.iteration(b)
    assert t.iteration_s >= t.overhead_s > 0
    # a sparse model's attention reads its top-k of the context (tests/model/test_sparse_attention.py)
    kv = b.kv_read_tokens
    if m.geometry.has_indexer:
        decode = b.decode_sequences or 0.0
        kv = decode * min(b.attention_pairs - b.prefill_pairs, m.geometry.index_topk * decode) / max(decode, 1) \
            + (b.kv_read_tokens - (b.attention_pairs - b.prefill_pairs))
    geometry = m.geometry                                   # index keys are the indexer's to read
    latent = (geometry.b_kv_per_gpu(m.tp) - geometry.index_key_bytes) * geometry.token_fraction / m.kv_shards
    mem = kv * latent / m.gpu.achievable_hbm_Bps
    assert t.attention_s_per_layer >= mem * (1 - 1e-12)
    if t.bounds["attention"] == "memory":
        assert t.attention_s_per_layer == pytest.approx(mem, rel=1e-12)
    else:
        assert t.attention_s_per_layer > mem
    assert m.iteration_s(b.new_tokens, b.sequences, b.kv_read_tokens, b.attention_pairs, b.prefill_pairs) == \
        pytest.approx(t.iteration_s, rel=1e-12)


def test_mla_prefill_attends_in_the_expanded_form():
    m = _model("deepseek-v3", "h200-sxm", tp=8)
    pairs = 8192 * 8193 / 2
    as_decode = m.attention_s(8192, pairs)
    as_prefill = m.attention_s(8192, pairs, prefill_pairs=pairs)
    # compute-bound either way at 8k tokens; absorbed 576 + 512 per head vs expanded (128 + 64) + 128
    assert as_decode / as_prefill == pytest.approx((576 + 512) / (128 + 64 + 128), rel=1e-9)
    gqa = _model("llama-3.1-8b")
    assert gqa.attention_s(8192, pairs) == gqa.attention_s(8192, pairs, prefill_pairs=pairs)
    b = BatchShape.uniform(4, 1000, prefill_tokens=512, prefill_context=100)
    assert b.prefill_pairs == 512 * 100 + 512 * 513 / 2 and b.attention_pairs == b.prefill_pairs + 4 * 1000


def test_causal_pairs_by_hand_and_cut_anywhere():
    """3 new tokens after 2: rows attend 3, 4 and 5 keys (12 pairs); a prompt cut into chunks has the pairs
    of the whole (the engine charges each chunk after its earlier tokens)."""
    from simroute.model.steptime import causal_pairs
    assert causal_pairs(3, 2) == 12 and causal_pairs(1) == 1
    assert causal_pairs(512, 0) + causal_pairs(1536, 512) == causal_pairs(2048)


def test_holder_kernel_per_exact_shape_is_the_uncached_value():
    """A scalar holder call is kept per exact (queries, rows, keys, dense): a repeat reads the same float the
    per-query form computes, and another shape or the sparse form is not served from it."""
    model = _model(tp=2)
    first = model.holder_partial_s(3, 32, 4096)
    assert model.holder_partial_s(3, 32, 4096) == first
    assert first == _model(tp=2).holder_partial_s(3, [32, 32, 32], [4096, 4096, 4096])
    assert model.holder_partial_s(3, 32, 8192) > first
    assert model.holder_partial_s(3, 32, 4096, dense=False) == _model(tp=2).holder_partial_s(3, 32, 4096, dense=False)
