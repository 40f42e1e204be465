"""vLLM (V1 engine): larger defaults on a GPU of 70 GiB or more that is not an A100; the chunk is the budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.frameworks.base import FRAMEWORKS, Deployment, Framework, Setting

if TYPE_CHECKING:
    from simroute.calib.engines import EnginePreset


@FRAMEWORKS.register("vllm")
class Vllm(Framework):
    """one token budget per step (8192 on an H100 / H200), running requests first, async scheduling."""

    def large_gpu(self, preset: EnginePreset, deployment: Deployment) -> bool:
        """vLLM's test for its larger defaults (arg_utils.py get_batch_defaults)."""
        excluded = str(preset.constant("large_gpu_excluded").value)
        return (deployment.hbm_gib >= float(preset.constant("large_gpu_min_gib").value)   # type: ignore[arg-type]
                and excluded not in deployment.gpu)

    def rule(self, key: str, preset: EnginePreset, deployment: Deployment, resolved: dict[str, Setting]) -> Setting:
        if key in ("token_budget", "max_running_seqs"):
            large = self.large_gpu(preset, deployment)
            return self.constant(preset, f"{key}_large_gpu" if large else key, deployment, as_key=key)
        if key == "prefill_chunk":       # long_prefill_token_threshold 0: a prompt may take the whole budget
            return Setting(resolved["token_budget"].value, "the token budget (vllm/config/scheduler.py: "
                                                           "long_prefill_token_threshold = 0, no per-request cap)")
        if key == "cuda_graph_max_batch":   # min(max_num_seqs x 2, 512), at most the token budget
            cap = self.constant(preset, key, deployment)
            running, budget = int(resolved["max_running_seqs"].value), int(resolved["token_budget"].value)
            value = min(2 * running, int(cap.value), budget)
            return Setting(value, f"min(2 x max_running_seqs, {int(cap.value)}, token_budget); {cap.source}")
        if key == "request_ingress_us":     # + aiconfigurator's per-layer prefill dispatch (vllm_backend.py)
            ingress = self.constant(preset, key, deployment)
            dispatch = self.constant(preset, "prefill_dispatch_us_per_layer", deployment)
            value = float(ingress.value) + float(dispatch.value) * deployment.layers
            return Setting(value, f"{ingress.source}; plus {deployment.layers} layers x {dispatch.source}")
        return super().rule(key, preset, deployment, resolved)
