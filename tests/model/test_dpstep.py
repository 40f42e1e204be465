"""The step of a DP-attention / expert-parallel / MTP group (simroute.model.dpstep) against the shipped H200
tables read directly, the TP step model it must reduce to, and the physics of a lockstep group."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simroute.calib import load_profile, shipped_dir
from simroute.errors import ConfigurationError
from simroute.model.dpstep import DeploymentStep, draft_batch, verify_batch
from simroute.model.geometry import get_model
from simroute.model.optables import OpKind
from simroute.model.parallel import A2A, Deployment, Mtp
from simroute.model.steptime import BatchShape, StepTimeModel

V3 = get_model("deepseek-v3")
DECODE = BatchShape.uniform(decode_seqs=64, context=4096)
PREFILL = BatchShape.uniform(prefill_tokens=4096)
INTER = (50e9, 10e-6)


@pytest.fixture(scope="module")
def h200():
    return load_profile(shipped_dir() / "gpus" / "h200-sxm.yaml").gpu_spec("h200-sxm")


def _group(gpu, hosts: int, model=V3, **extra) -> DeploymentStep:
    gpus = 8 * hosts
    mtp = extra.pop("mtp", None)
    return DeploymentStep(model, gpu, Deployment(tp=gpus, dp=gpus, ep=gpus, **extra), mtp=mtp, cuda_graphs=True,
                          inter=INTER)


def _rows(gpu, kind: OpKind, **where) -> dict:
    """A table's rows selected column by column (categorical by equality, numeric exactly): latency in s."""
    table = gpu.operator_tables.get(kind)
    mask = np.ones(table.rows, dtype=bool)
    for column, value in where.items():
        source = table.categorical.get(column, table.numeric.get(column))
        mask &= source == value
    return table.latency_us[mask] * 1e-6


def _one(gpu, kind: OpKind, **where) -> float:
    values = _rows(gpu, kind, **where)
    assert values.size >= 1, where
    return float(np.exp(np.mean(np.log(values))))


# ---- the same work cut the same way costs the same -----------------------------------------------------------
@pytest.mark.parametrize("model, tp", [("deepseek-v3", 8), ("deepseek-v3", 1), ("llama-3.1-70b", 4)])
def test_a_group_without_dp_or_ep_is_the_tp_instance(h200, model, tp):
    geometry = get_model(model)
    ref = StepTimeModel(geometry, h200, tp, cuda_graphs=True)
    group = DeploymentStep(geometry, h200, Deployment(tp=tp), cuda_graphs=True)
    for batch in (DECODE, PREFILL):
        assert group.iteration(batch).iteration_s == pytest.approx(ref.iteration(batch).iteration_s, rel=1e-12)
    mixed = BatchShape.uniform(decode_seqs=8, context=1000, prefill_tokens=512, prefill_context=300)
    # the TP model sums a layer's GEMM curves before reading them; a few 1e-5 apart between grid points
    assert group.iteration(mixed).iteration_s == pytest.approx(ref.iteration(mixed).iteration_s, rel=1e-4)


# ---- terms against the tables' own rows ----------------------------------------------------------------------
def test_one_host_all_gather_reads_the_fused_moe_at_ep_and_nccl(h200):
    step = _group(h200, 1)
    result = step.iteration(DECODE)
    moe = result.layer_s["moe"]
    # 8 ranks x 64 tokens gathered: the fused MoE row at 512 tokens, moe_tp 1, ep 8, power_law_1.01
    assert moe["experts"] == pytest.approx(_one(h200, OpKind.MOE, tokens=512, moe_tp=1, moe_ep=8, hidden=7168,
                                                inter=2048, topk=8, experts=256, dtype="fp8_block",
                                                distribution="power_law_1.01"))
    # all-gather + reduce-scatter of 512 x 7168 bf16 values over 8 GPUs: between the rows around 3.67M elements
    elements = 512 * 7168
    total = 0.0
    for op in ("all_gather", "reduce_scatter"):
        low = _one(h200, OpKind.COLLECTIVE, op=op, dtype="bf16", gpus=8, message_elements=2 ** 21)
        high = _one(h200, OpKind.COLLECTIVE, op=op, dtype="bf16", gpus=8, message_elements=2 ** 22)
        total += math.exp(math.log(low) + math.log(elements / 2 ** 21) / math.log(2) * math.log(high / low))
    assert moe["collective"] == pytest.approx(total, rel=0.05)
    assert result.layer_s["dense"]["collective"] == moe["collective"]     # dense layers gather too
    assert result.sources["experts"] == "moe" and result.sources["collective"] == "collective"
    assert result.lookups["experts"] == "measured"


