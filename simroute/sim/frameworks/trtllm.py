"""TensorRT-LLM (PyTorch backend): in-flight batching of whole prompts; a prompt is never chunked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.frameworks.base import FRAMEWORKS, Deployment, Framework, Setting

if TYPE_CHECKING:
    from simroute.calib.engines import EnginePreset


@FRAMEWORKS.register("trtllm")
class Trtllm(Framework):
    """in-flight batching of decodes with whole prompts (8192 tokens), overlap scheduler, CUDA graphs to 128."""

    optional = ("mem_fraction", "startup_free_gib", "batch_wait_timeout_iters", "batch_wait_max_tokens_ratio",
                "adp_balance", "adp_timeout_iters", "adp_batching_wait_iters")

    def pool_bytes(self, fraction: float, free_bytes: float, weight_bytes: float) -> float | None:
        """`KvCacheCreator._cal_max_memory` (tensorrt_llm/_torch/pyexecutor/_util.py): free_gpu_memory_fraction x
        (device memory - the peak of a profiling forward). TensorRT-LLM's peak is the estimation executor's: the
        weights, the CUDA context and communicators, the activations of dummy context requests of max_num_tokens
        tokens in all, and the CUDA graphs its warmup captured (released before the real pool is built,
        py_executor_creator.py). The peak is taken here as the weights plus what is held at start-up; the rest
        has no published figure for DeepSeek, so this is the pool's upper bound."""
        return max(fraction * (free_bytes - weight_bytes), 0.0)

    def rule(self, key: str, preset: EnginePreset, deployment: Deployment, resolved: dict[str, Setting]) -> Setting:
        if key == "prefill_chunk":       # chunked prefill is off: whole prompts (the trtllm scheduler reads none)
            return Setting(resolved["token_budget"].value, "not read: chunked prefill is off, prompts run whole "
                                                           "(tensorrt_llm/commands/serve.py enable_chunked_prefill "
                                                           "= False)")
        return super().rule(key, preset, deployment, resolved)
