"""Step-time probes: the constants `simroute.model.steptime` reads from a profile's GPU entry
(docs/STEP_TIME.md), measured on one GPU with torch in bf16 (numpy on the CPU in a dry run).

- `hbm`: device-to-device copy bandwidth (read + write) -> `hbm_efficiency` (over the datasheet `hbm_GBps`);
- `gemm`: bf16 GEMMs of every shipped model's linear layers (`ModelGeometry.linear_ops`, TP 1/2/4/8) over
  1..8192 tokens -> `gemm_efficiency` points over tokens;
- `decode-attention`: absorbed-MLA (FlashMLA where importable, else torch returning (out, lse)) and GQA
  (torch SDPA) over context x batch: the achieved rate against the model's memory-bound attention term;
- `prefill-attention`: causal attention FLOP rate -> `attention_efficiency`;
- `decoder-layer`: one whole layer with random weights (DeepSeek-V2-Lite dense and MoE, Llama-2-7b) over
  token counts, per operator: what the step-time model should reproduce;
- `launch-overhead`: one iteration's kernel launches, eager and as a CUDA graph -> `iteration_overhead_us`,
  `iteration_overhead_graph_us`.

Each probe checks its operator against a float64 numpy reference before timing, sweeps in priority order and
stops at its deadline with what it measured. The probes return raw rates; simroute.probes.step_constants
turns them into fractions of the GPU entry's datasheet peaks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from simroute.model.geometry import MODELS, ModelGeometry, get_model
from simroute.probes.gpu_common import Deadline, summary
from simroute.probes.step_backend import NumpyBackend, StepBackend, backend_for, ceil_div, rel_err

TOKENS = tuple(2 ** power for power in range(14))          # 1 .. 8192
TPS = (1, 2, 4, 8)
FIRST_MODELS = ("deepseek-v2-lite", "llama-2-7b")          # the decoder-layer models, measured first
REF_SHRINK = 16                                            # the dry run's numpy GEMMs are this much narrower
REF_MAX_TOKENS = 64
BF16_TOL = 3e-2


def _reps(args: dict[str, Any]) -> tuple[int, int]:
    return (1, 3) if args.get("quick") else (3, 10)


def _tokens(backend: StepBackend, tokens: tuple[int, ...] = TOKENS) -> tuple[int, ...]:
    return tokens if backend.measures_gpu else tuple(count for count in tokens if count <= REF_MAX_TOKENS)


def _base(backend: StepBackend, deadline: Deadline, **results: Any) -> dict[str, Any]:
    return {"backend": backend.name, "measures_gpu": backend.measures_gpu, "sweep": deadline.note(),
            "framework": backend.framework, "framework_version": backend.framework_version,
            "dtype": backend.dtype_label, **backend.info(), **results}


# ---- HBM: device-to-device copy ----------------------------------------------------------------------------
COPY_MiB = (64, 256, 1024, 4096)


def probe_hbm(args: dict[str, Any]) -> dict:
    """Copy rate of large device buffers, counted as read + write bytes (what the HBM moves)."""
    backend, deadline = backend_for(args), Deadline.for_probe(args, 60)
    warm, reps = _reps(args)
    src = backend.randn((1 << 20,), seed=1)
    dst = backend.empty_like(src)
    backend.copy(dst, src)
    if not np.array_equal(backend.host(dst), backend.host(src)):
        raise AssertionError("device-to-device copy did not reproduce its source")
    sizes = COPY_MiB if backend.measures_gpu else (1, 4, 16)
    rates, samples = {}, []
    for mib in deadline.points("copy sizes", sizes):
        src_buf = backend.randn((mib * 2 ** 20 // 2,), seed=2)           # mib MiB of bf16 (numpy's float32: twice)
        dst_buf = backend.empty_like(src_buf)
        nbytes = 2 * backend.nbytes(src_buf)                             # read + write
        times = backend.time(lambda: backend.copy(dst_buf, src_buf), warm, reps, deadline)
        rates[str(mib)] = nbytes / summary(times) / 1e9
        samples += [{"series": "d2d_copy", "x": float(mib), "value": seconds, "unit": "s", "bytes_moved": nbytes}
                    for seconds in times]
        del src_buf, dst_buf
    if not rates:
        raise TimeoutError("probe deadline reached before the first copy was timed")
    best = max(rates.values())
    return {"results": _base(backend, deadline, copy_GBps=rates, best_GBps=best),
            "samples": samples, "message": f"D2D copy best {best:.0f} GB/s (read + write) over {list(rates)} MiB"}


# ---- GEMM over token counts ----------------------------------------------------------------------------
@dataclass(frozen=True)
class GemmShape:
    """One distinct (k, n) weight shape and every (model, layer kind, op, TP) that uses it."""

    k: int
    n: int
    uses: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.k}x{self.n}"


def _ordered_models(models: tuple[str, ...] | None) -> list[ModelGeometry]:
    names = list(models) if models else [*FIRST_MODELS, *(model for model in MODELS if model not in FIRST_MODELS)]
    return [geom for geom in (get_model(name) for name in names) if geom.has_linear_geometry]


def gemm_plan(models: tuple[str, ...] | None = None, tps: tuple[int, ...] = TPS) -> list[GemmShape]:
    """The distinct GEMM weight shapes of the models' layers (attention projections, FFN up/down, router,
    shared and routed experts) at each TP degree, from `ModelGeometry.linear_ops`: TP 1 of the
    decoder-layer models first, so a sweep cut short by its deadline has those."""
    uses: dict[tuple[int, int], list[str]] = {}
    for tp in tps:
        for geom in _ordered_models(models):
            for kind in geom.layer_kinds():
                for linear in geom.linear_ops(tp, kind):
                    uses.setdefault((linear.k, linear.n), []).append(f"{geom.name}/{kind}/{linear.name}/tp{tp}")
    return [GemmShape(k_dim, n_dim, tuple(names)) for (k_dim, n_dim), names in uses.items()]


def _check_gemm(backend: StepBackend) -> float:
    rng = np.random.default_rng(3)
    left, right = rng.standard_normal((33, 96)), rng.standard_normal((96, 40))
    err = rel_err(backend.host(backend.upload(left) @ backend.upload(right)), left @ right)
    if err > BF16_TOL:
        raise AssertionError(f"{backend.name}: GEMM disagrees with numpy (rel err {err:.3g})")
    return err


def run_shape(backend: StepBackend, shape: GemmShape) -> tuple[int, int]:
    """(k, n) as timed: the model's on the GPU, narrower on the numpy stand-in."""
    if backend.measures_gpu:
        return shape.k, shape.n
    return max(shape.k // REF_SHRINK, 8), max(shape.n // REF_SHRINK, 8)


def _time_shape(backend: StepBackend, shape: GemmShape, tokens: tuple[int, ...], deadline: Deadline, warm: int,
                reps: int,
                l2_bytes: int) -> tuple[dict[int, float], int]:
    """(seconds per GEMM of `shape` at each token count, FLOPs per token as run: narrower on the numpy
    stand-in); weights rotate over enough copies to exceed the L2 (a weight read from L2 would flatter the
    memory-bound small-token GEMMs)."""
    k_run, n_run = run_shape(backend, shape)
    wbytes = k_run * n_run * 2
    copies = min(max(ceil_div(3 * l2_bytes, wbytes), 1), 8) if l2_bytes else 1
    weights = [backend.randn((k_run, n_run), seed=10 + copy, scale=1 / math.sqrt(k_run)) for copy in range(copies)]
    inputs = backend.randn((max(tokens), k_run), seed=4)
    out, turn = {}, [0]
    for count in deadline.points(f"gemm {shape.key} tokens", tokens):
        rows_in = inputs[:count]

        def run() -> Any:
            turn[0] = (turn[0] + 1) % copies
            return rows_in @ weights[turn[0]]
        out[count] = summary(backend.time(run, warm, reps, deadline))
    return out, 2 * k_run * n_run


def probe_gemm(args: dict[str, Any]) -> dict:
    """bf16 GEMM time and FLOP rate per shape and token count."""
    backend, deadline = backend_for(args), Deadline.for_probe(args, 120)
    warm, reps = _reps(args)
    err = _check_gemm(backend)
    tokens = _tokens(backend, tuple(args.get("tokens", TOKENS)))
    plan = gemm_plan(tuple(args["models"]) if args.get("models") else None)
    l2_bytes = int(backend.info().get("l2_bytes", 0))
    shapes, samples = {}, []
    for shape in deadline.points("gemm shapes", plan):
        times, flops_per_token = _time_shape(backend, shape, tokens, deadline, warm, reps, l2_bytes)
        k_run, n_run = run_shape(backend, shape)
        shapes[shape.key] = {"k": shape.k, "n": shape.n, "k_run": k_run, "n_run": n_run, "uses": list(shape.uses),
                             "seconds": {str(count): elapsed for count, elapsed in times.items()},
                             "TFLOPs": {str(count): count * flops_per_token / elapsed / 1e12
                                        for count, elapsed in times.items()}}
        samples += [{"series": "gemm", "x": float(count), "value": elapsed, "unit": "s", "k": shape.k, "n": shape.n,
                     "uses": ";".join(shape.uses[:4])} for count, elapsed in times.items()]
    if not shapes:
        raise TimeoutError("probe deadline reached before the first GEMM shape was timed")
    by_tokens = gemm_rate_by_tokens(shapes)
    return {"results": _base(backend, deadline, check_rel_err=err, shapes=shapes, TFLOPs_by_tokens=by_tokens,
                             planned_shapes=len(plan)),
            "samples": samples,
            "message": f"{len(shapes)}/{len(plan)} GEMM shapes; aggregate " + ", ".join(
                f"{count} tok {rate:.1f}" for count, rate in by_tokens.items()
                if count in ("1", "64", "1024", "8192")) + " TFLOP/s"}


def gemm_rate_by_tokens(shapes: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Aggregate FLOP rate (TFLOP/s) at each token count: all shapes' FLOPs over all their seconds, so the
    curve is the rate a layer made of these GEMMs reaches (the big shapes weigh by their time)."""
    flops: dict[str, float] = {}
    secs: dict[str, float] = {}
    for shape in shapes.values():
        for count, tflops in shape["TFLOPs"].items():
            elapsed = shape["seconds"][count]
            flops[count] = flops.get(count, 0.0) + tflops * 1e12 * elapsed
            secs[count] = secs.get(count, 0.0) + elapsed
    return {count: flops[count] / secs[count] / 1e12 for count in sorted(flops, key=int)}


# ---- attention -------------------------------------------------------------------------------------------
DECODE_CONTEXTS = (512, 2048, 8192, 32768)
DECODE_BATCHES = (1, 4, 16, 64, 256)
DECODE_MAX_BYTES = 8 * 2 ** 30                             # one layer's cache per point
PREFILL_TOKENS = (512, 1024, 2048, 4096, 8192)


@dataclass(frozen=True)
class AttentionKind:
    """One attention shape of a shipped model: query heads, cached heads, q/k width and v width."""

    name: str
    model: str
    heads: int
    kv_heads: int
    d_qk: int
    d_v: int
    mla: bool

    def table_columns(self, phase: str) -> dict[str, Any]:
        """The operator-table kind this shape's timings belong to (simroute.model.optables) and its shape
        columns: MLA (absorbed decode, or the expanded prefill, whose heads are all the table keys) or GQA."""
        mla = self.mla or self.name.startswith("mla-")
        if mla:
            return {"table": f"mla_{phase}", "heads": self.heads}
        return {"table": f"attention_{phase}", "heads": self.heads, "kv_heads": self.kv_heads, "head_dim": self.d_qk}

    def kv_bytes_per_token(self) -> int:
        """Cached bytes per token of one layer (bf16): the 576-wide latent for MLA, K and V for GQA."""
        return (self.d_qk if self.mla else self.kv_heads * (self.d_qk + self.d_v)) * 2


def decode_kinds() -> list[AttentionKind]:
    """Absorbed-MLA decode of DeepSeek-V2-Lite (16 heads) and V3 (128), GQA decode of Llama-2-7b."""
    out = [AttentionKind(f"mla-{name}", name, model.heads_q, 1, model.d_qk, model.d_v, True)
           for name, model in ((name, get_model(name)) for name in ("deepseek-v2-lite", "deepseek-v3"))]
    geom = get_model("llama-2-7b")
    return out + [AttentionKind("gqa-llama-2-7b", geom.name, geom.heads_q, geom.kv_heads, geom.d_qk, geom.d_v, False)]


def prefill_kinds() -> list[AttentionKind]:
    """Causal prefill: Llama-2-7b's heads, and DeepSeek-V2-Lite's MLA in its non-absorbed prefill form
    (q/k 128 + 64 rope wide, v 128)."""
    geom, model = get_model("llama-2-7b"), get_model("deepseek-v2-lite")
    return [AttentionKind("gqa-llama-2-7b", geom.name, geom.heads_q, geom.kv_heads, geom.d_qk, geom.d_v, False),
            AttentionKind("mla-prefill-deepseek-v2-lite", model.name, model.heads_q, model.heads_q,
                          model.qk_nope_head_dim + model.rope_dims, model.v_head_dim, False)]


def _flash_mla() -> Any:
    try:
        from flash_mla import flash_mla_with_kvcache, get_mla_metadata
    except ImportError:
        return None
    return flash_mla_with_kvcache, get_mla_metadata


def _flash_mla_call(backend: StepBackend, query: Any, cache: Any, scale: float) -> Any:
    """FlashMLA's dense decode over each sequence's own pages (page 64): q [B, h, 576], kv [B, C, 576]."""
    fwd, meta = _flash_mla()
    torch, (batch, heads, width), ctx = backend.t, query.shape, cache.shape[1]
    blocks = ceil_div(ctx, 64)
    pad = torch.zeros(batch * blocks * 64, width, dtype=backend.dtype, device=backend.dev)
    pad.view(batch, blocks * 64, width)[:, :ctx] = cache
    table = torch.arange(batch * blocks, dtype=torch.int32, device=backend.dev).view(batch, blocks)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=backend.dev)
    metadata, splits = meta(lens, heads, 1)
    query_pages = query.reshape(batch, 1, heads, width)
    return lambda: fwd(query_pages, pad.view(-1, 64, 1, width), table, lens, 512, metadata, splits,
                       softmax_scale=scale, causal=False)


def _flash_mla_usable(backend: StepBackend) -> str:
    """'' when FlashMLA is importable and agrees with the float64 reference on a small case, else why not."""
    if not backend.measures_gpu or _flash_mla() is None:
        return "FlashMLA not importable"
    rng = np.random.default_rng(6)
    query, cache = rng.standard_normal((2, 16, 576)), rng.standard_normal((2, 130, 576))
    try:
        out, _ = _flash_mla_call(backend, backend.upload(query), backend.upload(cache), 0.07)()
    except Exception as exc:  # an API this code does not know: fall back, saying why
        return f"FlashMLA failed: {type(exc).__name__}: {exc}"[:200]
    err = rel_err(backend.host(out).reshape(2, 16, 512), NumpyBackend(np.float64).mla_decode(query, cache, 0.07)[0])
    if err > BF16_TOL:
        raise AssertionError(f"FlashMLA disagrees with the numpy reference (rel err {err:.3g})")
    return ""


def _decode_call(backend: StepBackend, kind: AttentionKind, batch: int, ctx: int, seed: int,
                 flash_mla: bool = False) -> tuple[Any, str]:
    """A no-argument callable decoding one token per sequence over its own `ctx`-token cache."""
    scale = 1 / math.sqrt(192 if kind.mla else kind.d_qk)
    if kind.mla:
        query = backend.randn((batch, kind.heads, kind.d_qk), seed)
        cache = backend.randn((batch, ctx, kind.d_qk), seed + 1)
        if flash_mla:
            return _flash_mla_call(backend, query, cache, scale), "FlashMLA flash_mla_with_kvcache"
        return ((lambda: backend.mla_decode(query, cache, scale)),
                f"{backend.name}: absorbed MLA (matmul + logsumexp), (out, lse)")
    query = backend.randn((batch, kind.heads, 1, kind.d_qk), seed)
    key = backend.randn((batch, kind.kv_heads, ctx, kind.d_qk), seed + 1)
    value = backend.randn((batch, kind.kv_heads, ctx, kind.d_v), seed + 2)
    return (lambda: backend.attention(query, key, value, False, scale)), f"{backend.name}: " + (
        "scaled_dot_product_attention" if backend.measures_gpu else "softmax(q k^T) v")


def _check_attention(backend: StepBackend) -> float:
    """MLA decode (out, lse) and causal GQA attention against the float64 numpy reference."""
    ref, rng = NumpyBackend(np.float64), np.random.default_rng(5)
    query, cache = rng.standard_normal((2, 4, 576)), rng.standard_normal((2, 70, 576))
    out, lse = backend.mla_decode(backend.upload(query), backend.upload(cache), 0.07)
    want_o, want_lse = ref.mla_decode(query, cache, 0.07)
    errs = [rel_err(backend.host(out), want_o), rel_err(backend.host(lse), want_lse)]
    query, key, value = (rng.standard_normal(shape) for shape in ((1, 4, 9, 32), (1, 2, 9, 32), (1, 2, 9, 16)))
    errs.append(rel_err(backend.host(backend.attention(*map(backend.upload, (query, key, value)), True, 0.2)),
                        ref.attention(query, key, value, True, 0.2)))
    if max(errs) > BF16_TOL:
        raise AssertionError(f"{backend.name}: attention disagrees with numpy (rel errs {errs})")
    return max(errs)


def probe_decode_attention(args: dict[str, Any]) -> dict:
    """One decode step's attention per layer over context x batch: seconds and the bytes it must read."""
    backend, deadline = backend_for(args), Deadline.for_probe(args, 90)
    warm, reps = _reps(args)
    err = _check_attention(backend)
    no_flash = _flash_mla_usable(backend)
    ctxs, batches = (DECODE_CONTEXTS, DECODE_BATCHES) if backend.measures_gpu else ((64, 256), (1, 4))
    points, samples, kernels = [], [], {}
    grid = [(kind, ctx_len, batch_n) for kind in decode_kinds() for ctx_len in ctxs for batch_n in batches
            if batch_n * ctx_len * kind.kv_bytes_per_token() <= DECODE_MAX_BYTES]
    for kind, ctx, batch in deadline.points("decode attention", grid):
        call, kernels[kind.name] = _decode_call(backend, kind, batch, ctx, seed=ctx + batch, flash_mla=not no_flash)
        elapsed = summary(backend.time(call, warm, reps, deadline))
        nbytes = batch * ctx * kind.kv_bytes_per_token()
        points.append({"kind": kind.name, "context": ctx, "batch": batch, "seconds": elapsed, "kv_bytes": nbytes,
                       "GBps": nbytes / elapsed / 1e9, **kind.table_columns("decode")})
        samples.append({"series": f"decode_{kind.name}", "x": float(ctx), "value": elapsed, "unit": "s",
                        "batch": batch})
    if not points:
        raise TimeoutError("probe deadline reached before the first decode point was timed")
    best = max(point["GBps"] for point in points)
    return {"results": _base(backend, deadline, check_rel_err=err, points=points, kernels=kernels, best_GBps=best,
                             flash_mla=no_flash or "used"),
            "samples": samples, "message": f"decode attention: {len(points)}/{len(grid)} points, best cache read "
                                           f"{best:.0f} GB/s ({', '.join(sorted(set(kernels.values())))})"}


def probe_prefill_attention(args: dict[str, Any]) -> dict:
    """Causal attention of one S-token prompt: FLOP rate (pairs up to the diagonal, QK and PV)."""
    backend, deadline = backend_for(args), Deadline.for_probe(args, 60)
    warm, reps = _reps(args)
    err = _check_attention(backend)
    lengths = PREFILL_TOKENS if backend.measures_gpu else (64, 128)
    points, samples = [], []
    cases = [(prefill_kind, tokens) for prefill_kind in prefill_kinds() for tokens in lengths]
    for kind, tokens in deadline.points("prefill attention", cases):
        query, key, value = (backend.randn((1, kind.heads, tokens, width), seed=tokens + index)
                             for index, width in enumerate((kind.d_qk, kind.d_qk, kind.d_v)))
        scale = 1 / math.sqrt(kind.d_qk)
        elapsed = summary(backend.time(lambda: backend.attention(query, key, value, True, scale), warm, reps,
                                       deadline))
        flops = 2.0 * kind.heads * tokens * (tokens + 1) / 2 * (kind.d_qk + kind.d_v)
        points.append({"kind": kind.name, "tokens": tokens, "seconds": elapsed, "flops": flops,
                       "TFLOPs": flops / elapsed / 1e12, "batch": 1, **kind.table_columns("prefill")})
        samples.append({"series": f"prefill_{kind.name}", "x": float(tokens), "value": elapsed, "unit": "s"})
    if not points:
        raise TimeoutError("probe deadline reached before the first prefill point was timed")
    best = max(point["TFLOPs"] for point in points)
    return {"results": _base(backend, deadline, check_rel_err=err, points=points, best_TFLOPs=best),
            "samples": samples, "message": f"prefill attention best {best:.1f} TFLOP/s over {len(points)} points"}


# ---- one whole decoder layer ---------------------------------------------------------------------------------
LAYER_CASES = (("deepseek-v2-lite", "dense"), ("deepseek-v2-lite", "moe"), ("llama-2-7b", "dense"))
LAYER_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 8192)


def shrunk(geom: ModelGeometry) -> ModelGeometry:
    """A narrow copy of a geometry for the numpy dry run: the same operators, a fraction of the widths."""
    heads = max(geom.heads_q // 8, 1)
    return replace(geom, hidden=max(geom.hidden // REF_SHRINK, 16), intermediate=max(geom.intermediate // REF_SHRINK, 16),
                   expert_intermediate=max(geom.expert_intermediate // REF_SHRINK, 8), heads_q=heads,
                   kv_heads=heads if not geom.is_mla else geom.kv_heads, q_lora_rank=geom.q_lora_rank // REF_SHRINK)


class DecoderLayer:
    """One layer of `kind` with random weights, forward over a prefill chunk of T tokens (causal attention
    over the chunk). The weights are `linear_ops(tp=1, kind)` of the geometry; RoPE and the MLA latent norm
    are left out (elementwise, a few us). `stages(x)` gives each operator as a timed callable."""

    def __init__(self, backend: StepBackend, geom: ModelGeometry, kind: str, seed: int = 0,
                 host_weights: dict[str, np.ndarray] | None = None) -> None:
        self.be, self.geom, self.kind = backend, geom, kind
        self.ops = {linear.name: linear for linear in geom.linear_ops(1, kind)}
        if host_weights is not None:          # the correctness check: the same weights on both backends
            self.w = {name: [backend.upload(weights) for weights in host_weights[name]] for name in self.ops}
        else:                                 # timing: random weights made on the device
            self.w = {name: [backend.randn((linear.k, linear.n), seed=seed + 97 * index + expert,
                                           scale=1 / math.sqrt(linear.k))
                             for expert in range(linear.experts)]
                      for index, (name, linear) in enumerate(self.ops.items())}

    @staticmethod
    def random_weights(geom: ModelGeometry, kind: str, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {linear.name: rng.standard_normal((linear.experts, linear.k, linear.n)) / math.sqrt(linear.k)
                for linear in geom.linear_ops(1, kind)}

    def _lin(self, name: str, hidden: Any, expert: int = 0) -> Any:
        return hidden @ self.w[name][expert]

    def attention_block(self, hidden: Any) -> Any:
        geom, backend, tokens = self.geom, self.be, hidden.shape[0]
        normed = backend.rmsnorm(hidden)
        heads = geom.heads_q
        if not geom.is_mla:
            qkv = self._lin("qkv", normed)
            head_dim, kvh = geom.d_qk, geom.kv_heads
            query = qkv[:, :heads * head_dim].reshape(tokens, heads, head_dim).swapaxes(0, 1)[None]
            key = qkv[:, heads * head_dim:(heads + kvh) * head_dim].reshape(tokens, kvh, head_dim).swapaxes(0, 1)[None]
            value = qkv[:, (heads + kvh) * head_dim:].reshape(tokens, kvh, head_dim).swapaxes(0, 1)[None]
            scale, v_dim = 1 / math.sqrt(head_dim), geom.d_v
        else:
            qk_dim, v_dim = geom.qk_nope_head_dim + geom.rope_dims, geom.v_head_dim
            qin = self._lin("q_b", self._lin("q_a", normed)) if "q_a" in self.ops else self._lin("q", normed)
            query = qin.reshape(tokens, heads, qk_dim).swapaxes(0, 1)[None]
            latent = self._lin("kv_a", normed)
            kvb = self._lin("kv_b", latent[:, :geom.d_v]).reshape(tokens, heads, geom.qk_nope_head_dim + v_dim)
            rope = backend.expand(latent[:, None, geom.d_v:], (tokens, heads, geom.rope_dims))
            key = backend.cat([kvb[..., :geom.qk_nope_head_dim], rope], axis=-1).swapaxes(0, 1)[None]
            value = kvb[..., geom.qk_nope_head_dim:].swapaxes(0, 1)[None]
            scale = 1 / math.sqrt(qk_dim)
        attended = backend.attention(query, key, value, True, scale)[0].swapaxes(0, 1).reshape(tokens, heads * v_dim)
        return hidden + self._lin("o", attended)

    def routing(self, hidden: Any) -> list[tuple[int, Any, Any]]:
        """(expert, token rows, gate weights) of the experts this chunk reaches (host-side, once)."""
        backend, geom = self.be, self.geom
        gates = backend.softmax(self._lin("router", backend.rmsnorm(hidden)))
        vals, idx = backend.topk(gates, geom.experts_per_token)
        idx_h, vals_h = backend.host(idx).astype(np.int64), backend.host(vals)
        out = []
        for expert in np.unique(idx_h):
            rows, slot = np.nonzero(idx_h == expert)
            out.append((int(expert), backend.index(rows), backend.upload(vals_h[rows, slot][:, None])))
        return out

    def ffn_block(self, hidden: Any, routes: list[tuple[int, Any, Any]] | None = None) -> Any:
        backend, normed = self.be, self.be.rmsnorm(hidden)
        if self.kind == "dense":
            return hidden + self._glu("ffn_up", "ffn_down", normed)
        out = hidden + self._glu("shared_up", "shared_down", normed) if "shared_up" in self.ops else hidden + 0
        for expert, rows, gate in routes if routes is not None else self.routing(hidden):
            expert_out = self._glu("expert_up", "expert_down", backend.take_rows(normed, rows), expert)
            backend.index_add(out, rows, expert_out * gate)
        return out

    def _glu(self, up_proj: str, down_proj: str, normed: Any, expert: int = 0) -> Any:
        gate_up = self._lin(up_proj, normed, expert)
        half = gate_up.shape[-1] // 2
        return self._lin(down_proj, self.be.silu(gate_up[:, :half]) * gate_up[:, half:], expert)

    def forward(self, hidden: Any, routes: list[tuple[int, Any, Any]] | None = None) -> Any:
        return self.ffn_block(self.attention_block(hidden), routes)


def _check_layer(backend: StepBackend) -> float:
    """Each layer case, narrowed, on the backend against the same weights in float64 numpy."""
    ref, errs = NumpyBackend(np.float64), []
    for model, kind in LAYER_CASES:
        geom = shrunk(get_model(model))
        weights = DecoderLayer.random_weights(geom, kind, seed=7)
        hidden = np.random.default_rng(8).standard_normal((12, geom.hidden))
        want_layer = DecoderLayer(ref, geom, kind, host_weights=weights)
        routes = want_layer.routing(hidden) if kind == "moe" else None
        want = want_layer.forward(hidden, routes)
        layer = DecoderLayer(backend, geom, kind, host_weights=weights)
        got_routes = None if routes is None else [
            (expert, backend.index(ref.host(rows).astype(np.int64)), backend.upload(gate))
            for expert, rows, gate in routes]
        errs.append(rel_err(backend.host(layer.forward(backend.upload(hidden), got_routes)), want))
    if max(errs) > 2 * BF16_TOL:
        raise AssertionError(f"{backend.name}: decoder layer disagrees with numpy (rel errs {errs})")
    return max(errs)


def _attention_shapes(geom: ModelGeometry, tokens: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    if geom.is_mla:
        qk_dim = geom.qk_nope_head_dim + geom.rope_dims
        return ((1, geom.heads_q, tokens, qk_dim), (1, geom.heads_q, tokens, qk_dim),
                (1, geom.heads_q, tokens, geom.v_head_dim))
    return ((1, geom.heads_q, tokens, geom.d_qk), (1, geom.kv_heads, tokens, geom.d_qk),
            (1, geom.kv_heads, tokens, geom.d_v))


def _time_layer(backend: StepBackend, layer: DecoderLayer, tokens: int, deadline: Deadline, warm: int,
                reps: int) -> dict[str, Any]:
    """Whole-layer seconds and each operator's: every linear op (experts over the rows routed to them), the
    attention kernel, and the rest (norms, activations, residuals, routing's gathers)."""
    hidden = backend.randn((tokens, layer.geom.hidden), seed=tokens)
    routes = layer.routing(hidden) if layer.kind == "moe" else None
    whole = summary(backend.time(lambda: layer.forward(hidden, routes), warm, reps, deadline))
    ops: dict[str, float] = {}
    for name, weight_op in layer.ops.items():
        if weight_op.experts > 1:
            ins = [(expert, backend.randn((int(backend.host(rows).shape[0]), weight_op.k), seed=expert))
                   for expert, rows, _ in routes or []]
            ops[name] = summary(backend.time(lambda: [layer._lin(name, rows_in, expert) for expert, rows_in in ins],
                                             warm, reps, deadline))
        else:
            rows_in = backend.randn((tokens, weight_op.k), seed=1)
            ops[name] = summary(backend.time(lambda: layer._lin(name, rows_in), warm, reps, deadline))
    query, key, value = (backend.randn(shape, seed=index)
                         for index, shape in enumerate(_attention_shapes(layer.geom, tokens)))
    scale = 1 / math.sqrt(query.shape[-1])
    attn = summary(backend.time(lambda: backend.attention(query, key, value, True, scale), warm, reps, deadline))
    linear = sum(ops.values())
    return {"layer_s": whole, "linear_s": linear, "attention_s": attn, "rest_s": max(whole - linear - attn, 0.0),
            "ops_s": ops, "experts_reached": len(routes or [])}


def probe_decoder_layer(args: dict[str, Any]) -> dict:
    """Per-operator time of one decoder layer over prefill chunks of T tokens (one sequence)."""
    backend, deadline = backend_for(args), Deadline.for_probe(args, 90)
    warm, reps = _reps(args)
    err = _check_layer(backend)
    tokens = _tokens(backend, LAYER_TOKENS)
    out: dict[str, dict[str, Any]] = {}
    samples = []
    for model, kind in deadline.points("decoder layers", LAYER_CASES):
        geom = get_model(model) if backend.measures_gpu else shrunk(get_model(model))
        layer = DecoderLayer(backend, geom, kind, seed=11)
        case = out.setdefault(f"{model}/{kind}", {"model": model, "kind": kind, "tokens": {}})
        for count in deadline.points(f"{model}/{kind} tokens", tokens):
            timing = case["tokens"][str(count)] = _time_layer(backend, layer, count, deadline, warm, reps)
            samples += [{"series": f"layer_{model}_{kind}_{part}", "x": float(count), "value": timing[f"{part}_s"],
                         "unit": "s"} for part in ("layer", "linear", "attention", "rest")]
        del layer
    if not any(case_out["tokens"] for case_out in out.values()):
        raise TimeoutError("probe deadline reached before the first layer was timed")
    shown = [f"{name} T={count}: {timing['layer_s'] * 1e3:.2f} ms" for name, case_out in out.items()
             for count, timing in case_out["tokens"].items() if count in ("1", "1024")]
    return {"results": _base(backend, deadline, check_rel_err=err, layers=out, narrowed=not backend.measures_gpu),
            "samples": samples, "message": "; ".join(shown) or "layers timed"}


# ---- per-iteration launch overhead -----------------------------------------------------------------------
KERNELS_PER_LAYER = 16          # a decode layer's launches in an unfused engine (norms, GEMMs, attention, ...)


def probe_launch_overhead(args: dict[str, Any]) -> dict:
    """Wall time of one iteration's launches of tiny kernels (layers x KERNELS_PER_LAYER of DeepSeek-V2-Lite),
    launched eagerly from Python and replayed as one CUDA graph. Host clock around launch + synchronize: the
    launch path is what is measured, the kernels themselves do ~nothing."""
    import time as _time
    backend, deadline = backend_for(args), Deadline.for_probe(args, 45)
    launches = int(args.get("launches", get_model("deepseek-v2-lite").layers * KERNELS_PER_LAYER))
    iters = 5 if args.get("quick") else 30
    res, samples = {}, []
    for mode in deadline.points("launch modes", ("eager", "graph")):
        step, counter = backend.launch_chain(launches, graph=(mode == "graph"))
        before = counter()
        step()
        backend.sync()
        if counter() - before != launches:
            raise AssertionError(f"{mode}: one iteration bumped the counter {counter() - before:g} times, "
                                 f"not {launches}")
        times = []
        for _ in range(iters):
            started = _time.perf_counter()
            step()
            backend.sync()
            times.append(_time.perf_counter() - started)
            if deadline.expired():
                break
        res[mode] = summary(times) * 1e6
        samples += [{"series": f"iteration_{mode}", "x": float(launches), "value": seconds, "unit": "s"}
                    for seconds in times]
    if "eager" not in res:
        raise TimeoutError("probe deadline reached before the eager iteration was timed")
    graph = res.get("graph")
    graphs = "CUDA graph replay" if backend.measures_gpu else "none (reference: the eager loop)"
    return {"results": _base(backend, deadline, launches=launches, iteration_us=res["eager"], iteration_graph_us=graph,
                             graphs=graphs),
            "samples": samples,
            "message": f"{launches} launches: eager {res['eager']:.0f} us" +
                       (f", CUDA graph {graph:.0f} us" if graph is not None else ", graph not reached")}
