"""Table probes for the op kinds the step-time probes did not time: the fused MoE kernel and a layer's elementwise
kernels (docs/PROBES.md, "Operator tables"). Each returns points in the operator-table format
(simroute.model.optables.SCHEMA: a `table` kind and its columns per point), which simroute.probes.step_tables
writes with the other probes' rows, so a probed box's tables cover what the shipped (published) ones do.

- `moe`: the routed experts of every shipped MoE model at TP 1/2/4/8 (moe_tp = tp, no expert parallelism:
  moe_ep 1), balanced routing (token i takes experts i k .. i k + k - 1 modulo E: every expert the same load),
  bf16, over token counts. The kernel is vLLM's `fused_experts` or SGLang's where importable, else a torch
  reference (one GEMM pair per expert: not the fused kernel's time, and flagged so in the provenance).
- `elementwise`: fused add + RMSNorm, RMSNorm, RoPE and silu(gate) x up at every width the shipped models
  launch (simroute.model.steptime.elementwise_kernels, TP 1/2/4/8), over token counts: sgl_kernel's kernels
  where importable, else torch's operators (flagged).

GPU libraries are imported inside the probe only. In a dry run (numpy on the CPU) the same code runs the numpy
reference at narrowed shapes so the writer is exercised; those rows are marked as a dry run (step_tables).
Each kernel is checked against a float64 numpy reference before it is timed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from simroute.model.geometry import MODELS, get_model
from simroute.model.optables import ELEMENTWISE_KERNEL_NAMES, OpKind
from simroute.model.steptime import elementwise_kernels
from simroute.probes.gpu_common import Deadline, summary
from simroute.probes.gpu_step import _base, _reps
from simroute.probes.step_backend import NumpyBackend, StepBackend, backend_for, rel_err

TPS = (1, 2, 4, 8)
MOE_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
ELEMENTWISE_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384)
DRY_TOKENS = (1, 4, 16, 64)          # the numpy dry run's token counts
DRY_SHRINK = 16                      # its widths are this much narrower (and its expert count at most 8)
DRY_MAX_EXPERTS = 8
BALANCED = "balanced"
CHECK_TOLERANCE = 3e-2               # bf16 against float64
RMS_EPS = 1e-6


def _tokens(backend: StepBackend, grid: tuple[int, ...]) -> tuple[int, ...]:
    return grid if backend.measures_gpu else DRY_TOKENS


def _models(args: dict[str, Any]) -> list:
    names = list(args["models"]) if args.get("models") else list(MODELS)
    return [model for model in (get_model(name) for name in names) if model.has_linear_geometry]


# ---- fused MoE -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MoeShape:
    """One routed-expert shape as the moe table keys it (inter is the whole expert width; moe_tp splits it)."""

    hidden: int
    inter: int
    topk: int
    experts: int
    moe_tp: int
    uses: tuple[str, ...]

    def as_run(self, backend: StepBackend) -> tuple[int, int, int]:
        """(hidden, inter per rank, experts) as timed: the model's on the GPU, narrower in the numpy dry run."""
        per_rank = -(-self.inter // self.moe_tp)
        if backend.measures_gpu:
            return self.hidden, per_rank, self.experts
        return (max(self.hidden // DRY_SHRINK, 8), max(per_rank // DRY_SHRINK, 8),
                max(min(self.experts, DRY_MAX_EXPERTS), self.topk))


def moe_plan(models: list, tps: tuple[int, ...] = TPS) -> list[MoeShape]:
    """The distinct routed-expert shapes of the models' MoE layers at each TP degree, the widest TP first: the
    deployments served (DeepSeek-V3 at TP 8) are timed before a deadline cuts the sweep, and their narrow
    per-rank weights are the cheapest to build."""
    uses: dict[tuple[int, int, int, int, int], list[str]] = {}
    for tp_size in sorted(tps, reverse=True):
        for model in models:
            if not model.routed_experts or not model.layer_kinds().get("moe"):
                continue
            key = (model.hidden, model.expert_intermediate, model.experts_per_token, model.routed_experts, tp_size)
            uses.setdefault(key, []).append(f"{model.name}/tp{tp_size}")
    return [MoeShape(*key, tuple(found)) for key, found in uses.items()]


def balanced_routing(tokens: int, topk: int, experts: int) -> np.ndarray:
    """Token i's experts: i k .. i k + k - 1 modulo E (distinct per token when k <= E; every expert the same
    load over a batch of E tokens)."""
    return (np.arange(tokens)[:, None] * topk + np.arange(topk)[None, :]) % experts


def moe_reference(hidden_states: np.ndarray, gate_up: np.ndarray, down: np.ndarray, routing: np.ndarray,
                  weights: np.ndarray) -> np.ndarray:
    """The routed experts in float64 numpy: per expert, silu(x W_gate) x (x W_up) W_down, weighted and summed."""
    out = np.zeros_like(hidden_states)
    inter = down.shape[2]
    for expert in range(gate_up.shape[0]):
        rows, slots = np.nonzero(routing == expert)
        if not rows.size:
            continue
        projected = hidden_states[rows] @ gate_up[expert].T                       # [rows, 2 I]
        gate, up_projection = projected[:, :inter], projected[:, inter:]
        activated = gate / (1.0 + np.exp(-gate)) * up_projection
        np.add.at(out, rows, (activated @ down[expert].T) * weights[rows, slots][:, None])
    return out


def _fused_experts() -> tuple[Callable[..., Any] | None, str]:
    """vLLM's or SGLang's fused_experts (hidden, w1 [E, 2I, H], w2 [E, H, I], topk_weights, topk_ids), if one
    imports; else (None, why)."""
    for module, label in (("vllm.model_executor.layers.fused_moe", "vllm fused_experts"),
                          ("sglang.srt.layers.moe.fused_moe_triton", "sglang fused_experts")):
        try:
            found = __import__(module, fromlist=["fused_experts"]).fused_experts
        except Exception:          # not installed, or an import-time error of the library: the next one
            continue
        return found, label
    return None, "torch reference (one GEMM pair per expert: not a fused kernel's time)"


def _moe_call(backend: StepBackend, hidden: int, inter: int, experts: int, topk: int, tokens: int, seed: int,
              fused: Callable[..., Any] | None) -> Callable[[], Any]:
    """One launch of the routed experts on `backend` at balanced routing."""
    routing = balanced_routing(tokens, topk, experts)
    weights = np.full((tokens, topk), 1.0 / topk)
    states = backend.randn((tokens, hidden), seed=seed)
    gate_up = backend.randn((experts, 2 * inter, hidden), seed=seed + 1, scale=1 / math.sqrt(hidden))
    down = backend.randn((experts, hidden, inter), seed=seed + 2, scale=1 / math.sqrt(inter))
    if isinstance(backend, NumpyBackend):
        return lambda: moe_reference(states, gate_up, down, routing, weights)
    torch = backend.t
    ids = torch.as_tensor(routing, device=backend.dev, dtype=torch.int32)
    topk_weights = torch.as_tensor(weights, device=backend.dev, dtype=torch.float32)
    if fused is not None:
        return lambda: fused(states, gate_up, down, topk_weights, ids)
    return lambda: _torch_moe_on(backend, states, gate_up, down, ids, topk_weights, inter)


def _check_moe(backend: StepBackend, fused: Callable[..., Any] | None) -> float:
    rng = np.random.default_rng(7)
    tokens, hidden, inter, experts, topk = 12, 64, 32, 4, 2
    states = rng.standard_normal((tokens, hidden))
    gate_up = rng.standard_normal((experts, 2 * inter, hidden)) / math.sqrt(hidden)
    down = rng.standard_normal((experts, hidden, inter)) / math.sqrt(inter)
    routing = balanced_routing(tokens, topk, experts)
    weights = np.full((tokens, topk), 1.0 / topk)
    want = moe_reference(states, gate_up, down, routing, weights)
    if isinstance(backend, NumpyBackend):
        got = moe_reference(states, gate_up, down, routing, weights)
    else:
        torch = backend.t
        ids = torch.as_tensor(routing, device=backend.dev, dtype=torch.int32)
        topk_weights = torch.as_tensor(weights, device=backend.dev, dtype=torch.float32)
        uploaded = [backend.upload(array) for array in (states, gate_up, down)]
        if fused is not None:
            got = backend.host(fused(*uploaded, topk_weights, ids))
        else:
            got = backend.host(_torch_moe_on(backend, *uploaded, ids, topk_weights, inter))
    error = rel_err(got, want)
    if error > CHECK_TOLERANCE:
        raise AssertionError(f"{backend.name}: fused MoE disagrees with numpy (rel err {error:.3g})")
    return error


def _torch_moe_on(backend: StepBackend, states: Any, gate_up: Any, down: Any, ids: Any, topk_weights: Any,
                  inter: int) -> Any:
    """The routed experts in torch, one GEMM pair per expert (the fallback where no fused kernel imports)."""
    torch = backend.t
    tokens, topk = ids.shape
    flat_ids = ids.flatten().long()
    token_of = torch.arange(tokens, device=backend.dev).repeat_interleave(topk)
    slot_weights = topk_weights.flatten().to(states.dtype)
    out = torch.zeros_like(states)
    for expert in range(gate_up.shape[0]):
        picked = (flat_ids == expert).nonzero(as_tuple=True)[0]
        if picked.numel() == 0:
            continue
        rows = token_of[picked]
        projected = states.index_select(0, rows) @ gate_up[expert].T
        activated = torch.nn.functional.silu(projected[:, :inter]) * projected[:, inter:]
        out.index_add_(0, rows, (activated @ down[expert].T) * slot_weights[picked, None])
    return out


def probe_moe(args: dict[str, Any]) -> dict:
    """The fused routed-expert kernel's time per shape and token count, at balanced routing, TP without EP."""
    backend, deadline = backend_for(args), Deadline.for_probe(args, 150)
    warm, reps = _reps(args)
    fused, implementation = (None, "numpy reference (dry run)") if isinstance(backend, NumpyBackend) \
        else _fused_experts()
    error = _check_moe(backend, fused)
    plan = moe_plan(_models(args))
    tokens_grid = _tokens(backend, MOE_TOKENS)
    points, samples = [], []
    grid = [(shape, tokens) for shape in plan for tokens in tokens_grid]
    for shape, tokens in deadline.points("moe shapes x tokens", grid):
        hidden, inter, experts = shape.as_run(backend)
        seconds = summary(backend.time(_moe_call(backend, hidden, inter, experts, shape.topk, tokens, seed=tokens,
                                                 fused=fused), warm, reps, deadline))
        points.append({"table": OpKind.MOE.value, "distribution": BALANCED, "tokens": tokens, "hidden": hidden,
                       "inter": shape.inter if backend.measures_gpu else inter * shape.moe_tp,
                       "topk": shape.topk, "experts": experts, "moe_tp": shape.moe_tp, "moe_ep": 1,
                       "seconds": seconds, "uses": ";".join(shape.uses)})
        samples.append({"series": f"moe_{shape.hidden}x{shape.inter}_tp{shape.moe_tp}", "x": float(tokens),
                        "value": seconds, "unit": "s"})
    if not points:
        raise TimeoutError("probe deadline reached before the first MoE point was timed")
    return {"results": _base(backend, deadline, check_rel_err=error, points=points, implementation=implementation,
                             kernels={"moe": implementation}, planned_shapes=len(plan)),
            "samples": samples, "message": f"fused MoE: {len(points)}/{len(grid)} points ({implementation})"}


# ---- elementwise kernels -----------------------------------------------------------------------------------------
def elementwise_plan(models: list, tps: tuple[int, ...] = TPS) -> list[tuple[str, int]]:
    """The distinct (kernel, width) launches of the models' layers at each TP degree (steptime's one list)."""
    seen: dict[tuple[str, int], None] = {}
    for tp_size in tps:
        for model in models:
            for layer_kind in model.layer_kinds():
                for kernel in elementwise_kernels(model, tp_size, layer_kind):
                    seen.setdefault((kernel.kernel, kernel.width), None)
    return sorted(seen, key=lambda launch: (ELEMENTWISE_KERNEL_NAMES.index(launch[0]), launch[1]))


def elementwise_reference(kernel: str, states: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """Each kernel in numpy (float64 in the check): what the GPU kernels must compute."""
    if kernel == "add_rmsnorm":
        summed = states + residual
        return summed / np.sqrt((summed * summed).mean(axis=-1, keepdims=True) + RMS_EPS)
    if kernel == "rmsnorm":
        return states / np.sqrt((states * states).mean(axis=-1, keepdims=True) + RMS_EPS)
    if kernel == "rope":                       # rotate-half on the row's two halves by a fixed angle per column
        half = states.shape[-1] // 2
        angle = np.arange(half) / max(half, 1)
        cos, sin = np.cos(angle), np.sin(angle)
        first, second = states[..., :half], states[..., half:2 * half]
        return np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
    if kernel == "silu_mul":                   # states holds gate and up side by side: [tokens, 2 width]
        width = states.shape[-1] // 2
        gate, up_projection = states[..., :width], states[..., width:]
        return gate / (1.0 + np.exp(-gate)) * up_projection
    raise ValueError(f"unknown elementwise kernel {kernel}")


def _sgl_kernel() -> Any:
    try:
        import sgl_kernel
    except Exception:                          # not installed, or no GPU build: the torch operators
        return None
    return sgl_kernel


def _elementwise_operation(backend: StepBackend, kernel: str, width: int,
                           library: Any) -> tuple[Callable[[Any, Any], Any], str]:
    """`kernel` on `backend` as a function of (states, residual) for rows of `width` (silu_mul: states holds gate
    and up, 2 width), and which implementation runs it: sgl_kernel's where it imports (RoPE always torch's)."""
    if isinstance(backend, NumpyBackend):
        return (lambda states, residual: elementwise_reference(kernel, states, residual)), "numpy reference (dry run)"
    torch = backend.t
    weight = torch.ones(width, device=backend.dev, dtype=backend.dtype)
    if library is not None and kernel == "add_rmsnorm":
        def fused_add(states: Any, residual: Any) -> Any:
            library.fused_add_rmsnorm(states, residual, weight, RMS_EPS)       # in place: states normed
            return states
        return fused_add, "sgl_kernel fused_add_rmsnorm"
    if library is not None and kernel == "rmsnorm":
        return (lambda states, residual: library.rmsnorm(states, weight, RMS_EPS)), "sgl_kernel rmsnorm"
    if library is not None and kernel == "silu_mul":
        return (lambda states, residual: library.silu_and_mul(states)), "sgl_kernel silu_and_mul"
    half = width // 2
    angle = torch.arange(half, device=backend.dev, dtype=torch.float32) / max(half, 1)
    cos, sin = angle.cos().to(backend.dtype), angle.sin().to(backend.dtype)

    def torch_operators(states: Any, residual: Any) -> Any:
        if kernel == "add_rmsnorm":
            residual.add_(states)
            return backend.rmsnorm(residual)
        if kernel == "rmsnorm":
            return backend.rmsnorm(states)
        if kernel == "rope":
            first, second = states[:, :half], states[:, half:2 * half]
            return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)
        return torch.nn.functional.silu(states[:, :width]) * states[:, width:]
    return torch_operators, f"torch operators ({kernel}: not a fused serving kernel)"


def _operand_width(kernel: str, width: int) -> int:
    """The row width the kernel reads (silu_mul: gate and up side by side; RoPE: an even width)."""
    return 2 * width if kernel == "silu_mul" else width + width % 2


def _check_elementwise(backend: StepBackend, library: Any) -> float:
    """Each kernel's implementation against float64 numpy on small rows."""
    rng = np.random.default_rng(11)
    errors = []
    for kernel in ELEMENTWISE_KERNEL_NAMES:
        width = 16
        operand = _operand_width(kernel, width)
        states, residual = rng.standard_normal((5, operand)), rng.standard_normal((5, operand))
        want = elementwise_reference(kernel, states, residual)
        operation, _label = _elementwise_operation(backend, kernel, operand if kernel != "silu_mul" else width,
                                                   library)
        got = backend.host(operation(backend.upload(states), backend.upload(residual)))
        errors.append(rel_err(got, want))
    if max(errors) > CHECK_TOLERANCE:
        raise AssertionError(f"{backend.name}: elementwise kernels disagree with numpy (rel errs {errors})")
    return max(errors)


def probe_elementwise(args: dict[str, Any]) -> dict:
    """Each elementwise kernel's time per width and token count."""
    backend, deadline = backend_for(args), Deadline.for_probe(args, 90)
    warm, reps = _reps(args)
    library = None if isinstance(backend, NumpyBackend) else _sgl_kernel()
    error = _check_elementwise(backend, library)
    plan = elementwise_plan(_models(args))
    if not backend.measures_gpu:
        plan = sorted({(kernel, max(width // DRY_SHRINK, 8)) for kernel, width in plan},
                      key=lambda launch: (ELEMENTWISE_KERNEL_NAMES.index(launch[0]), launch[1]))
    grid = [(kernel, width, tokens) for kernel, width in plan for tokens in _tokens(backend, ELEMENTWISE_TOKENS)]
    points, samples, kernels = [], [], {}
    for kernel, width, tokens in deadline.points("elementwise kernels x widths x tokens", grid):
        operand = _operand_width(kernel, width)
        operation, kernels[kernel] = _elementwise_operation(backend, kernel, operand if kernel != "silu_mul"
                                                            else width, library)
        states = backend.randn((tokens, operand), seed=tokens + width)
        residual = backend.randn((tokens, operand), seed=tokens + width + 1)
        seconds = summary(backend.time(lambda: operation(states, residual), warm, reps, deadline))  # noqa: B023
        points.append({"table": OpKind.ELEMENTWISE.value, "kernel": kernel, "tokens": tokens, "width": width,
                       "seconds": seconds})
        samples.append({"series": f"elementwise_{kernel}_{width}", "x": float(tokens), "value": seconds,
                        "unit": "s"})
    if not points:
        raise TimeoutError("probe deadline reached before the first elementwise point was timed")
    return {"results": _base(backend, deadline, check_rel_err=error, points=points, kernels=kernels,
                             implementation=", ".join(sorted(set(kernels.values())))),
            "samples": samples,
            "message": f"elementwise: {len(points)}/{len(grid)} points ({', '.join(sorted(set(kernels.values())))})"}
