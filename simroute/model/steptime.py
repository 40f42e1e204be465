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

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence, Union

from simroute.model.cost import HOLDER_CT_REF, HOLDER_HEADS_REF, holder_curve_s, holder_work
from simroute.model.curves import interp_clamped
from simroute.model.geometry import WEIGHT_BYTES, LinearOp, ModelGeometry
from simroute.model.optables import Lookup, OperatorTables

Curve = tuple[tuple[float, ...], tuple[float, ...]]
Efficiency = Union[float, Curve]

MEMORY, COMPUTE = "memory", "compute"
LATENCY, BANDWIDTH, NONE = "latency", "bandwidth", "none"
ALLREDUCES_PER_LAYER = 2          # after attention's output projection and after the FFN / MoE
# Memory-bound kernels of every layer that the GEMM, MoE and attention tables do not time (the attention tables
# time the backend's call, its KV-cache store included; the MoE table SGLang's whole fused_moe, its activation
# included): listed once by `elementwise_kernels`, read from an `elementwise` operator table where one has the
# kernel, else each bytes / achievable HBM bandwidth plus the GPU's per-kernel floor.
NORMS_PER_LAYER = 2               # the input and post-attention norms
NORM_ACCESSES = 4                 # fused add + RMSNorm: hidden state and residual in, both out
ACTIVATION_ACCESSES = 3           # silu(gate) x up: gate and up in, the product out
# Where an MLA latent lives under tensor parallelism (docs/STEP_TIME.md, "MLA KV under TP"): `replicated`, the
# serving engines' TP attention (SGLang's and vLLM's default: every rank holds the whole latent and attends its
# own heads), or `tpla`, the layout of "Move the Query, Not the Cache" §8 (the latent column-partitioned over
# the ranks, each attending every head over its 1/N slice). GQA models split their KV heads either way.
KV_LAYOUTS = ("replicated", "tpla")
# DeepSeek Sparse Attention's lightning indexer (docs/STEP_TIME.md, "Sparse attention"): each query token scores its
# whole context in FP8 (2 x index heads x index dim FLOPs per key), writes one fp32 logit per key and a top-k kernel
# reads them back; the top-k of one sequence is one row scanned by one thread block (SGLang's fast_topk), so a decode
# batch waits for its longest row. Tokens one row scans per second: fitted to aiconfigurator-core 0.12.0's measured
# DeepSeek-V3.2 attention module on H200 under SGLang 0.5.14 (sparse_attention/sglang/0.5.14/
# dsa_generation_module_perf, 16 heads per rank, bf16 KV, batch 1): the module grows 71.7 us per layer from 2,048 to
# 131,072 tokens of context (77.1 -> 148.8 us; past 2,048 only the indexer grows), of which the roofline explains
# 2.0 us (its key and logit bytes at 131,072 tokens, 9.3 us, less its three-launch floor at 2,048, 7.2 us): the
# rest, 69.7 us, is the top-k row over 129,024 more tokens. Checked on the rows it was not fitted to (batches 2 to
# 16: tests/model/test_sparse_attention.py, docs/STEP_TIME.md).
INDEXER_LOGIT_BYTES = 8.0                  # one fp32 logit written and read back per (query, key) pair
INDEXER_ROW_TOKENS_PER_S = 1.85e9


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
    kernel_floor_s: float = 0.0                         # the least time any kernel launch takes (roofline floor)
    allreduce_bus_Bps: float | None = None              # the board's all-reduce bus bandwidth (NVSwitch), if any
    allreduce_latency_s: float | None = None            # and its latency per all-reduce
    operator_tables: OperatorTables | None = field(default=None, compare=False, hash=False, repr=False)
    nvlink_domain_gpus: int | None = None               # GPUs one NVLink domain connects (HGX 8, NVL72 72)
    nvlink_Bps: float | None = None                     # NVLink bandwidth of one GPU, one direction

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
    decode_sequences: float | None = None     # None: every sequence but one prefill chunk (if any) decodes

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
                   attention_pairs=float(decode_seqs * context + pre_pairs), prefill_pairs=float(pre_pairs),
                   decode_sequences=float(decode_seqs))


