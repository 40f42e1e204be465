"""Physical feasibility: the one place that says whether a deployment, or one iteration's shape on it, can exist.

`simroute model step`, `simroute run`, `plan` and studies (whose points are runs, checked when the study is
loaded: simroute/sim/deployment.py) ask these functions before they compute, print or write anything. A shape
no serving engine could hold has no step time and no latency: a command that printed one would answer a
question that has no answer. Each check raises the one-line `ConfigurationError` naming the flag or field that
made the shape (`Fields`: `--tp` on the command line, `tp` in a run config, `axes.tp=3: tp` in a study), with the
figures that decide it. What they check:
- the model's context window (`ModelGeometry.context_window`, the config's max_position_embeddings, which
  SGLang and vLLM refuse a longer request against: prompt + output tokens);
- a TP degree splits the query heads (and the GQA KV heads) evenly, and a TP group lives inside one host;
- block-FP8 weights run only on a GPU with FP8 tensor cores;
- the weights of one GPU of the TP group fit in its HBM (a run's `hbm_gb` within the GPU's);
- the KV of a batch fits in the HBM the weights leave.
Pure functions over the model layer's objects (numpy-free): docs/MODEL.md, "Model limits".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simroute.errors import ConfigurationError

if TYPE_CHECKING:
    from simroute.model.geometry import ModelGeometry
    from simroute.model.steptime import StepTimeModel


@dataclass(frozen=True)
class Fields:
    """How the caller's user named each input: config fields (`Fields()`), CLI flags (`Fields.flags()`), or a
    study's fields (`Fields(tp="axes.tp=3: tp", file=...)`)."""

    tp: str = "tp"
    gpu: str = "gpu"
    weights: str = "weights"
    model: str = "model"
    hbm: str = "hbm_gb"
    context: str = "context"
    tokens: str = "tokens"
    decode_seqs: str = "decode-seqs"
    prefill_context: str = "prefill-context"
    file: str | None = None          # the file the fields are in (a study), if any

    @staticmethod
    def flags(**names: str) -> "Fields":
        """The command line's flags (`--tp`, `--hbm-gb`); `names` overrides a field's flag (`context="tokens"`)."""
        base = {"tp": "tp", "gpu": "gpu", "weights": "weights", "model": "model", "hbm": "hbm-gb",
                "context": "context", "tokens": "tokens", "decode_seqs": "decode-seqs",
                "prefill_context": "prefill-context", **names}
        return Fields(**{name: f"--{value}" for name, value in base.items()})


def _name(field: str) -> str:
    """The flag or field a hint names: a study's `axes.policy=paper: tp` is `tp`."""
    return field.split(": ")[-1]


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


def check_tp_splits_heads(geometry: ModelGeometry, tp: int, fields: Fields = Fields()) -> None:
    """A TP degree must split the query heads evenly, and the KV heads (GQA) evenly or replicate them evenly."""
    if geometry.heads_q % tp:
        raise ConfigurationError(f"tp {tp} does not divide {geometry.name}'s {geometry.heads_q} query heads: no "
                                 "serving engine shards it so", file=fields.file, field=fields.tp)
    if not geometry.is_mla and geometry.kv_heads % tp and tp % geometry.kv_heads:
        raise ConfigurationError(f"tp {tp} neither divides nor is a multiple of {geometry.name}'s "
                                 f"{geometry.kv_heads} KV heads", file=fields.file, field=fields.tp)


def check_tp_fits_host(tp: int, gpus_per_host: int, fields: Fields = Fields()) -> None:
    """A TP group lives inside one host (its all-reduce runs over the host's fabric)."""
    if gpus_per_host % tp:
        raise ConfigurationError(f"tp {tp} does not divide the {gpus_per_host} GPUs of a host: a tensor-parallel "
                                 "group lives inside one host", file=fields.file, field=fields.tp)


def check_weight_dtype(step: StepTimeModel, fields: Fields = Fields()) -> None:
    """Block-FP8 weights (DeepSeek-V3's, Kimi K2's, or `--weights fp8`) need FP8 tensor cores: SGLang's block-FP8
    kernels need sm89 or newer ("fp8e4nv data type is not supported on CUDA arch < 89", skypilot-org/skypilot#4723,
    DeepSeek-R1 on A100) and vLLM's Marlin weight-only path has no block-wise FP8 (vllm-project/vllm#13885)."""
    geometry, gpu = step.geometry, step.gpu
    if geometry.weight_dtype != "fp8" or gpu.has_fp8:
        return
    asked = geometry.sources.get("weight_dtype", "").startswith("override")
    raise ConfigurationError(f"{geometry.name} with block-FP8 weights ({'asked' if asked else 'its checkpoint'}) "
                             f"needs FP8 tensor cores, which {gpu.name} lacks: no serving engine runs them there "
                             f"(SGLang needs sm89+, vLLM's Marlin has no block-wise FP8); use {_name(fields.weights)} "
                             "bf16 or a GPU with FP8", file=fields.file, field=fields.weights if asked else fields.gpu)


