"""The step time of a serving group under DP attention, expert parallelism and MTP (docs/STEP_TIME.md,
"DP attention and expert parallelism").

A step of a DP group is lockstep: every layer ends in a collective every rank takes part in, so a layer costs
- the busiest attention rank's attention block: its projections (GEMMs at its own tokens, its heads split over
  the rank's `attn_tp` GPUs), its attention kernel over its own requests' latent, its norms and RoPE;
- the MLP on the tokens it sees: under `allgather` the whole group's tokens (all-gathered, SGLang's DP padding),
  the dense FFN and the shared experts tensor-parallel over the group, the fused routed-expert kernel read at
  (moe_tp, ep); under `deepep` each GPU's own tokens for the router, shared experts (whole, tp 1) and dense FFN
  (`--moe-dense-tp-size 1`), and DeepEP's grouped expert kernel read at the group's tokens;
- the collectives that move the tokens: NCCL all-gather before and reduce-scatter after the MLP, or DeepEP's
  dispatch and combine (low-latency rows for a decode-only batch, normal-mode rows otherwise), or, without DP
  attention, the TP model's two all-reduces;
plus the busiest rank's LM head on its own sequences, and the iteration overhead (under an engine preset, the
framework's CPU side: `HostCosts.step_s` over the ranks' batches, the TP step's formula). With MTP a step is the target
model's verify of nextn + 1 tokens per decoding sequence plus the MTP module's draft passes, and emits
`Mtp.tokens_per_step` tokens.

Every term reads the measured tables where they hold it (`sources`, `lookups` as simroute.model.steptime's) and
falls back to the roofline where they do not, saying so in `notes`. The pieces a TP instance shares with this
composition (GEMM curves, attention surfaces, the elementwise kernels, the LM head) are read through the same
`StepTimeModel` / `MeasuredStep` objects, built at the rank's and at the MLP's TP degree: one formula, one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from simroute.model.geometry import WEIGHT_BYTES, LinearOp, ModelGeometry
from simroute.model.limits import check_parallel
from simroute.model.opstep import GEMM_DTYPE, KV_DTYPE, MOE_DTYPE, SHARED_OVERLAP_MAX_TOKENS, _fused
from simroute.model.optables import Curve, Lookup, OpKind, Surface, TableMiss
from simroute.model.parallel import (A2A, ATTENTION_OPS, DEEPEP_NORMAL_SMS, MTP_MODULES, Deployment, HbmPerGpu,
                                     LayerTraffic, Mtp, a2a_layer_traffic, combine_row_bytes, gathered_tokens,
                                     hbm_per_gpu)
from simroute.model.steptime import NONE, BatchShape, ElementwiseKernel, GpuSpec, HostCosts, StepTimeModel

ATTENTION_ROLES = frozenset({"input norm", "post-attention norm", "rope (q and k heads)",
                             "mla latent norms (q_a, kv_a)"})
# what a measured MLA module (`mla_module`) holds of the attention block: everything after the fused q_a / kv_a
# projection (the collector feeds the module a random latent), so the layer keeps that GEMM and its two
# add + RMSNorms around the module
MODULE_ROLES = frozenset({"rope (q and k heads)", "mla latent norms (q_a, kv_a)"})
MODULE_KEEPS = frozenset({"q_a+kv_a", "q_a", "kv_a"})
# SGLang's default MLA attention backend on Hopper (server_args: FA3 for DeepseekV3ForCausalLM on SM90 when
# `is_fa3_default_architecture`), the backend of the `mla_module` rows read by default
MLA_MODULE_BACKEND = "fa3"
MLP_ROLES = frozenset({"ffn activation", "shared experts activation"})
# the terms of a layer, in the order outputs list them
TERMS = ("attention_gemms", "attention", "mlp_gemms", "experts", "collective", "elementwise")
# DeepEP's table modes by batch: low-latency for a decode-only batch, normal otherwise (`--deepep-mode auto`)
DEEPEP_MODES = {True: ("ll", "deepep_ll"), False: ("normal", "deepep_normal")}
# the MTP module's own kernels besides its MoE layer: two RMSNorms (enorm, hnorm) on the embedding and the
# hidden state, then eh_proj over their concatenation (DeepSeek-V3 Technical Report §2.2, Figure 3)
MTP_NORMS = 2


def _first_curve(table: Any, axis: str, fixed: dict[str, Any], variants: list[dict[str, Any]]
                 ) -> tuple[Curve, dict[str, Any]] | None:
    """The curve over `axis` of the first of `variants` (label selections, in order of preference) the table
    has rows for at `fixed`, with that variant; None when it has none of them."""
    for variant in variants:
        try:
            return table.curve(axis, fixed, variant), variant
        except TableMiss:
            continue
    return None


@dataclass(frozen=True)
class LayerCost:
    """One layer of one kind: seconds per term (`TERMS`), and the busiest attention rank."""

    seconds: dict[str, float]
    busiest_rank: int

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())


@dataclass(frozen=True)
class GroupStep:
    """One step of a group, term by term. `layer_s[kind][term]`: seconds of one layer of that kind;
    `terms_s[term]`: over every layer (and `lm_head`, `overhead`, `mtp_draft`); `sources` / `lookups` per term.
    With MTP, `tokens_per_step` > 1 and `tpot_s` is the step over it."""

    iteration_s: float
    layer_s: dict[str, dict[str, float]]
    terms_s: dict[str, float]
    sources: dict[str, str]
    lookups: dict[str, str]
    notes: tuple[str, ...]
    busiest_rank: int
    tokens_per_step: float = 1.0
    mtp: dict[str, float] = field(default_factory=dict)
    collective_s: float = 0.0       # the collectives' seconds in iteration_s (target layers and MTP passes)

    @property
    def tpot_s(self) -> float:
        return self.iteration_s / self.tokens_per_step

    def as_ms(self) -> dict[str, object]:
        return {"iteration_ms": self.iteration_s * 1e3, "tpot_ms": self.tpot_s * 1e3,
                "tokens_per_step": self.tokens_per_step,
                "terms_ms": {name: value * 1e3 for name, value in self.terms_s.items()},
                "layer_ms": {kind: {name: value * 1e3 for name, value in terms.items()}
                             for kind, terms in self.layer_s.items()},
                "term_sources": dict(self.sources), "term_lookups": dict(self.lookups),
                "busiest_rank": self.busiest_rank, "mtp_ms": {name: value * 1e3 for name, value in self.mtp.items()},
                "notes": list(self.notes)}


def _is_attention(gemm: LinearOp) -> bool:
    """An attention projection (a fused GEMM of them: `q_a+kv_a`) rather than an FFN / MoE one."""
    return all(part in ATTENTION_OPS for part in gemm.name.split("+"))


def decode_rows(batch: BatchShape) -> float:
    """The sequences of a batch attending in the decode form (one query token each): `decode_sequences`, else every
    sequence but one prefill chunk."""
    if batch.decode_sequences is not None:
        return batch.decode_sequences
    return batch.sequences - (1.0 if batch.prefill_pairs > 0 else 0.0)


def verify_batch(batch: BatchShape, nextn: int) -> BatchShape:
    """The target model's verify pass of a rank's batch: every decoding sequence computes nextn + 1 tokens over its
    context and samples each (its attention read as nextn + 1 decode rows over the same context, as the
    database's composition reads it: an upper bound, the latent is read once per row)."""
    decodes = decode_rows(batch)
    if decodes <= 0 or nextn <= 0:
        return batch
    context = max(batch.attention_pairs - batch.prefill_pairs, 0.0) / decodes
    extra = decodes * nextn
    return BatchShape(new_tokens=batch.new_tokens + extra, sequences=batch.sequences + extra,
                      kv_read_tokens=batch.kv_read_tokens + extra * context,
                      attention_pairs=batch.attention_pairs + extra * context, prefill_pairs=batch.prefill_pairs,
                      decode_sequences=decodes + extra)


def draft_batch(batch: BatchShape, rows: int, *, with_prefill: bool = True) -> BatchShape:
    """One MTP draft pass of a rank's batch: `rows` tokens per decoding sequence over its context (1: a draft
    decode step; nextn + 1: the draft extend after verification) and, `with_prefill`, the prefill chunk's tokens
    (the draft extend that follows a prefill; the draft decode steps run the decoding sequences alone)."""
    decodes = decode_rows(batch)
    context = max(batch.attention_pairs - batch.prefill_pairs, 0.0) / decodes if decodes > 0 else 0.0
    rows_total = decodes * rows
    if not with_prefill or batch.new_tokens <= decodes:
        return BatchShape(new_tokens=rows_total, sequences=rows_total, kv_read_tokens=rows_total * context,
                          attention_pairs=rows_total * context, decode_sequences=rows_total)
    prefill_tokens = batch.new_tokens - decodes
    return BatchShape(new_tokens=rows_total + prefill_tokens, sequences=rows_total + (batch.sequences - decodes),
                      kv_read_tokens=rows_total * context + max(batch.kv_read_tokens - decodes * context, 0.0),
                      attention_pairs=rows_total * context + batch.prefill_pairs, prefill_pairs=batch.prefill_pairs,
                      decode_sequences=rows_total)


class DeploymentStep:
    """The step-time model of one group (`deployment`) of `gpu` serving `geometry`; `mtp` adds MTP's draft and
    verify. `intra` / `inter` (bulk bytes/s, latency s) are the NVLink and cross-host fabrics the collectives fall
    back to where no table holds them (the GPU entry's all-reduce bus, when it has one, for NVLink)."""

    def __init__(self, geometry: ModelGeometry, gpu: GpuSpec, deployment: Deployment, *, mtp: Mtp | None = None,
                 cuda_graphs: bool = False, intra: tuple[float, float] = (float("inf"), 0.0),
                 inter: tuple[float, float] | None = None, mla_backend: str = MLA_MODULE_BACKEND,
                 host: HostCosts | None = None) -> None:
        check_parallel(geometry, deployment, mtp)
        if mtp is not None and mtp.nextn == 0:
            mtp = None
        self.geometry, self.gpu, self.deployment, self.mtp = geometry, gpu, deployment, mtp
        self.mode = deployment.a2a_mode if deployment.dp_attention or deployment.ep > 1 else A2A.ALLGATHER
        self.mlp_tp = 1 if (self.mode is A2A.DEEPEP and deployment.dp_attention) else deployment.tp
        bus = gpu.allreduce_bus_Bps
        self.intra = (bus, gpu.allreduce_latency_s or 0.0) if bus is not None else intra
        self.inter = inter
        # the framework's CPU side (an engine preset's `HostCosts`): charged over the ranks' batches as a TP
        # instance charges it over its own (`HostCosts.step_s`), in place of the GPU entry's constant overhead
        self.host = host
        self.attn = StepTimeModel(geometry, gpu, deployment.attn_tp, cuda_graphs=cuda_graphs,
                                  allreduce_Bps=intra[0], allreduce_latency_s=intra[1], host=host)
        self.mlp = self.attn if self.mlp_tp == deployment.attn_tp else StepTimeModel(
            geometry, gpu, self.mlp_tp, cuda_graphs=cuda_graphs, allreduce_Bps=intra[0], allreduce_latency_s=intra[1],
            host=host)
        self.tables = gpu.operator_tables
        self.mla_backend = mla_backend
        # True while `iteration` explains each term (lookups, tables); False on `iteration_s`, the hot path
        self._explain = True
        self._elementwise_cache: dict[tuple, tuple[float, list]] = {}
        # one MoE layer's GPU-pair bytes per (tokens per rank, prefill): a pure function of them that decode steps
        # ask again and again (`_pass_traffic`)
        self._traffic_cache: dict[tuple, LayerTraffic] = {}
        self._notes: list[str] = []
        self._build()
        self.hbm: HbmPerGpu = hbm_per_gpu(geometry, deployment,
                                          mtp_layers=MTP_MODULES.get(geometry.name, 0) if mtp is not None else 0)

    # ---- what one GPU holds (the StepTimeModel names simroute.model.limits reads) -------------------------
    @property
    def tp(self) -> int:
        """The group's GPUs."""
        return self.deployment.tp

    @property
    def weight_bytes_per_gpu(self) -> float:
        """Weights one GPU holds (`hbm.parts`: attention replicated per rank, its experts, its share of the rest)."""
        return self.hbm.weights

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """Cached bytes of one token on the GPU(s) of the rank attending it (the MTP layer's included)."""
        return self.hbm.kv_bytes_per_token

    def kv_capacity_tokens(self, reserved_bytes: float = 0.0) -> int:
        """Tokens of KV one DP rank's GPU holds beside its weights (`reserved_bytes` set aside): the group holds
        dp x this."""
        free = self.gpu.hbm_bytes - reserved_bytes - self.weight_bytes_per_gpu
        if free <= 0 or self.kv_bytes_per_token_per_gpu <= 0:
            return 0
        return int(free // self.kv_bytes_per_token_per_gpu)

    # ---- construction -------------------------------------------------------------------------------------
    def _note(self, text: str) -> None:
        if text not in self._notes:
            self._notes.append(text)

    def _gemm(self, model: StepTimeModel, gemm: LinearOp) -> tuple[LinearOp, Curve | None]:
        measured = model.measured
        curve = measured.gemm_curve(gemm) if measured is not None else None
        if curve is None and measured is not None:
            self._note(f"no {GEMM_DTYPE.get(gemm.weight_dtype, 'bf16')} GEMM rows for {gemm.name} (n {gemm.n}, "
                       f"k {gemm.k}): it runs on the roofline")
        return gemm, curve

    def _build(self) -> None:
        geometry, deployment = self.geometry, self.deployment
        kinds = {kind: count for kind, count in geometry.layer_kinds().items() if count > 0}
        self.kinds = kinds
        # attention side: the same projections in every layer kind
        any_kind = next(iter(kinds))
        ops = _fused(geometry.linear_ops(deployment.attn_tp, any_kind))
        self._attn_every = [self._gemm(self.attn, gemm) for gemm in ops if _is_attention(gemm) and gemm.name != "kv_b"]
        self._attn_prefill = [self._gemm(self.attn, gemm) for gemm in ops if gemm.name == "kv_b"]
        measured = self.attn.measured
        self._bmm = measured.bmm_curve() if (measured is not None and geometry.is_mla) else None
        self._module = self._module_surfaces()
        # MLP side, per layer kind: dense FFN, or router + shared experts
        self._mlp: dict[str, list[tuple[LinearOp, Curve | None]]] = {}
        for kind in kinds:
            self._mlp[kind] = [self._gemm(self.mlp, gemm) for gemm in _fused(geometry.linear_ops(self.mlp_tp, kind))
                               if not _is_attention(gemm) and gemm.experts == 1]
        self._routed: dict[str, Curve | None] = {}
        if "moe" in kinds:
            if self.mode is A2A.DEEPEP and deployment.dp_attention:
                for mode, _backend in DEEPEP_MODES.values():
                    self._routed[mode] = self._deepep_curve(mode)
            else:
                self._routed["fused"] = self._fused_moe_curve()
        self._collectives: dict[str, Curve | None] = {}
        if deployment.dp_attention and self.mode is A2A.ALLGATHER:
            for op_name, gpus in (("all_gather", deployment.tp), ("reduce_scatter", deployment.tp)):
                self._collectives[f"{op_name}@{gpus}"] = self._collective_curve(op_name, gpus)
            if deployment.attn_tp > 1:
                for op_name in ("all_gather", "reduce_scatter"):
                    self._collectives[f"{op_name}@{deployment.attn_tp}"] = self._collective_curve(
                        op_name, deployment.attn_tp)
        elif self.mode is A2A.DEEPEP and deployment.dp_attention:
            for _decode_only, (_mode, backend) in DEEPEP_MODES.items():
                for phase in ("dispatch", "combine"):
                    self._collectives[f"{backend}:{phase}"] = self._a2a_curve(backend, phase)
        # the MTP module's eh_proj (2 hidden -> hidden, bf16: assumed, the checkpoint's quantisation of the
        # module was not checked) on the attention rank's tokens
        self._eh_proj = self._gemm(self.attn, LinearOp("eh_proj", 2 * geometry.hidden, geometry.hidden)) \
            if self.mtp is not None else None

    def _module_surfaces(self) -> dict[str, Surface]:
        """The measured MLA module of a DP-attention rank at this KV dtype (decode and prefill), where the tables
        hold both phases; {} otherwise (the attention block is then composed kernel by kernel)."""
        table = self.tables.get(OpKind.MLA_MODULE) if self.tables is not None else None
        geometry = self.geometry
        if table is None or not self.deployment.dp_attention or not geometry.is_mla:
            return {}
        kv_dtype = KV_DTYPE.get(geometry.cache_dtype, "bf16")
        heads = geometry.heads_q // self.deployment.attn_tp
        out: dict[str, Surface] = {}
        for phase in ("decode", "prefill"):
            try:
                out[phase] = Surface.from_table(table, "batch", "tokens", {"heads": heads},
                                                {"phase": phase, "kv_dtype": kv_dtype, "backend": self.mla_backend})
            except TableMiss:
                return {}
        self._note(f"attention: the {self.mla_backend} MLA module measured whole ({kv_dtype} KV, FP8 attention: "
                   f"{out['decode'].table.split(' (')[0]}), q_b / kv_b / BMMs / o_proj / RoPE / latent norms in it")
        return out

    def _fused_moe_curve(self) -> Curve | None:
        """SGLang's fused routed-expert kernel at (moe_tp, ep): the `moe` table (as MeasuredStep reads it at
        ep 1)."""
        table = self.tables.get(OpKind.MOE) if self.tables is not None else None
        geometry, deployment = self.geometry, self.deployment
        if table is None:
            return None
        dtype = MOE_DTYPE.get(geometry.weight_dtype, "bf16")
        fixed = {"hidden": geometry.hidden, "inter": geometry.expert_intermediate, "topk": geometry.experts_per_token,
                 "experts": geometry.routed_experts, "moe_tp": deployment.moe_tp, "moe_ep": deployment.ep}
        found = _first_curve(table, "tokens", fixed, [{"dtype": dtype, "distribution": distribution}
                                                      for distribution in (deployment.expert_distribution, "balanced")])
        if found is not None:
            curve, match = found
            if match["distribution"] != deployment.expert_distribution:
                self._note(f"no {deployment.expert_distribution} fused-MoE rows: the routed experts read the balanced "
                           "ones")
            return curve
        self._note(f"no fused-MoE rows at moe_tp {deployment.moe_tp}, ep {deployment.ep} for {geometry.name}: the "
                   "routed experts run on the roofline")
        return None

    def _deepep_curve(self, mode: str) -> Curve | None:
        """DeepEP's grouped expert kernels (`moe_deepep`, the group's tokens) in `mode` (ll / normal)."""
        table = self.tables.get(OpKind.MOE_DEEPEP) if self.tables is not None else None
        geometry, deployment = self.geometry, self.deployment
        if table is not None:
            dtype = MOE_DTYPE.get(geometry.weight_dtype, "bf16")
            fixed = {"hidden": geometry.hidden, "inter": geometry.expert_intermediate,
                     "topk": geometry.experts_per_token, "experts": geometry.routed_experts, "ep": deployment.ep}
            found = _first_curve(table, "tokens", fixed, [{"mode": mode, "dtype": dtype, "distribution": distribution}
                                                          for distribution in (deployment.expert_distribution,
                                                                               "balanced")])
            if found is not None:
                return found[0]
        self._note(f"no DeepEP expert rows ({mode} mode) at ep {deployment.ep} for {geometry.name}: the routed "
                   "experts run on the roofline")
        return None

    def _collective_curve(self, op_name: str, gpus: int) -> Curve | None:
        table = self.tables.get(OpKind.COLLECTIVE) if self.tables is not None else None
        # the database's NCCL rows are one host's (NVLink): a collective across hosts is not theirs to extrapolate
        if table is not None and gpus <= self.deployment.gpus_per_host:
            try:
                return table.curve("message_elements", {"gpus": gpus}, {"op": op_name, "dtype": "bf16"})
            except TableMiss:
                pass
        where = "hosts" if gpus > self.deployment.gpus_per_host else "GPUs"
        self._note(f"no NCCL {op_name} rows over {gpus} GPUs (the database measures one host): a ring over the "
                   f"{'cross-host fabric' if where == 'hosts' else 'NVLink bus'} on the roofline")
        return None

    def _a2a_curve(self, backend: str, phase: str) -> Curve | None:
        """DeepEP's `phase` at this group's (ep, hosts) and the model's (hidden, topk, experts), over tokens per
        rank; normal mode at the SM budget SGLang runs it with."""
        table = self.tables.get(OpKind.MOE_A2A) if self.tables is not None else None
        geometry, deployment = self.geometry, self.deployment
        if table is not None:
            sms = DEEPEP_NORMAL_SMS if backend == "deepep_normal" else 0
            fixed = {"hidden": geometry.hidden, "topk": geometry.experts_per_token,
                     "experts": geometry.routed_experts, "ep": deployment.ep, "nodes": deployment.hosts, "sms": sms}
            found = _first_curve(table, "tokens", fixed, [{"backend": backend, "phase": phase, "dtype": dtype}
                                                          for dtype in sorted(set(table.values("dtype")))])
            if found is not None:
                return found[0]
        self._note(f"no {backend} {phase} rows at ep {deployment.ep} over {deployment.hosts} host(s): its bytes on "
                   "the roofline of NVLink and the cross-host fabric")
        return None

    # ---- kernels ------------------------------------------------------------------------------------------
    def _gemm_s(self, gemm: LinearOp, curve: Curve | None, tokens: float) -> tuple[float, Lookup, str]:
        if tokens <= 0:
            return 0.0, Lookup.MEASURED, ""
        if curve is not None:
            if not self._explain:
                return curve.seconds(tokens), Lookup.MEASURED, ""
            seconds, how = curve.lookup(tokens)
            return seconds, how, curve.table.split(" (")[0]
        gpu = self.gpu
        peak = gpu.peak_fp8_flops if (gemm.fp8 and gpu.has_fp8) else gpu.peak_flops
        mem = (gemm.weight_bytes + tokens * (gemm.k + gemm.n) * WEIGHT_BYTES) / gpu.achievable_hbm_Bps
        comp = 2.0 * tokens * gemm.k * gemm.n / (peak * gpu.gemm_fraction(tokens))
        return max(mem, comp, gpu.kernel_floor_s), Lookup.ROOFLINE, "roofline"

    def _experts_roofline_s(self, tokens: float) -> float:
        """The busiest EP rank's routed experts on the roofline: its share of the token-expert pairs through its
        experts' weights (touched ones read once), FP8 GEMMs at the curve's fraction at its per-expert tokens."""
        geometry, deployment, gpu = self.geometry, self.deployment, self.gpu
        pairs = tokens * geometry.experts_per_token / deployment.ep
        local = deployment.experts_per_rank(geometry)
        touched = min(local, pairs)
        per_expert = geometry.hidden * 3 * geometry.expert_intermediate / deployment.moe_tp
        weight_bytes = per_expert * (1.0 if geometry.weight_dtype == "fp8" else 2.0)
        peak = gpu.peak_fp8_flops if (geometry.weight_dtype == "fp8" and gpu.has_fp8) else gpu.peak_flops
        mem = (touched * weight_bytes + pairs * 2 * geometry.hidden * WEIGHT_BYTES) / gpu.achievable_hbm_Bps
        comp = 2.0 * pairs * per_expert / (peak * gpu.gemm_fraction(pairs / max(touched, 1.0)))
        return max(mem, comp, 2 * gpu.kernel_floor_s)

    def _ring_s(self, gpus: int, message_bytes: float) -> float:
        """A ring all-gather / reduce-scatter of `message_bytes` (the whole gathered message) over `gpus`: each
        GPU moves (g - 1) / g of it over its slowest link, g - 1 latencies."""
        spans = gpus > self.deployment.gpus_per_host
        rate, latency = (self.inter if spans else self.intra) or (float("inf"), 0.0)
        return (gpus - 1) * latency + (gpus - 1) / gpus * message_bytes / rate

    def _a2a_roofline_s(self, rank_tokens: Sequence[float], prefill: bool) -> tuple[float, float]:
        """(dispatch, combine) seconds of the busiest GPU's all-to-all bytes over NVLink and the cross-host fabric
        (`a2a_layer_traffic`), one latency each."""
        traffic = a2a_layer_traffic(self.geometry, self.deployment, rank_tokens, mode=A2A.DEEPEP, prefill=prefill)
        intra_Bps, intra_lat = self.intra
        inter_Bps, inter_lat = self.inter or (float("inf"), 0.0)
        out = []
        for matrix in (traffic.dispatch, traffic.combine):
            worst = 0.0
            for src, row in enumerate(matrix):
                nvlink = sum(nbytes for dst, nbytes in enumerate(row)
                             if dst != src and traffic.hosts[dst] == traffic.hosts[src])
                rdma = sum(nbytes for dst, nbytes in enumerate(row) if traffic.hosts[dst] != traffic.hosts[src])
                seconds = max(nvlink / intra_Bps + intra_lat, rdma / inter_Bps + (inter_lat if rdma else 0.0))
                worst = max(worst, seconds)
            out.append(worst)
        return out[0], out[1]

    # ---- one layer ----------------------------------------------------------------------------------------
    def _attention_block(self, batch: BatchShape) -> tuple[dict[str, float], dict[str, list]]:
        """One rank's attention block per layer: projections, kernel, its norms and RoPE."""
        decodes = decode_rows(batch)
        prefill_tokens = max(batch.new_tokens - decodes, 0.0)
        looks: dict[str, list] = {"attention_gemms": [], "attention": [], "elementwise": []}
        if self._module:
            return self._module_block(batch, decodes, prefill_tokens, looks)
        gemms = 0.0
        for gemm, curve in self._attn_every:
            seconds, how, table = self._gemm_s(gemm, curve, batch.new_tokens)
            gemms += seconds
            looks["attention_gemms"].append((how, table))
        for gemm, curve in self._attn_prefill:
            seconds, how, table = self._gemm_s(gemm, curve, prefill_tokens)
            gemms += seconds
            if prefill_tokens > 0:
                looks["attention_gemms"].append((how, table))
        if self.geometry.is_mla and decodes > 0:
            if self._bmm is not None:
                seconds, how = self._curve_s(self._bmm, decodes)
                gemms += seconds
                looks["attention_gemms"].append((how, "mla_bmm"))
            else:
                looks["attention_gemms"].append((Lookup.ROOFLINE, "roofline"))
        if self._explain:
            terms = self.attn.iteration(batch)
            attention = terms.attention_s_per_layer
            looks["attention"].append((Lookup(terms.lookups["attention"]) if terms.lookups["attention"] != NONE
                                       else Lookup.MEASURED, terms.sources["attention"]))
        else:
            attention = self.attn.attention_layer_s(batch)
        elementwise, found = self._roles_s(self.attn, ATTENTION_ROLES, batch.new_tokens)
        looks["elementwise"] += found
        return {"attention_gemms": gemms, "attention": attention, "elementwise": elementwise}, looks

    def _roles_s(self, model: StepTimeModel, roles: frozenset[str], tokens: float,
                 kind: str | None = None) -> tuple[float, list]:
        """One layer's elementwise kernels of `roles` at `tokens` tokens (of layer `kind`, where the roles differ
        by kind), and what they rest on; kept per token count (the kernels' time depends on nothing else)."""
        key = (id(model), roles, tokens, kind)
        hit = self._elementwise_cache.get(key)
        if hit is not None:
            return hit
        seconds, looks, seen = 0.0, [], set()
        for row in model.elementwise_breakdown(tokens) if tokens > 0 else ():
            role, layers = row["role"], float(row["layers"])
            row_kind = "dense" if role == "ffn activation" else "moe" if role == "shared experts activation" else None
            if role not in roles or role in seen or layers <= 0 or (kind is not None and row_kind not in (None, kind)):
                continue
            seen.add(role)
            seconds += float(row["ms"]) * 1e-3 / layers
            looks.append((Lookup(row["lookup"]), str(row["table"]).split(" (")[0]))
        if len(self._elementwise_cache) > 65536:
            self._elementwise_cache.clear()
        self._elementwise_cache[key] = (seconds, looks)
        return seconds, looks

    def _surface_s(self, surface: Surface, row: float, col: float) -> tuple[float, Lookup]:
        return surface.lookup(row, col) if self._explain else (surface.seconds(row, col), Lookup.MEASURED)

    def _curve_s(self, curve: Curve, coordinate: float) -> tuple[float, Lookup]:
        return curve.lookup(coordinate) if self._explain else (curve.seconds(coordinate), Lookup.MEASURED)

    def _module_block(self, batch: BatchShape, decodes: float, prefill_tokens: float,
                      looks: dict[str, list]) -> tuple[dict[str, float], dict[str, list]]:
        """The attention block from the measured module: the fused q_a / kv_a GEMM, the module (decode rows at the
        decodes' mean context, prefill rows at the length whose causal pairs equal the chunk's), the two norms."""
        gemms = 0.0
        for gemm, curve in self._attn_every:
            if gemm.name in MODULE_KEEPS:
                seconds, how, table = self._gemm_s(gemm, curve, batch.new_tokens)
                gemms += seconds
                looks["attention_gemms"].append((how, table))
        attention = 0.0
        if decodes > 0:
            context = max(batch.attention_pairs - batch.prefill_pairs, 0.0) / decodes
            seconds, how = self._surface_s(self._module["decode"], decodes, max(context, 1.0))
            attention += seconds
            looks["attention"].append((how, "mla_module"))
        if prefill_tokens > 0 and batch.prefill_pairs > 0:
            sequences = max(batch.sequences - decodes, 1.0)
            isl = (math.sqrt(8.0 * batch.prefill_pairs / sequences + 1.0) - 1.0) / 2.0
            seconds, how = self._surface_s(self._module["prefill"], sequences, isl)
            attention += seconds
            looks["attention"].append((how, "mla_module"))
        elementwise, found = self._roles_s(self.attn, ATTENTION_ROLES - MODULE_ROLES, batch.new_tokens)
        looks["elementwise"] += found
        return {"attention_gemms": gemms, "attention": attention, "elementwise": elementwise}, looks

    def layer(self, kind: str, batches: Sequence[BatchShape],
              blocks: list[tuple[dict[str, float], dict[str, list]]] | None = None
              ) -> tuple[LayerCost, dict[str, list]]:
        """One layer of `kind` for the attention ranks' batches (one per DP rank): seconds per term, and what
        each term rests on. `blocks`: the ranks' attention blocks where the caller has them (they do not depend
        on the layer's kind: a step's layers share them)."""
        deployment, geometry = self.deployment, self.geometry
        if blocks is None:
            blocks = [self._attention_block(batch) for batch in batches]
        busiest = max(range(len(blocks)), key=lambda index: sum(blocks[index][0].values()))
        seconds = dict(blocks[busiest][0])
        looks: dict[str, list] = {term: list(found) for term, found in blocks[busiest][1].items()}
        looks.update({"mlp_gemms": [], "experts": [], "collective": []})
        rank_tokens = [batch.new_tokens for batch in batches]
        has_prefill = any(batch.new_tokens > decode_rows(batch) for batch in batches)
        decode_only = not has_prefill
        dp_attention = deployment.dp_attention
        if not dp_attention:
            mlp_tokens = rank_tokens[busiest]
        elif self.mode is A2A.ALLGATHER:
            mlp_tokens = gathered_tokens(rank_tokens, has_prefill)
        else:
            mlp_tokens = max(rank_tokens)
        mlp_gemms, routed_s, shared_s = 0.0, 0.0, 0.0
        for gemm, curve in self._mlp[kind]:
            op_s, how, table = self._gemm_s(gemm, curve, mlp_tokens)
            looks["mlp_gemms"].append((how, table))
            if gemm.name.startswith("shared_"):
                shared_s += op_s
            else:
                mlp_gemms += op_s
        if kind == "moe":
            if self.mode is A2A.DEEPEP and dp_attention:
                mode = DEEPEP_MODES[decode_only][0]
                curve, tokens = self._routed[mode], sum(rank_tokens)
            else:
                curve, tokens = self._routed["fused"], mlp_tokens
            if curve is not None:
                routed_s, how = self._curve_s(curve, tokens)
                looks["experts"].append((how, curve.table.split(" (")[0]))
            else:
                routed_s = self._experts_roofline_s(tokens)
                looks["experts"].append((Lookup.ROOFLINE, "roofline"))
            # SGLang overlaps the shared experts with the routed kernel on a second stream up to 1024 tokens
            # (DUAL_STREAM_TOKEN_THRESHOLD); DeepEP's path runs them one after the other
            if self.mode is not A2A.DEEPEP and mlp_tokens <= SHARED_OVERLAP_MAX_TOKENS:
                shared_s = max(shared_s - routed_s, 0.0)          # only what the routed kernel does not hide
        seconds["mlp_gemms"] = mlp_gemms + shared_s
        seconds["experts"] = routed_s
        elementwise, found = self._roles_s(self.mlp, MLP_ROLES, mlp_tokens, kind)
        seconds["elementwise"] += elementwise
        looks["elementwise"] += found
        seconds["collective"] = self._collective_s(kind, batches, busiest, rank_tokens, mlp_tokens, has_prefill,
                                                   looks["collective"])
        return LayerCost({term: seconds[term] for term in TERMS}, busiest), looks

    def _collective_s(self, kind: str, batches: Sequence[BatchShape], busiest: int, rank_tokens: list[float],
                      mlp_tokens: float, has_prefill: bool, looks: list) -> float:
        deployment, geometry = self.deployment, self.geometry
        if not deployment.dp_attention:
            if not self._explain:
                return self.attn.allreduce_and_head_s(batches[busiest])[0]
            terms = self.attn.iteration(batches[busiest])
            if deployment.tp > 1:
                looks.append((Lookup(terms.lookups["allreduce"]), terms.sources["allreduce"].split(" (")[0]))
            return terms.allreduce_s_per_layer
        if self.mode is A2A.DEEPEP:
            if kind != "moe":
                return 0.0                          # dense layers data-parallel (--moe-dense-tp-size 1)
            backend = DEEPEP_MODES[not has_prefill][1]
            tokens = max(rank_tokens)
            total = 0.0
            fallback = None
            for index, phase in enumerate(("dispatch", "combine")):
                curve = self._collectives[f"{backend}:{phase}"]
                if curve is not None:
                    seconds, how = self._curve_s(curve, tokens)
                    looks.append((how, curve.table.split(" (")[0]))
                else:
                    fallback = fallback or self._a2a_roofline_s(rank_tokens, has_prefill)
                    seconds = fallback[index]
                    looks.append((Lookup.ROOFLINE, "roofline"))
                total += seconds
            return total
        row_elements = geometry.hidden
        total = 0.0
        steps = [("all_gather", deployment.tp, mlp_tokens), ("reduce_scatter", deployment.tp, mlp_tokens)]
        if deployment.attn_tp > 1:
            steps += [("reduce_scatter", deployment.attn_tp, rank_tokens[busiest]),
                      ("all_gather", deployment.attn_tp, rank_tokens[busiest])]
        for op_name, gpus, tokens in steps:
            curve = self._collectives[f"{op_name}@{gpus}"]
            elements = tokens * row_elements
            if curve is not None:
                seconds, how = self._curve_s(curve, elements)
                looks.append((how, curve.table.split(" (")[0]))
            else:
                seconds = self._ring_s(gpus, elements * combine_row_bytes(geometry) / row_elements)
                looks.append((Lookup.ROOFLINE, "roofline"))
            total += seconds
        return total

    # ---- a step -------------------------------------------------------------------------------------------
    def _ranks(self, batches: BatchShape | Sequence[BatchShape]) -> list[BatchShape]:
        if isinstance(batches, BatchShape):
            return [batches] * self.deployment.dp
        out = list(batches)
        if len(out) != self.deployment.dp:
            raise ValueError(f"need one batch per attention rank ({self.deployment.dp}), got {len(out)}")
        return out

    def _forward(self, batches: list[BatchShape], kinds: dict[str, int], looks: dict[str, list],
                 layer_s: dict[str, dict[str, float]]) -> tuple[float, dict[str, float], int]:
        totals = {term: 0.0 for term in TERMS}
        busiest = 0
        distinct: dict[BatchShape, tuple[dict[str, float], dict[str, list]]] = {}    # idle ranks are alike
        for batch in batches:
            if batch not in distinct:
                distinct[batch] = self._attention_block(batch)
        blocks = [distinct[batch] for batch in batches]
        for kind, count in kinds.items():
            cost, found = self.layer(kind, batches, blocks)
            layer_s[kind] = cost.seconds
            busiest = cost.busiest_rank
            for term, seconds in cost.seconds.items():
                totals[term] += count * seconds
            for term, items in found.items():
                looks.setdefault(term, []).extend(items)
        return sum(totals.values()), totals, busiest

    def _head_s(self, batch: BatchShape, looks: dict[str, list]) -> float:
        if not self._explain:
            return self.attn.allreduce_and_head_s(batch)[1]
        terms = self.attn.iteration(batch)
        looks.setdefault("lm_head", []).append((Lookup(terms.lookups["lm_head"]), terms.sources["lm_head"]
                                                .split(" (")[0]))
        return terms.lm_head_s

    def iteration_s(self, batches: BatchShape | Sequence[BatchShape]) -> GroupStep:
        """`iteration` without saying what each term rests on (empty `sources` / `lookups`): the simulator's hot
        path, the same seconds."""
        self._explain = False
        try:
            return self.iteration(batches)
        finally:
            self._explain = True

    def iteration(self, batches: BatchShape | Sequence[BatchShape]) -> GroupStep:
        """One step of the group: `batches` per attention rank (one BatchShape: every rank the same). With MTP,
        decoding sequences verify nextn + 1 tokens and the MTP module drafts (the class docstring). The seconds of
        its collectives (`terms_s["collective"]`, `layer_s[kind]["collective"]`) are what a simulator replaces
        by the flows of `parallel.a2a_layer_traffic` on its links."""
        ranks = self._ranks(batches)
        looks: dict[str, list] = {}
        layer_s: dict[str, dict[str, float]] = {}
        mtp = self.mtp
        target = [verify_batch(batch, mtp.nextn) for batch in ranks] if mtp is not None else ranks
        body, totals, busiest = self._forward(target, self.kinds, looks, layer_s)
        heads = [self._head_s(batch, looks) for batch in target]
        totals["lm_head"] = max(heads)
        totals["overhead"] = self.attn.gpu_overhead_s
        mtp_terms: dict[str, float] = {}
        tokens_per_step = 1.0
        collective = totals["collective"]
        if mtp is not None:
            draft = 0.0
            passes = [draft_batch(batch, 1, with_prefill=False) for batch in ranks]
            extend = [draft_batch(batch, mtp.verify_tokens) for batch in ranks]
            for label, pass_batches, repeats in (("draft_decode", passes, mtp.draft_decode_passes),
                                                 ("draft_extend", extend, 1)):
                if repeats <= 0:
                    mtp_terms[label] = 0.0
                    continue
                one, one_collective = self._draft_pass_s(pass_batches, looks)
                mtp_terms[label] = repeats * one
                draft += repeats * one
                collective += repeats * one_collective
            totals["mtp_draft"] = draft
            tokens_per_step = mtp.tokens_per_step
            mtp_terms["verify"] = body + totals["lm_head"]
        kernels = body + totals["lm_head"] + totals["overhead"] + totals.get("mtp_draft", 0.0)
        total = kernels
        host = self.host
        if host is not None:        # every rank's scheduler and launches, at its requests (not MTP's verify rows)
            launched = [(batch.new_tokens, batch.sequences, decode_rows(batch)) for batch in ranks]
            total = host.step_s(kernels, self.geometry.layers, launched)
            totals["overhead"] = total - kernels
        sources, lookups = self._summarise(looks) if self._explain else ({}, {})
        if host is not None and self._explain:
            sources["overhead"] = host.source(launched)
        return GroupStep(iteration_s=total, layer_s=layer_s, terms_s=totals, sources=sources, lookups=lookups,
                         notes=tuple(self._notes) + tuple(self.attn.notes), busiest_rank=busiest,
                         tokens_per_step=tokens_per_step, mtp=mtp_terms, collective_s=collective)

    def _draft_pass_s(self, batches: list[BatchShape], looks: dict[str, list]) -> tuple[float, float]:
        """One pass of the MTP module: its MoE layer, eh_proj, its two input norms and the shared LM head; and the
        part of it its MoE layer's collectives take."""
        layer_s: dict[str, dict[str, float]] = {}
        body, totals, _busiest = self._forward(batches, {"moe": 1}, looks, layer_s)
        tokens = max(batch.new_tokens for batch in batches)
        assert self._eh_proj is not None
        gemm, curve = self._eh_proj
        proj, how, table = self._gemm_s(gemm, curve, tokens)
        looks.setdefault("mtp_draft", []).append((how, table))
        norm = self.attn.elementwise_kernel_s(_mtp_norm(self.geometry.hidden), tokens) * MTP_NORMS
        return body + proj + norm + max(self._head_s(batch, looks) for batch in batches), totals["collective"]

    @staticmethod
    def _summarise(looks: dict[str, list]) -> tuple[dict[str, str], dict[str, str]]:
        sources, lookups = {}, {}
        for term, items in looks.items():
            if not items:
                sources[term], lookups[term] = "none", NONE
                continue
            sources[term] = "; ".join(sorted({table.split(" (")[0] for _how, table in items if table}))
            lookups[term] = Lookup.worst(*(how for how, _table in items)).value
        for term in (*TERMS, "lm_head"):
            sources.setdefault(term, "none")
            lookups.setdefault(term, NONE)
        sources["overhead"] = lookups["overhead"] = Lookup.ROOFLINE.value
        return sources, lookups


def _mtp_norm(width: int) -> ElementwiseKernel:
    """One of the MTP module's input RMSNorms (enorm / hnorm) over a hidden-state row."""
    return ElementwiseKernel("rmsnorm", "mtp input norm", width, 2 * width)


# ---- the simulator's one call per group step --------------------------------------------------------------------
@dataclass(frozen=True)
class A2aLoad:
    """Bytes one pass of a step moves between the group's GPUs: `traffic` is one layer's (every GPU pair, split by
    link in `traffic.by_link()`), moved by `layers` layers of the pass (`what`: target, draft_decode, draft_extend).
    Under all-gather every layer of a DP group gathers and reduce-scatters (DP padding included); under DeepEP the
    MoE layers dispatch and combine."""

    what: str
    traffic: LayerTraffic
    layers: int

    @property
    def bytes(self) -> float:
        """Bytes over every GPU pair and layer, the GPU's own rows excluded."""
        total = 0.0
        for split in self.traffic.by_link().values():
            total += split["nvlink"] + split["rdma"]
        return total * self.layers


@dataclass(frozen=True)
class GroupIteration:
    """One lockstep step of a DP-attention group, as the simulator's instance engine needs it.

    `seconds`: the step, the same for every rank (each layer ends in a collective all ranks join); of it,
    `collective_s` the collectives' (what a simulator that puts `a2a` on its links replaces by their flows) and
    `compute_s` the rest. `tokens_per_decode`: tokens each decoding sequence emits this step (1, or MTP's mean
    accepted length); `emitted[r]`: rank r's decoding sequences x that. `busiest_rank`: the rank whose attention
    set the step. `kv_capacity_tokens`: tokens of KV one rank's GPU holds (each rank its own latent)."""

    seconds: float
    collective_s: float
    busiest_rank: int
    tokens_per_decode: float
    emitted: tuple[float, ...]
    a2a: tuple[A2aLoad, ...]
    kv_capacity_tokens: int

    @property
    def compute_s(self) -> float:
        return self.seconds - self.collective_s


def _pass_traffic(step: DeploymentStep, what: str, batches: Sequence[BatchShape], layers: int) -> A2aLoad | None:
    """One pass's collective bytes (`A2aLoad`), or None where its layers move none between GPUs."""
    deployment = step.deployment
    tokens = [batch.new_tokens for batch in batches]
    has_prefill = any(batch.new_tokens > decode_rows(batch) for batch in batches)
    if layers <= 0 or sum(tokens) <= 0:
        return None
    if step.mode is A2A.ALLGATHER and gathered_tokens(tokens, has_prefill) > sum(tokens):
        tokens = [max(tokens)] * len(tokens)              # MAX_LEN padding: every rank sends the busiest's rows
    key = (tuple(tokens), has_prefill)
    traffic = step._traffic_cache.get(key)
    if traffic is None:
        traffic = a2a_layer_traffic(step.geometry, deployment, tokens, mode=step.mode, prefill=has_prefill)
        if len(step._traffic_cache) > 4096:
            step._traffic_cache.clear()
        step._traffic_cache[key] = traffic
    return A2aLoad(what, traffic, layers)


def group_iteration(step: DeploymentStep, ranks: Sequence[BatchShape], *, traffic: bool = True) -> GroupIteration:
    """The seconds, the collective bytes and the emitted tokens of one step of `step`'s group, given each DP
    rank's own batch (`ranks[r]`: its decoding sequences and prefill chunk, `BatchShape` as the TP engine builds
    it; an idle rank's is all zeros and still joins the collectives, SGLang's idle batch). Every rank's step takes
    `seconds`. With MTP the decoding sequences verify nextn + 1 tokens, the module drafts, and each emits
    `tokens_per_decode` on average (`Mtp.length_probabilities` to draw it). A group with no work returns 0 s.
    `traffic=False` leaves `a2a` empty: the GPU-pair matrices cost about as much as the step's own arithmetic
    (tp x tp per pass), which a simulator that does not put them on its links need not pay."""
    batches = list(ranks)
    deployment = step.deployment
    if len(batches) != deployment.dp:
        raise ValueError(f"need one batch per DP rank ({deployment.dp}), got {len(batches)}")
    mtp = step.mtp
    per_decode = mtp.tokens_per_step if mtp is not None else 1.0
    decodes = tuple(decode_rows(batch) if batch.new_tokens > 0 else 0.0 for batch in batches)
    emitted = tuple(count * per_decode for count in decodes)
    capacity = step.kv_capacity_tokens()
    if all(batch.new_tokens <= 0 for batch in batches):
        return GroupIteration(0.0, 0.0, 0, per_decode, emitted, (), capacity)
    result = step.iteration_s(batches)
    loads: list[A2aLoad] = []
    if traffic and deployment.dp_attention:
        kinds = step.kinds if step.mode is A2A.ALLGATHER else {"moe": step.kinds.get("moe", 0)}
        target = [verify_batch(batch, mtp.nextn) for batch in batches] if mtp is not None else batches
        passes = [("target", target, sum(kinds.values()))]
        if mtp is not None:
            passes += [("draft_decode", [draft_batch(batch, 1, with_prefill=False) for batch in batches],
                        mtp.draft_decode_passes),
                       ("draft_extend", [draft_batch(batch, mtp.verify_tokens) for batch in batches], 1)]
        for what, pass_batches, layers in passes:
            load = _pass_traffic(step, what, pass_batches, layers)
            if load is not None:
                loads.append(load)
    return GroupIteration(result.iteration_s, result.collective_s, result.busiest_rank, per_decode, emitted,
                          tuple(loads), capacity)
