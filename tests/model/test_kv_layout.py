"""MLA KV under tensor parallelism, two named layouts (docs/STEP_TIME.md, "MLA KV under TP"): HBM, fetch bytes and
time tell one story per layout, pinned by hand counts."""

from __future__ import annotations

import pytest

from simroute.calib import load_profile, shipped_dir
from simroute.model.geometry import get_model
from simroute.model.steptime import BatchShape

H200 = load_profile(shipped_dir() / "gpus" / "h200-sxm.yaml")


def _model(layout: str, name: str = "deepseek-v3", tp: int = 8, tables: bool = True):
    spec = H200.gpu_spec("h200-sxm", tables=tables)
    return load_profile("paper-all").step_model(name, tp=tp, gpu_spec=spec, intra_host_fabric="h100-nvlink4",
                                                kv_layout=layout)


def test_hbm_per_token_whole_latent_or_one_rank_share():
    g = get_model("deepseek-v3")
    # 61 layers x (kv_lora_rank 512 + rope 64) x 2 bytes (bf16 cache)
    assert g.kv_bytes_per_token == 61 * 576 * 2
    replicated, tpla = _model("replicated"), _model("tpla")
    assert replicated.kv_bytes_per_token_per_gpu == 61 * 576 * 2
    assert tpla.kv_bytes_per_token_per_gpu == 61 * 576 * 2 / 8
    assert replicated.weight_bytes_per_gpu == tpla.weight_bytes_per_gpu
    free = H200.gpu_spec("h200-sxm").hbm_bytes - replicated.weight_bytes_per_gpu
    assert replicated.kv_capacity_tokens() == int(free // (61 * 576 * 2))
    assert tpla.kv_capacity_tokens() == int(free // (61 * 576 * 2 / 8))


def test_fetch_fans_out_inside_the_host_only_when_replicated():
    copy = 4.6e9                              # a fetched 64k-token DeepSeek-V3 chunk, all ranks
    replicated, tpla = _model("replicated"), _model("tpla")
    gpu = replicated.gpu
    # each rank pulled 1/8 over its NIC; the host all-gathers: every GPU receives 7/8 of the copy over NVLink
    assert replicated.fanout_s(copy) == pytest.approx(gpu.allreduce_latency_s + 7 / 8 * copy / gpu.allreduce_bus_Bps)
    assert replicated.fanout_bytes(copy) == pytest.approx(7 * copy)
    assert tpla.fanout_s(copy) == 0.0 == tpla.fanout_bytes(copy)
    # GQA splits KV heads over the ranks under either name: nothing fans out, nothing changes
    gqa_r, gqa_t = _model("replicated", "llama-3.1-70b", 4), _model("tpla", "llama-3.1-70b", 4)
    assert gqa_r.fanout_s(copy) == 0.0 and gqa_r.kv_bytes_per_token_per_gpu == gqa_t.kv_bytes_per_token_per_gpu
    b = BatchShape.uniform(32, 8192)
    assert gqa_r.iteration(b).iteration_s == gqa_t.iteration(b).iteration_s
    assert _model("replicated", tp=1).fanout_s(copy) == 0.0


def test_tpla_attention_is_the_all_heads_kernel_over_one_rank_share():
    b = BatchShape.uniform(32, 16_384)
    tpla, one_gpu = _model("tpla"), _model("replicated", tp=1)
    # measured: the 128-head (TP 1) kernel's time over 8 ranks
    assert tpla.iteration(b).attention_s_per_layer == pytest.approx(
        max(one_gpu.iteration(b).attention_s_per_layer / 8, tpla.gpu.kernel_floor_s), rel=1e-9)
    # roofline: a rank reads 1/8 of the latent bytes the replicated rank reads, and does the same FLOPs (all
    # heads over 1/8 of the width = 1/8 of the heads over all of it): the memory-bound replicated decode
    # becomes compute-bound, faster but by less than 8x
    roof_r, roof_t = _model("replicated", tables=False), _model("tpla", tables=False)
    rep, shard = roof_r.iteration(b), roof_t.iteration(b)
    assert rep.bounds["attention"] == "memory" and shard.bounds["attention"] == "compute"
    assert rep.attention_s_per_layer / 8 < shard.attention_s_per_layer < rep.attention_s_per_layer
    compute_s = b.attention_pairs * 2 * 16 * (576 + 512) / (roof_r.gpu.peak_flops * roof_r.gpu.attention_efficiency)
    assert shard.attention_s_per_layer == pytest.approx(compute_s, rel=1e-9)


def test_unknown_layout_refused():
    with pytest.raises(ValueError, match="kv_layout"):
        _model("striped")


def test_the_policy_prices_the_fan_out_it_will_be_charged():
    """horizon_costs_scalar adds the fan-out to a dense fetch only: route and local are unchanged, and a sparse
    selection (gathered every step, never a whole copy) pays none."""
    from simroute.calib import default_profile_path
    from simroute.model.scalar import ScalarModel
    from simroute.sim.policies.base import horizon_costs_scalar

    m = ScalarModel(load_profile(default_profile_path()).cost_params("deepseek-v3", route_exchanges="per-layer"))
    cross = [f.name for f in m.p.fabrics].index("h100-ibgda")
    fan = _model("replicated").fanout_s(65536 * get_model("deepseek-v3").kv_bytes_per_token)
    assert fan > 1e-3                       # ~11 ms for a 4.6 GB copy at the board's 370 GB/s
    kw = dict(mq_first=128 * 16, mq_step=128, steps=31, ct=65536, fabric=cross, cached=True, tp=8)
    plain, fanned = horizon_costs_scalar(m, **kw), horizon_costs_scalar(m, fanout_s=fan, **kw)
    assert fanned[0] == plain[0] and fanned[2] == plain[2]
    assert fanned[1] == pytest.approx(plain[1] + fan, rel=1e-12)
    sparse = dict(kw, topk=2048, holders=1)
    assert horizon_costs_scalar(m, fanout_s=fan, **sparse) == horizon_costs_scalar(m, **sparse)