def test_two_hosts_read_deepep_low_latency_rows(h200):
    step = _group(h200, 2)
    result = step.iteration(DECODE)
    moe = result.layer_s["moe"]
    shape = dict(hidden=7168, topk=8, experts=256, ep=16, nodes=2, sms=0, tokens=64)
    dispatch = _one(h200, OpKind.MOE_A2A, backend="deepep_ll", phase="dispatch", **shape)
    combine = _one(h200, OpKind.MOE_A2A, backend="deepep_ll", phase="combine", **shape)
    assert moe["collective"] == pytest.approx(dispatch + combine)
    # DeepEP's expert kernels at the group's 16 x 64 tokens
    assert moe["experts"] == pytest.approx(_one(h200, OpKind.MOE_DEEPEP, mode="ll", tokens=1024, ep=16, hidden=7168,
                                                inter=2048, topk=8, experts=256, dtype="fp8_block",
                                                distribution="power_law_1.01"))
    assert result.layer_s["dense"]["collective"] == 0.0            # dense layers data-parallel
    assert result.sources["collective"] == "moe_a2a" and result.lookups["collective"] == "measured"
    # a prefill batch reads the normal-mode rows (SM budget 20)
    prefill = step.iteration(PREFILL).layer_s["moe"]
    normal = dict(shape, sms=20, tokens=4096)
    assert prefill["collective"] == pytest.approx(
        _one(h200, OpKind.MOE_A2A, backend="deepep_normal", phase="dispatch", **normal)
        + _one(h200, OpKind.MOE_A2A, backend="deepep_normal", phase="combine", **normal))


def test_fp8_kv_reads_the_measured_mla_module(h200):
    fp8 = _group(h200, 2, model=V3.with_cache_dtype("fp8"))
    result = fp8.iteration(BatchShape.uniform(decode_seqs=64, context=4096))
    module = _one(h200, OpKind.MLA_MODULE, phase="decode", kv_dtype="fp8", backend="fa3", batch=64, tokens=4096,
                  heads=128)
    assert result.layer_s["moe"]["attention"] == pytest.approx(module)
    assert result.sources["attention"] == "mla_module"
    # bf16 KV has no module rows: kernel by kernel
    assert _group(h200, 2).iteration(DECODE).sources["attention"].startswith("mla_decode")


def test_past_the_database_the_collectives_fall_back_and_say_so(h200):
    wide = _group(h200, 16)                                # 128 GPUs: DeepEP measured up to 8 hosts
    result = wide.iteration(DECODE)
    assert result.lookups["collective"] == "roofline"
    assert any("deepep_ll dispatch" in note and "roofline" in note for note in result.notes)
    small = wide.iteration(BatchShape.uniform(decode_seqs=16, context=4096))
    assert 0 < small.layer_s["moe"]["collective"] < result.layer_s["moe"]["collective"]


def test_without_tables_everything_is_the_roofline(h200):
    from dataclasses import replace
    bare = replace(h200, operator_tables=None)
    result = _group(bare, 2).iteration(DECODE)
    assert math.isfinite(result.iteration_s) and result.iteration_s > 0
    assert {result.lookups[term] for term in ("attention_gemms", "experts", "collective", "mlp_gemms")} \
        == {"roofline"}


@pytest.mark.parametrize("hosts, kv", [(1, "bf16"), (2, "bf16"), (2, "fp8")])
def test_the_hot_path_gives_the_same_seconds(h200, hosts, kv):
    step = _group(h200, hosts, model=V3.with_cache_dtype(kv), mtp=Mtp(2, accept_rate=0.6))
    ranks = [BatchShape.uniform(decode_seqs=10 + 7 * rank, context=3000 + 100 * rank) for rank in range(8 * hosts)]
    for batches in (ranks, PREFILL, DECODE):
        explained, fast = step.iteration(batches), step.iteration_s(batches)
        assert fast.iteration_s == pytest.approx(explained.iteration_s, rel=1e-12)
        assert fast.terms_s == pytest.approx(explained.terms_s, rel=1e-12)
        assert fast.sources == {} and explained.sources


