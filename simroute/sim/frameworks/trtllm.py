"""TensorRT-LLM (PyTorch backend): in-flight batching of whole prompts; a prompt is never chunked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.frameworks.base import FRAMEWORKS, Deployment, Framework, Setting

if TYPE_CHECKING:
    from simroute.calib.engines import EnginePreset


@FRAMEWORKS.register("trtllm")
class Trtllm(Framework):
    """in-flight batching of decodes with whole prompts (8192 tokens), overlap scheduler, CUDA graphs to 128."""

    def rule(self, key: str, preset: EnginePreset, deployment: Deployment, resolved: dict[str, Setting]) -> Setting:
        if key == "prefill_chunk":       # chunked prefill is off: whole prompts (the trtllm scheduler reads none)
            return Setting(resolved["token_budget"].value, "not read: chunked prefill is off, prompts run whole "
                                                           "(tensorrt_llm/commands/serve.py enable_chunked_prefill "
                                                           "= False)")
        return super().rule(key, preset, deployment, resolved)
