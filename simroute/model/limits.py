"""Physical feasibility: the one place that says whether a deployment or one iteration's shape can exist.

`simroute model step`, `simroute run` (and so `plan` and studies, whose points are runs) ask these functions
before they compute or write anything; each raises `ConfigurationError` with one line naming the flag or file,
the field and the limit. What they check:
- the model's context window (`ModelGeometry.context_window`, the config's max_position_embeddings, which
  SGLang and vLLM refuse a longer request against: prompt + output tokens);
- the weights of one GPU of the TP group fit in its HBM;
- the KV of a batch fits in the HBM the weights leave (in the KV cache's dtype).
Pure functions over the model layer's objects (numpy-free): docs/MODEL.md, "Model limits".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.errors import ConfigurationError

if TYPE_CHECKING:
    from simroute.model.geometry import ModelGeometry
    from simroute.model.steptime import StepTimeModel


def window_source(geometry: ModelGeometry) -> str:
    """Where the model's context window comes from (its published config, or an assumption)."""
    return geometry.sources.get("context_window", "unknown")


def context_problem(geometry: ModelGeometry, tokens: int) -> str | None:
    """Why a sequence of `tokens` tokens (prompt + output) cannot run on `geometry`, or None if it can (or the
    model's window is unknown)."""
    window = geometry.context_window
    if window <= 0 or tokens <= window:
        return None
    return (f"{tokens:,} tokens is past {geometry.name}'s {window:,}-token context window "
            f"({window_source(geometry).split(';')[0]})")


def check_context(geometry: ModelGeometry, tokens: int, *, what: str, field: str, file: object = None) -> None:
    """Refuse a sequence longer than the model's window: `what` names it (a flag's value, a trace's request)."""
    problem = context_problem(geometry, tokens)
    if problem is not None:
        raise ConfigurationError(f"{what}: {problem}", file=file, field=field)


def weights_problem(step: StepTimeModel, hbm_bytes: float | None = None) -> str | None:
    """Why one GPU of the TP group cannot hold its share of the weights, or None."""
    hbm = step.gpu.hbm_bytes if hbm_bytes is None else hbm_bytes
    weights = step.weight_bytes_per_gpu
    if weights < hbm:
        return None
    return (f"{step.geometry.name} at tp = {step.tp} needs {weights / 1e9:.1f} GB of weights per GPU "
            f"({step.geometry.weight_dtype}), more than the {hbm / 1e9:.1f} GB of HBM of {step.gpu.name}; raise "
            "--tp or pick a smaller model")


def check_weights(step: StepTimeModel, hbm_bytes: float | None = None, *, field: str = "tp") -> None:
    """Refuse a deployment whose weights do not fit one GPU of its TP group."""
    problem = weights_problem(step, hbm_bytes)
    if problem is not None:
        raise ConfigurationError(problem, field=field)


def kv_capacity_tokens(step: StepTimeModel, hbm_bytes: float | None = None) -> int:
    """Tokens of KV (in the cache's dtype) that fit beside the weights on one GPU of the TP group."""
    hbm = step.gpu.hbm_bytes if hbm_bytes is None else hbm_bytes
    return step.kv_capacity_tokens(step.gpu.hbm_bytes - hbm)


def check_kv(step: StepTimeModel, kv_tokens: float, *, what: str, field: str,
             hbm_bytes: float | None = None) -> None:
    """Refuse a batch whose KV (`kv_tokens` tokens, `what` says of what) exceeds the HBM the weights leave."""
    capacity = kv_capacity_tokens(step, hbm_bytes)
    if kv_tokens <= capacity:
        return
    need = kv_tokens * step.kv_bytes_per_token_per_gpu
    raise ConfigurationError(
        f"{what}: {kv_tokens:,.0f} tokens of KV ({need / 1e9:,.1f} GB per GPU in {step.geometry.cache_dtype}) "
        f"exceed the {capacity:,} tokens the weights leave in HBM on {step.tp} x {step.gpu.name}: no engine can "
        "hold this batch", field=field)


def check_shape(step: StepTimeModel, *, tokens: int, decode_seqs: int, context: int, prefill_context: int) -> None:
    """`model step`'s shape: the weights fit, each sequence fits the window, the batch's KV fits the HBM.

    A decoding sequence holds `context` tokens plus the one it computes; the prefill chunk (tokens - decode_seqs)
    holds its `prefill_context` earlier tokens plus itself."""
    check_weights(step)
    geometry = step.geometry
    prefill = tokens - decode_seqs
    if decode_seqs > 0:
        check_context(geometry, context + 1, what=f"--context {context:,} (+ the decoded token)", field="context")
    if prefill > 0:
        check_context(geometry, prefill_context + prefill,
                      what=f"--prefill-context {prefill_context:,} + a {prefill:,}-token prefill chunk",
                      field="prefill-context" if prefill_context else "tokens")
    kv_tokens = decode_seqs * context + (prefill_context + prefill if prefill > 0 else 0)
    decode_kv = decode_seqs * context
    field = "decode-seqs" if decode_kv >= kv_tokens - decode_kv else "tokens"
    check_kv(step, kv_tokens, field=field,
             what=f"--decode-seqs {decode_seqs:,} at --context {context:,}"
                  + (f" and a {prefill:,}-token prefill after {prefill_context:,}" if prefill > 0 else ""))
