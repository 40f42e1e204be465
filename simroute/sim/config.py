"""Run configuration: one frozen dataclass, validated when built, recorded in every output.

Each field declares its help text, its bounds and (for names) the registry of valid values in its metadata
(`setting(...)`). That one declaration drives the checks in `RunConfig.__post_init__`, the `simroute run`
options (simroute/cli/run_cmd.py) and the study specs (which name RunConfig fields): adding a field here
adds its option, its help and its check.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from simroute.checks import check_number
from simroute.defaults import DEFAULT_MODEL, DEFAULT_TP
from simroute.errors import ConfigurationError, UnknownNameError
from simroute.model.cost import ROUTE_EXCHANGES
from simroute.model.geometry import CACHE_DTYPE_BYTES, WEIGHT_DTYPE_BYTES
from simroute.model.steptime import KV_LAYOUTS
from simroute.sim.registry import Registry, registry
from simroute.sim.slo import DEFAULT_SLO, JOINER
from simroute.sim.slo import parse as parse_slo
from simroute.sim.vocab import FP8_GEMM_BACKENDS, HOLDER_MODES, MOE_BACKENDS

# Names are checked against the registries of their kinds: each loads its plug-in package on first read, so
# this value object imports none of them (simroute/sim/registry.py).
POLICIES, ROUTERS, PLACEMENTS = registry("policy"), registry("router"), registry("placement")
SCHEDULERS, ROUTINGS, FRAMEWORKS = registry("scheduler"), registry("routing"), registry("framework")
PREFILL_ROUTERS = registry("prefill-router")


def default_trace_path() -> Path:
    """The shipped default trace (an agentic scenario), found inside the installed package."""
    return Path(__file__).resolve().parent.parent / "data" / "traces" / "agents-default.parquet"


def setting(default: Any = MISSING, help: str = "", *, minimum: float | None = None, maximum: float | None = None,
            exclusive_minimum: bool = False, choices: Registry | Sequence[str] | Mapping[str, Any] | None = None,
            option: str | None = None, check: Callable[[Any], Any] | None = None,
            listing: Callable[[], str] | None = None, joiner: str | None = None) -> Any:
    """A RunConfig field with its metadata: help text, numeric bounds, valid names (a registry or a tuple), the
    CLI option's name where it differs from the field's, for a value with a grammar of its own (`--engine
    NAME[@VERSION]`) a `check` that raises on a bad one and a `listing` of what it may name (the help's tail),
    and for a text field that the option may repeat, the words that join the repeats into one value."""
    meta = {"help": help, "minimum": minimum, "maximum": maximum, "exclusive_minimum": exclusive_minimum,
            "choices": choices, "option": option, "check": check, "listing": listing, "joiner": joiner}
    return field(default=default, metadata=meta)


ENGINE_AUTO, ENGINE_NONE = "auto", "none"


def parse_engine(value: str) -> tuple[str, str | None]:
    """(framework or 'auto' / 'none', version or None) of an `--engine` value; raises on a framework no plug-in
    registers or a version no preset ships (calib/engines/)."""
    from simroute.calib.engine_files import preset_versions
    if value in (ENGINE_AUTO, ENGINE_NONE):
        return value, None
    name, at, version = value.partition("@")
    if name not in FRAMEWORKS:
        raise UnknownNameError("engine", name, [ENGINE_AUTO, ENGINE_NONE, *FRAMEWORKS])
    if at:
        versions = preset_versions(name)
        if version not in versions:
            raise UnknownNameError("engine", value, [f"{name}@{known}" for known in versions])
    return name, version or None


def _check_engine(value: str) -> None:
    parse_engine(value)


def engine_listing() -> str:
    """Each framework with its shipped preset versions and its one-line description (`simroute run --help`)."""
    from simroute.calib.engine_files import preset_versions
    lines = dict(item.split(": ", 1) for item in FRAMEWORKS.help().split("; "))
    return "; ".join(f"{name}@{'|'.join(preset_versions(name))}: {lines[name]}" for name in FRAMEWORKS)


def _check_disagg(value: str) -> None:
    from simroute.sim.pools import parse_disagg
    parse_disagg(value)


MAX_DECODE_STEPS_PER_EVENT = 65_536    # past any output length a decode run could have in one event
A2A_MODES = ("allgather", "deepep")          # simroute.model.parallel.A2A
RANK_FLOWS = ("auto", "every", "shortcut")   # simroute.sim.cluster.Cluster.every_rank
OVER_WINDOW_MODES = ("refuse", "drop")   # a request past the model's context window: exit 2, or dropped


@dataclass(frozen=True)
class RunConfig:
    """Everything a run depends on besides the input files' contents (which are hashed into the summary).

    Times are in the units their names say; the simulator converts to seconds once.
    """

    topology: str = setting(help="Topology YAML (default: the shipped fattree.yaml).")
    trace: str = setting(help="Trace dataset (*.parquet directory; default: the shipped agents trace).")
    calib: str = setting(help="Calibration profile: a YAML path or a shipped name (see `simroute calib list`); "
                              "default h100-ibgda.")
    hosts: int | None = setting(None, "Hosts of the topology's family (its hosts, NICs, leaves and spines per leaf "
                                      "at this size); the topology file's count if unset.", minimum=1)
    model: str = setting(DEFAULT_MODEL, "Model geometry (default: the one default deployment, simroute/defaults.py).")
    gpu: str | None = setting(None, "GPU entry of the instances: a name in the profile's gpus or a shipped "
                                    "calib/gpus/NAME.yaml (see `simroute calib list`); the topology's hosts.gpu if "
                                    "unset.")
    policy: str = setting("paper", "Route / fetch / local policy.", choices=POLICIES)
    routing: str = setting("ecmp", "Path selection for bulk flows.", choices=ROUTINGS)
    seed: int = setting(0, "Seed: a run is a pure function of its inputs and this.", minimum=0)
    route_exchanges: str = setting("per-layer", "per-layer (exact: one exchange per layer) or once (the paper's "
                                                "accounting).", choices=ROUTE_EXCHANGES)
    placement: str = setting("hash", "Where canonical chunks live.", choices=PLACEMENTS)
    replicas: int = setting(1, "Copies of each hot chunk under `popularity` placement.", minimum=1)
    hot_fraction: float = setting(0.01, "Share of chunks replicated under `popularity` placement.", minimum=0,
                                  maximum=1)
    router: str = setting("affinity", "Requester choice per request.", choices=ROUTERS)
    tp: int = setting(DEFAULT_TP, "GPUs per instance (a tensor-parallel group inside a host).", minimum=1)
    dp_attention: int = setting(1, "DP attention: the tp GPUs of a group serve as this many attention ranks, each its "
                                   "own instance with its own latent KV, HBM budget and requests (route / fetch / "
                                   "local asked between a host's GPUs too), the dense / MoE layers shared by the group "
                                   "in lockstep steps (docs/STEP_TIME.md, DP attention in a run). 1: TP instances. "
                                   "Example: --tp 8 --dp-attention 8 --ep 8.", minimum=1)
    ep: int = setting(1, "Expert parallelism of the group's MoE layers: experts / ep whole experts per GPU; with "
                         "--dp-attention each step's all-to-all goes on the fabric as flows (--ep-flows).", minimum=1)
    a2a: str | None = setting(None, "How a DP group's MoE layer moves its tokens: allgather (NCCL all-gather + "
                                    "reduce-scatter) or deepep (dispatch + combine); SGLang's choice if unset "
                                    "(allgather within a host, deepep across hosts).", choices=A2A_MODES)
    moe_load: str = setting("power_law_1.01", "Routed-expert load the expert kernels are read at: balanced or "
                                              "power_law_<alpha> (the database's rows).")
    ep_flows: bool = setting(True, "Put each DP group step's all-to-all on the links as flows (one per GPU pair per "
                                   "step, NVLink within a host, RDMA across): the step's collectives take "
                                   "max(the table's time, the flows' time).")
    nextn: int = setting(0, "MTP draft tokens per step (DeepSeek's MTP module); 0: none. With --accept-rate or "
                            "--accept-length. Example: --nextn 2 --accept-rate 0.7.", minimum=0)
    accept_rate: float | None = setting(None, "MTP: per-draft acceptance rate in [0, 1].", minimum=0, maximum=1)
    accept_length: float | None = setting(None, "MTP: mean tokens a step emits, in [1, nextn + 1].", minimum=1)
    disagg: str = setting("none", "Disaggregated serving: P:D, a prefill pool and a decode pool of instances in "
                                  "this ratio (as many P:D groups as the cluster holds; the decode pool first, "
                                  "then the prefill pool, the rest idle). Every request is prefilled on a prefill "
                                  "instance (--prefill-router), its prompt's KV shipped to its decode instance "
                                  "(--router) and decoded there; none: aggregated serving. The decode pool "
                                  "takes --tp / --dp-attention / --ep / --nextn (a DP group's ranks each a decode "
                                  "instance), the prefill pool is TP instances (--prefill-tp). Example: --disagg 1:3 "
                                  "(docs/MODEL.md, Disaggregated serving).", check=_check_disagg)
    prefill_tp: int | None = setting(None, "GPUs per prefill instance under --disagg (the decode pool's is --tp); "
                                           "--tp if unset (a host's GPUs where a decode DP group spans hosts); not "
                                           "read by aggregated serving (a study's aggregated "
                                           "points beside its P:D ones). Example: --model llama-3.1-70b --tp 8 "
                                           "--disagg 1:2 --prefill-tp 4.", minimum=1)
    prefill_router: str = setting("least-tokens", "Prefill instance per request under --disagg.",
                                  choices=PREFILL_ROUTERS)
    weights: str | None = setting(None, "Weight dtype of the linear layers (default: the checkpoint's, e.g. fp8 "
                                        "for DeepSeek-V3).", choices=tuple(WEIGHT_DTYPE_BYTES))
    kv_cache: str | None = setting(None, "KV-cache dtype: the HBM room per token, the attention rows read and the "
                                         "bytes a fetched or transferred copy carries (routed queries and partials "
                                         "stay bf16); default: the serving framework's default for the checkpoint "
                                         "(bf16 for every shipped model: SGLang's --kv-cache-dtype auto), recorded "
                                         "in summary.json engine.kv_cache. Example: --kv-cache fp8.",
                                   choices=tuple(CACHE_DTYPE_BYTES))
    over_window: str = setting("refuse", "A trace request longer than the model's context window (prompt + chunks + "
                                         "output tokens): refuse the run before it starts (exit 2, naming the "
                                         "request), or drop such requests as the engine would (HTTP 400) and count "
                                         "them (summary.json model_limits).", choices=OVER_WINDOW_MODES)
    kv_layout: str = setting("replicated", "Where an MLA latent lives under TP: replicated (every rank holds it "
                                           "all, the serving engines' TP attention; a fetch lands 1/tp per rank "
                                           "and fans out over NVLink) or tpla (the paper's §8: 1/tp per rank, "
                                           "rank-paired fetch and route).", choices=KV_LAYOUTS)
    rank_flows: str = setting("auto", "A bulk transfer between TP instances on the fabric: every rank's flow (rank r "
                                      "to rank r, 1/tp of the bytes each), one rank pair's flow standing for all "
                                      "(shortcut), or auto: every rank's flow where the topology's kind says the "
                                      "ranks share links (a host's GPUs on one leaf's uplinks: `simroute topo show` "
                                      "prints its rank planes), the shortcut where each rank has its own plane.",
                                 choices=RANK_FLOWS)
    hbm_gb: float | None = setting(None, "HBM per GPU (GB): weights, running sequences' KV, canonical chunks and "
                                         "copies share it; the GPU entry's capacity if unset.", minimum=0,
                                   exclusive_minimum=True)
    chunk_hbm_share: float = setting(0.5, "Share of the KV region (HBM minus weights) placement may pin with "
                                          "canonical chunks.", minimum=0, maximum=1)
    engine: str = setting("auto", "Serving framework preset, NAME or NAME@VERSION: its kernel tables and the "
                                  "scheduling it runs by default on the GPU (scheduler, token budget, prefill chunk, "
                                  "running cap, CUDA-graph limit, overlap scheduling), its CPU cost per iteration "
                                  "and its per-request path (API server, tokenisation, the hops to the first "
                                  "token); the flags below win over it, and summary.json records each setting's "
                                  "source (docs/ENGINES.md). auto: the framework whose tables the GPU entry reads; "
                                  "none: the engine of the flags alone (Sarathi 2048, the GPU entry's constant "
                                  "overhead). Example: --engine vllm@0.24.0. Presets:",
                          check=_check_engine, listing=engine_listing)
    scheduler: str | None = setting(None, "Instance engine scheduler (the engine preset's if unset).",
                                    choices=SCHEDULERS)
    max_running_seqs: int | None = setting(None, "Running sequences per instance engine at most (the preset's if "
                                                 "unset).", minimum=1)
    token_budget: int | None = setting(None, "Tokens per engine iteration: decode tokens + prefill chunks (sglang: "
                                             "a prefill batch's tokens; the preset's if unset).", minimum=1)
    prefill_chunk: int | None = setting(None, "Largest prefill chunk per iteration (the preset's if unset; the "
                                              "trtllm and vllm schedulers prefill whole prompts and read none).",
                                        minimum=1)
    cuda_graph_max_batch: int | None = setting(None, "Largest decode-only batch replayed as a CUDA graph; a larger "
                                                     "one launches its kernels eagerly (the preset's if unset; 0: "
                                                     "none). Not with --engine none.", minimum=0)
    overlap_scheduling: bool | None = setting(None, "Overlap scheduling: the CPU plans iteration n+1 while the GPU "
                                                    "runs iteration n (the preset's if unset). Not with --engine "
                                                    "none.")
    scheduler_recv_interval: int | None = setting(None, "SGLang's --scheduler-recv-interval: the scheduler takes new "
                                                        "requests once per this many decode iterations (after every "
                                                        "prefill; e.g. 10). The sglang preset's (1) if unset; only "
                                                        "with --engine sglang.", minimum=1)
    mem_fraction: float | None = setting(None, "The framework's KV-pool fraction: SGLang's --mem-fraction-static, "
                                               "TensorRT-LLM's free_gpu_memory_fraction; the pool is sized as the "
                                               "framework's source sizes it (docs/ENGINES.md). If unset, the "
                                               "framework's own default (SGLang computes it from the GPU's memory, "
                                               "chunk, CUDA graphs and TP; TensorRT-LLM 0.9); only with --engine "
                                               "sglang or trtllm.",
                                         minimum=0, exclusive_minimum=True, maximum=1)
    prefill_graph_max_tokens: int | None = setting(None, "SGLang's piecewise CUDA graphs of prefill: a prefill batch "
                                                         "of at most this many tokens launches no kernels eagerly "
                                                         "(0: every prefill is eager, as SGLang <= 0.5.9 by "
                                                         "default). The sglang preset's (2048 with MLA, else the "
                                                         "chunk) if unset; only with --engine sglang.", minimum=0)
    batch_wait_timeout_iters: int | None = setting(None, "TensorRT-LLM's batch waiting: while decodes run, context "
                                                         "requests wait up to this many iterations for the batch to "
                                                         "fill (see --batch-wait-max-tokens-ratio). The trtllm "
                                                         "preset's (0: off) if unset; only with --engine trtllm.",
                                                   minimum=0)
    batch_wait_max_tokens_ratio: float | None = setting(None, "TensorRT-LLM's batch waiting: context requests stop "
                                                              "waiting once the batch holds this share of the token "
                                                              "budget (max_num_tokens). The trtllm preset's (0: off) "
                                                              "if unset; only with --engine trtllm.", minimum=0,
                                                        maximum=1)
    adp_balance: bool | None = setting(None, "TensorRT-LLM's attention-DP balancing (attention_dp_config "
                                             "enable_balance): a DP-attention group holds every rank's context "
                                             "requests until each rank has one, or --adp-timeout-iters iterations "
                                             "(docs/ENGINES.md). The trtllm preset's (off) if unset; only with "
                                             "--engine trtllm.")
    adp_timeout_iters: int | None = setting(None, "TensorRT-LLM's attention_dp_config timeout_iters: iterations "
                                                  "context requests wait while some rank has none (--adp-balance). "
                                                  "The trtllm preset's (50) if unset; only with --engine trtllm.",
                                            minimum=0)
    adp_batching_wait_iters: int | None = setting(None, "TensorRT-LLM's attention_dp_config batching_wait_iters: "
                                                        "iterations context requests wait once every rank has one "
                                                        "(--adp-balance). The trtllm preset's (10) if unset; only "
                                                        "with --engine trtllm.", minimum=0)
    moe_backend: str | None = setting(None, "TensorRT-LLM's moe_config backend where it names a kernel other than "
                                            "the preset's MoE rows: TRTLLM (the TRT-LLM-gen fused MoE, Blackwell "
                                            "only) reads the routed experts from the table set that times it "
                                            "(docs/ENGINES.md). Unset: the preset's own MoE rows (DeepGEMM on "
                                            "B200, CUTLASS on H100 / H200); only with --engine trtllm.",
                                      choices=MOE_BACKENDS)
    fp8_gemm_backend: str | None = setting(None, "SGLang's FP8 block-scaled GEMM backend where it names a kernel "
                                                 "other than the preset's GEMM rows: flashinfer_trtllm (FlashInfer's "
                                                 "TRT-LLM-gen GEMM, Blackwell only) runs each fp8_block GEMM no "
                                                 "faster than that kernel's published throughput (docs/ENGINES.md). "
                                                 "Unset: the preset's own rows (DeepGEMM); only with --engine "
                                                 "sglang.", choices=FP8_GEMM_BACKENDS)
    holder_mode: str = setting("inline", "Where a holder runs routed partial attention: inline (between / inside "
                                         "its own iterations) or stream (a concurrent stream).",
                               choices=HOLDER_MODES)
    holder_interference: float = setting(0.3, "stream: share of the partial work that slows the holder's own "
                                              "iterations.", minimum=0, maximum=1)
    micro_batch_overlap: bool = setting(False, "Two micro-batches: one's routed exchanges behind the other's "
                                               "compute (reports the share of exchange time hidden).")
    check_hbm: bool = setting(False, "Assert the HBM invariant at every engine iteration (tests).")
    staging_streams: int = setting(8, "K, the CUDA streams of each holder's D2D staging pool.", minimum=1)
    staging_copy_GBps: float | None = setting(None, "D2D rate of one staging copy on a copy engine (GB/s); the "
                                                     "profile's staging_copy_GBps, else the GPU's achievable HBM "
                                                     "rate / 2, if unset.", minimum=0, exclusive_minimum=True)
    decode_steps_per_event: int = setting(8, "Identical decode iterations one engine event may stand for (cut "
                                             "at arrivals and completions; docs/MODEL.md).", minimum=1,
                                          maximum=MAX_DECODE_STEPS_PER_EVENT)
    prefill_us: float | None = setting(None, "Re-prefill cost per token-layer (us); the profile's value if "
                                             "unset.", minimum=0)
    max_requests: int | None = setting(None, "Replay only the first N requests.", minimum=1)
    qps: float | None = setting(None, "Open-loop arrival rate (requests/s): the trace's open-loop arrival times are "
                                      "rescaled to this mean rate (think times, prompts and outputs unchanged); "
                                      "the trace's own rate if unset.", minimum=0, exclusive_minimum=True)
    time_scale: float | None = setting(None, "Multiply the trace's open-loop arrival times by this (0.5 = twice "
                                             "the load); not with --qps.", minimum=0, exclusive_minimum=True)
    concurrency: int | None = setting(None, "At most N requests in flight (the serving benchmark clients' "
                                            "--max-concurrency): a due request waits, first come first served, "
                                            "for a slot, and takes one the instant a request ends; with every "
                                            "arrival at t = 0 a closed loop of N clients. The trace's own "
                                            "max_concurrency (trace gen serving -p concurrency=N) if unset.",
                                      minimum=1)
    until_s: float | None = setting(None, "Stop at this simulated time (s); unfinished requests are dropped.",
                                    minimum=0, exclusive_minimum=True, option="until")
    slo: str = setting(JOINER.join(DEFAULT_SLO), "The SLO the run is judged by (summary.json slo: met, and "
                                                 "attainment, the share of requests meeting its TTFT / TPOT / e2e "
                                                 "conditions); conditions '[stat] metric op value' joined by 'and' "
                                                 "or given as repeated --slo (docs/STUDIES.md, SLOs). Example: "
                                                 "--slo 'p99 ttft_ms <= 2000' --slo 'p99 tpot_ms <= 50'.",
                       joiner=JOINER)
    telemetry: bool = setting(True, "Write per-flow / per-link / per-holder / iteration tables.")
    link_series: bool = setting(False, "Also write per-link utilisation time series (large on long runs).")

    def __post_init__(self) -> None:
        from simroute.shipped import resolve_input
        for kind in ("topology", "trace", "calib"):   # a shipped name stands for its file
            object.__setattr__(self, kind, resolve_input(kind, getattr(self, kind)))
        hints = field_hints(type(self))
        for f in fields(self):
            value = _checked(f.name, getattr(self, f.name), hints[f.name], f.metadata)
            if value is not getattr(self, f.name):
                object.__setattr__(self, f.name, value)     # an integral float given for an int field
        chunk, budget = self.prefill_chunk, self.token_budget
        if chunk is not None and budget is not None and chunk > budget and self.scheduler not in ("vllm", "trtllm"):
            raise ConfigurationError(f"{chunk} exceeds token_budget {budget}: no iteration could hold such a chunk "
                                     "(lower prefill_chunk or raise token_budget)", field="prefill_chunk")
        if self.engine == "none":
            for name in ("cuda_graph_max_batch", "overlap_scheduling", "scheduler_recv_interval",
                         "prefill_graph_max_tokens", "mem_fraction", "batch_wait_timeout_iters",
                         "batch_wait_max_tokens_ratio", "adp_balance", "adp_timeout_iters",
                         "adp_batching_wait_iters", "moe_backend", "fp8_gemm_backend"):
                if getattr(self, name) is not None:
                    raise ConfigurationError("is a framework setting: name an engine preset (--engine) to set it",
                                             field=name)
        if self.qps is not None and self.time_scale is not None:
            raise ConfigurationError("set the load by --qps or by --time-scale, not both", field="qps")
        self._check_parallel()
        try:
            object.__setattr__(self, "slo", JOINER.join(parse_slo(self.slo).texts))
        except ValueError as exc:
            raise ConfigurationError(str(exc), field="slo") from None

    @property
    def instance_gpus(self) -> int:
        """GPUs of one instance: the TP group, or one DP attention rank's (tp / dp_attention)."""
        return self.tp // self.dp_attention

    @property
    def grouped(self) -> bool:
        """Whether the instances step as DP groups (`simroute.sim.engine.group`): DP attention, EP or MTP."""
        return self.dp_attention > 1 or self.ep > 1 or self.nextn > 0

    def parallel(self, gpus_per_host: int) -> tuple[Any, Any]:
        """(`parallel.Deployment`, `parallel.Mtp` or None) of one group on hosts of `gpus_per_host` GPUs."""
        from simroute.model.parallel import Deployment, Mtp
        deployment = Deployment(tp=self.tp, dp=self.dp_attention, ep=self.ep, gpus_per_host=gpus_per_host,
                                a2a=None if self.a2a is None else self.a2a, distribution=self.moe_load)  # type: ignore
        mtp = Mtp(self.nextn, self.accept_rate, self.accept_length) if self.nextn > 0 else None
        return deployment, mtp

    def _check_parallel(self) -> None:
        """The group's shape as far as it is the model's (simroute.model.limits: DP ranks, EP degree, MTP); the
        hosts' part is checked with the topology (sim/deployment.py)."""
        from simroute.model.geometry import get_model
        from simroute.model.limits import check_mtp, check_parallel
        from simroute.model.parallel import Mtp
        if not self.grouped and self.a2a is None and self.accept_rate is None and self.accept_length is None:
            return
        geometry = get_model(self.model)
        check_mtp(geometry, Mtp(self.nextn, self.accept_rate, self.accept_length))
        if self.kv_layout != "replicated" and self.dp_attention > 1:
            raise ConfigurationError("tpla is a TP layout; with dp_attention each rank holds its own latent",
                                     field="kv_layout")
        deployment, mtp = self.parallel(max(self.tp, 1))
        check_parallel(geometry, deployment, mtp)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("topology", "trace", "calib"):
            d[k] = str(Path(d[k]))
        return d


@functools.cache
def field_hints(config_type: type) -> dict[str, Any]:
    """`typing.get_type_hints(config_type)`, once per class and process: a run builds its RunConfig more than once
    (the CLI's options, the config, the settings that ran), each time evaluating ~60 string annotations. The
    dict is shared: read it, never change it."""
    return typing.get_type_hints(config_type)


def field_types(hint: Any) -> tuple[type, bool]:
    """(base type, optional) of a field annotation such as `int`, `float | None`."""
    args = typing.get_args(hint)
    if args and type(None) in args:
        return next(a for a in args if a is not type(None)), True
    return hint, False


def _checked(name: str, value: Any, hint: Any, meta: Any) -> Any:
    """The field's value if it has the annotated type and lies within the declared bounds / names, else raise."""
    base, optional = field_types(hint)
    if value is None and optional:
        return None
    if base in (int, float):
        return check_number(value, name, integer=base is int, minimum=meta.get("minimum"),
                            maximum=meta.get("maximum"), exclusive_minimum=meta.get("exclusive_minimum", False))
    if not isinstance(value, base):
        raise ConfigurationError(f"must be {base.__name__}{' or null' if optional else ''}, got {value!r}",
                                 field=name)
    check = meta.get("check")
    if check is not None:
        check(value)
        return value
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise UnknownNameError(name, value, list(choices))
    return value