# ---- lockstep --------------------------------------------------------------------------------------------------
def test_a_step_is_set_by_its_busiest_rank(h200):
    step = _group(h200, 1)
    light, heavy = BatchShape.uniform(decode_seqs=16, context=4096), BatchShape.uniform(decode_seqs=128, context=4096)
    uneven = step.iteration([heavy] + [light] * 7)
    assert uneven.busiest_rank == 0
    assert uneven.layer_s["moe"]["attention"] == step.iteration(heavy).layer_s["moe"]["attention"]
    # more load on one rank never makes the group faster, nor costs more than every rank that loaded
    assert step.iteration(light).iteration_s < uneven.iteration_s < step.iteration(heavy).iteration_s
    assert step.iteration([light] * 7 + [heavy]).busiest_rank == 7
    with pytest.raises(ValueError):
        step.iteration([light] * 3)


@pytest.mark.parametrize("hosts", [1, 2])
def test_more_decodes_never_make_a_step_faster(h200, hosts):
    step = _group(h200, hosts)
    times = [step.iteration(BatchShape.uniform(decode_seqs=count, context=4096)).iteration_s
             for count in (1, 4, 16, 64, 128, 256)]
    assert times == sorted(times)


# ---- MTP -------------------------------------------------------------------------------------------------------
def test_verify_and_draft_batches_by_hand():
    verify = verify_batch(DECODE, 3)
    assert (verify.new_tokens, verify.decode_sequences) == (256, 256)
    assert verify.kv_read_tokens == verify.attention_pairs == 256 * 4096
    assert draft_batch(DECODE, 1) == DECODE
    extend = draft_batch(DECODE, 4)
    assert extend.new_tokens == 256 and extend.sequences == 256 and extend.kv_read_tokens == 256 * 4096
    # a batch with a prefill chunk: the draft extend runs its tokens too, the draft decode steps do not
    mixed = BatchShape.uniform(decode_seqs=8, context=1000, prefill_tokens=512)
    assert draft_batch(mixed, 1, with_prefill=False).new_tokens == 8
    assert draft_batch(mixed, 3).new_tokens == 8 * 3 + 512
    assert draft_batch(mixed, 3).prefill_pairs == mixed.prefill_pairs
    assert verify_batch(mixed, 2).new_tokens == 8 * 3 + 512


@pytest.mark.parametrize("hosts", [1, 2])
def test_mtp_step_is_verify_plus_drafts(h200, hosts):
    plain = _group(h200, hosts)
    with_mtp = _group(h200, hosts, mtp=Mtp(3, accept_rate=0.7))
    result = with_mtp.iteration(DECODE)
    verify = plain.iteration(verify_batch(DECODE, 3))
    assert result.mtp["verify"] == pytest.approx(verify.iteration_s - verify.terms_s["overhead"])
    # two draft decode passes and one draft extend, each one MoE layer + eh_proj + norms + the LM head
    assert result.mtp["draft_decode"] > 0 and result.mtp["draft_extend"] > result.mtp["draft_decode"] / 2
    assert result.iteration_s == pytest.approx(result.mtp["verify"] + result.terms_s["overhead"]
                                               + result.mtp["draft_decode"] + result.mtp["draft_extend"])
    assert result.tokens_per_step == pytest.approx(1 + 0.7 + 0.49 + 0.343)
    assert result.tpot_s == pytest.approx(result.iteration_s / result.tokens_per_step)
    # a draft pass is one MoE layer's worth and more, well under the target's 61
    one_layer = sum(plain.iteration(DECODE).layer_s["moe"].values())
    assert one_layer < result.mtp["draft_decode"] / 2 < 3 * one_layer


def test_mtp_needs_an_mtp_module(h200):
    with pytest.raises(ConfigurationError, match="ships no MTP module"):
        DeploymentStep(get_model("llama-3.1-8b"), h200, Deployment(tp=1), mtp=Mtp(1, accept_rate=0.5))


def test_eplb_reads_the_balanced_rows(h200):
    step = _group(h200, 1, redundant_experts=32)
    assert step.deployment.expert_distribution == "balanced"
    assert step.iteration(DECODE).layer_s["moe"]["experts"] == pytest.approx(
        _one(h200, OpKind.MOE, tokens=512, moe_tp=1, moe_ep=8, hidden=7168, inter=2048, topk=8, experts=256,
             dtype="fp8_block", distribution="balanced"))


def test_allgather_across_hosts_falls_back_to_the_ring(h200):
    step = _group(h200, 2, a2a=A2A.ALLGATHER)
    result = step.iteration(DECODE)
    # 16 x 64 rows of 14,336 B all-gathered and reduce-scattered: 15/16 of each over the 50 GB/s NIC, 15 latencies
    ring = 15 * 10e-6 + 15 / 16 * 16 * 64 * 14336 / 50e9
    assert result.layer_s["moe"]["collective"] == pytest.approx(2 * ring)
    assert result.lookups["collective"] == "roofline"
