"""TensorRT-LLM (PyTorch backend): in-flight batching of whole prompts; a prompt is never chunked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.frameworks.base import FRAMEWORKS, GIB, Deployment, Framework, Setting

if TYPE_CHECKING:
    from simroute.calib.engines import EnginePreset

# the launch a published profiling figure was measured at: (preset constant, the setting or deployment field it
# must equal)
PROFILED_LAUNCH = (("profiled_launch_tp", "tp"), ("profiled_launch_ep", "ep"),
                   ("profiled_launch_max_num_tokens", "token_budget"),
                   ("profiled_launch_cuda_graph_max_batch", "cuda_graph_max_batch"))


@FRAMEWORKS.register("trtllm")
class Trtllm(Framework):
    """in-flight batching of decodes with whole prompts (8192 tokens), overlap scheduler, CUDA graphs to 128."""

    optional = ("mem_fraction", "startup_free_gib", "batch_wait_timeout_iters", "batch_wait_max_tokens_ratio",
                "adp_balance", "adp_timeout_iters", "adp_batching_wait_iters", "profiled_free_gib",
                "moe_backend")

    def kv_pool_bytes(self, settings: dict[str, Setting], weight_bytes: float) -> float | None:
        """`KvCacheCreator._cal_max_tokens` (tensorrt_llm/_torch/pyexecutor/_util.py): free_gpu_memory_fraction x
        (device memory - the profiling peak + the temporary KV pool of the profiling). Where a start-up log of
        this launch publishes that bracket (`profiled_free_gib`), the pool is the fraction of it; else the
        upper bound of `pool_bytes`."""
        fraction, profiled = settings.get("mem_fraction"), settings.get("profiled_free_gib")
        if (fraction is not None and fraction.value is not None and profiled is not None
                and profiled.value is not None):
            return float(fraction.value) * float(profiled.value) * GIB
        return super().kv_pool_bytes(settings, weight_bytes)

    def pool_bytes(self, fraction: float, free_bytes: float, weight_bytes: float) -> float | None:
        """The pool's upper bound where no start-up log of the launch is published: the profiling peak taken as
        the weights plus what is held at start-up. TensorRT-LLM's peak is the estimation executor's: the weights,
        the CUDA context and communicators, the activations of dummy context requests of max_num_tokens tokens in
        all, and the CUDA graphs its warmup captured (released before the real pool is built,
        py_executor_creator.py); the published B200 launch's peak is 14 GiB above this bound's."""
        return max(fraction * (free_bytes - weight_bytes), 0.0)

    def moe_tables(self, preset: EnginePreset, deployment: Deployment, settings: dict[str, Setting]) -> str | None:
        """`moe_config.backend: TRTLLM` runs the TRT-LLM-gen fused MoE (`create_moe.py` get_moe_cls: TRTLLM with FP8
        block scales -> TRTLLMGenFusedMoE -> `fp8_block_scale_moe_runner`), which the preset's own rows do not time
        (aiconfigurator's TensorRT-LLM collector: DeepGEMM on B200): its routed experts read the preset's
        `trtllm_gen_moe_tables`, on the GPUs whose rows there time that kernel (`trtllm_gen_moe_gpus`)."""
        if self.kernel_named(settings, "moe_backend", preset, deployment, "trtllm_gen_moe_gpus",
                             "the TRT-LLM-gen fused MoE, Blackwell only") is None:
            return None
        return str(preset.constant("trtllm_gen_moe_tables").value)

    def rule(self, key: str, preset: EnginePreset, deployment: Deployment, resolved: dict[str, Setting]) -> Setting:
        if key == "moe_backend":        # unset: the preset's own MoE rows, the kernel its tables timed
            return Setting(None, "unset: the routed experts read the preset's own MoE rows (aiconfigurator "
                                 "0.12.0's TensorRT-LLM 1.3.0rc20 collector: DeepGEMM on B200, CUTLASS on H100 / "
                                 "H200, for FP8 block scales)")
        if key == "prefill_chunk":       # chunked prefill is off: whole prompts (the trtllm scheduler reads none)
            return Setting(resolved["token_budget"].value, "not read: chunked prefill is off, prompts run whole "
                                                           "(tensorrt_llm/commands/serve.py enable_chunked_prefill "
                                                           "= False)")
        if key == "profiled_free_gib":
            return self.profiled_free(preset, deployment, resolved)
        return super().rule(key, preset, deployment, resolved)

    def profiled_free(self, preset: EnginePreset, deployment: Deployment, resolved: dict[str, Setting]) -> Setting:
        """The published `profiled_free_gib_mla_moe` where this deployment is the launch it was measured at (an
        MLA + mixture-of-experts model, the GPU's tier, the launch's TP, EP, max_num_tokens and CUDA-graph batch,
        no DP attention, the real device's memory); None, saying why, anywhere else (the profiling peak moves
        with each of them, and no source gives by how much)."""
        name = "profiled_free_gib_mla_moe"
        if name not in preset.constants:
            return Setting(None, f"no {name} in {preset.label}: the pool is the startup_free_gib upper bound")
        if deployment.hbm_override:
            return Setting(None, "not modelled: --hbm-gb sets the GPU's memory, the published profiling is the real "
                                 "device's")
        if not (deployment.mla and deployment.moe):
            return Setting(None, f"no published profiling for this model ({name} is the DeepSeek-V3 family's): "
                                 "the pool is the startup_free_gib upper bound")
        if deployment.dp_attention > 1:
            return Setting(None, f"not the launch {name} was measured at (DP attention): the pool is the "
                                 "startup_free_gib upper bound")
        for constant, field in PROFILED_LAUNCH:
            want = int(self.constant(preset, constant, deployment).value)
            have = resolved[field].value if field in resolved else getattr(deployment, field)
            if int(have) != want:
                return Setting(None, f"not the launch {name} was measured at ({field} {have}, the published "
                                     f"launch's {want}): the pool is the startup_free_gib upper bound")
        found = self.constant(preset, name, deployment)
        if not found.value:
            return Setting(None, f"no published profiling for {deployment.gpu}: {found.source}")
        return found
