"""Import NVIDIA's measured operator database from the `aiconfigurator-core` package (PyPI, Apache-2.0).

The package ships its measurements as `aiconfigurator_core/systems/data/<gpu>/<op>/<framework>/<version>/
*.parquet` (latencies in ms, one row per measured shape, collected with the named framework's kernels on the
named GPU; a `collection_meta.yaml` beside each). This module maps the files simroute's step-time model reads
onto simroute's table format (simroute.calib.optables): same rows, renamed columns, latencies in us, and a
manifest entry per table naming the package, its version, the source file and its collection metadata.

Mapping (aiconfigurator file -> simroute kind: rows kept):
- gemm/gemm_perf -> gemm: every dtype (bfloat16 -> bf16; fp8 per-tensor; fp8_block, the 128x128 block scaling of
  DeepSeek-V3 checkpoints).
- moe/moe_perf -> moe: every dtype and token distribution; where one shape was timed under several kernels, the
  framework's default one (`DEFAULT_KERNELS`), never the fastest of them; a kernel timed twice keeps its faster row.
- attention/context_attention_perf, generation_attention_perf -> attention_prefill / attention_decode: full
  attention only (window_size 0), bf16 activations; where one shape was measured under several backends, the
  framework's default one (`DEFAULT_KERNELS`); decode context = isl + step.
Where a framework's default among a shape's kernels is not established (`DEFAULT_KERNELS` names neither), the
kernel the file lists first is kept (the collector's order), and the manifest says which kernels were kept.
- mla/context_mla_perf, generation_mla_perf -> mla_prefill / mla_decode: num_heads is the heads of one rank.
- mla_bmm/mla_bmm_perf -> mla_bmm: stage pre (mla_gen_pre) and post (mla_gen_post).
- sparse_attention/dsa_generation_module_perf -> dsa_decode: DSA's whole decode attention module (projections,
  lightning indexer with its top-k, sparse MLA) with the indexer (op dsa_generation_module), by architecture;
  decode context = isl + step. The step model composes sparse attention from the other kinds and is checked
  against these rows (docs/STEP_TIME.md, "Sparse attention").
- comm/<framework>/custom_allreduce_perf -> allreduce (mode graph / eager: the framework's custom all-reduce
  replayed in a CUDA graph or launched eagerly; TensorRT-LLM's file, without a `backend` column, is its AUTO
  strategy timed under CUDA-graph capture: mode graph); comm/nccl/<version>/nccl_perf all_reduce -> allreduce mode
  nccl. message_elements counts bf16 values (the file's message_size; 33,554,432 elements = 64 MiB).
A kind the asked version lacks is taken from the newest version of the same framework that has it, and its
manifest entry says which. Without --version, the version is the database's own `current` one for that system
and framework (systems/query_versions.yaml), else the newest that holds GEMM rows.

Expert parallelism (docs/STEP_TIME.md, "DP attention and expert parallelism"), read from every version folder of
the framework, a shape measured in several taking the newest version's row (the database measured multi-host
DeepEP only once, under SGLang 0.5.0, shipped in its 0.5.6.post2 folder):
- comm/<framework>/*/wideep_deepep_{ll,normal}_perf -> moe_a2a (backend deepep_ll / deepep_normal, phase dispatch /
  combine, dtype default): DeepEP's low-latency and normal-mode all-to-all of `tokens` tokens per rank over
  `nodes` hosts of the system's GPUs per node (ep = nodes x that), latency per call = transmit + notify;
  normal mode at each dispatch / combine SM budget (`sms`; low latency: 0). comm/<framework>/*/moe_a2a_perf (the
  newer unified schema, vLLM and TensorRT-LLM) -> the same kind, its own backend names (deepep_ht -> deepep_normal).
- moe/<framework>/*/wideep_{generation,context}_moe_perf -> moe_deepep (mode ll / normal): DeepEP's grouped
  expert GEMMs on the busiest rank, `tokens` the whole EP group's (the collector draws the group's routing).
- mla/<framework>/*/wideep_{context,generation}_mla_perf -> mla_module (phase prefill / decode, kv_dtype,
  backend flashinfer / fa3; batch, tokens = isl or context, heads of the rank): the whole MLA block of an attention
  rank after its fused q_a / kv_a projection (norms, q_b, RoPE, kv_b or the absorbed BMMs, the kernel, o_proj),
  timed as one module with FP8 attention; the newest version's rows.
- comm/nccl/<the system's nccl_version>/nccl_perf -> collective: every NCCL op (all_gather, reduce_scatter,
  all_reduce, alltoall), message_elements the whole message (an all-gather's gathered output).

GPU names: `--gpu` takes simroute's GPU entry names (`GPU_NAMES`; any other simroute-style name maps to the system
of the same name with `_` for `-`, e.g. h100-pcie -> h100_pcie) or the database's system names; `available` lists
every system with its frameworks and versions. `trim` drops the rows no shipped model reads (simroute.calib.trim).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from simroute.errors import ConfigurationError
from simroute.model.optables import LATENCY_COLUMN, OpKind

PACKAGE = "aiconfigurator-core"
LICENCE = "Apache-2.0 (aiconfigurator-core; the database files carry: Copyright (c) 2026 NVIDIA CORPORATION & AFFILIATES)"
# simroute GPU entry -> aiconfigurator system name (other names map by `_` for `-`: `system_name`)
GPU_NAMES = {"h200-sxm": "h200_sxm", "h100-sxm": "h100_sxm", "a100-80gb": "a100_sxm",
             "rtxpro6000": "rtx_pro_6000_server", "b200-sxm": "b200_sxm", "b300-sxm": "b300_sxm", "gb200": "gb200",
             "gb300": "gb300"}


@dataclass(frozen=True)
class KernelDefault:
    """The kernels (the database's `kernel_source`) a framework runs by default for one op family, by the GPU's
    compute-capability major (the system's `sm_version` // 10), kept where the database timed one shape under
    several; a kernel named nowhere ranks after the defaults, an opt-in one last."""

    by_major: Mapping[int, tuple[str, ...]]     # compute-capability major -> the defaults there, best first
    other: tuple[str, ...] = ()                 # on any other GPU, or one whose architecture the database omits
    opt_in: tuple[str, ...] = ()                # kernels the framework runs only when asked: kept only where alone
    source: str = ""                            # where the default was read (file, function, version)

    def defaults(self, sm_version: int | None) -> tuple[str, ...]:
        return self.by_major.get(sm_version // 10, self.other) if sm_version else self.other

    def rank(self, kernel: str, sm_version: int | None) -> int:
        defaults = self.defaults(sm_version)
        if kernel in defaults:
            return defaults.index(kernel)
        if kernel in self.opt_in:
            return len(defaults) + 1 + self.opt_in.index(kernel)
        return len(defaults)


# (framework, op family) -> the framework's default kernels; a pair not named keeps the file's first kernel
DEFAULT_KERNELS: dict[tuple[str, str], KernelDefault] = {
    ("sglang", "attention"): KernelDefault(
        by_major={9: ("fa3",), 10: ("trtllm_mha",)}, other=("flashinfer",),
        source="published: sglang 0.5.14 python/sglang/srt/server_args.py, ServerArgs._get_default_attn_backend "
               "(MHA models): fa3 on Hopper (is_hopper_with_cuda_12_3: major 9), trtllm_mha on SM100/SM103 "
               "(is_sm100_supported: major 10), else flashinfer (SM120 included; triton only for a model with "
               "attention sinks, which the database's rows do not name)"),
    ("sglang", "moe"): KernelDefault(
        by_major={10: ("sglang_flashinfer_trtllm_moe", "sglang_mxfp4_flashinfer_trtllm_moe")},
        other=("sglang_fused_moe_triton",),
        source="published: sglang 0.5.14 python/sglang/srt/server_args.py, moe_runner_backend default 'auto', set to "
               "flashinfer_trtllm on SM100 (is_sm100_supported) for DeepseekV3ForCausalLM and the other listed "
               "architectures (fp8, modelopt or unquantized experts, no --moe-a2a-backend) in "
               "_handle_model_specific_adjustments; elsewhere 'auto' runs the Triton fused MoE "
               "(layers/quantization/fp8.py: DeepGEMM only under DeepEP, Mooncake or NIXL). aiconfigurator-core "
               "0.12.0 times one kernel per SGLang shape: no choice is made on its tables"),
    ("trtllm", "moe"): KernelDefault(
        by_major={}, opt_in=("moe_torch_flow_min_latency",),
        source="published: TensorRT-LLM tensorrt_llm/llmapi/llm_args.py, enable_min_latency default False "
               "('Currently only used for Llama4'; read in the repository's llm_args.py, 1.3.0rc20 itself is not "
               "on PyPI); aiconfigurator-core 0.12.0 sdk/operations/moe.py keeps the moe_torch_flow_min_latency "
               "rows in a separate low-latency table, not the MoE table it composes"),
}

# the op kinds the step model reads, trimmed by `trim` (the others are small: all-reduce, MLA BMMs)
TRIMMED_KINDS = (OpKind.GEMM, OpKind.MOE, OpKind.ATTENTION_PREFILL, OpKind.ATTENTION_DECODE, OpKind.MLA_PREFILL,
                 OpKind.MLA_DECODE)
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16"}

# kind -> (op folder, file stem under the framework's version folder)
_FILES: dict[OpKind, tuple[str, str]] = {
    OpKind.GEMM: ("gemm", "gemm_perf"),
    OpKind.MOE: ("moe", "moe_perf"),
    OpKind.ATTENTION_PREFILL: ("attention", "context_attention_perf"),
    OpKind.ATTENTION_DECODE: ("attention", "generation_attention_perf"),
    OpKind.MLA_PREFILL: ("mla", "context_mla_perf"),
    OpKind.MLA_DECODE: ("mla", "generation_mla_perf"),
    OpKind.MLA_BMM: ("mla_bmm", "mla_bmm_perf"),
    OpKind.DSA_DECODE: ("sparse_attention", "dsa_generation_module_perf"),
    OpKind.ALLREDUCE: ("comm", "custom_allreduce_perf"),
}


def package_root() -> tuple[Path, str]:
    """The installed package's data directory and version; a clear error when it is not installed."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(f"the {PACKAGE} package is not installed (pip install {PACKAGE}), or give --from "
                                 "the directory that holds its systems/data", field="--from")
    root = Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"
    return root, importlib.metadata.version(PACKAGE)


def _unpacked_version(data_root: Path) -> str:
    """The version of an unpacked wheel (its dist-info's METADATA beside the package folder), if it is there."""
    for meta in data_root.parent.parent.parent.glob("aiconfigurator_core-*.dist-info/METADATA"):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return "unknown (read from --from)"


def _dtype(value: str) -> str:
    return _DTYPES.get(value, value)


def _version_key(version: str) -> tuple:
    parts = []
    for piece in version.replace("rc", ".").replace("post", ".").split("."):
        parts.append(int(piece) if piece.isdigit() else -1)
    return tuple(parts)


def system_name(gpu: str) -> str:
    """The database's system for a simroute GPU name (or a system name, unchanged)."""
    return GPU_NAMES.get(gpu, gpu.replace("-", "_"))


def simroute_name(system: str) -> str:
    """The simroute GPU name of a database system (the shipped entry's where one maps to it)."""
    return next((name for name, mapped in GPU_NAMES.items() if mapped == system), system.replace("_", "-"))


def _framework_versions(system: Path, framework: str) -> list[str]:
    """The versions of `framework` that hold at least one table this importer reads, oldest first."""
    folders = {folder for folder, _stem in _FILES.values()}
    found = {path.parent.name for folder in folders
             for path in system.glob(f"{folder}/{framework}/*/*.parquet")
             if any(path.stem == stem for kind_folder, stem in _FILES.values() if kind_folder == folder)}
    return sorted(found, key=_version_key)


def _frameworks(system: Path) -> list[str]:
    folders = {folder for folder, _stem in _FILES.values()}
    return sorted({path.name for folder in folders for path in system.glob(f"{folder}/*")
                   if path.is_dir() and path.name != "nccl" and _framework_versions(system, path.name)})


def _current_version(root: Path, system: str, framework: str) -> str | None:
    """The database's `current` version of (system, framework) (systems/query_versions.yaml), if it says."""
    from simroute.ioutil import load_yaml

    path = root.parent / "query_versions.yaml"
    if not path.is_file():
        return None
    try:
        doc = load_yaml(path) or {}
    except Exception:       # a damaged version file only loses the default, never the import
        return None
    slot = ((doc.get("overrides") or {}).get(system) or {}).get(framework) or \
        (doc.get("defaults") or {}).get(framework) or {}
    current = slot.get("current") if isinstance(slot, dict) else None
    return str(current) if current else None


def default_version(root: Path, system: str, framework: str, versions: list[str]) -> str:
    """The version an import reads without --version: the database's `current` one where it is measured here,
    else the newest version holding GEMM rows, else the newest."""
    current = _current_version(root, system, framework)
    if current in versions:
        return current  # type: ignore[return-value]
    with_gemm = [v for v in versions if (root / system / "gemm" / framework / v / "gemm_perf.parquet").is_file()]
    return (with_gemm or versions)[-1]


def available(data_root: str | Path | None = None) -> list[dict[str, Any]]:
    """Every system the database ships: its simroute name, frameworks, their measured versions and the
    default (`current`) one."""
    root, _version = _data_root(data_root)
    out = []
    for system in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        frameworks = {}
        for framework in _frameworks(system):
            versions = _framework_versions(system, framework)
            frameworks[framework] = {"versions": versions,
                                     "default": default_version(root, system.name, framework, versions)}
        if frameworks:
            out.append({"system": system.name, "gpu": simroute_name(system.name), "frameworks": frameworks})
    return out


def _data_root(data_root: str | Path | None) -> tuple[Path, str]:
    """The database's systems/data directory and the package version it comes from."""
    if data_root is None:
        return package_root()
    root = Path(data_root)
    if (root / "aiconfigurator_core" / "systems" / "data").is_dir():
        root = root / "aiconfigurator_core" / "systems" / "data"
    elif (root / "systems" / "data").is_dir():
        root = root / "systems" / "data"
    return root, _unpacked_version(root)


def _pick_version(folder: Path, version: str, stem: str) -> Path | None:
    """The asked version's folder if it holds `stem`.parquet, else the newest version folder that does."""
    exact = folder / version / f"{stem}.parquet"
    if exact.is_file():
        return exact
    found = sorted((p for p in folder.glob(f"*/{stem}.parquet")), key=lambda p: _version_key(p.parent.name))
    return found[-1] if found else None


def _read(path: Path):
    import pandas as pd

    try:
        return pd.read_parquet(path)
    except Exception as exc:  # damaged or unreadable file
        raise ConfigurationError(f"not a readable Parquet file ({type(exc).__name__})", file=path) from None


def _meta(path: Path) -> str:
    meta = path.parent / "collection_meta.yaml"
    if not meta.is_file():
        return ""
    lines = [ln.strip() for ln in meta.read_text(errors="replace").splitlines() if ln.strip() and
             not ln.lstrip().startswith("#")]
    return "; ".join(lines)[:400]


def _convert(kind: OpKind, frame) -> dict[str, Any]:
    """One aiconfigurator frame -> simroute columns (latency ms -> us)."""
    lat = frame["latency"].to_numpy(dtype=float) * 1e3
    if kind is OpKind.GEMM:
        return {"dtype": [_dtype(v) for v in frame["gemm_dtype"]], "m": frame["m"], "n": frame["n"],
                "k": frame["k"], LATENCY_COLUMN: lat}
    if kind is OpKind.MOE:
        return {"dtype": [_dtype(v) for v in frame["moe_dtype"]], "distribution": frame["distribution"],
                "tokens": frame["num_tokens"], "hidden": frame["hidden_size"], "inter": frame["inter_size"],
                "topk": frame["topk"], "experts": frame["num_experts"], "moe_tp": frame["moe_tp_size"],
                "moe_ep": frame["moe_ep_size"], LATENCY_COLUMN: lat}
    if kind in (OpKind.ATTENTION_PREFILL, OpKind.ATTENTION_DECODE):
        cols = {"kv_dtype": [_dtype(v) for v in frame["kv_cache_dtype"]], "batch": frame["batch_size"],
                "heads": frame["num_heads"], "kv_heads": frame["num_key_value_heads"], "head_dim": frame["head_dim"],
                LATENCY_COLUMN: lat}
        if kind is OpKind.ATTENTION_PREFILL:
            cols["isl"] = frame["isl"]
        else:
            cols["context"] = frame["isl"] + frame["step"]
        return cols
    if kind in (OpKind.MLA_PREFILL, OpKind.MLA_DECODE):
        cols = {"kv_dtype": [_dtype(v) for v in frame["kv_cache_dtype"]], "batch": frame["batch_size"],
                "heads": frame["num_heads"], LATENCY_COLUMN: lat}
        if kind is OpKind.MLA_PREFILL:
            cols["isl"] = frame["isl"]
        else:
            cols["context"] = frame["isl"] + frame["step"]
        return cols
    if kind is OpKind.DSA_DECODE:
        return {"architecture": list(frame["architecture"]), "dtype": [_dtype(v) for v in frame["gemm_type"]],
                "kv_dtype": [_dtype(v) for v in frame["kv_cache_dtype"]], "batch": frame["batch_size"],
                "context": frame["isl"] + frame["step"], "heads": frame["num_heads"], LATENCY_COLUMN: lat}
    if kind is OpKind.MLA_BMM:
        return {"stage": [v.removeprefix("mla_gen_") for v in frame["op_name"]],
                "dtype": [_dtype(v) for v in frame["bmm_dtype"]], "tokens": frame["num_tokens"],
                "heads": frame["num_heads"], LATENCY_COLUMN: lat}
    if kind is OpKind.ALLREDUCE:
        modes = (frame["backend"] if "backend" in frame else ["x_graph"] * len(frame))  # TRT-LLM: AUTO under graphs
        return {"mode": [v.rsplit("_", 1)[-1] for v in modes],
                "dtype": [_dtype(v) for v in frame["allreduce_dtype"]], "gpus": frame["num_gpus"],
                "message_elements": frame["message_size"], LATENCY_COLUMN: lat}
    raise AssertionError(kind)


def _default_kernel_rows(frame, keys: list[str], framework: str, family: str, sm_version: int | None, *,
                         faster_repeat: bool) -> tuple[Any, dict[str, Any] | None]:
    """One row per shape: the framework's default kernel's (`DEFAULT_KERNELS`), else the kernel the file lists
    first; of one kernel's repeated rows the first, or with `faster_repeat` the faster. Returns the rows and, where
    some shape had several kernels, what was kept and why (for the manifest), else None."""
    if "kernel_source" not in frame or frame.empty:
        order = ["latency"] if faster_repeat else []
        return (frame.sort_values(order, kind="stable") if order else frame).drop_duplicates(keys, keep="first"), None
    choice = DEFAULT_KERNELS.get((framework, family))
    sources = frame["kernel_source"].astype(str)
    first_seen = {name: i for i, name in enumerate(dict.fromkeys(sources))}
    ranked = frame.assign(_rank=sources.map(lambda name: choice.rank(name, sm_version) if choice else 0),
                          _first=sources.map(first_seen))
    order = ["_rank", "_first", "latency"] if faster_repeat else ["_rank", "_first"]
    kept = ranked.sort_values(order, kind="stable").drop_duplicates(keys, keep="first")
    # the rows in the order the earlier importer wrote them (MoE: faster first; attention: the defaults' rows first,
    # then the file's order), so that an import without a choice to make writes the same bytes
    kept = kept.sort_index().sort_values("latency" if faster_repeat else "_rank", kind="stable")
    kept = kept.drop(columns=["_rank", "_first"])
    several = ranked.groupby(keys, sort=False)["kernel_source"].nunique()
    if not (several > 1).any():
        return kept, None
    counts = kept["kernel_source"].value_counts()
    note = {"kernels_kept": {str(name): int(n) for name, n in counts.items()},
            "shapes_with_several_kernels": int((several > 1).sum()), "sm_version": sm_version,
            "defaults": list(choice.defaults(sm_version)) if choice else [],
            "rule": choice.source if choice else
            f"no {framework} default established for {family}: the kernel the file lists first"}
    return kept, note


def _filter(kind: OpKind, frame, framework: str = "", sm_version: int | None = None
            ) -> tuple[Any, dict[str, Any] | None]:
    """Keep the rows the step model reads (see the module docstring); with the kernel choice made, if any."""
    note = None
    if kind in (OpKind.ATTENTION_PREFILL, OpKind.ATTENTION_DECODE):
        if "window_size" in frame:
            frame = frame[frame["window_size"] == 0]
        if "attn_dtype" in frame:
            frame = frame[frame["attn_dtype"] == "bfloat16"]
        keys = ["batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype", "step"]
        frame, note = _default_kernel_rows(frame, keys, framework, "attention", sm_version,
                                           faster_repeat=False)
    if kind is OpKind.DSA_DECODE:
        frame = frame[frame["op_name"] == "dsa_generation_module"]       # with the indexer, as the model runs it
    if kind is OpKind.MOE:
        keys = ["moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
                "moe_ep_size", "distribution"]
        frame, note = _default_kernel_rows(frame, keys, framework, "moe", sm_version, faster_repeat=True)
    return frame, note


def _nccl_allreduce(system: Path):
    """NCCL's all-reduce rows (mode nccl), from the newest nccl version folder; None without one."""
    import pandas as pd

    path = _pick_version(system / "comm" / "nccl", "", "nccl_perf")
    if path is None:
        return None, None
    frame = _read(path)
    frame = frame[(frame["op_name"] == "all_reduce") & frame["nccl_dtype"].isin(["half", "bfloat16"])]
    return pd.DataFrame({"backend": "x_nccl", "allreduce_dtype": frame["nccl_dtype"].map(
        lambda v: "bfloat16" if v in ("half", "bfloat16") else v), "num_gpus": frame["num_gpus"],
        "message_size": frame["message_size"], "latency": frame["latency"]}), path


# legacy DeepEP file -> (simroute backend, the phases' latency columns)
_DEEPEP_FILES = {"wideep_deepep_ll_perf": ("deepep_ll", {"dispatch": ("dispatch_avg_t_us",),
                                                          "combine": ("combine_avg_t_us",)}),
                 "wideep_deepep_normal_perf": ("deepep_normal",
                                               {"dispatch": ("dispatch_transmit_us", "dispatch_notify_us"),
                                                "combine": ("combine_transmit_us", "combine_notify_us")})}
_A2A_BACKENDS = {"deepep_ht": "deepep_normal"}          # DeepEP's high-throughput kernels are its normal mode
_DEEPEP_MOE_FILES = {"wideep_generation_moe_perf": "ll", "wideep_context_moe_perf": "normal"}
_A2A_KEYS = ["backend", "phase", "dtype", "hidden", "topk", "experts", "ep", "nodes", "sms", "tokens"]


def _gpus_per_node(root: Path, system_name: str) -> int:
    """The system's GPUs per node (its systems/<name>.yaml `node.num_gpus_per_node`; 8 when absent, the HGX boards
    the legacy DeepEP tables were measured on)."""
    import yaml

    spec = root.parent / f"{system_name}.yaml"
    try:
        node = (yaml.safe_load(spec.read_text()) or {}).get("node") or {}
        return int(node.get("num_gpus_per_node") or 8)
    except (OSError, ValueError, TypeError, yaml.YAMLError):
        return 8


def _sm_version(root: Path, system_name: str) -> int | None:
    """The system's compute capability as the database states it (`gpu.sm_version`, e.g. 90, 100, 120), or None."""
    import yaml

    try:
        gpu = (yaml.safe_load((root.parent / f"{system_name}.yaml").read_text()) or {}).get("gpu") or {}
        return int(gpu["sm_version"]) if gpu.get("sm_version") is not None else None
    except (OSError, ValueError, TypeError, AttributeError, yaml.YAMLError):
        return None


def _nccl_version(root: Path, system_name: str) -> str:
    """The NCCL version the database's own estimator reads for the system (`misc.nccl_version`), or ''."""
    import yaml

    try:
        misc = (yaml.safe_load((root.parent / f"{system_name}.yaml").read_text()) or {}).get("misc") or {}
        return str(misc.get("nccl_version") or "")
    except (OSError, yaml.YAMLError, AttributeError):
        return ""


def _newest_first(paths: list[Path]) -> list[Path]:
    return sorted(paths, key=lambda path: _version_key(path.parent.name), reverse=True)


def _rel(path: Path, root: Path) -> str:
    return f"aiconfigurator_core/systems/data/{path.relative_to(root)}"


def _ep_tables(root: Path, system_name: str, framework: str) -> tuple[dict, dict]:
    """The expert-parallel kinds (moe_a2a, moe_deepep) and NCCL's collectives (collective) of one system and
    framework: (tables, manifest entries), each kind only where the database has rows."""
    import pandas as pd

    system = root / system_name
    tables: dict[OpKind, dict[str, Any]] = {}
    entries: dict[OpKind, dict[str, Any]] = {}
    per_node = _gpus_per_node(root, system_name)
    frames, files = [], []
    for path in _newest_first(list((system / "comm" / framework).glob("*/*.parquet"))):
        stem = path.stem
        if stem in _DEEPEP_FILES:
            backend, phases = _DEEPEP_FILES[stem]
            frame = _read(path)
            for phase, columns in phases.items():
                latency = sum(frame[column].fillna(0.0).to_numpy(dtype=float) for column in columns if column in frame)
                sms = frame[f"{phase}_sms"] if f"{phase}_sms" in frame else 0
                frames.append(pd.DataFrame({
                    "backend": backend, "phase": phase, "dtype": "default", "hidden": frame["hidden_size"],
                    "topk": frame["num_topk"], "experts": frame["num_experts"], "ep": frame["node_num"] * per_node,
                    "nodes": frame["node_num"], "sms": sms, "tokens": frame["num_token"], LATENCY_COLUMN: latency}))
            files.append(_rel(path, root))
        elif stem == "moe_a2a_perf":
            frame = _read(path)
            frames.append(pd.DataFrame({
                "backend": frame["comm_backend"].map(lambda name: _A2A_BACKENDS.get(name, name)),
                "phase": frame["phase"], "dtype": frame["comm_dtype"].map(_dtype), "hidden": frame["hidden_size"],
                "topk": frame["topk"], "experts": frame["num_experts"], "ep": frame["ep_size"],
                "nodes": frame["node_num"], "sms": frame["sms"], "tokens": frame["num_tokens"],
                LATENCY_COLUMN: frame["latency"].to_numpy(dtype=float) * 1e3}))
            files.append(_rel(path, root))
    if frames:
        # newest version first: a shape measured again keeps its newest row
        merged = pd.concat(frames, ignore_index=True).drop_duplicates(_A2A_KEYS, keep="first")
        merged = merged[merged[LATENCY_COLUMN] > 0]
        if not merged.empty:
            tables[OpKind.MOE_A2A] = {column: merged[column].tolist() for column in (*_A2A_KEYS, LATENCY_COLUMN)}
            entries[OpKind.MOE_A2A] = {"source_files": "; ".join(files), "gpus_per_node": per_node,
                                       "note": "legacy DeepEP tables: ep = nodes x the system's GPUs per node; "
                                               "a shape measured in several versions keeps the newest"}
    frames, files = [], []
    for path in _newest_first(list((system / "moe" / framework).glob("*/wideep_*_moe_perf.parquet"))):
        mode = _DEEPEP_MOE_FILES.get(path.stem)
        if mode is None:
            continue
        frame = _read(path)
        frames.append(pd.DataFrame({
            "mode": mode, "dtype": frame["moe_dtype"].map(_dtype),
            "distribution": frame["distribution"].map(lambda name: "balanced" if name == "uniform" else name),
            "tokens": frame["num_tokens"], "hidden": frame["hidden_size"], "inter": frame["inter_size"],
            "topk": frame["topk"], "experts": frame["num_experts"], "ep": frame["moe_ep_size"],
            LATENCY_COLUMN: frame["latency"].to_numpy(dtype=float) * 1e3}))
        files.append(_rel(path, root))
    if frames:
        keys = ["mode", "dtype", "distribution", "tokens", "hidden", "inter", "topk", "experts", "ep"]
        merged = pd.concat(frames, ignore_index=True).drop_duplicates(keys, keep="first")
        tables[OpKind.MOE_DEEPEP] = {column: merged[column].tolist() for column in (*keys, LATENCY_COLUMN)}
        entries[OpKind.MOE_DEEPEP] = {"source_files": "; ".join(files),
                                      "note": "tokens: the EP group's; the busiest rank's kernels; uniform -> balanced"}
    frames, files = [], []
    for path in _newest_first(list((system / "mla" / framework).glob("*/wideep_*_mla_perf.parquet"))):
        phase = {"wideep_context_mla_perf": "prefill", "wideep_generation_mla_perf": "decode"}.get(path.stem)
        if phase is None:
            continue
        frame = _read(path)
        tokens = frame["isl"] + (frame["step"] if phase == "decode" and "step" in frame else 0)
        frames.append(pd.DataFrame({
            "phase": phase, "kv_dtype": frame["kv_cache_dtype"].map(_dtype), "backend": frame["kernel_source"],
            "batch": frame["batch_size"], "tokens": tokens, "heads": frame["num_heads"],
            LATENCY_COLUMN: frame["latency"].to_numpy(dtype=float) * 1e3}))
        files.append(_rel(path, root))
    if frames:
        keys = ["phase", "kv_dtype", "backend", "batch", "tokens", "heads"]
        merged = pd.concat(frames, ignore_index=True).drop_duplicates(keys, keep="first")
        tables[OpKind.MLA_MODULE] = {column: merged[column].tolist() for column in (*keys, LATENCY_COLUMN)}
        entries[OpKind.MLA_MODULE] = {"source_files": "; ".join(files),
                                      "note": "the MLA block after the fused q_a/kv_a GEMM, timed whole (FP8 "
                                              "attention); newest version's rows"}
    wanted = _nccl_version(root, system_name)
    nccl = _pick_version(system / "comm" / "nccl", wanted, "nccl_perf")
    if nccl is not None:
        frame = _read(nccl)
        tables[OpKind.COLLECTIVE] = {
            "op": frame["op_name"].tolist(), "dtype": [{"half": "bf16"}.get(value, _dtype(value))
                                                       for value in frame["nccl_dtype"]],
            "gpus": frame["num_gpus"].tolist(), "message_elements": frame["message_size"].tolist(),
            LATENCY_COLUMN: (frame["latency"].to_numpy(dtype=float) * 1e3).tolist()}
        entries[OpKind.COLLECTIVE] = {"source_file": _rel(nccl, root), "framework_version": nccl.parent.name,
                                      "note": f"the system's nccl_version ({wanted or 'unset: the newest'}); half "
                                              "read as bf16 (2-byte elements)",
                                      "collection_meta": _meta(nccl)}
    return tables, entries


def import_tables(gpu: str, framework: str, version: str | None, output: str | Path,
                  data_root: str | Path | None = None, *, trim: bool = False) -> dict[str, Any]:
    """Write simroute tables for `gpu` (a simroute GPU entry name or an aiconfigurator system name) under
    `framework` [`version`] to `output`; returns a summary (rows per kind, versions read, skipped kinds).
    `trim`: drop the rows of the large kinds no shipped model reads (simroute.calib.trim; every read identical)."""
    import pandas as pd

    from simroute.calib.optables import columns_table, write_operator_tables
    from simroute.checks import check_name
    check_name(gpu, "--gpu", what="GPU name")
    check_name(framework, "--framework", what="framework name")
    if version is not None:
        check_name(version, "--version", what="version")

    root, pkg_version = _data_root(data_root)
    system_id = system_name(gpu)
    system = root / system_id
    if not system.is_dir():
        known = [f"{simroute_name(p.name)} ({p.name})" if simroute_name(p.name) != p.name else p.name
                 for p in sorted(root.iterdir()) if p.is_dir()] if root.is_dir() else []
        raise ConfigurationError(f"no measurements for GPU '{gpu}' in {PACKAGE} {pkg_version} (known: "
                                 f"{', '.join(known) or 'none'}; --list shows frameworks and versions)",
                                 file=root, field="--gpu")
    versions = _framework_versions(system, framework)
    if not versions:
        frameworks = _frameworks(system)
        raise ConfigurationError(f"no '{framework}' measurements for {system_id} (measured: "
                                 f"{', '.join(frameworks) or 'none'})", file=system, field="--framework")
    version = version or default_version(root, system_id, framework, versions)
    if version not in versions:
        raise ConfigurationError(f"version '{version}' not measured for {system_id} {framework} (measured: "
                                 f"{', '.join(versions)})", file=system, field="--version")
    tables: dict[OpKind, dict[str, Any]] = {}
    entries: dict[OpKind, dict[str, Any]] = {}
    skipped: list[str] = []
    sm_version = _sm_version(root, system_id)
    for kind, (folder, stem) in _FILES.items():
        path = _pick_version(system / folder / framework, version, stem)
        if path is None:
            skipped.append(kind.value)
            continue
        try:
            frame, kernel_choice = _filter(kind, _read(path), framework, sm_version)
            if kind is OpKind.ALLREDUCE:
                nccl, nccl_path = _nccl_allreduce(system)
                if nccl is not None:
                    if "backend" not in frame:
                        frame = frame.assign(backend="x_graph")
                    frame = pd.concat([frame[["backend", "allreduce_dtype", "num_gpus", "message_size", "latency"]],
                                       nccl], ignore_index=True)
            if frame.empty:
                skipped.append(kind.value)
                continue
            tables[kind] = _convert(kind, frame)
        except KeyError as exc:                    # a file of another schema version
            raise ConfigurationError(f"lacks the column {exc} this importer reads", file=path) from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise ConfigurationError(f"a column does not hold what this importer reads ({' '.join(str(exc).split())})"
                                     [:300], file=path) from None
        columns_table(kind, tables[kind], path)    # every value checked against the source, before any write
        rel = path.relative_to(root)
        entries[kind] = {"source_file": f"aiconfigurator_core/systems/data/{rel}",
                         "framework_version": path.parent.name, "device": str(frame["device"].iloc[0])
                         if "device" in frame else system_id, "collection_meta": _meta(path)}
        if kernel_choice is not None:
            entries[kind]["kernel_choice"] = kernel_choice
        if kind is OpKind.ALLREDUCE and nccl is not None:
            entries[kind]["nccl_file"] = f"aiconfigurator_core/systems/data/{nccl_path.relative_to(root)}"
    ep_tables, ep_entries = _ep_tables(root, system_id, framework)
    tables.update(ep_tables)
    entries.update(ep_entries)
    if not tables:
        raise ConfigurationError(f"no operator tables the step model reads under {system_id} {framework} {version}",
                                 file=system)
    provenance = {"kind": "measured", "package": PACKAGE, "package_version": pkg_version, "licence": LICENCE,
                  "ref": f"NVIDIA's measured operator database shipped in {PACKAGE} {pkg_version}, "
                         f"systems/data/{system_id} ({framework} {version})"}
    full_rows = {kind: int(np.asarray(columns[LATENCY_COLUMN]).size) for kind, columns in tables.items()}
    if trim:
        tables, trimmed, digest = _trimmed(gpu, framework, version, tables)
        for kind, (kept, of) in trimmed.items():
            entries[kind]["rows_measured"] = of
        provenance["trimmed_for_reads"] = digest
        provenance["trimmed"] = ("rows no shipped model reads were dropped (simroute.calib.trim: every model, TP "
                                 "degree, weight and KV dtype and MLA layout reads the same rows); "
                                 f"`simroute calib import aiconfigurator --gpu {gpu} --framework {framework} "
                                 f"--version {version}` without --trim writes them all")
    write_operator_tables(output, gpu=gpu, framework=framework, version=version, provenance=provenance,
                          tables=tables, entries=entries)
    return {"gpu": gpu, "system": system_id, "framework": framework, "version": version, "output": str(output),
            "rows": {k.value: int(np.asarray(v[LATENCY_COLUMN]).size) for k, v in tables.items()},
            "rows_measured": {k.value: n for k, n in full_rows.items()}, "trimmed": trim,
            "versions": {k.value: e.get("framework_version", "several") for k, e in entries.items()}, "skipped": skipped}


def _trimmed(gpu: str, framework: str, version: str, tables: dict[OpKind, dict[str, Any]]
             ) -> tuple[dict[OpKind, dict[str, Any]], dict[OpKind, tuple[int, int]], str]:
    """The converted tables less the rows no shipped model reads (simroute.calib.trim)."""
    from simroute.calib.trim import columns_of, model_reads, reads_digest, table_from_columns, trim_tables
    from simroute.model.optables import OperatorTables

    full = OperatorTables(gpu, framework, version, {kind: table_from_columns(kind, columns)
                                                    for kind, columns in tables.items()})
    reads = model_reads(full)
    kept, counts = trim_tables(full, TRIMMED_KINDS, reads=reads)
    out = {kind: (columns_of(kept.tables[kind]) if kind in counts else columns) for kind, columns in tables.items()}
    return out, counts, reads_digest(reads)
