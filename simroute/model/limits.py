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
- the KV of a batch fits in the HBM the weights leave;
- a DP-attention / expert-parallel group (simroute.model.parallel.Deployment) has ranks of equal width, an EP
  degree that divides its GPUs and the model's experts, hosts that divide it, an all-to-all it can run, and MTP
  settings that mean something (`check_parallel`); each GPU of it holds its weights and each rank its own KV
  (`check_group`, `check_group_shape`).
Pure functions over the model layer's objects (numpy-free): docs/MODEL.md, "Model limits".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simroute.errors import ConfigurationError

if TYPE_CHECKING:
    from simroute.model.dpstep import DeploymentStep
    from simroute.model.geometry import ModelGeometry
    from simroute.model.parallel import Deployment, Mtp
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
    # a DP-attention / expert-parallel group (check_parallel)
    dp: str = "dp_attention"
    ep: str = "ep"
    hosts: str = "hosts"
    a2a: str = "a2a"
    redundant_experts: str = "redundant_experts"
    moe_load: str = "moe_load"
    nextn: str = "nextn"
    accept_rate: str = "accept_rate"
    accept_length: str = "accept_length"
    kv_layout: str = "kv_layout"
    file: str | None = None          # the file the fields are in (a study), if any

    @staticmethod
    def flags(**names: str) -> "Fields":
        """The command line's flags (`--tp`, `--hbm-gb`); `names` overrides a field's flag (`context="tokens"`)."""
        base = {"tp": "tp", "gpu": "gpu", "weights": "weights", "model": "model", "hbm": "hbm-gb",
                "context": "context", "tokens": "tokens", "decode_seqs": "decode-seqs",
                "prefill_context": "prefill-context", "dp": "dp-attention", "ep": "ep", "hosts": "hosts",
                "a2a": "a2a", "redundant_experts": "redundant-experts", "moe_load": "moe-load", "nextn": "nextn",
                "accept_rate": "accept-rate", "accept_length": "accept-length", "kv_layout": "kv-layout", **names}
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
    _check_batch(step, tokens=tokens, decode_seqs=decode_seqs, context=context, prefill_context=prefill_context,
                 fields=fields)


def _check_batch(step: StepTimeModel | DeploymentStep, *, tokens: int, decode_seqs: int, context: int,
                 prefill_context: int, fields: Fields, whose: str = "") -> None:
    """Each sequence of one batch fits the model's window, and the batch's KV the HBM the weights leave on the
    GPU that holds it (`whose` batch: a DP rank's)."""
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
             what=f"{whose}--decode-seqs {decode_seqs:,} at --context {context:,}"
                  + (f" and a {prefill:,}-token prefill after {prefill_context:,}" if prefill > 0 else ""))


# ---- DP attention, expert parallelism, MTP ---------------------------------------------------------------------
def check_hosts(tp: int, hosts: int, gpus_per_host: int, fields: Fields = Fields()) -> int:
    """A group of `tp` GPUs over `hosts` hosts of `gpus_per_host` GPUs: equal shares, none past a host. Returns the
    group's GPUs per host."""
    if hosts < 1 or tp % hosts or tp // hosts > gpus_per_host:
        raise ConfigurationError(f"{_name(fields.hosts)} {hosts} must divide {_name(fields.tp)} {tp} into hosts of "
                                 f"at most {gpus_per_host} GPUs", file=fields.file, field=fields.hosts)
    return tp // hosts


