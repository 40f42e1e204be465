"""SGLang: the chunk and CUDA-graph sizes it picks by GPU memory, its running-request cap."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.frameworks.base import FRAMEWORKS, Deployment, Framework, Setting

if TYPE_CHECKING:
    from simroute.calib.engines import EnginePreset


@FRAMEWORKS.register("sglang")
class Sglang(Framework):
    """prefill batches first, chunked by GPU memory (8192 tokens on an H100 / H200), overlap scheduling."""

    optional = ("scheduler_recv_interval",)

    def rule(self, key: str, preset: EnginePreset, deployment: Deployment, resolved: dict[str, Setting]) -> Setting:
        if key == "max_running_seqs":
            # max_running_requests: the estimate is clamped to at least the constant, and never more than half the
            # KV pool's tokens (model_runner_kv_cache_mixin.py _resolve_max_num_reqs)
            floor = self.constant(preset, key, deployment)
            half = deployment.kv_capacity_tokens // 2
            if half < floor.value:
                return Setting(max(half, 1), f"{floor.source}; at most half the KV room "
                                             f"({deployment.kv_capacity_tokens} tokens) // 2")
            return floor
        return super().rule(key, preset, deployment, resolved)
