"""SGLang: the chunk and CUDA-graph sizes it picks by GPU memory, its running-request cap."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.frameworks.base import FRAMEWORKS, Deployment, Framework, Setting

if TYPE_CHECKING:
    from simroute.calib.engines import EnginePreset


@FRAMEWORKS.register("sglang")
class Sglang(Framework):
    """prefill batches first, chunked by GPU memory (8192 tokens on an H100 / H200), overlap scheduling."""

    optional = ("scheduler_recv_interval", "prefill_graph_max_tokens", "mem_fraction", "startup_free_gib")

    def pool_bytes(self, fraction: float, free_bytes: float, weight_bytes: float) -> float | None:
        """`profile_max_num_token` (model_runner_kv_cache_mixin.py, sglang 0.5.9 lines 116-149): the memory free
        after the weights less (1 - mem_fraction_static) x the memory free at start-up, i.e. f x start-up free -
        weights (GiB of 2^30 bytes, as its logs print them)."""
        return max(fraction * free_bytes - weight_bytes, 0.0)

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
        if key == "prefill_graph_max_tokens":
            # piecewise CUDA graphs of prefill batches: up to 2048 tokens with an MLA backend, else the chunk
            if deployment.mla:
                return self.constant(preset, "prefill_graph_max_tokens_mla", deployment, as_key=key)
            chunk = resolved["prefill_chunk"]
            return Setting(chunk.value, f"the prefill chunk (non-MLA: server_args.py prefill max_bs = "
                                        f"chunked_prefill_size); {chunk.source}")
        return super().rule(key, preset, deployment, resolved)
