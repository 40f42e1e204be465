"""One engine iteration composed from measured operator tables (docs/STEP_TIME.md, "Composition").

An iteration runs, per layer, the kernels a serving engine launches (SGLang's order; vLLM's differs only in
fusions the tables already measure):
- the attention projections and the FFN or shared experts as GEMMs at the iteration's token count (MLA: q_a,
  q_b, kv_a and o; kv_b only for prefill tokens, which attend in the expanded form; decode tokens run kv_b's
  halves as the absorbed per-head BMMs, `mla_bmm` pre and post);
- the router GEMM and the fused routed-expert kernel (`moe`, at the iteration's tokens, skewed routing), the
  shared experts beside it on a second stream up to 1024 tokens and after it above (SGLang's dual-stream
  threshold);
- attention: decode sequences on the decode table at their mean context, prefill chunks on the prefill table
  at the sequence length whose causal pairs equal the chunk's (a chunk after a prefix attends as much);
- two all-reduces of tokens x hidden bf16 values (after attention and after the FFN / MoE) when tp > 1: the
  custom all-reduce (CUDA-graph rows for decode-only batches, eager ones otherwise) up to its 8 MiB, NCCL past it;
plus the LM head GEMM on the sampled positions, and the per-layer memory-bound kernels (fused add + RMSNorms, RoPE,
MLA's latent norms, activations: the one list `steptime.elementwise_kernels`) from the `elementwise` table kernel by
kernel, each no faster than the GPU's kernel floor, the roofline's for a kernel the table lacks. The iteration
overhead is simroute.model.steptime's.

Each group of kernels that a table cannot answer (a shape no row covers, a model whose MoE shape was never
measured) falls back to the roofline of simroute.model.steptime, floored per kernel; `sources` says which term
read which table and `lookups` whether it was measured, interpolated, extrapolated or roofline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from simroute.model.geometry import LinearOp, ModelGeometry
from simroute.model.optables import Curve, Lookup, OperatorTables, OpKind, Surface, TableMiss

if TYPE_CHECKING:
    from simroute.model.steptime import ElementwiseKernel

# the activations' dtype: the elementwise kernels run on bf16 hidden states whatever the weights' dtype
ELEMENTWISE_DTYPE = "bf16"

# Weight dtypes of a geometry -> the GEMM table's dtype (FP8 checkpoints use 128 x 128 block scales: DeepGEMM's
# fp8_block kernels in SGLang; the per-tensor fp8 rows are a different kernel).
GEMM_DTYPE = MOE_DTYPE = {"bf16": "bf16", "fp8": "fp8_block"}
KV_DTYPE = {"bf16": "bf16", "fp8": "fp8"}
# The routed experts' token distribution the fused-MoE rows are read at: a power law of exponent 1.01 over the
# experts (the database's measured skewed routing, which aiconfigurator composes by default), not the
# perfectly balanced rows, which no real router achieves batch by batch.
MOE_DISTRIBUTION = "power_law_1.01"
SHARED_PREFIX = "shared_"
# GEMMs a serving engine fuses into one launch: MLA's q_a and kv_a read the same hidden state (SGLang's fused
# down-projection, n = q_lora_rank + kv_lora_rank + rope)
FUSED = (("q_a", "kv_a"),)


def _fused(ops: list[LinearOp]) -> list[LinearOp]:
    """`ops` with each fusable group (same input width and dtype) replaced by one GEMM of their summed n."""
    out = list(ops)
    for group in FUSED:
        members = [gemm for gemm in out if gemm.name in group]
        if len(members) == len(group) and len({(gemm.k, gemm.weight_dtype) for gemm in members}) == 1:
            fused = LinearOp("+".join(group), members[0].k, sum(gemm.n for gemm in members),
                             weight_dtype=members[0].weight_dtype)
            out = [fused if gemm is members[0] else gemm for gemm in out if gemm is members[0] or gemm not in members]
    return out
ALLREDUCE_MODES = ("graph", "eager", "nccl")
# SGLang's custom all-reduce (the table's graph / eager rows) serves messages of at most 8 MiB
# (CustomAllreduce._MAX_CAR_SIZE = 8192 * 1024 bytes; `should_custom_ar`); a larger one, a prefill's
# tokens x hidden, goes to NCCL (pynccl), graph or not.
CUSTOM_ALLREDUCE_MAX_BYTES = 8192 * 1024
ALLREDUCE_BYTES = 2                      # bf16 activations
# SGLang runs the shared experts beside the routed ones on a second stream only for batches of at most this
# many tokens (DeepseekV2MoE.forward's DUAL_STREAM_TOKEN_THRESHOLD); a larger batch runs them one after the other.
SHARED_OVERLAP_MAX_TOKENS = 1024


@dataclass(frozen=True)
class NoSlowerThan:
    """A surface read no slower than another at the same shape: an FP8-KV MLA decode surface bounded by the same
    table's bf16-KV rows (docs/STEP_TIME.md, "FP8 KV cache"). Duck-types `Surface` for the attention term."""

    surface: Surface
    bound: Surface

    @property
    def status(self) -> Lookup:
        return Lookup.worst(self.surface.status, self.bound.status)

    @property
    def table(self) -> str:
        return f"{self.surface.table} (fp8 rows, no slower than its bf16 rows)"

    def seconds(self, row: float, col: float) -> float:
        own, bound = self.surface.seconds(row, col), self.bound.seconds(row, col)
        return own if own <= bound else bound

    def lookup(self, row: float, col: float) -> tuple[float, Lookup]:
        own, bound = self.surface.lookup(row, col), self.bound.lookup(row, col)
        return own if own[0] <= bound[0] else bound


