"""Step time of one serving-engine iteration: a roofline per term, fed by a GPU entry of the profile.

An iteration (one forward pass of a continuous batch, as vLLM and Sarathi-Serve schedule it) costs, per layer,
- linear ops (attention projections and FFN, or MoE with the activated experts): weights read once per
  iteration (bf16, or FP8 with block scales: half the bytes), 2 FLOPs per weight per token (FP8 GEMMs at the
  GPU's FP8 rate; a GPU without one runs them at its bf16 rate, as weight-only FP8 kernels do);
- attention: the bytes of every attended context (MLA c_KV or GQA K/V, read once per sequence), the FLOPs of
  the new tokens against it;
- the tensor-parallel all-reduce of the layer's output (two per layer) over the instance's own fabric;
plus the LM head on the sampled positions and a fixed per-iteration overhead (launch + scheduling). Each term
is a roofline max(bytes / (HBM bandwidth x achievable fraction), FLOPs / (peak x achievable fraction)).
docs/STEP_TIME.md is the contract; docs/MODEL.md states the modelling choices. Numpy-free hot path: the
simulator calls `iteration_s` with plain floats.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence, Union

from simroute.model.cost import HOLDER_CT_REF, HOLDER_HEADS_REF, holder_curve_s, holder_work
from simroute.model.curves import interp_clamped
from simroute.model.geometry import WEIGHT_BYTES, LinearOp, ModelGeometry

Curve = tuple[tuple[float, ...], tuple[float, ...]]
Efficiency = Union[float, Curve]

MEMORY, COMPUTE = "memory", "compute"
LATENCY, BANDWIDTH, NONE = "latency", "bandwidth", "none"
ALLREDUCES_PER_LAYER = 2          # after attention's output projection and after the FFN / MoE


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's peaks (datasheet) and the achievable fraction of each (published or measured).

    gemm_efficiency is a float or an (x, y) curve over the iteration's token count (small GEMMs reach a lower
    fraction of peak); it is clamped outside its points. `sources` names each value's provenance.
    """

    name: str
    peak_flops: float
    hbm_Bps: float
    hbm_bytes: float
    hbm_efficiency: float
    gemm_efficiency: Efficiency
    attention_efficiency: float
    iteration_overhead_s: float
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    iteration_overhead_graph_s: float | None = None     # the same iteration under CUDA graphs, when measured
    peak_fp8_flops: float | None = None                 # dense FP8 tensor-core peak (None: the GPU has none)

    @property
    def achievable_hbm_Bps(self) -> float:
        return self.hbm_Bps * self.hbm_efficiency

    @property
    def has_fp8(self) -> bool:
        return self.peak_fp8_flops is not None

    def gemm_fraction(self, tokens: float) -> float:
        """Achievable fraction of peak FLOP/s of the linear GEMMs of an iteration of `tokens` tokens."""
        eff = self.gemm_efficiency
        if isinstance(eff, (int, float)):
            return float(eff)
        return interp_clamped(tokens, eff[0], eff[1])


def causal_pairs(tokens: float, earlier: float = 0.0) -> float:
    """(query, key) pairs of `tokens` new tokens after `earlier` tokens, causal: each new token attends the
    earlier ones and the new ones up to itself. The one formula for a prefill chunk's attention pairs."""
    return tokens * earlier + tokens * (tokens + 1) / 2


@dataclass(frozen=True)
class BatchShape:
    """What one iteration computes (see docs/STEP_TIME.md).

    new_tokens: tokens computed (1 per decoding sequence + prefill chunk tokens); sequences: sequences in the
    batch (each samples one position); kv_read_tokens: sum over sequences of the context each attends, its
    own tokens and resident chunks, read once; attention_pairs: sum over sequences of new_tokens_i x context_i;
    prefill_pairs: the part of attention_pairs that prefill chunks contribute (0 = all in decode's form). MLA
    decode attends in the absorbed form (d_qk + d_v per head), MLA prefill in the expanded one
    ((qk_nope + rope) + v_head per head, 3.4x fewer FLOPs), as serving engines run them; GQA has one form.
    """

    new_tokens: float
    sequences: float
    kv_read_tokens: float
    attention_pairs: float
    prefill_pairs: float = 0.0

    @classmethod
    def uniform(cls, decode_seqs: int = 0, context: int = 0, prefill_tokens: int = 0,
                prefill_context: int = 0) -> "BatchShape":
        """`decode_seqs` sequences decoding over `context` tokens each, plus one prefill chunk of
        `prefill_tokens` tokens after `prefill_context` earlier tokens (causal: pairs up to the diagonal)."""
        pre_ctx = prefill_context + prefill_tokens
        pre_pairs = causal_pairs(prefill_tokens, prefill_context)
        has_prefill = 1 if prefill_tokens > 0 else 0
        return cls(new_tokens=float(decode_seqs + prefill_tokens), sequences=float(decode_seqs + has_prefill),
                   kv_read_tokens=float(decode_seqs * context + (pre_ctx if has_prefill else 0)),
                   attention_pairs=float(decode_seqs * context + pre_pairs), prefill_pairs=float(pre_pairs))


