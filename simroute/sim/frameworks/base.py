"""A serving framework: how its preset's constants become one deployment's engine settings.

A preset (calib/engines/<framework>-<version>.yaml, read by simroute.calib.engines) holds the constants with their
provenance; the framework class holds the rules the framework's source applies to them (SGLang sizes its prefill
chunk by GPU memory, vLLM takes larger defaults on a GPU of 70 GiB or more, TensorRT-LLM never chunks a prompt).
A run's explicit flags win over the preset; every setting says where it came from (`Setting.source`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from simroute.errors import ConfigurationError
from simroute.sim.registry import Registry, registry

if TYPE_CHECKING:
    from simroute.calib.engines import EnginePreset

# the settings a preset resolves, in the order a summary lists them; the first six are also RunConfig flags
FLAG_SETTINGS = ("scheduler", "token_budget", "prefill_chunk", "max_running_seqs", "cuda_graph_max_batch",
                 "overlap_scheduling")
SETTINGS = FLAG_SETTINGS + ("host_us_per_sequence", "eager_launch_us_per_layer", "request_ingress_us",
                            "request_egress_us")
# settings only some frameworks have (a RunConfig flag too): a framework lists those it has in `optional`; a flag
# for one its framework lacks is refused
OPTIONAL_SETTINGS = ("scheduler_recv_interval", "prefill_graph_max_tokens", "mem_fraction", "batch_wait_timeout_iters",
                     "batch_wait_max_tokens_ratio", "adp_balance", "adp_timeout_iters", "adp_batching_wait_iters",
                     "moe_backend", "fp8_gemm_backend")
GIB = float(1 << 30)


@dataclass(frozen=True)
class Setting:
    """One resolved engine setting and where it came from: `flag (--name)`, or the preset's constant
    (`preset sglang@0.5.14 <constant>: <provenance>`), or a rule over others."""

    value: Any
    source: str


@dataclass(frozen=True)
class Deployment:
    """What a framework's rules read of the deployment: the GPU entry (its name and memory), the TP degree, the
    model's layers, the KV room one GPU has beside the weights (tokens), whether its attention is MLA and its
    FFN a mixture of experts (the DeepSeek-V3 family), and its DP-attention and expert-parallel degrees."""

    gpu: str
    hbm_bytes: float
    tp: int
    layers: int
    kv_capacity_tokens: int
    mla: bool = False
    moe: bool = False
    hbm_override: bool = False      # the run sets the GPU's memory (--hbm-gb)
    dp_attention: int = 1           # attention ranks of the TP group (--dp-attention; SGLang's dp_size)
    ep: int = 1                     # expert parallelism of the group's MoE layers (--ep)

    @property
    def hbm_gib(self) -> float:
        return self.hbm_bytes / GIB


class Framework:
    """Contract: `settings(preset, deployment, flags)` -> every name of SETTINGS mapped to a `Setting`. `flags`
    holds the run's explicit values (RunConfig fields that are not None), which win. The base reads each setting
    from the preset's constant of the same name (a tier table at the deployment's GPU memory and TP); a
    framework overrides `rule` where its source derives a setting from others."""

    name: ClassVar[str]
    optional: ClassVar[tuple[str, ...]] = ()      # the OPTIONAL_SETTINGS this framework has

    def settings(self, preset: EnginePreset, deployment: Deployment, flags: dict[str, Any]) -> dict[str, Setting]:
        out: dict[str, Setting] = {}
        for key in OPTIONAL_SETTINGS:
            if key in flags and key not in self.optional:
                raise ConfigurationError(f"is not a setting of {preset.label} (only of: "
                                         f"{', '.join(n for n, f in FRAMEWORKS.classes.items() if key in f.optional)})",
                                         field=key)
        for key in SETTINGS + self.optional:
            if key in flags:
                out[key] = Setting(flags[key], f"flag (--{key.replace('_', '-')})")
            else:
                out[key] = self.rule(key, preset, deployment, out)
        return out

    def kv_pool_bytes(self, settings: dict[str, Setting], weight_bytes: float) -> float | None:
        """The KV pool one GPU allocates, as the framework's source sizes it from its memory fraction (None: not
        modelled, the pool is all HBM after the weights: no fraction set, no published start-up figure, or a
        framework without `pool_bytes`)."""
        fraction, free = settings.get("mem_fraction"), settings.get("startup_free_gib")
        if fraction is None or free is None or fraction.value is None or free.value is None:
            return None
        return self.pool_bytes(float(fraction.value), float(free.value) * GIB, weight_bytes)

    def pool_bytes(self, fraction: float, free_bytes: float, weight_bytes: float) -> float | None:
        """The pool from the memory fraction, the bytes free at start-up and the weights' (None: not modelled)."""
        return None

    def rule(self, key: str, preset: EnginePreset, deployment: Deployment, resolved: dict[str, Setting]) -> Setting:
        """Setting `key` from the preset (`resolved` holds the settings before it in SETTINGS order). An MLA +
        mixture-of-experts layer (the DeepSeek-V3 family) launches many more kernels than a dense one: a preset
        that carries `eager_launch_us_per_layer_mla_moe` launches such a layer eagerly at that cost."""
        if key == "mem_fraction":          # the preset's default fraction, else unset: all HBM after the weights
            if "mem_fraction" in preset.constants:
                return self.constant(preset, key, deployment)
            return Setting(None, "unset: the KV pool is all HBM after the weights (--mem-fraction sizes it as the "
                                 "framework does)")
        if key == "startup_free_gib":
            return self.startup_free(preset, deployment)
        if (key == "eager_launch_us_per_layer" and deployment.mla and deployment.moe
                and "eager_launch_us_per_layer_mla_moe" in preset.constants):
            return self.constant(preset, "eager_launch_us_per_layer_mla_moe", deployment, as_key=key)
        return self.constant(preset, key, deployment)

    def moe_tables(self, preset: EnginePreset, deployment: Deployment, settings: dict[str, Setting]) -> str | None:
        """The table set (calib/ops/<gpu>/<name>/) whose MoE rows the routed experts read instead of the preset's
        own, where the settings name another kernel (None: the preset's own)."""
        return None

    @staticmethod
    def kernel_named(settings: dict[str, Setting], name: str, preset: EnginePreset, deployment: Deployment,
                     gpus_key: str, kernel: str) -> Setting | None:
        """The setting `name` where it names a kernel (None where unset), refused on a GPU the preset's `gpus_key`
        (a space-separated list) does not name: no published timing of that kernel there."""
        setting = settings.get(name)
        if setting is None or setting.value is None:
            return None
        gpus = str(preset.constant(gpus_key).value).split()
        if deployment.gpu not in gpus:
            raise ConfigurationError(f"{setting.value} ({kernel}) has no published timing on {deployment.gpu} "
                                     f"(it has on {', '.join(gpus)})", field=name)
        return setting

    def gemm_bound(self, preset: EnginePreset, deployment: Deployment,
                   settings: dict[str, Setting]) -> tuple[str, float, str] | None:
        """(GEMM dtype, FLOP/s, why) where the settings name a GEMM kernel the preset's rows do not time and no
        table does, but a published measurement bounds its throughput: that dtype's rows run no faster than the
        rate (`optables.gemm_rows_no_faster_than`). None: the preset's own rows."""
        return None

    def startup_free(self, preset: EnginePreset, deployment: Deployment) -> Setting:
        """GiB free on one GPU when the framework starts loading its weights (the device's memory less the CUDA
        context and the communicators), as published start-up logs print it for this GPU; None where the preset
        has no figure for the GPU (a tier value of 0) or the run sets its own HBM (--hbm-gb)."""
        if deployment.hbm_override:
            return Setting(None, "not modelled: --hbm-gb sets the GPU's memory, the published start-up figure is "
                                 "the real device's")
        found = self.constant(preset, "startup_free_gib", deployment)
        if not found.value:
            return Setting(None, f"no published start-up figure for {deployment.gpu}: {found.source}")
        return found

    @staticmethod
    def constant(preset: EnginePreset, key: str, deployment: Deployment, as_key: str | None = None) -> Setting:
        """The preset's constant `key` at this deployment, cited."""
        constant = preset.constant(key)
        value = constant.at(deployment.hbm_gib, deployment.tp)
        if isinstance(value, float) and value.is_integer() and (as_key or key) in _INTEGER:
            value = int(value)
        where = f" at {deployment.hbm_gib:.0f} GiB, tp {deployment.tp}" if constant.tiers else ""
        return Setting(value, f"preset {preset.label} {key}{where}: {constant.cite()}")


_INTEGER = {"token_budget", "prefill_chunk", "max_running_seqs", "cuda_graph_max_batch", "scheduler_recv_interval",
            "prefill_graph_max_tokens", "batch_wait_timeout_iters", "adp_timeout_iters", "adp_batching_wait_iters"}

FRAMEWORKS: Registry[type[Framework]] = registry("framework")
