"""A run's engine: the framework preset it names (`--engine NAME[@VERSION]`, `auto`, `none`), resolved for its
deployment, with the run's explicit flags on top (docs/ENGINES.md).

`auto` (the default) takes the framework whose operator tables the GPU entry reads (the default deployment's H200
tables are SGLang 0.5.14's: the sglang preset); a GPU without tables takes the default framework's newest preset.
`none` is the engine of the flags alone: Sarathi-style chunking at 2048 tokens and the GPU entry's constant
`iteration_overhead_us`, no per-request path (the engine before presets). A preset selects its kernel tables too:
calib/ops/<gpu>/<framework>-<version>/ where that GPU has them, else the GPU entry's own (and the run says so).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simroute.errors import ConfigurationError
from simroute.model.steptime import GpuSpec, HostCosts
from simroute.sim.config import ENGINE_AUTO as AUTO, ENGINE_NONE as NONE, RunConfig, parse_engine
from simroute.sim.frameworks.base import FLAG_SETTINGS, FRAMEWORKS, OPTIONAL_SETTINGS, SETTINGS, Deployment, Setting
DEFAULT_FRAMEWORK = "sglang"        # the framework whose tables the shipped GPU entries read
# the engine before presets (`--engine none`): RunConfig's former defaults
LEGACY = {"scheduler": "sarathi", "token_budget": 2048, "prefill_chunk": 2048, "max_running_seqs": 256}


@dataclass(frozen=True)
class ResolvedEngine:
    """The engine settings of a run and where each came from, the tables it reads and the CPU-side costs."""

    engine: str                         # 'sglang@0.5.14', or 'none'
    settings: dict[str, Setting]
    tables: str                         # the operator tables the step model reads ('none': the roofline)
    notes: tuple[str, ...] = ()
    preset_file: str | None = None

    def value(self, key: str) -> Any:
        return self.settings[key].value

    @property
    def preset(self) -> bool:
        return self.engine != NONE

    @property
    def host(self) -> HostCosts | None:
        """The framework's CPU side of an iteration (None: the GPU entry's constant overhead)."""
        if not self.preset:
            return None
        prefill_graphs = self.settings.get("prefill_graph_max_tokens")
        return HostCosts(overlap=bool(self.value("overlap_scheduling")),
                         host_s_per_sequence=float(self.value("host_us_per_sequence")) * 1e-6,
                         launch_s_per_layer=float(self.value("eager_launch_us_per_layer")) * 1e-6,
                         graph_max_batch=int(self.value("cuda_graph_max_batch")),
                         prefill_graph_max_tokens=int(prefill_graphs.value) if prefill_graphs is not None else 0)

    @property
    def ingress_s(self) -> float:
        """A request's path from its arrival to the scheduler (API server, tokenisation, one hop)."""
        return float(self.value("request_ingress_us")) * 1e-6 if self.preset else 0.0

    @property
    def egress_s(self) -> float:
        """A token's path from the scheduler to the client (detokenisation, hops, the HTTP stream)."""
        return float(self.value("request_egress_us")) * 1e-6 if self.preset else 0.0

    @property
    def recv_interval(self) -> int:
        """Iterations between the scheduler's polls of its input queue (SGLang's --scheduler-recv-interval; 1: a
        framework without it takes new requests every iteration)."""
        setting = self.settings.get("scheduler_recv_interval")
        return int(setting.value) if setting is not None else 1

    def kv_pool_bytes(self, weight_bytes: float) -> float | None:
        """The KV pool of one GPU as the framework's source sizes it from the run's --mem-fraction (None: not
        modelled, all HBM after the weights); `weight_bytes` the weights one GPU holds."""
        if not self.preset:
            return None
        return FRAMEWORKS.get(self.engine.split("@")[0])().kv_pool_bytes(self.settings, weight_bytes)

    @property
    def batch_wait(self) -> tuple[int, float]:
        """TensorRT-LLM's batch waiting: (iterations context requests may wait, share of the token budget that ends
        the wait); (0, 0.0): off, as a framework without it."""
        iters = self.settings.get("batch_wait_timeout_iters")
        ratio = self.settings.get("batch_wait_max_tokens_ratio")
        return (int(iters.value) if iters is not None else 0, float(ratio.value) if ratio is not None else 0.0)

    @property
    def adp_balance(self) -> tuple[bool, int, int]:
        """TensorRT-LLM's attention-DP balancing: (on, timeout_iters, batching_wait_iters); (False, 0, 0): off, as
        a framework without it."""
        on = self.settings.get("adp_balance")
        if on is None or not on.value:
            return (False, 0, 0)
        return (True, int(self.settings["adp_timeout_iters"].value), int(self.settings["adp_batching_wait_iters"].value))

    @property
    def schedule_ahead(self) -> bool:
        return self.preset and bool(self.value("overlap_scheduling"))

    def applied(self, cfg: RunConfig) -> RunConfig:
        """`cfg` with the resolved engine and flag settings written in (a summary's `config` then says what ran)."""
        values = {key: self.value(key) for key in FLAG_SETTINGS + OPTIONAL_SETTINGS if key in self.settings}
        return dataclasses.replace(cfg, engine=self.engine, **values)

    def summary(self) -> dict[str, Any]:
        return {"engine": self.engine, "preset_file": self.preset_file, "tables": self.tables,
                "settings": {key: {"value": setting.value, "source": setting.source}
                             for key, setting in self.settings.items()},
                "notes": list(self.notes)}