@dataclass(frozen=True)
class StepTerms:
    """One iteration's time, term by term (seconds). iteration_s = layers x (linear + attention + allreduce)
    per layer + lm_head_s + overhead_s. bounds: term -> "memory" / "compute" (all-reduce: "latency" /
    "bandwidth" / "none")."""

    iteration_s: float
    linear_s_per_layer: float
    attention_s_per_layer: float
    allreduce_s_per_layer: float
    overhead_s: float
    lm_head_s: float
    layers: int
    bounds: dict[str, str]

    def as_ms(self) -> dict[str, object]:
        """The CLI's view: every term in ms, plus the bounds."""
        return {"iteration_ms": self.iteration_s * 1e3, "linear_ms_per_layer": self.linear_s_per_layer * 1e3,
                "attention_ms_per_layer": self.attention_s_per_layer * 1e3,
                "allreduce_ms_per_layer": self.allreduce_s_per_layer * 1e3, "lm_head_ms": self.lm_head_s * 1e3,
                "overhead_ms": self.overhead_s * 1e3, "layers": self.layers, "bounds": dict(self.bounds)}


@dataclass(frozen=True)
class _LayerKind:
    """The per-iteration constants of one layer kind on one GPU, folded from its GEMM list."""

    count: int
    dense_weight_bytes: float      # read once whatever the token count
    expert_weight_bytes: float     # one routed expert's matrices (0 without MoE)
    experts: int
    experts_per_token: int
    flops_per_token: float         # of the bf16 GEMMs every token passes (attention projections, FFN, shared experts)
    fp8_flops_per_token: float     # of those GEMMs in FP8 (0 for a bf16 checkpoint)
    expert_flops_per_token: float  # of the routed experts' bf16 GEMMs (k experts per token)
    expert_fp8_flops_per_token: float
    act_bytes_per_token: float


def _flops(ops: Sequence[LinearOp], fp8: bool) -> float:
    return float(sum(2 * op.k * op.n * op.active for op in ops if op.fp8 == fp8))


def _fold(ops: Sequence[LinearOp], count: int) -> _LayerKind:
    dense = [op for op in ops if op.experts == 1]
    routed = [op for op in ops if op.experts > 1]
    return _LayerKind(
        count=count,
        dense_weight_bytes=float(sum(op.weight_bytes for op in dense)),
        expert_weight_bytes=float(sum(op.weight_bytes for op in routed)),
        experts=routed[0].experts if routed else 0,
        experts_per_token=routed[0].active if routed else 0,
        flops_per_token=_flops(dense, False), fp8_flops_per_token=_flops(dense, True),
        expert_flops_per_token=_flops(routed, False), expert_fp8_flops_per_token=_flops(routed, True),
        act_bytes_per_token=float(sum((op.k + op.n) * op.active * WEIGHT_BYTES for op in ops)))


def experts_touched(experts: int, per_token: int, tokens: float) -> float:
    """Expected distinct routed experts an iteration of `tokens` tokens activates, each token choosing
    `per_token` of `experts` uniformly: E (1 - (1 - k/E)^T). Their weights are what the iteration reads."""
    if experts <= 0 or tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - per_token / experts) ** tokens)


def expert_load(experts: int, per_token: int, tokens: float) -> tuple[float, float]:
    """(experts touched, tokens each touched expert's GEMM sees) in an iteration of `tokens` tokens under
    uniform routing: the T x k token-expert assignments spread over the E (1 - (1 - k/E)^T) experts they touch,
    1 token each at T = 1, T k / E once every expert is touched. The second sets that GEMM's M, hence its place
    on the GEMM-efficiency curve (docs/STEP_TIME.md, "MoE")."""
    touched = experts_touched(experts, per_token, tokens)
    return touched, (tokens * per_token / touched if touched > 0 else 0.0)