@dataclass(frozen=True)
class HostCosts:
    """The serving framework's CPU side of one iteration (docs/ENGINES.md), which the kernel tables do not time.

    The CPU schedules an iteration, prepares its inputs and processes its outputs (`host_s_per_sequence` per
    running sequence), and launches its kernels: one CUDA-graph replay for a decode-only batch of at most
    `graph_max_batch` sequences (captured at start-up; 0 = none), else every layer's kernels one by one
    (`launch_s_per_layer`), and the GPU cannot finish before the last launch. With `overlap` (SGLang's overlap
    scheduler, vLLM's async scheduling, TensorRT-LLM's overlap scheduler) the host work of iteration n + 1 runs
    while the GPU runs iteration n: an iteration takes max(kernels, host + launch); without it the host work
    comes after the kernels: host + max(kernels, launch). A TP instance and a DP-attention / expert-parallel
    group's step are charged by the same formula (`step_s`, over the ranks that launch the step)."""

    overlap: bool
    host_s_per_sequence: float
    launch_s_per_layer: float
    graph_max_batch: int
    prefill_graph_max_tokens: int = 0   # prefill batches of at most this many tokens replay piecewise graphs

    def graphed(self, decode_only: bool, sequences: float, new_tokens: float = 0.0) -> bool:
        """Whether a batch replays captured CUDA graphs: decode-only and within the captured batch sizes, or a
        prefill batch within the piecewise graphs' captured token counts (SGLang's prefill CUDA graphs; 0: none)."""
        if decode_only:
            return sequences <= self.graph_max_batch
        return new_tokens <= self.prefill_graph_max_tokens

    def period_s(self, kernels_s: float, sequences: float, layers: int, graphed: bool) -> float:
        """One iteration's time from its kernels' time (see the class)."""
        host = self.host_s_per_sequence * sequences
        launch = 0.0 if graphed else self.launch_s_per_layer * layers
        if self.overlap:
            cpu = host + launch
            return kernels_s if kernels_s >= cpu else cpu
        return host + (kernels_s if kernels_s >= launch else launch)

    def lockstep(self, ranks: Iterable[tuple[float, float, float]]) -> tuple[float, bool]:
        """(sequences, graphed) of a step that `ranks` launch together, each rank's batch given as (new tokens,
        sequences, decode-form sequences): a TP instance is one rank; a DP-attention / expert-parallel group's
        ranks each run their own scheduler over their own batch. Every rank's CPU works beside the others', so the
        step waits for the rank with the most sequences; the step replays its CUDA graph only when every rank's
        batch is within the captured ones (SGLang gathers `can_cuda_graph` over the DP ranks and takes the min:
        managers/scheduler.py `prepare_mlp_sync_batch`, sglang 0.5.x), else every rank launches eagerly. An idle
        rank (an empty batch) is graphed and has no sequences."""
        most = 0.0
        graphed = True
        for new_tokens, sequences, decodes in ranks:
            if sequences > most:
                most = sequences
            if graphed and not self.graphed(new_tokens <= decodes, sequences, new_tokens):
                graphed = False
        return most, graphed

    def step_s(self, kernels_s: float, layers: int, ranks: Iterable[tuple[float, float, float]]) -> float:
        """The step's time from its kernels' for the ranks that launch it (`lockstep`): the one formula a TP
        instance and a DP / EP group both charge (`period_s`)."""
        sequences, graphed = self.lockstep(ranks)
        return self.period_s(kernels_s, sequences, layers, graphed)

    def source(self, ranks: Iterable[tuple[float, float, float]]) -> str:
        """What the step's overhead term rests on, in words (a step's `sources["overhead"]`)."""
        graphed = self.lockstep(ranks)[1]
        return (f"engine preset: {'CUDA graph' if graphed else 'eager launches'}, "
                f"{'overlapped' if self.overlap else 'serial'} host work")


@dataclass(frozen=True)
class StepTerms:
    """One iteration's time, term by term (seconds). iteration_s = layers x (linear + attention + indexer +
    allreduce + elementwise) per layer + lm_head_s + overhead_s. bounds: term -> "memory" / "compute" (all-reduce:
    "latency" / "bandwidth" / "none"; a term read from a table: "measured"). sources / lookups: which operator
    table each term read (or "roofline") and whether at a grid point, between, or past the grid."""

    iteration_s: float
    linear_s_per_layer: float
    attention_s_per_layer: float
    allreduce_s_per_layer: float
    overhead_s: float
    lm_head_s: float
    layers: int
    bounds: dict[str, str]
    elementwise_s_per_layer: float = 0.0
    indexer_s_per_layer: float = 0.0                           # DSA's lightning indexer (0 for a dense model)
    sources: dict[str, str] = field(default_factory=dict)      # term -> the table it read, or "roofline"
    lookups: dict[str, str] = field(default_factory=dict)      # term -> measured / interpolated / extrapolated / roofline
    # each elementwise kernel: role, kernel, width, layers, ms over those layers, lookup and table (or roofline)
    elementwise_kernels: tuple[dict[str, object], ...] = ()

    def as_ms(self) -> dict[str, object]:
        """The CLI's view: every term in ms, plus the bounds and each term's source."""
        return {"iteration_ms": self.iteration_s * 1e3, "linear_ms_per_layer": self.linear_s_per_layer * 1e3,
                "attention_ms_per_layer": self.attention_s_per_layer * 1e3,
                "allreduce_ms_per_layer": self.allreduce_s_per_layer * 1e3,
                "elementwise_ms_per_layer": self.elementwise_s_per_layer * 1e3,
                "indexer_ms_per_layer": self.indexer_s_per_layer * 1e3, "lm_head_ms": self.lm_head_s * 1e3,
                "overhead_ms": self.overhead_s * 1e3, "layers": self.layers, "bounds": dict(self.bounds),
                "term_sources": dict(self.sources), "term_lookups": dict(self.lookups),
                "elementwise_kernels": [dict(kernel) for kernel in self.elementwise_kernels]}


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
    return float(sum(2 * gemm.k * gemm.n * gemm.active for gemm in ops if gemm.fp8 == fp8))


def _fold(ops: Sequence[LinearOp], count: int) -> _LayerKind:
    dense = [gemm for gemm in ops if gemm.experts == 1]
    routed = [gemm for gemm in ops if gemm.experts > 1]
    return _LayerKind(
        count=count,
        dense_weight_bytes=float(sum(gemm.weight_bytes for gemm in dense)),
        expert_weight_bytes=float(sum(gemm.weight_bytes for gemm in routed)),
        experts=routed[0].experts if routed else 0,
        experts_per_token=routed[0].active if routed else 0,
        flops_per_token=_flops(dense, False), fp8_flops_per_token=_flops(dense, True),
        expert_flops_per_token=_flops(routed, False), expert_fp8_flops_per_token=_flops(routed, True),
        act_bytes_per_token=float(sum((gemm.k + gemm.n) * gemm.active * WEIGHT_BYTES
                                      for gemm in ops)))


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


@dataclass(frozen=True)
class ElementwiseKernel:
    """One memory-bound kernel launch of a layer: the elementwise table's `kernel` and `width` columns it is read
    at, what it does in the layer, and the elements per token it reads and writes (the roofline's bytes / 2)."""

    kernel: str                 # add_rmsnorm | rmsnorm | rope | silu_mul (optables.ELEMENTWISE_KERNEL_NAMES)
    role: str                   # its place in the layer (outputs name it)
    width: int                  # elements per token of the row it works on, on one rank
    elements_per_token: int     # elements read + written per token
    in_fused_moe: bool = False  # the routed experts' activation: part of a measured fused-MoE kernel


