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

TOKENS = tuple(2 ** i for i in range(14))                  # 1 .. 8192
TPS = (1, 2, 4, 8)
FIRST_MODELS = ("deepseek-v2-lite", "llama-2-7b")          # the decoder-layer models, measured first
REF_SHRINK = 16                                            # the dry run's numpy GEMMs are this much narrower
REF_MAX_TOKENS = 64
BF16_TOL = 3e-2


def _reps(args: dict[str, Any]) -> tuple[int, int]:
    return (1, 3) if args.get("quick") else (3, 10)


def _tokens(be: StepBackend, tokens: tuple[int, ...] = TOKENS) -> tuple[int, ...]:
    return tokens if be.measures_gpu else tuple(t for t in tokens if t <= REF_MAX_TOKENS)


def _base(be: StepBackend, dl: Deadline, **results: Any) -> dict[str, Any]:
    return {"backend": be.name, "measures_gpu": be.measures_gpu, "sweep": dl.note(), "framework": be.framework,
            "framework_version": be.framework_version, "dtype": be.dtype_label, **be.info(), **results}


# ---- HBM: device-to-device copy ----------------------------------------------------------------------------
COPY_MiB = (64, 256, 1024, 4096)


def probe_hbm(args: dict[str, Any]) -> dict:
    """Copy rate of large device buffers, counted as read + write bytes (what the HBM moves)."""
    be, dl = backend_for(args), Deadline.for_probe(args, 60)
    warm, reps = _reps(args)
    src = be.randn((1 << 20,), seed=1)
    dst = be.empty_like(src)
    be.copy(dst, src)
    if not np.array_equal(be.host(dst), be.host(src)):
        raise AssertionError("device-to-device copy did not reproduce its source")
    sizes = COPY_MiB if be.measures_gpu else (1, 4, 16)
    rates, samples = {}, []
    for mib in dl.points("copy sizes", sizes):
        a = be.randn((mib * 2 ** 20 // 2,), seed=2)           # mib MiB of bf16 (numpy's float32: twice)
        b = be.empty_like(a)
        nbytes = 2 * be.nbytes(a)                             # read + write
        xs = be.time(lambda: be.copy(b, a), warm, reps, dl)
        rates[str(mib)] = nbytes / summary(xs) / 1e9
        samples += [{"series": "d2d_copy", "x": float(mib), "value": v, "unit": "s", "bytes_moved": nbytes}
                    for v in xs]
        del a, b
    if not rates:
        raise TimeoutError("probe deadline reached before the first copy was timed")
    best = max(rates.values())
    return {"results": _base(be, dl, copy_GBps=rates, best_GBps=best),
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
    names = list(models) if models else [*FIRST_MODELS, *(m for m in MODELS if m not in FIRST_MODELS)]
    return [g for g in (get_model(n) for n in names) if g.has_linear_geometry]


def gemm_plan(models: tuple[str, ...] | None = None, tps: tuple[int, ...] = TPS) -> list[GemmShape]:
    """The distinct GEMM weight shapes of the models' layers (attention projections, FFN up/down, router,
    shared and routed experts) at each TP degree, from `ModelGeometry.linear_ops`: TP 1 of the
    decoder-layer models first, so a sweep cut short by its deadline has those."""
    uses: dict[tuple[int, int], list[str]] = {}
    for tp in tps:
        for geom in _ordered_models(models):
            for kind in geom.layer_kinds():
                for op in geom.linear_ops(tp, kind):
                    uses.setdefault((op.k, op.n), []).append(f"{geom.name}/{kind}/{op.name}/tp{tp}")
    return [GemmShape(k, n, tuple(u)) for (k, n), u in uses.items()]


def _check_gemm(be: StepBackend) -> float:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((33, 96)), rng.standard_normal((96, 40))
    err = rel_err(be.host(be.upload(a) @ be.upload(b)), a @ b)
    if err > BF16_TOL:
        raise AssertionError(f"{be.name}: GEMM disagrees with numpy (rel err {err:.3g})")
    return err


def run_shape(be: StepBackend, shape: GemmShape) -> tuple[int, int]:
    """(k, n) as timed: the model's on the GPU, narrower on the numpy stand-in."""
    return (shape.k, shape.n) if be.measures_gpu else (max(shape.k // REF_SHRINK, 8), max(shape.n // REF_SHRINK, 8))


def _time_shape(be: StepBackend, shape: GemmShape, tokens: tuple[int, ...], dl: Deadline, warm: int, reps: int,
                l2_bytes: int) -> tuple[dict[int, float], int]:
    """(seconds per GEMM of `shape` at each token count, FLOPs per token as run: narrower on the numpy
    stand-in); weights rotate over enough copies to exceed the L2 (a weight read from L2 would flatter the
    memory-bound small-token GEMMs)."""
    k, n = run_shape(be, shape)
    wbytes = k * n * 2
    copies = min(max(ceil_div(3 * l2_bytes, wbytes), 1), 8) if l2_bytes else 1
    weights = [be.randn((k, n), seed=10 + c, scale=1 / math.sqrt(k)) for c in range(copies)]
    x = be.randn((max(tokens), k), seed=4)
    out, turn = {}, [0]
    for m in dl.points(f"gemm {shape.key} tokens", tokens):
        xm = x[:m]

        def run() -> Any:
            turn[0] = (turn[0] + 1) % copies
            return xm @ weights[turn[0]]
        out[m] = summary(be.time(run, warm, reps, dl))
    return out, 2 * k * n


def probe_gemm(args: dict[str, Any]) -> dict:
    """bf16 GEMM time and FLOP rate per shape and token count."""
    be, dl = backend_for(args), Deadline.for_probe(args, 120)
    warm, reps = _reps(args)
    err = _check_gemm(be)
    tokens = _tokens(be, tuple(args.get("tokens", TOKENS)))
    plan = gemm_plan(tuple(args["models"]) if args.get("models") else None)
    l2 = int(be.info().get("l2_bytes", 0))
    shapes, samples = {}, []
    for shape in dl.points("gemm shapes", plan):
        times, flops_per_token = _time_shape(be, shape, tokens, dl, warm, reps, l2)
        k_run, n_run = run_shape(be, shape)
        shapes[shape.key] = {"k": shape.k, "n": shape.n, "k_run": k_run, "n_run": n_run, "uses": list(shape.uses),
                             "seconds": {str(m): t for m, t in times.items()},
                             "TFLOPs": {str(m): m * flops_per_token / t / 1e12 for m, t in times.items()}}
        samples += [{"series": "gemm", "x": float(m), "value": t, "unit": "s", "k": shape.k, "n": shape.n,
                     "uses": ";".join(shape.uses[:4])} for m, t in times.items()]
    if not shapes:
        raise TimeoutError("probe deadline reached before the first GEMM shape was timed")
    by_tokens = gemm_rate_by_tokens(shapes)
    return {"results": _base(be, dl, check_rel_err=err, shapes=shapes, TFLOPs_by_tokens=by_tokens,
                             planned_shapes=len(plan)),
            "samples": samples,
            "message": f"{len(shapes)}/{len(plan)} GEMM shapes; aggregate " + ", ".join(
                f"{m} tok {r:.1f}" for m, r in by_tokens.items() if m in ("1", "64", "1024", "8192")) + " TFLOP/s"}


def gemm_rate_by_tokens(shapes: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Aggregate FLOP rate (TFLOP/s) at each token count: all shapes' FLOPs over all their seconds, so the
    curve is the rate a layer made of these GEMMs reaches (the big shapes weigh by their time)."""
    flops: dict[str, float] = {}
    secs: dict[str, float] = {}
    for s in shapes.values():
        for m, tf in s["TFLOPs"].items():
            t = s["seconds"][m]
            flops[m] = flops.get(m, 0.0) + tf * 1e12 * t
            secs[m] = secs.get(m, 0.0) + t
    return {m: flops[m] / secs[m] / 1e12 for m in sorted(flops, key=int)}


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
    out = [AttentionKind(f"mla-{m}", m, get_model(m).heads_q, 1, get_model(m).d_qk, get_model(m).d_v, True)
           for m in ("deepseek-v2-lite", "deepseek-v3")]
    g = get_model("llama-2-7b")
    return out + [AttentionKind("gqa-llama-2-7b", g.name, g.heads_q, g.kv_heads, g.d_qk, g.d_v, False)]


def prefill_kinds() -> list[AttentionKind]:
    """Causal prefill: Llama-2-7b's heads, and DeepSeek-V2-Lite's MLA in its non-absorbed prefill form
    (q/k 128 + 64 rope wide, v 128)."""
    g, m = get_model("llama-2-7b"), get_model("deepseek-v2-lite")
    return [AttentionKind("gqa-llama-2-7b", g.name, g.heads_q, g.kv_heads, g.d_qk, g.d_v, False),
            AttentionKind("mla-prefill-deepseek-v2-lite", m.name, m.heads_q, m.heads_q,
                          m.qk_nope_head_dim + m.rope_dims, m.v_head_dim, False)]


def _flash_mla() -> Any:
    try:
        from flash_mla import flash_mla_with_kvcache, get_mla_metadata
    except ImportError:
        return None
    return flash_mla_with_kvcache, get_mla_metadata


def _flash_mla_call(be: StepBackend, q: Any, kv: Any, scale: float) -> Any:
    """FlashMLA's dense decode over each sequence's own pages (page 64): q [B, h, 576], kv [B, C, 576]."""
    fwd, meta = _flash_mla()
    t, (batch, heads, d), ctx = be.t, q.shape, kv.shape[1]
    blocks = ceil_div(ctx, 64)
    pad = t.zeros(batch * blocks * 64, d, dtype=be.dtype, device=be.dev)
    pad.view(batch, blocks * 64, d)[:, :ctx] = kv
    table = t.arange(batch * blocks, dtype=t.int32, device=be.dev).view(batch, blocks)
    lens = t.full((batch,), ctx, dtype=t.int32, device=be.dev)
    md, splits = meta(lens, heads, 1)
    qq = q.reshape(batch, 1, heads, d)
    return lambda: fwd(qq, pad.view(-1, 64, 1, d), table, lens, 512, md, splits, softmax_scale=scale, causal=False)


def _flash_mla_usable(be: StepBackend) -> str:
    """'' when FlashMLA is importable and agrees with the float64 reference on a small case, else why not."""
    if not be.measures_gpu or _flash_mla() is None:
        return "FlashMLA not importable"
    rng = np.random.default_rng(6)
    q, kv = rng.standard_normal((2, 16, 576)), rng.standard_normal((2, 130, 576))
    try:
        out, _ = _flash_mla_call(be, be.upload(q), be.upload(kv), 0.07)()
    except Exception as exc:  # an API this code does not know: fall back, saying why
        return f"FlashMLA failed: {type(exc).__name__}: {exc}"[:200]
    err = rel_err(be.host(out).reshape(2, 16, 512), NumpyBackend(np.float64).mla_decode(q, kv, 0.07)[0])
    if err > BF16_TOL:
        raise AssertionError(f"FlashMLA disagrees with the numpy reference (rel err {err:.3g})")
    return ""


def _decode_call(be: StepBackend, kind: AttentionKind, batch: int, ctx: int, seed: int,
                 flash_mla: bool = False) -> tuple[Any, str]:
    """A no-argument callable decoding one token per sequence over its own `ctx`-token cache."""
    scale = 1 / math.sqrt(192 if kind.mla else kind.d_qk)
    if kind.mla:
        q, kv = be.randn((batch, kind.heads, kind.d_qk), seed), be.randn((batch, ctx, kind.d_qk), seed + 1)
        if flash_mla:
            return _flash_mla_call(be, q, kv, scale), "FlashMLA flash_mla_with_kvcache"
        return (lambda: be.mla_decode(q, kv, scale)), f"{be.name}: absorbed MLA (matmul + logsumexp), (out, lse)"
    q = be.randn((batch, kind.heads, 1, kind.d_qk), seed)
    k = be.randn((batch, kind.kv_heads, ctx, kind.d_qk), seed + 1)
    v = be.randn((batch, kind.kv_heads, ctx, kind.d_v), seed + 2)
    return (lambda: be.attention(q, k, v, False, scale)), f"{be.name}: " + (
        "scaled_dot_product_attention" if be.measures_gpu else "softmax(q k^T) v")


def _check_attention(be: StepBackend) -> float:
    """MLA decode (out, lse) and causal GQA attention against the float64 numpy reference."""
    ref, rng = NumpyBackend(np.float64), np.random.default_rng(5)
    q, kv = rng.standard_normal((2, 4, 576)), rng.standard_normal((2, 70, 576))
    out, lse = be.mla_decode(be.upload(q), be.upload(kv), 0.07)
    want_o, want_lse = ref.mla_decode(q, kv, 0.07)
    errs = [rel_err(be.host(out), want_o), rel_err(be.host(lse), want_lse)]
    q, k, v = (rng.standard_normal(s) for s in ((1, 4, 9, 32), (1, 2, 9, 32), (1, 2, 9, 16)))
    errs.append(rel_err(be.host(be.attention(*map(be.upload, (q, k, v)), True, 0.2)),
                        ref.attention(q, k, v, True, 0.2)))
    if max(errs) > BF16_TOL:
        raise AssertionError(f"{be.name}: attention disagrees with numpy (rel errs {errs})")
    return max(errs)


def probe_decode_attention(args: dict[str, Any]) -> dict:
    """One decode step's attention per layer over context x batch: seconds and the bytes it must read."""
    be, dl = backend_for(args), Deadline.for_probe(args, 90)
    warm, reps = _reps(args)
    err = _check_attention(be)
    no_flash = _flash_mla_usable(be)
    ctxs, batches = (DECODE_CONTEXTS, DECODE_BATCHES) if be.measures_gpu else ((64, 256), (1, 4))
    points, samples, kernels = [], [], {}
    grid = [(kind, c, b) for kind in decode_kinds() for c in ctxs for b in batches
            if b * c * kind.kv_bytes_per_token() <= DECODE_MAX_BYTES]
    for kind, ctx, batch in dl.points("decode attention", grid):
        fn, kernels[kind.name] = _decode_call(be, kind, batch, ctx, seed=ctx + batch, flash_mla=not no_flash)
        t = summary(be.time(fn, warm, reps, dl))
        nbytes = batch * ctx * kind.kv_bytes_per_token()
        points.append({"kind": kind.name, "context": ctx, "batch": batch, "seconds": t, "kv_bytes": nbytes,
                       "GBps": nbytes / t / 1e9, **kind.table_columns("decode")})
        samples.append({"series": f"decode_{kind.name}", "x": float(ctx), "value": t, "unit": "s", "batch": batch})
    if not points:
        raise TimeoutError("probe deadline reached before the first decode point was timed")
    best = max(p["GBps"] for p in points)
    return {"results": _base(be, dl, check_rel_err=err, points=points, kernels=kernels, best_GBps=best,
                             flash_mla=no_flash or "used"),
            "samples": samples, "message": f"decode attention: {len(points)}/{len(grid)} points, best cache read "
                                           f"{best:.0f} GB/s ({', '.join(sorted(set(kernels.values())))})"}


def probe_prefill_attention(args: dict[str, Any]) -> dict:
    """Causal attention of one S-token prompt: FLOP rate (pairs up to the diagonal, QK and PV)."""
    be, dl = backend_for(args), Deadline.for_probe(args, 60)
    warm, reps = _reps(args)
    err = _check_attention(be)
    lengths = PREFILL_TOKENS if be.measures_gpu else (64, 128)
    points, samples = [], []
    for kind, s in dl.points("prefill attention", [(k, s) for k in prefill_kinds() for s in lengths]):
        q, k, v = (be.randn((1, kind.heads, s, d), seed=s + i) for i, d in enumerate((kind.d_qk, kind.d_qk,
                                                                                       kind.d_v)))
        t = summary(be.time(lambda: be.attention(q, k, v, True, 1 / math.sqrt(kind.d_qk)), warm, reps, dl))
        flops = 2.0 * kind.heads * s * (s + 1) / 2 * (kind.d_qk + kind.d_v)
        points.append({"kind": kind.name, "tokens": s, "seconds": t, "flops": flops, "TFLOPs": flops / t / 1e12,
                       "batch": 1, **kind.table_columns("prefill")})
        samples.append({"series": f"prefill_{kind.name}", "x": float(s), "value": t, "unit": "s"})
    if not points:
        raise TimeoutError("probe deadline reached before the first prefill point was timed")
    best = max(p["TFLOPs"] for p in points)
    return {"results": _base(be, dl, check_rel_err=err, points=points, best_TFLOPs=best),
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

    def __init__(self, be: StepBackend, geom: ModelGeometry, kind: str, seed: int = 0,
                 host_weights: dict[str, np.ndarray] | None = None) -> None:
        self.be, self.geom, self.kind = be, geom, kind
        self.ops = {op.name: op for op in geom.linear_ops(1, kind)}
        if host_weights is not None:          # the correctness check: the same weights on both backends
            self.w = {name: [be.upload(m) for m in host_weights[name]] for name in self.ops}
        else:                                 # timing: random weights made on the device
            self.w = {name: [be.randn((op.k, op.n), seed=seed + 97 * i + e, scale=1 / math.sqrt(op.k))
                             for e in range(op.experts)] for i, (name, op) in enumerate(self.ops.items())}

    @staticmethod
    def random_weights(geom: ModelGeometry, kind: str, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {op.name: rng.standard_normal((op.experts, op.k, op.n)) / math.sqrt(op.k)
                for op in geom.linear_ops(1, kind)}

    def _lin(self, name: str, x: Any, expert: int = 0) -> Any:
        return x @ self.w[name][expert]

    def attention_block(self, x: Any) -> Any:
        g, be, t = self.geom, self.be, x.shape[0]
        h = be.rmsnorm(x)
        hq = g.heads_q
        if not g.is_mla:
            qkv = self._lin("qkv", h)
            d, kvh = g.d_qk, g.kv_heads
            q = qkv[:, :hq * d].reshape(t, hq, d).swapaxes(0, 1)[None]
            k = qkv[:, hq * d:(hq + kvh) * d].reshape(t, kvh, d).swapaxes(0, 1)[None]
            v = qkv[:, (hq + kvh) * d:].reshape(t, kvh, d).swapaxes(0, 1)[None]
            scale, dv = 1 / math.sqrt(d), g.d_v
        else:
            qk, dv = g.qk_nope_head_dim + g.rope_dims, g.v_head_dim
            qin = self._lin("q_b", self._lin("q_a", h)) if "q_a" in self.ops else self._lin("q", h)
            q = qin.reshape(t, hq, qk).swapaxes(0, 1)[None]
            c = self._lin("kv_a", h)
            kvb = self._lin("kv_b", c[:, :g.d_v]).reshape(t, hq, g.qk_nope_head_dim + dv)
            rope = be.expand(c[:, None, g.d_v:], (t, hq, g.rope_dims))
            k = be.cat([kvb[..., :g.qk_nope_head_dim], rope], axis=-1).swapaxes(0, 1)[None]
            v = kvb[..., g.qk_nope_head_dim:].swapaxes(0, 1)[None]
            scale = 1 / math.sqrt(qk)
        o = be.attention(q, k, v, True, scale)[0].swapaxes(0, 1).reshape(t, hq * dv)
        return x + self._lin("o", o)

    def routing(self, x: Any) -> list[tuple[int, Any, Any]]:
        """(expert, token rows, gate weights) of the experts this chunk reaches (host-side, once)."""
        be, g = self.be, self.geom
        gates = be.softmax(self._lin("router", be.rmsnorm(x)))
        vals, idx = be.topk(gates, g.experts_per_token)
        idx_h, vals_h = be.host(idx).astype(np.int64), be.host(vals)
        out = []
        for e in np.unique(idx_h):
            rows, slot = np.nonzero(idx_h == e)
            out.append((int(e), be.index(rows), be.upload(vals_h[rows, slot][:, None])))
        return out

    def ffn_block(self, x: Any, routes: list[tuple[int, Any, Any]] | None = None) -> Any:
        be, h = self.be, self.be.rmsnorm(x)
        if self.kind == "dense":
            return x + self._glu("ffn_up", "ffn_down", h)
        out = x + self._glu("shared_up", "shared_down", h) if "shared_up" in self.ops else x + 0
        for e, rows, gate in routes if routes is not None else self.routing(x):
            be.index_add(out, rows, self._glu("expert_up", "expert_down", be.take_rows(h, rows), e) * gate)
        return out

    def _glu(self, up: str, down: str, h: Any, expert: int = 0) -> Any:
        u = self._lin(up, h, expert)
        f = u.shape[-1] // 2
        return self._lin(down, self.be.silu(u[:, :f]) * u[:, f:], expert)

    def forward(self, x: Any, routes: list[tuple[int, Any, Any]] | None = None) -> Any:
        return self.ffn_block(self.attention_block(x), routes)


def _check_layer(be: StepBackend) -> float:
    """Each layer case, narrowed, on the backend against the same weights in float64 numpy."""
    ref, errs = NumpyBackend(np.float64), []
    for model, kind in LAYER_CASES:
        geom = shrunk(get_model(model))
        w = DecoderLayer.random_weights(geom, kind, seed=7)
        x = np.random.default_rng(8).standard_normal((12, geom.hidden))
        want_layer = DecoderLayer(ref, geom, kind, host_weights=w)
        routes = want_layer.routing(x) if kind == "moe" else None
        want = want_layer.forward(x, routes)
        layer = DecoderLayer(be, geom, kind, host_weights=w)
        got_routes = None if routes is None else [(e, be.index(ref.host(r).astype(np.int64)), be.upload(g))
                                                  for e, r, g in routes]
        errs.append(rel_err(be.host(layer.forward(be.upload(x), got_routes)), want))
    if max(errs) > 2 * BF16_TOL:
        raise AssertionError(f"{be.name}: decoder layer disagrees with numpy (rel errs {errs})")
    return max(errs)


def _attention_shapes(geom: ModelGeometry, t: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    if geom.is_mla:
        qk = geom.qk_nope_head_dim + geom.rope_dims
        return (1, geom.heads_q, t, qk), (1, geom.heads_q, t, qk), (1, geom.heads_q, t, geom.v_head_dim)
    return ((1, geom.heads_q, t, geom.d_qk), (1, geom.kv_heads, t, geom.d_qk), (1, geom.kv_heads, t, geom.d_v))


def _time_layer(be: StepBackend, layer: DecoderLayer, t: int, dl: Deadline, warm: int, reps: int) -> dict[str, Any]:
    """Whole-layer seconds and each operator's: every linear op (experts over the rows routed to them), the
    attention kernel, and the rest (norms, activations, residuals, routing's gathers)."""
    x = be.randn((t, layer.geom.hidden), seed=t)
    routes = layer.routing(x) if layer.kind == "moe" else None
    whole = summary(be.time(lambda: layer.forward(x, routes), warm, reps, dl))
    ops: dict[str, float] = {}
    for name, op in layer.ops.items():
        if op.experts > 1:
            ins = [(e, be.randn((int(be.host(r).shape[0]), op.k), seed=e)) for e, r, _ in routes or []]
            ops[name] = summary(be.time(lambda: [layer._lin(name, xi, e) for e, xi in ins], warm, reps, dl))
        else:
            xi = be.randn((t, op.k), seed=1)
            ops[name] = summary(be.time(lambda: layer._lin(name, xi), warm, reps, dl))
    q, k, v = (be.randn(s, seed=i) for i, s in enumerate(_attention_shapes(layer.geom, t)))
    scale = 1 / math.sqrt(q.shape[-1])
    attn = summary(be.time(lambda: be.attention(q, k, v, True, scale), warm, reps, dl))
    linear = sum(ops.values())
    return {"layer_s": whole, "linear_s": linear, "attention_s": attn, "rest_s": max(whole - linear - attn, 0.0),
            "ops_s": ops, "experts_reached": len(routes or [])}


def probe_decoder_layer(args: dict[str, Any]) -> dict:
    """Per-operator time of one decoder layer over prefill chunks of T tokens (one sequence)."""
    be, dl = backend_for(args), Deadline.for_probe(args, 90)
    warm, reps = _reps(args)
    err = _check_layer(be)
    tokens = _tokens(be, LAYER_TOKENS)
    out: dict[str, dict[str, Any]] = {}
    samples = []
    for model, kind in dl.points("decoder layers", LAYER_CASES):
        geom = get_model(model) if be.measures_gpu else shrunk(get_model(model))
        layer = DecoderLayer(be, geom, kind, seed=11)
        case = out.setdefault(f"{model}/{kind}", {"model": model, "kind": kind, "tokens": {}})
        for t in dl.points(f"{model}/{kind} tokens", tokens):
            r = case["tokens"][str(t)] = _time_layer(be, layer, t, dl, warm, reps)
            samples += [{"series": f"layer_{model}_{kind}_{part}", "x": float(t), "value": r[f"{part}_s"],
                         "unit": "s"} for part in ("layer", "linear", "attention", "rest")]
        del layer
    if not any(c["tokens"] for c in out.values()):
        raise TimeoutError("probe deadline reached before the first layer was timed")
    shown = [f"{name} T={t}: {r['layer_s'] * 1e3:.2f} ms" for name, c in out.items()
             for t, r in c["tokens"].items() if t in ("1", "1024")]
    return {"results": _base(be, dl, check_rel_err=err, layers=out, narrowed=not be.measures_gpu),
            "samples": samples, "message": "; ".join(shown) or "layers timed"}


# ---- per-iteration launch overhead -----------------------------------------------------------------------
KERNELS_PER_LAYER = 16          # a decode layer's launches in an unfused engine (norms, GEMMs, attention, ...)


def probe_launch_overhead(args: dict[str, Any]) -> dict:
    """Wall time of one iteration's launches of tiny kernels (layers x KERNELS_PER_LAYER of DeepSeek-V2-Lite),
    launched eagerly from Python and replayed as one CUDA graph. Host clock around launch + synchronize: the
    launch path is what is measured, the kernels themselves do ~nothing."""
    import time as _time
    be, dl = backend_for(args), Deadline.for_probe(args, 45)
    launches = int(args.get("launches", get_model("deepseek-v2-lite").layers * KERNELS_PER_LAYER))
    iters = 5 if args.get("quick") else 30
    res, samples = {}, []
    for mode in dl.points("launch modes", ("eager", "graph")):
        step, counter = be.launch_chain(launches, graph=(mode == "graph"))
        before = counter()
        step()
        be.sync()
        if counter() - before != launches:
            raise AssertionError(f"{mode}: one iteration bumped the counter {counter() - before:g} times, "
                                 f"not {launches}")
        xs = []
        for _ in range(iters):
            t0 = _time.perf_counter()
            step()
            be.sync()
            xs.append(_time.perf_counter() - t0)
            if dl.expired():
                break
        res[mode] = summary(xs) * 1e6
        samples += [{"series": f"iteration_{mode}", "x": float(launches), "value": v, "unit": "s"} for v in xs]
    if "eager" not in res:
        raise TimeoutError("probe deadline reached before the eager iteration was timed")
    graph = res.get("graph")
    return {"results": _base(be, dl, launches=launches, iteration_us=res["eager"], iteration_graph_us=graph,
                             graphs="CUDA graph replay" if be.measures_gpu else "none (reference: the eager loop)"),
            "samples": samples,
            "message": f"{launches} launches: eager {res['eager']:.0f} us" +
                       (f", CUDA graph {graph:.0f} us" if graph is not None else ", graph not reached")}