def weights_problem(step: StepTimeModel, hbm_bytes: float | None = None, tp_name: str = "tp") -> str | None:
    """Why one GPU of the TP group cannot hold its share of the weights, or None."""
    capacity = step.gpu.hbm_bytes if hbm_bytes is None else hbm_bytes
    weights = step.weight_bytes_per_gpu
    if weights < capacity:
        return None
    return (f"{step.geometry.name} at tp {step.tp} needs {weights / 1e9:.1f} GB of weights per GPU "
            f"({step.geometry.weight_dtype}), more than the {capacity / 1e9:.1f} GB of HBM of {step.gpu.name}: raise "
            f"{tp_name} or pick a smaller model or a larger GPU")


def check_weights(step: StepTimeModel, hbm_bytes: float | None = None, *, field: str = "tp",
                  file: str | None = None) -> None:
    """Refuse a deployment whose weights do not fit one GPU of its TP group (`hbm_bytes`: a run's --hbm-gb)."""
    problem = weights_problem(step, hbm_bytes, _name(field))
    if problem is not None:
        raise ConfigurationError(problem, file=file, field=field)


def check_deployment(step: StepTimeModel, *, hbm_bytes: float | None = None, fields: Fields = Fields()) -> None:
    """The instance `step` (a StepTimeModel: a model on `tp` GPUs of one kind) can be served at all: its TP
    splits the heads, its weights' dtype runs on the GPU, and its weights fit HBM."""
    check_tp_splits_heads(step.geometry, step.tp, fields)
    check_weight_dtype(step, fields)
    if hbm_bytes is not None and not hbm_bytes <= step.gpu.hbm_bytes:
        raise ConfigurationError(f"{hbm_bytes / 1e9:g} GB of HBM per GPU is more than the "
                                 f"{step.gpu.hbm_bytes / 1e9:g} GB a {step.gpu.name} has: {_name(fields.hbm)} sets "
                                 "aside less, never more",
                                 file=fields.file, field=fields.hbm)
    check_weights(step, hbm_bytes, field=fields.tp if hbm_bytes is None else fields.hbm, file=fields.file)


def kv_capacity_tokens(step: StepTimeModel, hbm_bytes: float | None = None) -> int:
    """Tokens of KV (in the cache's dtype) that fit beside the weights on one GPU of the TP group."""
    capacity = step.gpu.hbm_bytes if hbm_bytes is None else hbm_bytes
    return step.kv_capacity_tokens(step.gpu.hbm_bytes - capacity)


def check_kv(step: StepTimeModel, kv_tokens: float, *, what: str, field: str, hbm_bytes: float | None = None,
             file: str | None = None) -> None:
    """Refuse a batch whose KV (`kv_tokens` tokens, `what` says of what) exceeds the HBM the weights leave."""
    capacity = kv_capacity_tokens(step, hbm_bytes)
    if kv_tokens <= capacity:
        return
    need = kv_tokens * step.kv_bytes_per_token_per_gpu
    raise ConfigurationError(
        f"{what}: {kv_tokens:,.0f} tokens of KV ({need / 1e9:,.1f} GB per GPU in {step.geometry.cache_dtype}) "
        f"exceed the {capacity:,} tokens the weights leave in HBM on {step.tp} x {step.gpu.name}: no engine could "
        "hold this batch", file=file, field=field)


def check_shape(step: StepTimeModel, *, tokens: int, decode_seqs: int, context: int, prefill_context: int,
                fields: Fields = Fields()) -> None:
    """`model step`'s shape: the deployment can exist (`check_deployment`), each sequence fits the window, the
    batch's KV fits the HBM the weights leave.

    A decoding sequence holds `context` tokens plus the one it computes; the prefill chunk (tokens - decode_seqs)
    holds its `prefill_context` earlier tokens plus itself."""
    check_deployment(step, fields=fields)
    geometry = step.geometry
    prefill = tokens - decode_seqs
    if decode_seqs > 0:
        check_context(geometry, context + 1, what=f"--context {context:,} (+ the decoded token)",
                      field=fields.context)
    if prefill > 0:
        check_context(geometry, prefill_context + prefill,
                      what=f"--prefill-context {prefill_context:,} + a {prefill:,}-token prefill chunk",
                      field=fields.prefill_context if prefill_context else fields.tokens)
    kv_tokens = decode_seqs * context + (prefill_context + prefill if prefill > 0 else 0)
    decode_kv = decode_seqs * context
    field = fields.decode_seqs if decode_kv >= kv_tokens - decode_kv else fields.tokens
    check_kv(step, kv_tokens, field=field,
             what=f"--decode-seqs {decode_seqs:,} at --context {context:,}"
                  + (f" and a {prefill:,}-token prefill after {prefill_context:,}" if prefill > 0 else ""))