@dataclass(frozen=True)
class TermSource:
    """Which table (or the roofline) a term read, and what the lookup rests on."""

    table: str
    lookup: Lookup


class MeasuredStep:
    """The table-driven terms of one instance (a TP group of `tp` GPUs serving `geometry`).

    Built once per (model, GPU entry, TP); the hot path (`token_terms_s`, `attention_s`) does a bisect per term,
    and the step model caches whole iterations per exact shape in `shape_cache`.
    The `roofline_*` callables supply each term's fallback (the floored roofline of the same instance). Extend by adding a kernel group to `_build` and to `token_terms_s`
    together; `terms` returns the same numbers term by term (a test checks they agree)."""

    def __init__(self, geometry: ModelGeometry, tp_size: int, tables: OperatorTables, *, cuda_graphs: bool,
                 kv_shards: int = 1, kernel_floor_s: float = 0.0, graph_max_batch: int | None = None,
                 decode_floor_s_per_kv_token: float = 0.0,
                 elementwise_layers: Sequence[tuple[int, Sequence[ElementwiseKernel]]] = (),
                 roofline_elementwise: Callable[[ElementwiseKernel, float], float] | None = None,
                 roofline_linear: Callable[[float], float], roofline_attention: Callable[[float, float, float], float],
                 roofline_allreduce: Callable[[float], float], roofline_lm_head: Callable[[float], float]) -> None:
        self.geometry, self.tp, self.tables = geometry, tp_size, tables
        self.cuda_graphs = cuda_graphs
        # the largest decode-only batch the engine replays as a CUDA graph (None: every one); a larger one runs
        # eagerly and reads the eager all-reduce rows
        self.graph_max_batch = graph_max_batch
        # tpla (kv_shards = tp): a rank attends every head over 1/tp of the latent. No table measures that
        # kernel: it is the TP-1 kernel's time (all heads, whole latent) over tp, no less than one launch.
        self.kv_shards, self.kernel_floor_s = kv_shards, kernel_floor_s
        # no decode kernel reads its KV faster than the HBM's datasheet peak: seconds per KV token of one sequence
        # (a rank's heads, the whole latent before a tpla split) at that peak; a measured row faster than this
        # cannot be a measurement of that work (docs/STEP_TIME.md, "The HBM floor of decode attention")
        self.decode_floor_s_per_kv_token = decode_floor_s_per_kv_token
        self._roof_linear, self._roof_attention = roofline_linear, roofline_attention
        self._roof_allreduce, self._roof_lm_head = roofline_allreduce, roofline_lm_head
        self._elementwise_layers, self._roof_elementwise = tuple(elementwise_layers), roofline_elementwise
        self.sources: dict[str, TermSource] = {}
        self.notes: list[str] = []
        # iteration seconds per exact batch shape (the arguments of StepTimeModel.iteration_s), filled and read
        # by the owning step model: a run's engines repeat shapes (a decode at the same context on another
        # instance, a re-prefill the policies price again), and the tables never change once built
        self.shape_cache: dict[tuple, float] = {}
        self._build()

    # ---- construction -------------------------------------------------------------------------------
    def _gemm_curve(self, gemm: LinearOp, dtype: str | None = None) -> Curve | None:
        table = self.tables.get(OpKind.GEMM)
        if table is None:
            return None
        want = dtype or GEMM_DTYPE.get(gemm.weight_dtype, "bf16")
        have = set(table.values("dtype"))
        if want not in have:
            if "bf16" not in have:
                return None
            if want != "bf16":
                self._note(f"no {want} GEMM rows for {self.tables.label}: its GEMMs read the bf16 rows")
            want = "bf16"
        try:
            return table.curve("m", {"n": gemm.n, "k": gemm.k}, {"dtype": want})
        except TableMiss:
            return None

    def gemm_curve(self, gemm: LinearOp, dtype: str | None = None) -> Curve | None:
        """The table curve over tokens of one GEMM (None: no rows, the roofline's): what a composition of these
        tables under another parallelism (simroute.model.dpstep) reads."""
        return self._gemm_curve(gemm, dtype)

    def bmm_curve(self) -> Curve | None:
        """MLA's absorbed pre + post BMMs over decode tokens at this step's heads per rank (None: no rows)."""
        return self._bmm_curve()

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _sum(self, curves: list[Curve]) -> Curve:
        total = curves[0]
        for curve in curves[1:]:
            total = total.plus(curve)
        return total

    def _build(self) -> None:
        geometry, tp_size = self.geometry, self.tp
        self._kinds: list[tuple[int, Curve | None, Curve | None, Curve | None, Curve | None, Curve | None]] = []
        linear_lookups: list[Lookup] = []
        linear_tables: set[str] = set()
        self._dense_flags: list[bool] = []
        for kind, count in geometry.layer_kinds().items():
            if count <= 0:
                continue
            ops = _fused(geometry.linear_ops(tp_size, kind))
            every_token = [gemm for gemm in ops if gemm.experts == 1 and gemm.name != "kv_b"
                           and not gemm.name.startswith(SHARED_PREFIX)]
            curves = [self._gemm_curve(gemm) for gemm in every_token]
            dense = self._sum(curves) if curves and all(part_curve is not None for part_curve in curves) else None
            shared_ops = [gemm for gemm in ops if gemm.name.startswith(SHARED_PREFIX)]
            shared_curves = [self._gemm_curve(gemm) for gemm in shared_ops]
            shared = (self._sum(shared_curves)
                      if shared_curves and all(part_curve is not None for part_curve in shared_curves) else None)
            if shared_ops and shared is None:
                dense = None
            prefill_only = None                         # MLA's kv_b: prefill tokens only (expanded form)
            decode_only = None                          # MLA's absorbed BMMs: decode tokens only
            if geometry.is_mla:
                kv_b = next(gemm for gemm in ops if gemm.name == "kv_b")
                prefill_only = self._gemm_curve(kv_b)
                decode_only = self._bmm_curve()
            routed = self._moe_curve() if kind == "moe" else None
            if kind == "moe" and routed is None:
                self._note(f"no fused-MoE rows for {geometry.name}'s expert shape at TP {tp_size} in "
                           f"{self.tables.label}: "
                           "its routed experts run on the roofline")
            for curve in (dense, prefill_only, decode_only, routed):
                if curve is not None:
                    linear_lookups.append(curve.status)
                    linear_tables.add(curve.table.split(" (")[0])
            self._kinds.append((count, dense, prefill_only, decode_only, routed, shared))
            self._dense_flags.append(kind == "dense")
        # every kernel group of every layer kind must come from a table, else the whole linear term is the
        # roofline's (a half-measured sum would mix two error models)
        self.linear_measured = bool(self._kinds) and all(
            dense is not None and (routed is not None or kind_count_is_dense)
            and (not geometry.is_mla or (prefill_only is not None and decode_only is not None))
            for (count, dense, prefill_only, decode_only, routed, _shared), kind_count_is_dense
            in zip(self._kinds, self._dense_flags))
        if not self.linear_measured and self._kinds:
            self._note(f"the linear kernels of {geometry.name} at TP {tp_size} are not all in {self.tables.label}: "
                       "the linear term is the roofline's")
        self.sources["linear"] = TermSource(", ".join(sorted(linear_tables)) if self.linear_measured else "roofline",
                                            Lookup.worst(*linear_lookups) if self.linear_measured
                                            else Lookup.ROOFLINE)
        self._build_attention()
        self._build_allreduce()
        self._build_elementwise()
        head = geometry.lm_head_op(tp_size)
        self._lm_head = self._gemm_curve(head, "bf16")
        self.sources["lm_head"] = TermSource(self._lm_head.table if self._lm_head else "roofline",
                                             self._lm_head.status if self._lm_head else Lookup.ROOFLINE)

    def _build_elementwise(self) -> None:
        """Each elementwise kernel of each layer kind with its table curve (None: the roofline's). The routed
        experts' activation is left out where a measured fused-MoE kernel holds it."""
        table = self.tables.get(OpKind.ELEMENTWISE)
        floor_us = self.kernel_floor_s * 1e6
        self.elementwise_parts: list[tuple[int, ElementwiseKernel, Curve | None]] = []
        for count, kernels in self._elementwise_layers:
            for kernel in kernels:
                if kernel.in_fused_moe and self.linear_measured:
                    continue
                curve = None
                if table is not None:
                    try:
                        curve = table.curve("tokens", {"width": kernel.width},
                                            {"kernel": kernel.kernel, "dtype": ELEMENTWISE_DTYPE})
                    except TableMiss:
                        self._note(f"no elementwise {kernel.kernel} rows at width {kernel.width} in "
                                   f"{self.tables.label}: the {kernel.role} runs on the roofline")
                    if curve is not None and curve.seconds_at_points[0] < self.kernel_floor_s:
                        self._note(f"elementwise {kernel.kernel} rows at width {kernel.width} in {self.tables.label} "
                                   f"fall below the {floor_us:.2f} us kernel floor "
                                   f"({curve.seconds_at_points[0] * 1e6:.2f} "
                                   "us at the fewest tokens): raised to it")
                self.elementwise_parts.append((count, kernel, curve))
        self.elementwise_tabled = any(curve is not None for _count, _kernel, curve in self.elementwise_parts)
        tables = sorted({curve.table for _count, _kernel, curve in self.elementwise_parts if curve is not None})
        if any(curve is None for _count, _kernel, curve in self.elementwise_parts):
            tables.append("roofline")
        lookups = [curve.status if curve is not None else Lookup.ROOFLINE
                   for _count, _kernel, curve in self.elementwise_parts]
        self.sources["elementwise"] = TermSource("; ".join(tables) if self.elementwise_tabled else "roofline",
                                                 Lookup.worst(*lookups) if self.elementwise_tabled
                                                 else Lookup.ROOFLINE)

    def _elementwise_kernel_s(self, kernel: ElementwiseKernel, curve: Curve | None, tokens: float) -> float:
        """One launch of `kernel`: the table's time raised to the kernel floor, or the roofline's."""
        if curve is None:
            return self._roof_elementwise(kernel, tokens) if self._roof_elementwise is not None else 0.0
        measured = curve.seconds(tokens)
        return measured if measured >= self.kernel_floor_s else self.kernel_floor_s

    def elementwise_s(self, tokens: float) -> float:
        """The elementwise kernels of every layer at `tokens` tokens (0 at no tokens: nothing launches)."""
        if tokens <= 0:
            return 0.0
        return sum(count * self._elementwise_kernel_s(kernel, curve, tokens)
                   for count, kernel, curve in self.elementwise_parts)

    def elementwise_breakdown(self, tokens: float) -> tuple[dict[str, object], ...]:
        """Each elementwise kernel at `tokens` tokens: role, kernel, width, layers, ms over them, lookup, table."""
        rows = []
        for count, kernel, curve in self.elementwise_parts:
            seconds = self._elementwise_kernel_s(kernel, curve, tokens) if tokens > 0 else 0.0
            lookup = curve.lookup(tokens)[1] if curve is not None and tokens > 0 else (
                curve.status if curve is not None else Lookup.ROOFLINE)
            rows.append({"role": kernel.role, "kernel": kernel.kernel, "width": kernel.width, "layers": count,
                         "ms": count * seconds * 1e3, "lookup": lookup.value,
                         "table": curve.table if curve is not None else "roofline"})
        return tuple(rows)

    def _bmm_curve(self) -> Curve | None:
        table = self.tables.get(OpKind.MLA_BMM)
        if table is None:
            return None
        heads = math.ceil(self.geometry.heads_q / self.tp)
        dtype = "fp8" if self.geometry.weight_dtype == "fp8" and "fp8" in table.values("dtype") else "bf16"
        try:
            return table.curve("tokens", {"heads": heads}, {"stage": "pre", "dtype": dtype}).plus(
                table.curve("tokens", {"heads": heads}, {"stage": "post", "dtype": dtype}))
        except TableMiss:
            return None

    def _moe_curve(self) -> Curve | None:
        table = self.tables.get(OpKind.MOE)
        geometry = self.geometry
        if table is None:
            return None
        dtype = MOE_DTYPE.get(geometry.weight_dtype, "bf16")
        if dtype not in table.values("dtype"):
            return None
        fixed = {"hidden": geometry.hidden, "inter": geometry.expert_intermediate, "topk": geometry.experts_per_token,
                 "experts": geometry.routed_experts, "moe_tp": self.tp, "moe_ep": 1}
        for distribution in (MOE_DISTRIBUTION, "balanced"):
            try:
                curve = table.curve("tokens", fixed, {"dtype": dtype, "distribution": distribution})
            except TableMiss:
                continue
            if distribution != MOE_DISTRIBUTION:
                self._note(f"no {MOE_DISTRIBUTION} MoE rows for {geometry.name}: its routed experts read the "
                           "balanced ones")
            return curve
        return None

    def _build_attention(self) -> None:
        geometry, tp_size = self.geometry, self.tp
        kv_dtype = KV_DTYPE.get(geometry.cache_dtype, "bf16")
        heads = geometry.heads_q if self.kv_shards > 1 else math.ceil(geometry.heads_q / tp_size)
        if self.kv_shards > 1:
            self._note(f"tpla layout: a rank's MLA attention is the {geometry.heads_q}-head kernel's time / {tp_size} "
                       "(no table "
                       "measures TPLA's per-shard kernel)")
        self._decode: Surface | None = None
        self._prefill: Surface | None = None
        if geometry.is_mla:
            decode_kind, prefill_kind, fixed = OpKind.MLA_DECODE, OpKind.MLA_PREFILL, {"heads": heads}
        else:
            kv_heads = geometry.kv_heads_per_gpu(tp_size)
            decode_kind, prefill_kind = OpKind.ATTENTION_DECODE, OpKind.ATTENTION_PREFILL
            fixed = {"heads": heads, "kv_heads": kv_heads, "head_dim": geometry.d_qk}
        if geometry.token_compression:
            self._note(f"{geometry.name}'s compressed attention has no table kind: attention runs on the roofline")
        else:
            if geometry.has_indexer:
                self._note(f"{geometry.name}'s top-{geometry.index_topk} attention reads the dense MLA kernel's rows "
                           "at the keys it selects (min(context, k) a decode token); its lightning indexer runs on "
                           "the roofline (docs/STEP_TIME.md, \"Sparse attention\")")
            for kind, axis, slot in ((decode_kind, "context", "_decode"), (prefill_kind, "isl", "_prefill")):
                table = self.tables.get(kind)
                if table is None:
                    continue
                try:
                    # a probe times prefill one sequence at a time: more sequences scale from it (flagged)
                    setattr(self, slot, Surface.from_table(table, "batch", axis, fixed, {"kv_dtype": kv_dtype},
                                                           one_row_scales=slot == "_prefill"))
                except TableMiss:
                    self._note(f"no {kind.value} rows at {fixed} ({kv_dtype} KV) in {self.tables.label}")
                    continue
                if kind is OpKind.MLA_DECODE and kv_dtype != "bf16":
                    self._bound_by_bf16(table, fixed, kv_dtype)
        if self._decode is not None and self.decode_floor_s_per_kv_token > 0:
            points = below = 0
            grid = self._decode.surface if isinstance(self._decode, NoSlowerThan) else self._decode
            for log_batch, curve in zip(grid.log_rows, grid.curves):
                for log_context in curve.log_x:
                    points += 1
                    batch, context = math.exp(log_batch), math.exp(log_context)
                    floor = batch * context * self.decode_floor_s_per_kv_token
                    below += self._decode.seconds(batch, context) < floor * (1.0 - 1e-9)
            if below:
                self._note(f"{below} of {points} {decode_kind.value} grid points at {fixed} in {self.tables.label} "
                           "read the KV faster than the HBM datasheet peak: a decode there is raised to its KV bytes / "
                           "peak")
        for name, surface in (("attention_decode", self._decode), ("attention_prefill", self._prefill)):
            self.sources[name] = TermSource(surface.table if surface else "roofline",
                                            surface.status if surface else Lookup.ROOFLINE)

    def _bound_by_bf16(self, table, fixed: dict, kv_dtype: str) -> None:
        """An FP8 MLA decode kernel reads half the bytes of the bf16 one and dequantises in its tiles: it is no
        slower (TensorRT-LLM 1.3.0rc20's FP8 rows on H200: 0.73-0.99x its bf16 rows; FlashMLA's FP8 kernel). A
        table whose fp8 rows are slower timed something else (SGLang 0.5.14's fa3 backend dequantises the whole
        KV pool it was given every layer, SGLang issue #35291: 4.5-7x at large batches, a cost of the collector's
        pool size, not of the batch), so its bf16 rows bound them (docs/STEP_TIME.md, "FP8 KV cache")."""
        try:
            bound = Surface.from_table(table, "batch", "context", fixed, {"kv_dtype": "bf16"})
        except TableMiss:
            return
        self._decode = NoSlowerThan(self._decode, bound)      # type: ignore[arg-type]
        self._note(f"{kv_dtype} KV: {OpKind.MLA_DECODE.value} reads {self.tables.label}'s {kv_dtype} rows, no "
                   "slower than its bf16 rows at the same shape (an FP8 MLA decode kernel reads half the bytes; "
                   "docs/STEP_TIME.md, \"FP8 KV cache\")")

    def _build_allreduce(self) -> None:
        self._allreduce: dict[str, Curve] = {}
        table = self.tables.get(OpKind.ALLREDUCE)
        if self.tp == 1:
            self.sources["allreduce"] = TermSource("none (tp 1)", Lookup.MEASURED)
            return
        if table is not None:
            for mode in ALLREDUCE_MODES:
                if mode not in table.values("mode"):
                    continue
                try:
                    self._allreduce[mode] = table.curve("message_elements", {"gpus": self.tp},
                                                        {"mode": mode, "dtype": "bf16"})
                except TableMiss:
                    continue
        chosen = self._ar_curve(True, 1.0)
        self.sources["allreduce"] = TermSource(chosen.table if chosen else "roofline",
                                               chosen.status if chosen else Lookup.ROOFLINE)

    # ---- the hot path ---------------------------------------------------------------------------------
    def _graphed(self, prefill_tokens: float, decode_seqs: float) -> bool:
        """Whether a batch replays a CUDA graph: decode-only, and within the captured sizes when they are known."""
        return prefill_tokens == 0 and (self.graph_max_batch is None or decode_seqs <= self.graph_max_batch)

    def _ar_curve(self, decode_only: bool, elements: float) -> Curve | None:
        """The all-reduce a batch launches for a message of `elements` bf16 values: past the custom all-reduce's
        8 MiB, NCCL's rows; below it, engines replay decode-only batches as CUDA graphs (SGLang and vLLM capture
        them by default), so those read the graph rows, and a batch with prefill runs eagerly."""
        if elements * ALLREDUCE_BYTES > CUSTOM_ALLREDUCE_MAX_BYTES and "nccl" in self._allreduce:
            return self._allreduce["nccl"]
        mode = "graph" if decode_only else "eager"
        return self._allreduce.get(mode) or self._allreduce.get("nccl") or next(iter(self._allreduce.values()), None)

    def token_terms_s(self, new_tokens: float, sequences: float, decode_seqs: float) -> tuple[float, float, float]:
        """(linear kernels over all layers, all-reduces of one layer, LM head) seconds: the kernels whose work
        depends only on the batch's token and sequence counts (the caller caches them per count)."""
        prefill_tokens = max(new_tokens - decode_seqs, 0.0)
        if self.linear_measured:
            linear = 0.0
            for count, dense, prefill_only, decode_only, routed, shared in self._kinds:
                layer = dense.seconds(new_tokens)  # type: ignore[union-attr]
                if prefill_only is not None and prefill_tokens > 0:
                    layer += prefill_only.seconds(prefill_tokens)
                if decode_only is not None and decode_seqs > 0:
                    layer += decode_only.seconds(decode_seqs)
                shared_s = shared.seconds(new_tokens) if shared is not None else 0.0
                if routed is not None:                 # the shared experts overlap the routed kernel
                    routed_s = routed.seconds(new_tokens)     # (on a second stream, up to 1024 tokens)
                    if new_tokens > SHARED_OVERLAP_MAX_TOKENS:
                        layer += routed_s + shared_s
                    else:
                        layer += routed_s if routed_s >= shared_s else shared_s
                else:
                    layer += shared_s
                linear += count * layer
        else:
            linear = self._roof_linear(new_tokens)
        allreduce = 0.0
        if self.tp > 1 and new_tokens > 0:
            curve = self._ar_curve(self._graphed(prefill_tokens, decode_seqs), new_tokens * self.geometry.hidden)
            allreduce = (2.0 * curve.seconds(new_tokens * self.geometry.hidden) if curve is not None
                         else self._roof_allreduce(new_tokens))
        head = self._lm_head.seconds(sequences) if self._lm_head is not None else self._roof_lm_head(sequences)
        return linear, allreduce, head

    def attention_s(self, decode_seqs: float, decode_kv: float, prefill_seqs: float, prefill_pairs: float,
                    prefill_kv: float) -> float:
        """One layer's attention: decode sequences at their mean context, prefill chunks at the length whose
        causal pairs equal theirs (both tables' time is per layer, for one rank's heads; under tpla, the
        all-heads kernel over the rank's share of the latent)."""
        measured = roofline = 0.0
        if decode_seqs > 0 and decode_kv > 0:
            if self._decode is not None:
                seconds = self._decode.seconds(decode_seqs, decode_kv / decode_seqs)
                floor = decode_kv * self.decode_floor_s_per_kv_token
                measured += seconds if seconds >= floor else floor
            else:
                roofline += self._roof_attention(decode_kv, decode_kv, 0.0)
        if prefill_seqs > 0 and prefill_pairs > 0:
            if self._prefill is not None:
                per_seq = prefill_pairs / prefill_seqs
                isl = (math.sqrt(8.0 * per_seq + 1.0) - 1.0) / 2.0      # s (s + 1) / 2 = pairs
                measured += self._prefill.seconds(prefill_seqs, isl)
            else:
                roofline += self._roof_attention(prefill_kv, prefill_pairs, prefill_pairs)
        if self.kv_shards > 1 and measured > 0:
            measured = max(measured / self.kv_shards, self.kernel_floor_s)
        return measured + roofline

    def shape_lookups(self, new_tokens: float, sequences: float, decode_seqs: float, decode_kv: float,
                      prefill_seqs: float, prefill_pairs: float) -> dict[str, Lookup]:
        """What each term rests on at this batch shape (not only at the model's fixed coordinates): a token count
        or context past a table's grid makes the term extrapolated. Off the hot path (`StepTimeModel.iteration`)."""
        prefill_tokens = max(new_tokens - decode_seqs, 0.0)
        out = {name: self.sources[name].lookup for name in ("linear", "allreduce", "lm_head")}
        if self.linear_measured and new_tokens > 0:
            parts = []
            for _count, dense, prefill_only, decode_only, routed, shared in self._kinds:
                parts += [part_curve.lookup(new_tokens)[1] for part_curve in (dense, routed, shared)
                          if part_curve is not None]
                if prefill_only is not None and prefill_tokens > 0:
                    parts.append(prefill_only.lookup(prefill_tokens)[1])
                if decode_only is not None and decode_seqs > 0:
                    parts.append(decode_only.lookup(decode_seqs)[1])
            out["linear"] = Lookup.worst(out["linear"], *parts)
        curve = (self._ar_curve(self._graphed(prefill_tokens, decode_seqs), new_tokens * self.geometry.hidden)
                 if self.tp > 1 else None)
        if curve is not None and new_tokens > 0:
            out["allreduce"] = curve.lookup(new_tokens * self.geometry.hidden)[1]
        if self._lm_head is not None and sequences > 0:
            out["lm_head"] = self._lm_head.lookup(sequences)[1]
        attention: list[Lookup] = []
        if decode_seqs > 0 and decode_kv > 0:
            attention.append(self._decode.lookup(decode_seqs, decode_kv / decode_seqs)[1] if self._decode
                             else Lookup.ROOFLINE)
        if prefill_seqs > 0 and prefill_pairs > 0:
            isl = (math.sqrt(8.0 * prefill_pairs / prefill_seqs + 1.0) - 1.0) / 2.0
            attention.append(self._prefill.lookup(prefill_seqs, isl)[1] if self._prefill else Lookup.ROOFLINE)
        out["attention"] = Lookup.worst(*attention)
        out["elementwise"] = self.sources["elementwise"].lookup
        if self.elementwise_tabled and new_tokens > 0:
            out["elementwise"] = Lookup.worst(*(curve.lookup(new_tokens)[1] if curve is not None else Lookup.ROOFLINE
                                                for _count, _kernel, curve in self.elementwise_parts))
        return out
