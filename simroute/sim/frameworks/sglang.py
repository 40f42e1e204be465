"""SGLang: the chunk and CUDA-graph sizes it picks by GPU memory, its running-request cap, its default memory
fraction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.frameworks.base import FRAMEWORKS, Deployment, Framework, Setting

if TYPE_CHECKING:
    from simroute.calib.engines import EnginePreset

MIB = float(1 << 20)


def prefill_graph_sizes(max_tokens: int) -> list[int]:
    """The token counts SGLang captures piecewise prefill CUDA graphs at, up to `max_tokens` (sglang 0.5.14
    server_args.py _generate_prefill_cuda_graph_batch_sizes, lines 3384-3401)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1024 + 1, 64)) + list(range(1280, 4096 + 1, 256))
             + list(range(4608, max_tokens + 1, 512)))
    return [s for s in sizes if s <= max_tokens]


def default_mem_fraction(gpu_mib: float, chunk: int, graph_max_bs: int, tp: int, *, mla: bool,
                         prefill_graph_tokens: int, dp_attention: int = 1) -> tuple[float, list[tuple[str, float]]]:
    """SGLang's --mem-fraction-static when the launch sets none: (capacity - reserved) / capacity, rounded to 3
    places, capacity nvidia-smi's memory.total (MiB). Returns the fraction and the reserved MiB term by term.
    sglang 0.5.14 python/sglang/srt/server_args.py _handle_gpu_memory_settings (lines 3276-3315; called at line
    2524 with get_device_memory_capacity, utils/common.py get_nvgpu_memory_capacity lines 1751-1781):
    512 MiB of attention-backend metadata; 1.5 MiB per prefill-chunk token (at least 2048 tokens) for the
    activations; 2 MiB per decode CUDA-graph batch slot; tp x pp / 8 x 1024 MiB "for large parallel size"; with DP
    attention 3 MiB per graph slot per DP rank (+1.5 above 300 slots) and no piecewise prefill graphs (DP
    attention disables them, _disable_tc_piecewise_cudagraph_if_incompatible); with piecewise prefill graphs 1.5
    GiB under an MLA backend, else 8 MiB per captured size; at least 10 GiB on a GPU above 60 GiB. No speculative
    term in 0.5.14 (0.5.5-0.5.12 added 2 / 4 GiB for EAGLE: draft weights are now counted in the pool,
    model_runner_kv_cache_mixin.py _profile_available_bytes)."""
    terms = [("attention metadata", 512.0), (f"1.5 x {max(chunk, 2048)} prefill tokens", max(chunk, 2048) * 1.5),
             (f"2 x {graph_max_bs} decode graph slots", graph_max_bs * 2.0), (f"{tp} / 8 x 1024 (TP)", tp / 8 * 1024)]
    if dp_attention > 1:
        terms.append((f"3 x {graph_max_bs} x {dp_attention} (DP attention)", graph_max_bs * dp_attention * 3.0))
        if graph_max_bs > 300:
            terms.append((f"1.5 x {graph_max_bs} x {dp_attention} (DP attention, > 300 slots)",
                          graph_max_bs * dp_attention * 1.5))
    elif prefill_graph_tokens > 0:
        terms.append(("1.5 x 1024 (MLA prefill graphs)", 1.5 * 1024) if mla else
                     (f"8 x {len(prefill_graph_sizes(prefill_graph_tokens))} prefill graphs",
                      len(prefill_graph_sizes(prefill_graph_tokens)) * 8.0))
    reserved = sum(v for _, v in terms)
    if gpu_mib > 60 * 1024 and reserved < 10 * 1024:
        terms.append(("to the 10 GiB floor (GPU > 60 GiB)", 10 * 1024 - reserved))
        reserved = 10 * 1024
    return round((gpu_mib - reserved) / gpu_mib, 3), terms