class StepTimeModel:
    """The step time of one instance (a TP group of `tp` GPUs of `gpu` serving `geometry`).

    allreduce_Bps / allreduce_latency_s: the instance's intra-host fabric (bulk rate and per-hop latency) that
    the ring all-reduce runs over. holder_curve: the profile's measured holder-compute curve ((N, seconds) at
    holder_ref = (heads, ct) reference requesters), the floor of `holder_partial_s`. cuda_graphs: charge the
    GPU's `iteration_overhead_graph_s` when it has one (iterations replayed as CUDA graphs). FP8 weights
    (`geometry.weight_dtype`) halve the linear ops' weight bytes; their FLOPs run at the GPU's FP8 peak, or at
    its bf16 peak where it has none (`fp8_rate` says which, `notes` says so). Extend by adding terms to
    `iteration` and `iteration_s` together (a test checks they agree).
    """

    def __init__(self, geometry: ModelGeometry, gpu: GpuSpec, tp: int = 1, *, allreduce_Bps: float = float("inf"),
                 allreduce_latency_s: float = 0.0, holder_curve: Curve | None = None,
                 holder_ref: tuple[int, int] = (HOLDER_HEADS_REF, HOLDER_CT_REF), cuda_graphs: bool = False) -> None:
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        self.geometry, self.gpu, self.tp = geometry, gpu, tp
        self.allreduce_Bps, self.allreduce_latency_s = allreduce_Bps, allreduce_latency_s
        graph_s = gpu.iteration_overhead_graph_s
        self._layers = geometry.layers
        self._overhead_s = graph_s if (cuda_graphs and graph_s is not None) else gpu.iteration_overhead_s
        self.holder_curve, self.holder_ref = holder_curve, holder_ref
        g = geometry
        self._kinds = tuple(_fold(g.linear_ops(tp, kind), n) for kind, n in g.layer_kinds().items() if n > 0)
        head = g.lm_head_op(tp)
        self._head_bytes, self._head_flops = float(head.weight_bytes), 2.0 * head.k * head.n
        self._kind_rows = tuple((k.count, k.dense_weight_bytes, k.expert_weight_bytes, k.experts,
                                 k.experts_per_token, k.flops_per_token, k.fp8_flops_per_token,
                                 k.expert_flops_per_token, k.expert_fp8_flops_per_token, k.act_bytes_per_token)
                                for k in self._kinds)
        self._head_act_bytes = -(-g.vocab // tp) * WEIGHT_BYTES          # the logits written per sequence
        # the hot path's constants, folded once
        self._peak, self._bw = gpu.peak_flops, gpu.achievable_hbm_Bps
        uses_fp8 = any(k.fp8_flops_per_token or k.expert_fp8_flops_per_token for k in self._kinds)
        self.fp8_rate = uses_fp8 and gpu.has_fp8
        self._peak_fp8 = gpu.peak_fp8_flops if self.fp8_rate else gpu.peak_flops
        self.notes: tuple[str, ...] = () if not uses_fp8 or gpu.has_fp8 else (
            f"{gpu.name} has no FP8 tensor-core rate: the FP8 weights are read as FP8 (half the bytes) and their "
            "GEMMs run at the bf16 rate (weight-only FP8, dequantised in the kernel)",)
        self._inv_bw = 1.0 / self._bw
        self._attn_rate = gpu.peak_flops * gpu.attention_efficiency
        self._kv_bytes_token_layer = g.b_kv_per_gpu(tp) * g.token_fraction
        heads_per_gpu = -(-g.heads_q // tp)
        self._attn_flops_pair_layer = 2.0 * heads_per_gpu * (g.d_qk + g.d_v) * g.token_fraction
        expanded = (g.qk_nope_head_dim + g.rope_dims + g.v_head_dim) if g.is_mla else (g.d_qk + g.d_v)
        self._prefill_s_per_row_key = 2.0 * expanded * g.token_fraction / self._attn_rate   # one head's row
        self._attn_s_per_kv_token = self._kv_bytes_token_layer / self._bw
        self._attn_s_per_pair = self._attn_flops_pair_layer / self._attn_rate
        self._prefill_s_per_pair = heads_per_gpu * self._prefill_s_per_row_key
        self._heads_q = g.heads_q
        # a routed row is one query head of one token, split over the holder's TP ranks
        self._holder_s_per_pair = 2.0 * (g.d_qk + g.d_v) * g.token_fraction / tp / self._attn_rate
        ring_steps = 2.0 * (tp - 1)
        self._ar_latency_s = ALLREDUCES_PER_LAYER * ring_steps * allreduce_latency_s
        self._ar_s_per_token = ALLREDUCES_PER_LAYER * ring_steps / tp * g.hidden * WEIGHT_BYTES / allreduce_Bps

    # ---- sizes ------------------------------------------------------------------------------------------
    @property
    def weight_bytes_per_gpu(self) -> float:
        """All weights one GPU of the TP group holds: every layer (all experts), embedding and LM head."""
        g = self.geometry
        layers = sum(k.count * (k.dense_weight_bytes + k.experts * k.expert_weight_bytes) for k in self._kinds)
        return layers + self._head_bytes + -(-g.vocab // self.tp) * g.hidden * WEIGHT_BYTES

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """Cached bytes one token costs on one GPU, over all layers (`geometry.kv_bytes_per_token` on the
        rank's share of the cached heads)."""
        g = self.geometry
        return g.kv_bytes_per_token * g.kv_heads_per_gpu(self.tp) / g.kv_heads

    def kv_capacity_tokens(self, hbm_reserved_bytes: float = 0.0) -> int:
        """Tokens of KV that fit beside the weights (and `hbm_reserved_bytes` more, per GPU); 0 if none."""
        free = self.gpu.hbm_bytes - self.weight_bytes_per_gpu - hbm_reserved_bytes
        return max(int(free // self.kv_bytes_per_token_per_gpu), 0)

    # ---- terms ------------------------------------------------------------------------------------------
    def _linear(self, tokens: float) -> tuple[float, float, float]:
        """(seconds over all layers, memory-bound seconds, compute-bound seconds) of the linear ops. The GEMMs
        every token passes run at the curve's fraction at the iteration's tokens; each routed expert's at its
        own share (`expert_load`), the M its GEMM actually has."""
        gemm_fraction = self.gpu.gemm_fraction
        fraction = gemm_fraction(tokens)
        peak, peak_fp8 = self._peak, self._peak_fp8
        rate, rate_fp8 = peak * fraction, peak_fp8 * fraction
        inv_bw = self._inv_bw
        total = mem_s = comp_s = 0.0
        for count, dense_bytes, expert_bytes, experts, per_token, flops_token, fp8_flops_token, expert_flops, \
                expert_fp8_flops, act_token in self._kind_rows:
            comp = tokens * (flops_token / rate + fp8_flops_token / rate_fp8)
            if experts:
                touched, per_expert = expert_load(experts, per_token, tokens)
                weights = dense_bytes + touched * expert_bytes
                if per_expert > 0:
                    comp += tokens * (expert_flops / peak + expert_fp8_flops / peak_fp8) / gemm_fraction(per_expert)
            else:
                weights = dense_bytes
            mem = (weights + tokens * act_token) * inv_bw
            if mem >= comp:
                mem_s += count * mem
            else:
                comp_s += count * comp
        total = mem_s + comp_s
        return total, mem_s, comp_s

    def _attention(self, kv_read_tokens: float, attention_pairs: float,
                   prefill_pairs: float = 0.0) -> tuple[float, float, float]:
        """(seconds, bytes time, FLOPs time) of one layer's attention kernel."""
        mem = kv_read_tokens * self._attn_s_per_kv_token
        comp = (attention_pairs - prefill_pairs) * self._attn_s_per_pair + prefill_pairs * self._prefill_s_per_pair
        return (mem if mem >= comp else comp), mem, comp

    def _allreduce(self, tokens: float) -> tuple[float, str]:
        """One layer's all-reduces (ring: 2(tp-1) steps of latency, 2(tp-1)/tp of the bytes per GPU)."""
        if self.tp == 1 or tokens <= 0:
            return 0.0, NONE
        lat, wire = self._ar_latency_s, tokens * self._ar_s_per_token
        return lat + wire, (LATENCY if lat >= wire else BANDWIDTH)

    def _lm_head(self, sequences: float) -> tuple[float, str]:
        if sequences <= 0:
            return 0.0, NONE
        mem = (self._head_bytes + sequences * self._head_act_bytes) * self._inv_bw
        comp = sequences * self._head_flops / (self._peak * self.gpu.gemm_fraction(sequences))
        return (mem, MEMORY) if mem >= comp else (comp, COMPUTE)

    def iteration(self, batch: BatchShape) -> StepTerms:
        """One iteration's terms and the bound each hit."""
        layers = self.geometry.layers
        lin, lin_mem, lin_comp = self._linear(batch.new_tokens)
        attn, attn_mem, attn_comp = self._attention(batch.kv_read_tokens, batch.attention_pairs, batch.prefill_pairs)
        ar, ar_bound = self._allreduce(batch.new_tokens)
        head, head_bound = self._lm_head(batch.sequences)
        overhead = self._overhead_s
        total = lin + layers * (attn + ar) + head + overhead
        bounds = {"linear": MEMORY if lin_mem >= lin_comp else COMPUTE,
                  "attention": MEMORY if attn_mem >= attn_comp else COMPUTE,
                  "allreduce": ar_bound, "lm_head": head_bound}
        return StepTerms(iteration_s=total, linear_s_per_layer=lin / layers, attention_s_per_layer=attn,
                         allreduce_s_per_layer=ar, overhead_s=overhead, lm_head_s=head, layers=layers, bounds=bounds)

    def iteration_s(self, new_tokens: float, sequences: float, kv_read_tokens: float, attention_pairs: float,
                    prefill_pairs: float = 0.0) -> float:
        """`iteration(...).iteration_s` on plain floats: the simulator's hot loop."""
        attn = self._attention(kv_read_tokens, attention_pairs, prefill_pairs)[0]
        return (self._linear(new_tokens)[0] + self._layers * (attn + self._allreduce(new_tokens)[0])
                + self._lm_head(sequences)[0] + self._overhead_s)

    def attention_s(self, kv_read_tokens: float, attention_pairs: float, layers: int | None = None,
                    prefill_pairs: float = 0.0) -> float:
        """One attention kernel's work over a whole context, per layer, times `layers` (all by default)."""
        n = self.geometry.layers if layers is None else layers
        return n * self._attention(kv_read_tokens, attention_pairs, prefill_pairs)[0]

    def prefill_form_coeffs(self) -> tuple[float, float]:
        """(seconds per key token read, seconds per (row, key token) pair) of attention in the prefill form on
        one GPU, one layer: what `cost.holder_prefill_s` charges a routed query block of T > 1 tokens."""
        return self._attn_s_per_kv_token, self._prefill_s_per_row_key

    def holder_partial_s(self, queries: float, rows_per_query: float | Sequence[float],
                         key_tokens: float | Sequence[float], *, dense: bool = True) -> float:
        """One holder kernel call answering `queries` routed partial-attention queries (one layer): each of
        `rows_per_query` rows (the query heads x its tokens) over its `key_tokens` keys (scalars, or one value
        per query). The roofline over the batch's total keys and its FLOPs, floored by the profile's measured
        holder curve at the batch's reference-requester work per GPU (the query heads split over the TP
        ranks), so that an idle holder reproduces the measurement. A query of T > 1 tokens (a first pass's
        prefill chunk) is a prefill block: its FLOPs in the prefill form (`cost.holder_prefill_s`), and it
        counts toward the curve's work as one token's rows, as the closed form's `holder_compute_s` charges it.
        `dense=False` (a sparse selection's queries: each token gathers its own top-k) keeps every row on the
        curve, as at decode."""
        heads = self._heads_q if dense else float("inf")
        if isinstance(rows_per_query, (int, float)) and isinstance(key_tokens, (int, float)):
            keys = queries * key_tokens
            if rows_per_query > heads:
                pairs, block_pairs, floor_pairs = 0.0, keys * rows_per_query, keys * heads
            else:
                pairs, block_pairs = keys * rows_per_query, 0.0
                floor_pairs = pairs
        else:
            rows = [rows_per_query] * int(queries) if isinstance(rows_per_query, (int, float)) else rows_per_query
            toks = [key_tokens] * len(rows) if isinstance(key_tokens, (int, float)) else key_tokens
            keys, pairs, block_pairs, floor_pairs = float(sum(toks)), 0.0, 0.0, 0.0
            for r, t in zip(rows, toks):
                if r > heads:
                    block_pairs += r * t
                    floor_pairs += heads * t
                else:
                    pairs += r * t
                    floor_pairs += r * t
        # one kernel over every query's keys; decode rows in the absorbed form, blocks in the prefill form (the
        # batch form of `cost.holder_prefill_s`, same coefficients: `prefill_form_coeffs`)
        roof = max(keys * self._attn_s_per_kv_token,
                   pairs * self._holder_s_per_pair + block_pairs / self.tp * self._prefill_s_per_row_key)
        if self.holder_curve is None:
            return roof
        # pairs = rows x keys; each GPU of the TP group computes its heads' share (the curve is one GPU's)
        work = holder_work(floor_pairs / self.tp, 1.0, self.geometry.token_fraction, *self.holder_ref)
        return max(roof, holder_curve_s(work, self.holder_curve[0], self.holder_curve[1]))