def check_parallel(geometry: ModelGeometry, deployment: Deployment, mtp: Mtp | None = None,
                   fields: Fields = Fields()) -> None:
    """A DP-attention / expert-parallel group (`deployment`, simroute.model.parallel) can serve `geometry`: DP
    ranks of equal width whose heads split evenly, an EP degree that divides the group's GPUs and the model's
    expert slots (routed + EPLB's redundant), a group across hosts only as whole hosts and with DP attention, and
    DeepEP only as pure EP over single-GPU ranks (what its measured rows are); with `mtp`, the model ships an MTP
    module and one of acceptance rate / accepted length is given, in range."""
    from simroute.model.parallel import A2A
    dep, fld = deployment, fields

    def fail(problem: str, field: str) -> None:
        raise ConfigurationError(problem, file=fld.file, field=field)

    for value, field in ((dep.tp, fld.tp), (dep.dp, fld.dp), (dep.ep, fld.ep), (dep.gpus_per_host, fld.hosts)):
        if value < 1:
            fail(f"{_name(field)} must be >= 1, got {value}", field)
    if not _known_load(dep.distribution):
        fail(f"unknown expert load '{dep.distribution}' (balanced, or power_law_<alpha> with alpha > 0 as the "
             "database's rows: power_law_1.01)", fld.moe_load)
    if dep.redundant_experts < 0:
        fail(f"{_name(fld.redundant_experts)} must be >= 0, got {dep.redundant_experts}", fld.redundant_experts)
    if dep.tp % dep.dp:
        fail(f"{_name(fld.dp)} {dep.dp} does not divide {_name(fld.tp)} {dep.tp} (attention ranks of equal "
             "width)", fld.dp)
    if dep.tp % dep.ep:
        fail(f"{_name(fld.ep)} {dep.ep} does not divide {_name(fld.tp)} {dep.tp} (the MoE group is the group's "
             "GPUs)", fld.ep)
    if dep.tp > dep.gpus_per_host and dep.tp % dep.gpus_per_host:
        fail(f"{_name(fld.tp)} {dep.tp} spans hosts but is not a multiple of their {dep.gpus_per_host} GPUs", fld.hosts)
    if geometry.heads_q % dep.attn_tp:
        fail(f"an attention rank of {dep.attn_tp} GPUs ({_name(fld.tp)} {dep.tp} / {_name(fld.dp)} {dep.dp}) does not "
             f"divide {geometry.name}'s {geometry.heads_q} query heads", fld.dp)
    if not geometry.is_mla and not geometry.kv_heads % dep.attn_tp == 0 and dep.attn_tp % geometry.kv_heads:
        fail(f"an attention rank of {dep.attn_tp} GPUs neither divides nor is a multiple of {geometry.name}'s "
             f"{geometry.kv_heads} KV heads", fld.dp)
    if dep.ep > 1 and not geometry.is_moe:
        fail(f"{_name(fld.ep)} {dep.ep}: {geometry.name} has no routed experts", fld.ep)
    if dep.redundant_experts and dep.ep == 1:
        fail(f"{_name(fld.redundant_experts)} needs {_name(fld.ep)} > 1 (EPLB replicates experts across EP ranks)",
             fld.redundant_experts)
    slots = geometry.routed_experts + dep.redundant_experts
    if geometry.is_moe and slots % dep.ep:
        fail(f"{_name(fld.ep)} {dep.ep} does not divide {geometry.name}'s {geometry.routed_experts} routed experts"
             + (f" + {dep.redundant_experts} redundant" if dep.redundant_experts else ""), fld.ep)
    if dep.hosts > 1 and not dep.dp_attention:
        fail(f"{_name(fld.tp)} {dep.tp} spans {dep.hosts} hosts: TP attention across hosts is not modelled (give "
             f"{_name(fld.dp)})", fld.dp)
    if dep.a2a_mode is A2A.DEEPEP:
        if dep.ep == 1:
            fail(f"{_name(fld.a2a)} deepep needs {_name(fld.ep)} > 1 (DeepEP moves tokens between expert-parallel "
                 "ranks)", fld.ep)
        if dep.moe_tp != 1:
            fail(f"{_name(fld.a2a)} deepep needs {_name(fld.ep)} equal to {_name(fld.tp)} ({dep.ep} != {dep.tp}): "
                 "DeepEP is pure EP", fld.ep)
        if dep.attn_tp != 1:
            fail(f"{_name(fld.a2a)} deepep with attention ranks of {dep.attn_tp} GPUs is not modelled (give "
                 f"{_name(fld.dp)} equal to {_name(fld.tp)})", fld.dp)
    if mtp is not None:
        check_mtp(geometry, mtp, fld)