def elementwise_kernels(geometry: ModelGeometry, tp_size: int, layer_kind: str) -> tuple[ElementwiseKernel, ...]:
    """The memory-bound kernels one layer of `layer_kind` launches on one rank, one launch each: the one list the
    roofline and the elementwise table both read. Two fused add + RMSNorms (hidden state and residual in and
    out), RoPE on the rank's query and key heads (in place), MLA's q_a / kv_a RMSNorms (one launch: SGLang runs
    the pair on two streams; read at their summed width), and the gated activation of the dense FFN, of the
    shared experts and of the routed experts (the last inside a measured fused-MoE kernel)."""
    model = geometry
    rotated = (-(-model.heads_q // tp_size) + model.kv_heads_per_gpu(tp_size)) * model.rope_dims
    kernels = [ElementwiseKernel("add_rmsnorm", role, model.hidden, NORM_ACCESSES * model.hidden)
               for role in ("input norm", "post-attention norm")[:NORMS_PER_LAYER]]
    kernels.append(ElementwiseKernel("rope", "rope (q and k heads)", rotated, 2 * rotated))
    if model.is_mla:
        latent = model.q_lora_rank + model.d_v
        kernels.append(ElementwiseKernel("rmsnorm", "mla latent norms (q_a, kv_a)", latent, 2 * latent))
    if layer_kind == "dense":
        activations = (("ffn activation", model.intermediate, False),)
    else:
        activations = (("shared experts activation", model.shared_experts * model.expert_intermediate, False),
                       ("routed experts activation", model.experts_per_token * model.expert_intermediate, True))
    for role, width, fused in activations:
        if width > 0:
            per_rank = -(-width // tp_size)
            kernels.append(ElementwiseKernel("silu_mul", role, per_rank, ACTIVATION_ACCESSES * per_rank, fused))
    return tuple(kernels)


@dataclass(frozen=True)
class IndexerCost:
    """One layer of DSA's lightning indexer on one GPU (replicated on every TP rank: each rank selects for its own
    heads), on the roofline: its projections (wq_b, wk: FP8; weights_proj: bf16) over the iteration's tokens, the
    FP8 scores of every (query, key) pair against the cached index keys, the fp32 logits written and read back, and
    the top-k's longest row (`INDEXER_ROW_TOKENS_PER_S`)."""

    weight_bytes: float            # the projections' weights of one layer
    proj_s_per_token: float        # their FLOPs per token at the GPU's rate
    key_bytes: float               # one cached index key (FP8 + its scales)
    score_s_per_pair: float        # 2 x heads x dim FLOPs at the FP8 rate (bf16 where the GPU has none)
    inv_bw: float
    floor_s: float

    @classmethod
    def of(cls, geometry: ModelGeometry, gpu: GpuSpec, peak_fp8: float) -> "IndexerCost":
        ops = geometry.indexer_ops()
        rate = gpu.attention_efficiency
        proj = sum(2.0 * gemm.k * gemm.n / ((peak_fp8 if gemm.fp8 else gpu.peak_flops) * rate) for gemm in ops)
        return cls(weight_bytes=float(sum(gemm.weight_bytes for gemm in ops)), proj_s_per_token=proj,
                   key_bytes=float(geometry.index_key_bytes),
                   score_s_per_pair=2.0 * geometry.index_n_heads * geometry.index_head_dim / (peak_fp8 * rate),
                   inv_bw=1.0 / gpu.achievable_hbm_Bps, floor_s=gpu.kernel_floor_s)

    def seconds(self, new_tokens: float, decode_seqs: float, decode_kv: float, prefill_pairs: float,
                prefill_kv: float) -> float:
        """One layer: decode tokens score their whole context (decode_kv keys in all), prefill tokens their causal
        pairs; the batch waits for its longest top-k row (a decode sequence's mean context)."""
        if new_tokens <= 0:
            return 0.0
        pairs = decode_kv + prefill_pairs
        mem = (self.weight_bytes + (decode_kv + prefill_kv) * self.key_bytes
               + pairs * INDEXER_LOGIT_BYTES) * self.inv_bw
        comp = new_tokens * self.proj_s_per_token + pairs * self.score_s_per_pair
        roof = mem if mem >= comp else comp
        if roof < 3.0 * self.floor_s:                   # three launches: projections, scores, top-k
            roof = 3.0 * self.floor_s
        return roof + (decode_kv / decode_seqs / INDEXER_ROW_TOKENS_PER_S if decode_seqs > 0 else 0.0)


def selected_pairs(pairs_per_seq: float, topk: float) -> float:
    """Causal (query, key) pairs of one sequence's prefill whose pairs are `pairs_per_seq` (the length s with
    s (s + 1) / 2 = pairs) when each query token attends at most `topk` keys: the first topk tokens attend all
    before them, the rest topk each."""
    length = (math.sqrt(8.0 * pairs_per_seq + 1.0) - 1.0) / 2.0
    if length <= topk:
        return pairs_per_seq
    return topk * (topk + 1) / 2.0 + (length - topk) * topk


class StepTimeModel:
    """The step time of one instance (a TP group of `tp` GPUs of `gpu` serving `geometry`).

    allreduce_Bps / allreduce_latency_s: the instance's intra-host fabric (bulk rate and per-hop latency) that
    the ring all-reduce runs over. holder_curve: the profile's measured holder-compute curve ((N, seconds) at
    holder_ref = (heads, ct) reference requesters), the floor of `holder_partial_s`. cuda_graphs: charge the
    GPU's `iteration_overhead_graph_s` when it has one (iterations replayed as CUDA graphs). host: a serving
    framework's CPU side (`HostCosts`, an engine preset's): charged in place of the GPU entry's constant
    `iteration_overhead_us`, and only decode-only batches within its captured sizes read the measured CUDA-graph
    all-reduce rows (without it, every decode-only batch does). FP8 weights
    (`geometry.weight_dtype`) halve the linear ops' weight bytes; their FLOPs run at the GPU's FP8 peak, or at
    its bf16 peak where it has none (`fp8_rate` says which, `notes` says so). Extend by adding terms to
    `iteration` and `iteration_s` together (a test checks they agree).
    """

    def __init__(self, geometry: ModelGeometry, gpu: GpuSpec, tp_size: int = 1, *,
                 allreduce_Bps: float = float("inf"),
                 allreduce_latency_s: float = 0.0, holder_curve: Curve | None = None,
                 holder_ref: tuple[int, int] = (HOLDER_HEADS_REF, HOLDER_CT_REF), cuda_graphs: bool = False,
                 kv_layout: str = "replicated", host: HostCosts | None = None) -> None:
        if tp_size < 1:
            raise ValueError(f"tp must be >= 1, got {tp_size}")
        if kv_layout not in KV_LAYOUTS:
            raise ValueError(f"kv_layout must be one of {', '.join(KV_LAYOUTS)}, got {kv_layout!r}")
        self.geometry, self.gpu, self.tp = geometry, gpu, tp_size
        self.kv_layout = kv_layout
        # ranks an MLA latent is split over (1: every rank holds all of it)
        self.kv_shards = tp_size if (geometry.is_mla and kv_layout == "tpla") else 1
        self.allreduce_Bps, self.allreduce_latency_s = allreduce_Bps, allreduce_latency_s
        graph_s = gpu.iteration_overhead_graph_s
        self._layers = geometry.layers
        self._overhead_s = graph_s if (cuda_graphs and graph_s is not None) else gpu.iteration_overhead_s
        self.host = host
        if host is not None:        # the framework's CPU side replaces the GPU entry's constant overhead
            self._overhead_s = 0.0
        self.holder_curve, self.holder_ref = holder_curve, holder_ref
        self._partial_cache: dict[tuple, float] = {}    # holder_partial_s of scalar queries, per exact shape
        self._kinds = tuple(_fold(geometry.linear_ops(tp_size, kind), layer_count)
                            for kind, layer_count in geometry.layer_kinds().items() if layer_count > 0)
        head = geometry.lm_head_op(tp_size)
        self._head_bytes, self._head_flops = float(head.weight_bytes), 2.0 * head.k * head.n
        self._kind_rows = tuple((folded.count, folded.dense_weight_bytes, folded.expert_weight_bytes,
                                 folded.experts,
                                 folded.experts_per_token, folded.flops_per_token, folded.fp8_flops_per_token,
                                 folded.expert_flops_per_token, folded.expert_fp8_flops_per_token,
                                 folded.act_bytes_per_token)
                                for folded in self._kinds)
        self._head_act_bytes = -(-geometry.vocab // tp_size) * WEIGHT_BYTES       # the logits written per sequence
        # the hot path's constants, folded once
        self._peak, self._bw = gpu.peak_flops, gpu.achievable_hbm_Bps
        uses_fp8 = any(folded.fp8_flops_per_token or folded.expert_fp8_flops_per_token for folded in self._kinds)
        self.fp8_rate = uses_fp8 and gpu.has_fp8
        self._peak_fp8 = gpu.peak_fp8_flops if self.fp8_rate else gpu.peak_flops
        self.notes: tuple[str, ...] = () if not uses_fp8 or gpu.has_fp8 else (
            f"{gpu.name} has no FP8 tensor-core rate: the FP8 weights are read as FP8 (half the bytes) and their "
            "GEMMs run at the bf16 rate (weight-only FP8, dequantised in the kernel)",)
        self._inv_bw = 1.0 / self._bw
        self._attn_rate = gpu.peak_flops * gpu.attention_efficiency
        # the attention kernel reads the latent (or K/V); a sparse model's index keys are the indexer's to read
        self._kv_bytes_token_layer = ((geometry.b_kv_per_gpu(tp_size) - geometry.index_key_bytes)
                                      * geometry.token_fraction / self.kv_shards)
        heads_per_gpu = -(-geometry.heads_q // tp_size)
        self._attn_flops_pair_layer = 2.0 * heads_per_gpu * (geometry.d_qk + geometry.d_v) * geometry.token_fraction
        expanded = ((geometry.qk_nope_head_dim + geometry.rope_dims + geometry.v_head_dim) if geometry.is_mla
                    else (geometry.d_qk + geometry.d_v))
        self._prefill_s_per_row_key = 2.0 * expanded * geometry.token_fraction / self._attn_rate   # one head's row
        self._attn_s_per_kv_token = self._kv_bytes_token_layer / self._bw
        self._attn_s_per_pair = self._attn_flops_pair_layer / self._attn_rate
        self._prefill_s_per_pair = heads_per_gpu * self._prefill_s_per_row_key
        self._heads_q = geometry.heads_q
        # a routed row is one query head of one token, split over the holder's TP ranks
        self._holder_s_per_pair = (2.0 * (geometry.d_qk + geometry.d_v) * geometry.token_fraction / tp_size
                                   / self._attn_rate)
        self._indexer = (IndexerCost.of(geometry, gpu, gpu.peak_fp8_flops if gpu.has_fp8 else gpu.peak_flops)
                         if geometry.has_indexer else None)
        self._topk = float(geometry.index_topk) if geometry.has_indexer else 0.0
        ring_steps = 2.0 * (tp_size - 1)
        if gpu.allreduce_bus_Bps is not None:
            # a switched board (NVSwitch): one latency per all-reduce, 2 (tp - 1) / tp of the message over the bus
            self._ar_latency_s = ALLREDUCES_PER_LAYER * (gpu.allreduce_latency_s or 0.0)
            self._ar_s_per_token = (ALLREDUCES_PER_LAYER * ring_steps / tp_size * geometry.hidden * WEIGHT_BYTES
                                    / gpu.allreduce_bus_Bps)
        else:
            self._ar_latency_s = ALLREDUCES_PER_LAYER * ring_steps * allreduce_latency_s
            self._ar_s_per_token = (ALLREDUCES_PER_LAYER * ring_steps / tp_size * geometry.hidden * WEIGHT_BYTES
                                    / allreduce_Bps)
        # the kernel floor: no launch takes less than the GPU's floor, so a layer of n kernels no less than n floors
        self._floor_s = gpu.kernel_floor_s
        self._kernels_per_kind = tuple(len(geometry.linear_ops(tp_size, kind))
                                       for kind, layer_count in geometry.layer_kinds().items() if layer_count > 0)
        # the elementwise kernels (`elementwise_kernels`) of every layer kind, and their roofline summed over the
        # layers as (seconds per token, launch floors): with the routed experts' activation (the roofline's MoE)
        # and without it (a measured fused-MoE kernel holds it)
        self.elementwise_layers = tuple((count, elementwise_kernels(geometry, tp_size, kind))
                                        for kind, count in geometry.layer_kinds().items() if count > 0)
        roof, tabled = [0.0, 0.0], [0.0, 0.0]
        for count, kernels in self.elementwise_layers:
            for slot, chosen in ((roof, kernels), (tabled, [kern for kern in kernels if not kern.in_fused_moe])):
                slot[0] += count * sum(kern.elements_per_token for kern in chosen) * WEIGHT_BYTES * self._inv_bw
                slot[1] += count * len(chosen) * self._floor_s
        self._elementwise_s_per_token, self._elementwise_floor_s = roof
        self._elementwise_tabled = tuple(tabled)
        self._measured = None
        self._token_cache: dict[tuple[float, float, float], tuple[float, float, float]] = {}
        if gpu.operator_tables is not None:
            from simroute.model.opstep import MeasuredStep

            self._measured = MeasuredStep(
                geometry, tp_size, gpu.operator_tables, cuda_graphs=cuda_graphs, kv_shards=self.kv_shards,
                graph_max_batch=host.graph_max_batch if host is not None else None,
                kernel_floor_s=gpu.kernel_floor_s, elementwise_layers=self.elementwise_layers,
                # the attention kernel's KV bytes (a sparse model's index keys are the indexer's read)
                decode_floor_s_per_kv_token=((geometry.b_kv_per_gpu(tp_size) - geometry.index_key_bytes)
                                             * geometry.token_fraction / gpu.hbm_Bps),
                roofline_elementwise=self.elementwise_kernel_s,
                roofline_linear=lambda tokens: self._linear(tokens)[0],
                roofline_attention=lambda kv_tokens, pairs, pre: self._attention(kv_tokens, pairs, pre)[0],
                roofline_allreduce=lambda tokens: self._allreduce(tokens)[0],
                roofline_lm_head=lambda seqs: self._lm_head(seqs)[0])
            self.notes = self.notes + tuple(self._measured.notes)

    @property
    def measured(self):
        """The table-driven terms (simroute.model.opstep.MeasuredStep), or None on the roofline alone."""
        return self._measured

    @property
    def gpu_overhead_s(self) -> float:
        """The per-iteration overhead this instance charges (the CUDA-graph figure when it runs graphs)."""
        return self._overhead_s

    def attention_layer_s(self, batch: BatchShape) -> float:
        """One layer's attention kernel for `batch`: `iteration(batch).attention_s_per_layer` without the lookups
        (a composition's hot path, simroute.model.dpstep)."""
        if self._measured is not None:
            decode_seqs, decode_kv, prefill_seqs, prefill_kv, prefill_pairs = self._split(
                batch.new_tokens, batch.sequences, batch.kv_read_tokens, batch.attention_pairs, batch.prefill_pairs,
                batch.decode_sequences)
            return self._measured.attention_s(decode_seqs, decode_kv, prefill_seqs, prefill_pairs, prefill_kv)
        return self._attention(batch.kv_read_tokens, batch.attention_pairs, batch.prefill_pairs)[0]

    def allreduce_and_head_s(self, batch: BatchShape) -> tuple[float, float]:
        """(one layer's all-reduces, the LM head) for `batch`, as `iteration` charges them, without the lookups."""
        if self._measured is not None:
            decode_seqs = self._split(batch.new_tokens, batch.sequences, batch.kv_read_tokens, batch.attention_pairs,
                                      batch.prefill_pairs, batch.decode_sequences)[0]
            _linear, allreduce, head = self._token_terms(batch.new_tokens, batch.sequences, decode_seqs)
            return allreduce, head
        return self._allreduce(batch.new_tokens)[0], self._lm_head(batch.sequences)[0]

    # ---- sizes ------------------------------------------------------------------------------------------
    @property
    def weight_bytes_per_gpu(self) -> float:
        """All weights one GPU of the TP group holds: every layer (all experts), embedding and LM head."""
        geometry = self.geometry
        layers = sum(folded.count * (folded.dense_weight_bytes + folded.experts * folded.expert_weight_bytes)
                     for folded in self._kinds)
        if self._indexer is not None:                    # the indexer's projections, replicated on every rank
            layers += geometry.layers * self._indexer.weight_bytes
        return layers + self._head_bytes + -(-geometry.vocab // self.tp) * geometry.hidden * WEIGHT_BYTES

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """Cached bytes one token costs on one GPU, over all layers (`geometry.kv_bytes_per_token` on the
        rank's share of the cached heads; of an MLA latent, all of it, or 1/tp under the `tpla` layout)."""
        geometry = self.geometry
        return geometry.kv_bytes_per_token * geometry.kv_heads_per_gpu(self.tp) / geometry.kv_heads / self.kv_shards

    def fanout_s(self, copy_bytes: float) -> float:
        """Time to spread a fetched MLA copy over the host under the `replicated` layout: each rank pulled 1/tp
        of it over its own NIC, and every rank must hold all of it, so the host all-gathers: each GPU receives
        (tp - 1) / tp of the copy over NVLink (the board's all-reduce bus rate, else the intra-host fabric's),
        one latency. 0 where nothing fans out (tp 1, tpla, GQA: a rank's KV heads are its own)."""
        if self.tp == 1 or not self.geometry.is_mla or self.kv_shards > 1 or copy_bytes <= 0:
            return 0.0
        gpu = self.gpu
        rate = gpu.allreduce_bus_Bps if gpu.allreduce_bus_Bps is not None else self.allreduce_Bps
        latency = gpu.allreduce_latency_s if gpu.allreduce_latency_s is not None else self.allreduce_latency_s
        return latency + (self.tp - 1) / self.tp * copy_bytes / rate

    def fanout_bytes(self, copy_bytes: float) -> float:
        """NVLink bytes of that all-gather, over the whole host: tp ranks x (tp - 1) / tp of the copy."""
        return (self.tp - 1) * copy_bytes if self.fanout_s(copy_bytes) > 0 else 0.0

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
        floor = self._floor_s
        for (count, dense_bytes, expert_bytes, experts, per_token, flops_token, fp8_flops_token, expert_flops,
             expert_fp8_flops, act_token), kernels in zip(self._kind_rows, self._kernels_per_kind):
            comp = tokens * (flops_token / rate + fp8_flops_token / rate_fp8)
            if experts:
                touched, per_expert = expert_load(experts, per_token, tokens)
                weights = dense_bytes + touched * expert_bytes
                if per_expert > 0:
                    comp += tokens * (expert_flops / peak + expert_fp8_flops / peak_fp8) / gemm_fraction(per_expert)
            else:
                weights = dense_bytes
            mem = (weights + tokens * act_token) * inv_bw
            if floor and mem < kernels * floor > comp:      # launch-bound: every kernel at its floor
                mem = kernels * floor
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
        if kv_read_tokens > 0 and mem < self._floor_s > comp:
            mem = self._floor_s
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
        mem = max((self._head_bytes + sequences * self._head_act_bytes) * self._inv_bw, self._floor_s)
        comp = sequences * self._head_flops / (self._peak * self.gpu.gemm_fraction(sequences))
        return (mem, MEMORY) if mem >= comp else (comp, COMPUTE)

    def _elementwise(self, tokens: float) -> float:
        """The memory-bound per-layer kernels (norms, RoPE, activations), over every layer: the elementwise table's
        where the GPU has one, else the roofline (without the routed experts' activation when a measured
        fused-MoE kernel holds it)."""
        if tokens <= 0:
            return 0.0
        measured = self._measured
        if measured is not None:
            if measured.elementwise_tabled:
                return measured.elementwise_s(tokens)
            if measured.linear_measured:
                per_token, floor = self._elementwise_tabled
                return tokens * per_token + floor
        return tokens * self._elementwise_s_per_token + self._elementwise_floor_s

    def elementwise_kernel_s(self, kernel: ElementwiseKernel, tokens: float) -> float:
        """One launch of `kernel` over `tokens` tokens on the roofline: its bytes at the achievable HBM rate plus
        one kernel floor (the per-kernel fallback of the elementwise table)."""
        if tokens <= 0:
            return 0.0
        return tokens * kernel.elements_per_token * WEIGHT_BYTES * self._inv_bw + self._floor_s

    def elementwise_breakdown(self, tokens: float) -> tuple[dict[str, object], ...]:
        """Each elementwise kernel of each layer kind at `tokens` tokens: its role, kernel and width, the layers
        launching it, its ms over those layers, and what it rests on (the table and lookup, or the roofline).
        Off the hot path (`model step`)."""
        measured = self._measured
        if measured is not None:
            return measured.elementwise_breakdown(tokens)
        return tuple({"role": kern.role, "kernel": kern.kernel, "width": kern.width, "layers": count,
                      "ms": count * self.elementwise_kernel_s(kern, tokens) * 1e3,
                      "lookup": Lookup.ROOFLINE.value, "table": "roofline"}
                     for count, kernels in self.elementwise_layers for kern in kernels)

    def _split(self, new_tokens: float, sequences: float, kv_read_tokens: float, attention_pairs: float,
               prefill_pairs: float, decode_sequences: float | None) -> tuple[float, float, float, float, float]:
        """(decode sequences, their KV tokens, prefill sequences, prefill KV tokens, prefill pairs) of a batch:
        a decode sequence's pairs are its context, so the decode KV is the pairs outside prefill chunks."""
        prefill_seqs = 1.0 if prefill_pairs > 0 else 0.0
        decode_seqs = sequences - prefill_seqs if decode_sequences is None else decode_sequences
        prefill_seqs = max(sequences - decode_seqs, 0.0)
        decode_kv = max(attention_pairs - prefill_pairs, 0.0)
        return decode_seqs, decode_kv, prefill_seqs, max(kv_read_tokens - decode_kv, 0.0), prefill_pairs

    def _select(self, new_tokens: float, decode_seqs: float, decode_kv: float, prefill_seqs: float,
                prefill_kv: float, prefill_pairs: float) -> tuple[float, float, float]:
        """A sparse model's top-k (DSA): (the decode KV its attention reads, the prefill pairs it attends, the
        indexer's seconds per layer). A decode sequence attends min(context, k) keys; a prefill token at most k;
        the indexer scores every key either way (docs/STEP_TIME.md, "Sparse attention")."""
        topk, indexer = self._topk, self._indexer
        selected_kv = decode_seqs * min(decode_kv / decode_seqs, topk) if decode_seqs > 0 else 0.0
        selected = (prefill_seqs * selected_pairs(prefill_pairs / prefill_seqs, topk)
                    if prefill_seqs > 0 and prefill_pairs > 0 else prefill_pairs)
        return selected_kv, selected, indexer.seconds(new_tokens, decode_seqs, decode_kv, prefill_pairs, prefill_kv)

    def _token_terms(self, new_tokens: float, sequences: float, decode_seqs: float) -> tuple[float, float, float]:
        """The measured model's token-dependent terms, cached per (tokens, sequences, decodes): iterations of a
        run repeat these counts, while their contexts (the attention term) differ."""
        key = (new_tokens, sequences, decode_seqs)
        hit = self._token_cache.get(key)
        if hit is None:
            if len(self._token_cache) > 65536:
                self._token_cache.clear()
            hit = self._token_cache[key] = self._measured.token_terms_s(new_tokens, sequences, decode_seqs)
        return hit

    def iteration(self, batch: BatchShape) -> StepTerms:
        """One iteration's terms, the bound each hit and the table each read."""
        layers = self.geometry.layers
        elementwise = self._elementwise(batch.new_tokens)
        if self._measured is not None:
            decode_seqs, decode_kv, prefill_seqs, prefill_kv, prefill_pairs = self._split(
                batch.new_tokens, batch.sequences, batch.kv_read_tokens, batch.attention_pairs, batch.prefill_pairs,
                batch.decode_sequences)
            lin, allreduce, head = self._token_terms(batch.new_tokens, batch.sequences, decode_seqs)
            indexer = 0.0
            if self._indexer is not None:
                decode_kv, prefill_pairs, indexer = self._select(batch.new_tokens, decode_seqs, decode_kv,
                                                                 prefill_seqs, prefill_kv, prefill_pairs)
            attn = self._measured.attention_s(decode_seqs, decode_kv, prefill_seqs, prefill_pairs, prefill_kv)
            kernels = lin + elementwise + layers * (attn + indexer + allreduce) + head
            total = self._period(kernels, batch.new_tokens, batch.sequences, decode_seqs)
            overhead = self._overhead_s if self.host is None else total - kernels
            src = self._measured.sources
            attention_src = [src[term] for term, present in (("attention_decode", decode_seqs > 0),
                                                             ("attention_prefill", prefill_pairs > 0)) if present]
            sources = {name: src[name].table for name in ("linear", "allreduce", "lm_head")}
            sources["attention"] = "; ".join(source.table for source in attention_src) or "none"
            lookups = {name: how.value for name, how in self._measured.shape_lookups(
                batch.new_tokens, batch.sequences, decode_seqs, decode_kv, prefill_seqs, prefill_pairs).items()}
            sources["elementwise"] = src["elementwise"].table
            sources["overhead"] = lookups["overhead"] = Lookup.ROOFLINE.value
            if self.host is not None:
                sources["overhead"] = self._host_source(batch.new_tokens, batch.sequences, decode_seqs)
            for name, absent in (("allreduce", self.tp == 1 or batch.new_tokens <= 0), ("attention", not attention_src)):
                if absent:                                  # a term that launches no kernel rests on nothing
                    lookups[name] = NONE
            bounds = {name: (NONE if lookups[name] == NONE else
                             "measured" if lookups[name] != Lookup.ROOFLINE.value else "roofline")
                      for name in ("linear", "attention", "allreduce", "lm_head")}
            if self._indexer is not None:
                sources["indexer"] = lookups["indexer"] = bounds["indexer"] = Lookup.ROOFLINE.value
            return StepTerms(iteration_s=total, linear_s_per_layer=lin / layers, attention_s_per_layer=attn,
                             allreduce_s_per_layer=allreduce, overhead_s=overhead, lm_head_s=head, layers=layers,
                             bounds=bounds, elementwise_s_per_layer=elementwise / layers, sources=sources,
                             lookups=lookups, elementwise_kernels=self.elementwise_breakdown(batch.new_tokens),
                             indexer_s_per_layer=indexer)
        lin, lin_mem, lin_comp = self._linear(batch.new_tokens)
        kv_read, pairs, pre_pairs, indexer = self._roofline_attention_inputs(
            batch.new_tokens, batch.sequences, batch.kv_read_tokens, batch.attention_pairs, batch.prefill_pairs,
            batch.decode_sequences)
        attn, attn_mem, attn_comp = self._attention(kv_read, pairs, pre_pairs)
        allreduce, ar_bound = self._allreduce(batch.new_tokens)
        head, head_bound = self._lm_head(batch.sequences)
        kernels = lin + elementwise + layers * (attn + indexer + allreduce) + head
        decode_seqs = self._split(batch.new_tokens, batch.sequences, batch.kv_read_tokens, batch.attention_pairs,
                                  batch.prefill_pairs, batch.decode_sequences)[0]
        total = self._period(kernels, batch.new_tokens, batch.sequences, decode_seqs)
        overhead = self._overhead_s if self.host is None else total - kernels
        bounds = {"linear": MEMORY if lin_mem >= lin_comp else COMPUTE,
                  "attention": MEMORY if attn_mem >= attn_comp else COMPUTE,
                  "allreduce": ar_bound, "lm_head": head_bound}
        roof = {name: "roofline" for name in ("linear", "attention", "allreduce", "lm_head", "elementwise", "overhead")}
        if ar_bound == NONE:
            roof["allreduce"] = NONE                        # tp 1 (or no tokens): no all-reduce launches
        if self._indexer is not None:
            roof["indexer"] = bounds["indexer"] = Lookup.ROOFLINE.value
        if self.host is not None:
            roof["overhead"] = self._host_source(batch.new_tokens, batch.sequences, decode_seqs)
        return StepTerms(iteration_s=total, linear_s_per_layer=lin / layers, attention_s_per_layer=attn,
                         allreduce_s_per_layer=allreduce, overhead_s=overhead, lm_head_s=head, layers=layers,
                         bounds=bounds,
                         elementwise_s_per_layer=elementwise / layers, sources=dict(roof), lookups=dict(roof),
                         elementwise_kernels=self.elementwise_breakdown(batch.new_tokens), indexer_s_per_layer=indexer)

    def _roofline_attention_inputs(self, new_tokens: float, sequences: float, kv_read_tokens: float,
                                   attention_pairs: float, prefill_pairs: float,
                                   decode_sequences: float | None) -> tuple[float, float, float, float]:
        """(KV tokens read, pairs, prefill pairs, indexer seconds) the roofline attention charges: the batch's own
        for a dense model; a sparse model's top-k selection of them, and its indexer."""
        if self._indexer is None:
            return kv_read_tokens, attention_pairs, prefill_pairs, 0.0
        decode_seqs, decode_kv, prefill_seqs, prefill_kv, prefill_pairs = self._split(
            new_tokens, sequences, kv_read_tokens, attention_pairs, prefill_pairs, decode_sequences)
        selected_kv, selected_pairs_, indexer = self._select(new_tokens, decode_seqs, decode_kv, prefill_seqs,
                                                             prefill_kv, prefill_pairs)
        return selected_kv + prefill_kv, selected_kv + selected_pairs_, selected_pairs_, indexer

    def iteration_s(self, new_tokens: float, sequences: float, kv_read_tokens: float, attention_pairs: float,
                    prefill_pairs: float = 0.0, decode_sequences: float | None = None) -> float:
        """`iteration(...).iteration_s` on plain floats: the simulator's hot loop. The measured model keeps each
        exact shape's seconds (`MeasuredStep.shape_cache`; no rounding: a shape seen again reads the same float)."""
        measured = self._measured
        if measured is not None:
            key = (new_tokens, sequences, kv_read_tokens, attention_pairs, prefill_pairs, decode_sequences)
            cache = measured.shape_cache
            hit = cache.get(key)
            if hit is not None:
                return hit
            decode_seqs, decode_kv, prefill_seqs, prefill_kv, prefill_pairs = self._split(
                new_tokens, sequences, kv_read_tokens, attention_pairs, prefill_pairs, decode_sequences)
            lin, allreduce, head = self._token_terms(new_tokens, sequences, decode_seqs)
            indexer = 0.0
            if self._indexer is not None:
                decode_kv, prefill_pairs, indexer = self._select(new_tokens, decode_seqs, decode_kv, prefill_seqs,
                                                                 prefill_kv, prefill_pairs)
            attn = measured.attention_s(decode_seqs, decode_kv, prefill_seqs, prefill_pairs, prefill_kv)
            total = (lin + self._elementwise(new_tokens) + self._layers * (attn + indexer + allreduce) + head
                     + self._overhead_s)
            if self.host is not None:
                total = self._period(total, new_tokens, sequences, decode_seqs)
            if len(cache) >= 131072:       # bounded (about 30 MiB at most); a run has far fewer shapes
                cache.clear()
            cache[key] = total
            return total
        if self._indexer is None:
            attn = self._attention(kv_read_tokens, attention_pairs, prefill_pairs)[0]
            total = (self._linear(new_tokens)[0] + self._elementwise(new_tokens)
                     + self._layers * (attn + self._allreduce(new_tokens)[0]) + self._lm_head(sequences)[0]
                     + self._overhead_s)
        else:
            kv_read, pairs, pre_pairs, indexer = self._roofline_attention_inputs(
                new_tokens, sequences, kv_read_tokens, attention_pairs, prefill_pairs, decode_sequences)
            attn = self._attention(kv_read, pairs, pre_pairs)[0]
            total = (self._linear(new_tokens)[0] + self._elementwise(new_tokens)
                     + self._layers * (attn + indexer + self._allreduce(new_tokens)[0]) + self._lm_head(sequences)[0]
                     + self._overhead_s)
        if self.host is None:
            return total
        decode_seqs = self._split(new_tokens, sequences, kv_read_tokens, attention_pairs, prefill_pairs,
                                  decode_sequences)[0]
        return self._period(total, new_tokens, sequences, decode_seqs)

    def _period(self, kernels_s: float, new_tokens: float, sequences: float, decode_seqs: float) -> float:
        """The iteration's time from its kernels' (`HostCosts.period_s`), or kernels + the GPU entry's constant
        overhead without a framework's host costs."""
        host = self.host
        if host is None:
            return kernels_s + self._overhead_s
        return host.step_s(kernels_s, self._layers, ((new_tokens, sequences, decode_seqs),))

    def _host_source(self, new_tokens: float, sequences: float, decode_seqs: float) -> str:
        host = self.host
        assert host is not None
        return host.source(((new_tokens, sequences, decode_seqs),))

    def attention_s(self, kv_read_tokens: float, attention_pairs: float, layers: int | None = None,
                    prefill_pairs: float = 0.0) -> float:
        """One attention kernel's work over a whole context, per layer, times `layers` (all by default)."""
        count = self.geometry.layers if layers is None else layers
        return count * self._attention(kv_read_tokens, attention_pairs, prefill_pairs)[0]

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
        scalar = isinstance(rows_per_query, (int, float)) and isinstance(key_tokens, (int, float))
        if scalar:      # one call per routed (requester, holder) pair of every engine event: kept per exact shape
            key = (queries, rows_per_query, key_tokens, dense)
            hit = self._partial_cache.get(key)
            if hit is not None:
                return hit
        heads = self._heads_q if dense else float("inf")
        if scalar:
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
            for row_count, key_count in zip(rows, toks):
                if row_count > heads:
                    block_pairs += row_count * key_count
                    floor_pairs += heads * key_count
                else:
                    pairs += row_count * key_count
                    floor_pairs += row_count * key_count
        # one kernel over every query's keys; decode rows in the absorbed form, blocks in the prefill form (the
        # batch form of `cost.holder_prefill_s`, same coefficients: `prefill_form_coeffs`)
        roof = max(keys * self._attn_s_per_kv_token,
                   pairs * self._holder_s_per_pair + block_pairs / self.tp * self._prefill_s_per_row_key)
        if self.holder_curve is not None:
            # pairs = rows x keys; each GPU of the TP group computes its heads' share (the curve is one GPU's)
            work = holder_work(floor_pairs / self.tp, 1.0, self.geometry.token_fraction, *self.holder_ref)
            roof = max(roof, holder_curve_s(work, self.holder_curve[0], self.holder_curve[1]))
        if scalar:
            cache = self._partial_cache
            if len(cache) >= 131072:       # bounded, as the shape cache; a run has far fewer shapes
                cache.clear()
            cache[key] = roof
        return roof