def resolve_engine(cfg: RunConfig, spec: GpuSpec, *, layers: int, kv_capacity_tokens: int,
                   hbm_bytes: float | None = None, mla: bool = False, moe: bool = False
                   ) -> tuple[ResolvedEngine, GpuSpec]:
    """The run's engine (see the module) and the GPU spec with the preset's tables. `hbm_bytes` is the run's HBM
    per GPU (`--hbm-gb`) where it overrides the GPU entry's."""
    flags = {key: getattr(cfg, key) for key in FLAG_SETTINGS + OPTIONAL_SETTINGS if getattr(cfg, key) is not None}
    if cfg.engine == NONE:
        settings = {key: Setting(flags[key], f"flag (--{key.replace('_', '-')})") if key in flags
                    else Setting(value, "default (--engine none: the engine of the flags)")
                    for key, value in LEGACY.items()}
        settings = _check_chunk(settings)
        tables = spec.operator_tables.label if spec.operator_tables is not None else "none"
        return ResolvedEngine(NONE, settings, tables, ("no framework preset: the GPU entry's iteration_overhead_us "
                                                       "and no per-request path",)), spec
    from simroute.calib.engines import load_engine_preset
    framework, version = parse_engine(cfg.engine)
    notes: list[str] = []
    own = spec.operator_tables
    if framework == AUTO:
        if own is not None and own.framework in FRAMEWORKS:
            framework = own.framework
            from simroute.calib.engine_files import preset_versions
            version = own.version if own.version in preset_versions(framework) else None
            if version is None:
                notes.append(f"{spec.name}'s tables are {own.framework} {own.version}, for which no preset ships: "
                             f"the newest {framework} preset is used")
        else:
            framework = DEFAULT_FRAMEWORK
            notes.append(f"{spec.name} has no {'framework ' if own is not None else ''}operator tables: the "
                         f"{framework} preset is used")
    preset = load_engine_preset(framework, version)
    deployment = Deployment(gpu=spec.name, hbm_bytes=hbm_bytes if hbm_bytes is not None else spec.hbm_bytes,
                            tp=cfg.tp, layers=layers, kv_capacity_tokens=kv_capacity_tokens, mla=mla, moe=moe,
                            hbm_override=hbm_bytes is not None, dp_attention=cfg.dp_attention,
                            ep=cfg.ep)
    rules = FRAMEWORKS.get(framework)()
    settings = rules.settings(preset, deployment, flags)
    missing = [key for key in SETTINGS if key not in settings]
    if missing:
        raise ConfigurationError(f"the {framework} framework resolved no {', '.join(missing)}", file=preset.file)
    settings = _check_chunk(settings)
    spec, tables = _preset_tables(spec, preset.tables, notes)
    moe_tables = rules.moe_tables(preset, deployment, settings)
    if moe_tables is not None:
        spec, tables = _moe_tables(spec, moe_tables, tables, notes)
    bound = rules.gemm_bound(preset, deployment, settings)
    if bound is not None:
        spec, tables = _gemm_bound(spec, bound, tables, notes)
    return ResolvedEngine(preset.label, settings, tables, tuple(notes), _shipped_name(preset.file)), spec


def _shipped_name(path: Path) -> str:
    """A preset file as the run records it: `calib/engines/NAME.yaml` when shipped (outputs name no checkout's
    absolute path), else its path."""
    from simroute.calib.engine_files import engines_dir
    try:
        return f"calib/engines/{path.resolve().relative_to(engines_dir().resolve()).as_posix()}"
    except ValueError:
        return str(path)