def _known_load(distribution: str) -> bool:
    """`balanced` or `power_law_<alpha>`, alpha a positive number (the database's fld for routed-expert load)."""
    if distribution == "balanced":
        return True
    prefix = "power_law_"
    if not distribution.startswith(prefix):
        return False
    try:
        alpha = float(distribution[len(prefix):])
    except ValueError:
        return False
    return 0.0 < alpha < 100.0


def check_mtp(geometry: ModelGeometry, mtp: Mtp, fields: Fields = Fields()) -> None:
    """MTP settings that mean something: nextn >= 0 (0: no MTP, and then no acceptance), the model's checkpoint
    ships an MTP module, exactly one of acceptance rate ([0, 1]) and accepted length ([1, nextn + 1])."""
    from simroute.model.parallel import MTP_MODULES
    fld = fields
    given = [name for name, value in ((fld.accept_rate, mtp.accept_rate), (fld.accept_length, mtp.accepted_length))
             if value is not None]
    if mtp.nextn < 0:
        raise ConfigurationError(f"{_name(fld.nextn)} must be >= 0, got {mtp.nextn}", file=fld.file, field=fld.nextn)
    if mtp.nextn == 0:
        if given:
            raise ConfigurationError(f"{_name(given[0])} needs {_name(fld.nextn)} >= 1 (draft tokens to accept)",
                                     file=fld.file, field=given[0])
        return
    if geometry.name not in MTP_MODULES:
        raise ConfigurationError(f"{_name(fld.nextn)} {mtp.nextn}: {geometry.name} ships no MTP module (known: "
                                 f"{', '.join(sorted(MTP_MODULES))})", file=fld.file, field=fld.nextn)
    if len(given) != 1:
        raise ConfigurationError(f"give one of {_name(fld.accept_rate)} and {_name(fld.accept_length)} with "
                                 f"{_name(fld.nextn)} {mtp.nextn}", file=fld.file,
                                 field=given[1] if given else fld.accept_rate)
    rate, length = mtp.accept_rate, mtp.accepted_length
    if rate is not None and not 0.0 <= rate <= 1.0:
        raise ConfigurationError(f"{_name(fld.accept_rate)} must be in [0, 1], got {rate}", file=fld.file,
                                 field=fld.accept_rate)
    if length is not None and not 1.0 <= length <= mtp.nextn + 1:
        raise ConfigurationError(f"{_name(fld.accept_length)} must be in [1, nextn + 1 = {mtp.nextn + 1}], got "
                                 f"{length}", file=fld.file, field=fld.accept_length)


def check_group(step: DeploymentStep, *, hbm_bytes: float | None = None, fields: Fields = Fields()) -> None:
    """A group (`DeploymentStep`) can be served at all: its shape (`check_parallel`), its weights' dtype on the GPU,
    and each GPU's weights (attention replicated per rank, its experts, its share of the rest) in its HBM."""
    check_parallel(step.geometry, step.deployment, step.mtp, fields)
    check_weight_dtype(step, fields)  # type: ignore[arg-type]
    check_weights(step, hbm_bytes, field=fields.tp if hbm_bytes is None else fields.hbm,  # type: ignore[arg-type]
                  file=fields.file)


def check_group_shape(step: DeploymentStep, *, tokens: int, decode_seqs: int, context: int, prefill_context: int,
                      fields: Fields = Fields()) -> None:
    """`model step`'s shape on a group, every rank the same: the group can exist (`check_group`), each sequence
    fits the window, and one rank's KV (its own latent, on its own GPU) fits the HBM its weights leave."""
    check_group(step, fields=fields)
    _check_batch(step, tokens=tokens, decode_seqs=decode_seqs, context=context,  # type: ignore[arg-type]
                 prefill_context=prefill_context, fields=fields, whose="each DP rank's " if step.deployment.dp > 1
                 else "")