@FRAMEWORKS.register("sglang")
class Sglang(Framework):
    """prefill batches first, chunked by GPU memory (8192 tokens on an H100 / H200), overlap scheduling."""

    optional = ("scheduler_recv_interval", "prefill_graph_max_tokens", "device_memory_mib", "mem_fraction",
                "startup_free_gib", "fp8_gemm_backend")

    def pool_bytes(self, fraction: float, free_bytes: float, weight_bytes: float) -> float | None:
        """`profile_max_num_token` (model_runner_kv_cache_mixin.py, sglang 0.5.9 lines 116-149; in 0.5.14
        `_profile_available_bytes`, lines 85-119): the memory free after the weights less (1 - mem_fraction_static)
        x the memory free at start-up, i.e. f x start-up free - weights (GiB of 2^30 bytes, as its logs print
        them)."""
        return max(fraction * free_bytes - weight_bytes, 0.0)

    def device_memory(self, preset: EnginePreset, deployment: Deployment) -> Setting:
        """The GPU's memory as SGLang reads it (nvidia-smi memory.total, MiB): the preset's published figure for
        the GPU, else the run's --hbm-gb or the GPU entry's memory."""
        if deployment.hbm_override:
            return Setting(deployment.hbm_bytes / MIB, "the run's --hbm-gb")
        found = self.constant(preset, "device_memory_mib", deployment)
        if found.value:
            return found
        return Setting(deployment.hbm_bytes / MIB, f"the GPU entry's memory ({deployment.gpu}): no published "
                                                   f"nvidia-smi figure ({found.source})")

    def default_fraction(self, deployment: Deployment, resolved: dict[str, Setting]) -> Setting:
        """--mem-fraction-static as SGLang picks it when the launch sets none (`default_mem_fraction`), from this
        deployment's resolved chunk, decode graph limit and prefill graphs."""
        gpu_mib = float(resolved["device_memory_mib"].value)
        chunk, graphs = int(resolved["prefill_chunk"].value), int(resolved["cuda_graph_max_batch"].value)
        fraction, terms = default_mem_fraction(gpu_mib, chunk, graphs, deployment.tp, mla=deployment.mla,
                                               prefill_graph_tokens=int(resolved["prefill_graph_max_tokens"].value),
                                               dp_attention=deployment.dp_attention)
        reserved = sum(v for _, v in terms)
        terms_text = " + ".join(f"{value:.0f} ({name})" for name, value in terms)
        return Setting(fraction, f"SGLang's default (sglang 0.5.14 server_args.py _handle_gpu_memory_settings, "
                                 f"lines 3276-3315): round(({gpu_mib:.0f} MiB - {reserved:.0f} MiB reserved) / "
                                 f"{gpu_mib:.0f} MiB, 3); reserved = {terms_text}")

    def gemm_bound(self, preset: EnginePreset, deployment: Deployment,
                   settings: dict[str, Setting]) -> tuple[str, float, str] | None:
        """`--fp8-gemm-backend flashinfer_trtllm` (or, before sglang 0.5.9, SGLANG_ENABLE_FLASHINFER_GEMM=true; with
        DeepGEMM off, `auto` on Blackwell) runs every FP8 block-scaled linear through FlashInfer's
        `gemm_fp8_nt_groupwise(backend="trtllm")` (fp8_utils.py `flashinfer_gemm_w8a8_block_fp8_linear_with_fallback`,
        sglang 0.5.12): decode-sized tiles of 8-32 tokens (docs/STEP_TIME.md, "FlashInfer's TRT-LLM FP8 GEMM").
        No table times it shape by shape; its published B200 timings never exceed the preset's
        `flashinfer_trtllm_fp8_gemm_tflops`, so the preset's fp8_block rows (DeepGEMM) run no faster than that on
        the GPUs it was measured on (`flashinfer_trtllm_fp8_gemm_gpus`); refused elsewhere."""
        if self.kernel_named(settings, "fp8_gemm_backend", preset, deployment, "flashinfer_trtllm_fp8_gemm_gpus",
                             "FlashInfer's TRT-LLM-gen FP8 GEMM") is None:
            return None
        rate = self.constant(preset, "flashinfer_trtllm_fp8_gemm_tflops", deployment)
        return "fp8_block", float(rate.value) * 1e12, f"preset {preset.label} flashinfer_trtllm_fp8_gemm_tflops"

    def rule(self, key: str, preset: EnginePreset, deployment: Deployment, resolved: dict[str, Setting]) -> Setting:
        if key == "fp8_gemm_backend":   # unset: the preset's own fp8_block rows, the kernel its tables timed
            return Setting(None, "unset: FP8 block-scaled GEMMs read the preset's own rows (aiconfigurator-core "
                                 "0.12.0's SGLang 0.5.14 collector: DeepGEMM, kernel_source "
                                 "sglang_deepgemm_gemm_nt_f8f8bf16; SGLang's default where DeepGEMM is on)")
        if key == "max_running_seqs":
            # max_running_requests: the estimate is clamped to at least the constant, and never more than half the
            # KV pool's tokens (model_runner_kv_cache_mixin.py _resolve_max_num_reqs)
            floor = self.constant(preset, key, deployment)
            half = deployment.kv_capacity_tokens // 2
            if half < floor.value:
                return Setting(max(half, 1), f"{floor.source}; at most half the KV room "
                                             f"({deployment.kv_capacity_tokens} tokens) // 2")
            return floor
        if key == "device_memory_mib":
            return self.device_memory(preset, deployment)
        if key == "mem_fraction":
            return self.default_fraction(deployment, resolved)
        if key == "prefill_graph_max_tokens":
            # piecewise CUDA graphs of prefill batches: up to 2048 tokens with an MLA backend, else the chunk
            if deployment.mla:
                return self.constant(preset, "prefill_graph_max_tokens_mla", deployment, as_key=key)
            chunk = resolved["prefill_chunk"]
            return Setting(chunk.value, f"the prefill chunk (non-MLA: server_args.py prefill max_bs = "
                                        f"chunked_prefill_size); {chunk.source}")
        return super().rule(key, preset, deployment, resolved)