def _check_chunk(settings: dict[str, Setting]) -> dict[str, Setting]:
    """Sarathi's chunk must fit its budget: a flag that breaks this is refused (naming the flag); a preset's chunk
    over a flagged budget is cut to it."""
    if settings["scheduler"].value != "sarathi":
        return settings
    chunk, budget = settings["prefill_chunk"], settings["token_budget"]
    if chunk.value <= budget.value:
        return settings
    if chunk.source.startswith("flag"):
        raise ConfigurationError(f"{chunk.value} exceeds token_budget {budget.value} ({budget.source}): no "
                                 "iteration could hold such a chunk (lower prefill_chunk or raise token_budget)",
                                 field="prefill_chunk")
    return {**settings, "prefill_chunk": Setting(budget.value, f"cut to the token budget; was {chunk.value} "
                                                               f"({chunk.source})")}


def _moe_tables(spec: GpuSpec, name: str, label: str, notes: list[str]) -> tuple[GpuSpec, str]:
    """`spec` whose tables take their MoE rows from calib/ops/<gpu>/<name>/ (the kernel a launch's MoE backend
    runs, `Framework.moe_tables`); refused, naming the setting, where that table set has none."""
    from simroute.calib.optables import load_operator_tables_cached
    from simroute.calib.profile import shipped_dir
    from simroute.model.optables import OpKind
    directory = shipped_dir() / "ops" / spec.name / name
    own = spec.operator_tables
    other = load_operator_tables_cached(str(directory.resolve())) if directory.is_dir() else None
    moe = other.get(OpKind.MOE) if other is not None else None
    if own is None or moe is None:
        raise ConfigurationError(f"needs the MoE rows of calib/ops/{spec.name}/{name}, which do not ship",
                                 field="moe_backend")
    tables = dataclasses.replace(own, tables={**own.tables, OpKind.MOE: moe})
    notes.append(f"moe_backend: the routed experts read {other.label}'s MoE rows (the kernel the launch's MoE "
                 "backend runs)")
    return dataclasses.replace(spec, operator_tables=tables), f"{label}; moe: {other.label}"


_BOUNDED: dict[tuple, tuple] = {}


def _gemm_bound(spec: GpuSpec, bound: tuple[str, float, str], label: str, notes: list[str]) -> tuple[GpuSpec, str]:
    """`spec` whose GEMM rows of one dtype run no faster than a FLOP rate (`Framework.gemm_bound`: a launch's GEMM
    kernel that no table times, bounded by its published throughput); refused, naming the setting, without such
    rows."""
    from simroute.model.optables import OpKind, gemm_rows_no_faster_than
    dtype, flops_per_s, why = bound
    own = spec.operator_tables
    gemm = own.get(OpKind.GEMM) if own is not None else None
    if gemm is None or dtype not in gemm.values("dtype"):
        raise ConfigurationError(f"needs {dtype} GEMM rows to bound, which {label} lacks", field="fp8_gemm_backend")
    key = (id(gemm), dtype, flops_per_s, why)
    hit = _BOUNDED.get(key)
    if hit is None or hit[0] is not gemm:     # one bounded table per loaded one: its curves stay memoized
        hit = _BOUNDED[key] = (gemm, gemm_rows_no_faster_than(gemm, dtype, flops_per_s, why))
    tables = dataclasses.replace(own, tables={**own.tables, OpKind.GEMM: hit[1]})
    notes.append(f"fp8_gemm_backend: {dtype} GEMMs no faster than {flops_per_s / 1e12:.1f} TFLOP/s ({why})")
    return dataclasses.replace(spec, operator_tables=tables), f"{label}; {dtype} GEMMs <= {flops_per_s / 1e12:.1f} " \
                                                               "TFLOP/s"


def _preset_tables(spec: GpuSpec, name: str, notes: list[str]) -> tuple[GpuSpec, str]:
    """`spec` reading calib/ops/<gpu>/<name>/ when that directory exists, else the GPU entry's own tables (noted)."""
    from simroute.calib.optables import MANIFEST, load_operator_tables_cached
    from simroute.calib.profile import shipped_dir
    own = spec.operator_tables
    directory = shipped_dir() / "ops" / spec.name / name
    if (directory / MANIFEST).is_file():
        if own is not None and Path(own.path).resolve() == directory.resolve():
            return spec, own.label
        tables = load_operator_tables_cached(str(directory.resolve()))
        return dataclasses.replace(spec, operator_tables=tables), tables.label
    if own is None:
        notes.append(f"no calib/ops/{spec.name}/{name} tables and none in the GPU entry: the roofline")
        return spec, "none"
    if f"{own.framework}-{own.version}" != name:
        notes.append(f"no calib/ops/{spec.name}/{name} tables: the GPU entry's own ({own.label}) are read")
    return spec, own.label
