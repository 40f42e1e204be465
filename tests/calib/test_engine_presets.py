"""Every engine-preset constant pinned to its source: the test reads each shipped preset file and checks each
constant's value and that its reference names the file (and version) it was read from. A constant added without a
pin, or a value or reference changed without changing its pin here, fails (docs/ENGINES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simroute.calib.engines import EnginePresetFile, engines_dir, load_engine_preset_file, version_key
from simroute.errors import ConfigurationError

SGL = "sglang 0.5.14 python/sglang/srt/"
VLLM = "vllm 0.24.0 vllm/"
TRT = "TensorRT-LLM "
SGL_TIERS = [[20, 2048, None], [35, 2048, None], [60, 4096, None], [90, 8192, None], [160, 8192, None],
             [None, 16384, None]]
SGL_GRAPHS = [[20, 8, 8], [35, 24, 80], [60, 32, 160], [90, 256, 512], [160, 256, 512], [None, 512, 512]]
IPC = "uw-syfi/vibesys PR #421"
TOKENISE = "tenstorrent/tt-inference-server issue #2173"
LAUNCH = "cloudai.pt/tag/cuda-graphs"
GAP = "vllm-project/vllm issue #10634"
FI_GEMM = "sgl-project/sglang pull request #13528"
# The rows of that PR's B200 table read here (`--tp-size 4`, provider Flashinfer =
# gemm_fp8_nt_groupwise(backend="trtllm"), us): (m, n, k) -> (DeepGEMM, Flashinfer)
FI_GEMM_ROWS = {(1024, 576, 7168): (60.543999, 28.704001), (2048, 576, 7168): (61.439998, 41.216001),
                (4096, 576, 7168): (62.208001, 63.487999), (256, 24576, 7168): (71.039997, 223.519996),
                (1024, 24576, 7168): (146.031998, 826.191992), (2048, 24576, 7168): (260.383993, 1632.544041)}

# GiB free at start-up ("Load weight begin. avail mem"): none published below 100 GiB, H200 138.09, B200 175.34, none
# above (GB200, B300)
STARTUP = [[100, 0, None], [150, 138.09, None], [170, 175.34, None], [None, 0, None]]
# nvidia-smi memory.total (MiB), the capacity SGLang's default --mem-fraction-static is a share of: H200 143,771, B200
# 183,359, none published for the others
DEVICE_MIB = [[100, 0, None], [150, 143771, None], [170, 183359, None], [None, 0, None]]
# TensorRT-LLM's pool bracket after start-up profiling (device - peak + temporary KV), published by one server's
# start-up log: DeepSeek-R1 FP8 at TP 8 on B200 (the 150-170 GiB tier), none for the other GPUs
PROFILED = [[150, 0, None], [170, 81.5965, None], [None, 0, None]]
PROFILE_LOG = ("github.com/zufayu/ClaudeSkillsE2EPerf/blob/159fe9b99e8cff4fdab3064058571bcdfd044ba5/results/"
               "b200_dsr_fp8/b200_dsr_fp8_mtp0_ep1_tp8_post3/server_fp8_throughput_summarize_ep1_c256.trimmed.log")
# file -> constant -> (kind, value or tiers, substrings its reference must hold: the file and version it cites)
PINS: dict[str, dict[str, tuple[str, object, tuple[str, ...]]]] = {
    "sglang-0.5.14.yaml": {
        "scheduler": ("source", "sglang", (SGL + "managers/scheduler.py get_next_batch_to_run", "line 2656",
                                           "enable_mixed_chunk = False")),
        "token_budget": ("source", 16384, (SGL + "server_args.py lines 688-698", "max_prefill_tokens = 16384")),
        "prefill_chunk": ("source", SGL_TIERS, (SGL + "server_args.py _handle_gpu_memory_settings (lines 3122-3207)",
                                                "PrefillAdder.add_one_req")),
        "cuda_graph_max_batch": ("source", SGL_GRAPHS, (SGL + "server_args.py _handle_gpu_memory_settings",
                                                        "decode max_bs")),
        "max_running_seqs": ("source", 2048, (SGL + "model_executor/model_runner_kv_cache_mixin.py "
                                                    "_resolve_max_num_reqs",)),
        "overlap_scheduling": ("source", True, (SGL + "server_args.py line 776: disable_overlap_schedule = False",)),
        "host_us_per_sequence": ("default", 21.5, (GAP, "5.5 ms / 256")),
        "eager_launch_us_per_layer": ("published", 262, (LAUNCH, "8.4 ms / 32 layers")),
        "request_ingress_us": ("published", 1550, (TOKENISE, "1.40 ms", IPC, "0.15 ms")),
        "request_egress_us": ("published", 300, (IPC, "2 x 0.15 ms")),
        "scheduler_recv_interval": ("source", 1, (SGL + "server_args.py line 784: scheduler_recv_interval = 1",
                                                  "managers/scheduler_recv_skipper.py SchedulerRecvSkipper.handle",
                                                  "DEFAULT 1000, DECODE 1", "sglang 0.5.5 (managers/scheduler.py "
                                                  "recv_requests")),
        "prefill_graph_max_tokens_mla": ("source", 2048, (SGL + "model_executor/cuda_graph_config.py lines 90-91",
                                                          "server_args.py lines 3239-3245", "2048 with an MLA",
                                                          "enable_piecewise_cuda_graph = False",
                                                          "0.5.12 disable_piecewise_cuda_graph = False")),
        "eager_launch_us_per_layer_mla_moe": ("fitted", 1770, ("InferenceX's H200 SGLang 0.5.5 run (2025-12-15",
                                                               "bench/fit_sglang_eager_prefill.py",
                                                               "sgl-project/sglang PR #12996")),
        "startup_free_gib": ("published", STARTUP, ("github.com/sgl-project/sglang/issues/24607",
                                                    "github.com/sgl-project/sglang/pull/9162", "avail mem=N GB",
                                                    "143,771 MiB", "183,359 MiB")),
        "device_memory_mib": ("published", DEVICE_MIB, ("github.com/sgl-project/sglang/issues/3196",
                                                        "github.com/sgl-project/sglang/pull/9162", "143,771 MiB",
                                                        "183,359 MiB", SGL + "utils/common.py "
                                                        "get_nvgpu_memory_capacity", "(line 2524)")),
        "flashinfer_trtllm_fp8_gemm_tflops": ("published", 532.7, (
            FI_GEMM, "benchmark_deepgemm_fp8_gemm_blackwell.py --tp-size 4", 'backend="trtllm"')),
        "flashinfer_trtllm_fp8_gemm_gpus": ("published", "b200-sxm", (FI_GEMM, "_dispatch_explicit_backend",
                                                                     "SM100 / SM103")),
    },
    "vllm-0.24.0.yaml": {
        "scheduler": ("source", "sarathi", (VLLM + "v1/core/sched/scheduler.py", "(line 430)", "(line 625)",
                                            "long_prefill_token_threshold = 0")),
        "token_budget": ("source", 2048, (VLLM + "engine/arg_utils.py get_batch_defaults", "(line 2404)")),
        "token_budget_large_gpu": ("source", 8192, (VLLM + "engine/arg_utils.py get_batch_defaults "
                                                           "(lines 2404-2412)",)),
        "max_running_seqs": ("source", 256, (VLLM + "engine/arg_utils.py get_batch_defaults (lines 2414-2424)",)),
        "max_running_seqs_large_gpu": ("source", 1024, (VLLM + "engine/arg_utils.py get_batch_defaults "
                                                               "(lines 2410-2413)",)),
        "large_gpu_min_gib": ("source", 70, (VLLM + "engine/arg_utils.py line 2404",)),
        "large_gpu_excluded": ("source", "a100", (VLLM + "engine/arg_utils.py lines 2401-2404",)),
        "cuda_graph_max_batch": ("source", 512, (VLLM + "config/vllm.py lines 1684-1694",)),
        "overlap_scheduling": ("source", True, (VLLM + "config/vllm.py lines 964-1004",)),
        "host_us_per_sequence": ("fitted", 21.5, ("5.5 ms / 256",)),
        "eager_launch_us_per_layer": ("published", 262, (LAUNCH, "8.4 ms / 32 layers")),
        "request_ingress_us": ("published", 1550, (TOKENISE, "1.40 ms", IPC, "0.15 ms")),
        "request_egress_us": ("published", 150, (IPC, "0.15 ms")),
        "prefill_dispatch_us_per_layer": ("fitted", 800, ("aiconfigurator-core 0.12.0 aiconfigurator_core/sdk/"
                                                          "backends/vllm_backend.py _prefill_dispatch_overhead_ms",)),
    },
    "trtllm-1.3.0rc20.yaml": {
        "scheduler": ("source", "trtllm", (TRT + "cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp",
                                           "enable_chunked_prefill default False")),
        "token_budget": ("source", 8192, (TRT + "tensorrt_llm/builder.py BuildConfig", "max_num_tokens = 8192")),
        "max_running_seqs": ("source", 2048, (TRT + "tensorrt_llm/builder.py BuildConfig", "max_batch_size = 2048")),
        "cuda_graph_max_batch": ("source", 128, (TRT + "tensorrt_llm/llmapi/llm_args.py",
                                                 "a default max_batch_size of 128")),
        "overlap_scheduling": ("source", True, (TRT + "tensorrt_llm/llmapi/llm_args.py",
                                                "disable_overlap_scheduler = False")),
        "host_us_per_sequence": ("default", 21.5, (GAP, "5.5 ms / 256")),
        "eager_launch_us_per_layer": ("published", 262, (LAUNCH, "8.4 ms / 32 layers")),
        "request_ingress_us": ("published", 1550, (TOKENISE, "1.40 ms", IPC, "0.15 ms")),
        "request_egress_us": ("published", 150, (IPC, "0.15 ms")),
        "eager_launch_us_per_layer_mla_moe": ("fitted", 1770, ("stands in: SGLang's fitted eager launch",
                                                               "sglang-0.5.14.yaml eager_launch_us_per_layer_mla_moe",
                                                               "no TensorRT-LLM row was used",
                                                               "164 ms on B200, 119-123 ms on H200")),
        "mem_fraction": ("source", 0.9, (TRT + "tensorrt_llm/commands/serve.py (stored copy, commit 00209af1)",
                                         "--kv_cache_free_gpu_memory_fraction default=0.9",
                                         "KvCacheConfig(free_gpu_memory_fraction=...)")),
        "startup_free_gib": ("default", STARTUP, ("stands in: SGLang's published start-up figures",
                                                  "sglang-0.5.14.yaml startup_free_gib", "_util.py")),
        "profiled_free_gib_mla_moe": ("published", PROFILED, (PROFILE_LOG, "release:1.2.0rc6.post3",
                                                              "max_tokens=1994844", "max_gpu_total_bytes=70090869555",
                                                              "70,090,869,555 B / 0.8 = 81.5965 GiB",
                                                              "Peak memory during memory usage profiling",
                                                              "97.03 GiB", "1.2.0rc6.post2")),
        "profiled_launch_tp": ("published", 8, (PROFILE_LOG, "tp_size 8")),
        "profiled_launch_ep": ("published", 1, (PROFILE_LOG, "ep_size 1", "enable_attention_dp false")),
        "profiled_launch_max_num_tokens": ("published", 8512, (PROFILE_LOG, "--max_num_tokens=8512")),
        "profiled_launch_cuda_graph_max_batch": ("published", 256, (PROFILE_LOG, "max_batch_size 256")),
        "batch_wait_timeout_iters": ("source", 0, (TRT + "tensorrt_llm/llmapi/llm_args.py",
                                                   "batch_wait_timeout_iters Field(default=0",
                                                   "enable_batch_waiting = batch_wait_timeout_iters > 0 or "
                                                   "batch_wait_max_tokens_ratio > 0",
                                                   "only without attention DP")),
        "batch_wait_max_tokens_ratio": ("source", 0, (TRT + "tensorrt_llm/llmapi/llm_args.py",
                                                      "batch_wait_max_tokens_ratio Field(default=0",
                                                      "waited iterations >= batch_wait_timeout_iters or scheduled "
                                                      "tokens >= ratio x max_num_tokens")),
        "adp_balance": ("source", False, (TRT + "tensorrt_llm/llmapi/llm_args.py",
                                          "AttentionDpConfig enable_balance Field(default=False)",
                                          "_balance_adp_requests only if enable_attention_dp and "
                                          "attention_dp_enable_balance")),
        "adp_timeout_iters": ("source", 50, (TRT + "tensorrt_llm/llmapi/llm_args.py",
                                             "AttentionDpConfig timeout_iters Field(default=50",
                                             "timeout_reached = count >= attention_dp_time_out_iters")),
        "adp_batching_wait_iters": ("source", 10, (TRT + "tensorrt_llm/llmapi/llm_args.py",
                                                   "AttentionDpConfig batching_wait_iters Field(default=10",
                                                   "if adp_ctx_batching_wait_iters_count < "
                                                   "attention_dp_batching_wait_iters")),
        "trtllm_gen_moe_tables": ("source", "sglang-0.5.14", (
            "create_moe.py get_moe_cls", "backend TRTLLM with FP8 block scales returns TRTLLMGenFusedMoE",
            "fp8_block_scale_moe_runner", "namespace tensorrt_llm::kernels::trtllmgen_moe",
            "include/flashinfer/trtllm/fused_moe/runner.h", "trtllm_fp8_block_scale_moe",
            "kernel_source sglang_flashinfer_trtllm_moe", "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic")),
        "trtllm_gen_moe_gpus": ("source", "b200-sxm", ("fused_moe_trtllm_gen.py", "SM 100 only",
                                                       "sglang_flashinfer_trtllm_moe")),
    },
}
FITTED_POINTS = {("vllm-0.24.0.yaml", "host_us_per_sequence"): GAP,
                 ("vllm-0.24.0.yaml", "prefill_dispatch_us_per_layer"): "aiconfigurator 0.12.0",
                 ("sglang-0.5.14.yaml", "eager_launch_us_per_layer_mla_moe"):
                     "ix-2025-12-15-h200-sglang-1k8k-tp8ep1-c64",
                 ("trtllm-1.3.0rc20.yaml", "eager_launch_us_per_layer_mla_moe"):
                     "ix-2025-12-15-h200-sglang-1k1k-tp8ep1-c4"}


def pin_failures(name: str, raw: dict) -> list[str]:
    """What in one preset file's raw YAML differs from its pins (empty: every constant as pinned)."""
    pins, constants = PINS[name], raw["constants"]
    problems = [f"{key}: not pinned" for key in constants if key not in pins]
    problems += [f"{key}: pinned but absent" for key in pins if key not in constants]
    for key, (kind, value, refs) in pins.items():
        entry = constants.get(key)
        if entry is None:
            continue
        got = ([[tier.get("below_gib"), tier["value"], tier.get("value_tp4")] for tier in entry["tiers"]]
               if "tiers" in entry else entry["value"])
        if got != value or type(got) is bool and type(value) is not bool:
            problems.append(f"{key}: value {got!r}, pinned {value!r}")
        if entry["provenance"]["kind"] != kind:
            problems.append(f"{key}: kind {entry['provenance']['kind']}, pinned {kind}")
        problems += [f"{key}: reference lacks {ref!r}" for ref in refs if ref not in entry["provenance"]["ref"]]
        if (name, key) in FITTED_POINTS and not any(FITTED_POINTS[name, key] in point
                                                     for point in entry["provenance"].get("points", [])):
            problems.append(f"{key}: fitted points lack {FITTED_POINTS[name, key]!r}")
    return problems


def _raw(name: str) -> dict:
    return yaml.safe_load((engines_dir() / name).read_text())


def test_every_shipped_preset_is_pinned():
    assert sorted(path.name for path in engines_dir().glob("*.yaml")) == sorted(PINS)


@pytest.mark.parametrize("name", sorted(PINS))
def test_each_constant_is_its_source_s_value_citing_the_file_and_version(name):
    assert pin_failures(name, _raw(name)) == []
    preset = load_engine_preset_file(engines_dir() / name)          # and the loader takes it
    assert preset.label.replace("@", "-") + ".yaml" == name and set(preset.constants) == set(PINS[name])


@pytest.mark.parametrize("name,key,mutate", [
    ("sglang-0.5.14.yaml", "token_budget", lambda entry: entry.update(value=8192)),
    ("sglang-0.5.14.yaml", "prefill_chunk", lambda entry: entry["tiers"][4].update(value=4096)),
    ("vllm-0.24.0.yaml", "overlap_scheduling", lambda entry: entry.update(value=False)),
    ("trtllm-1.3.0rc20.yaml", "cuda_graph_max_batch", lambda entry: entry["provenance"].update(ref="a blog")),
    ("vllm-0.24.0.yaml", "host_us_per_sequence", lambda entry: entry["provenance"].update(kind="published")),
])
def test_a_mutated_constant_fails_its_pin(name, key, mutate):
    raw = _raw(name)
    mutate(raw["constants"][key])
    assert any(problem.startswith(key) for problem in pin_failures(name, raw))


def _write(tmp_path: Path, name: str, raw: dict) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("edit,field", [
    (lambda raw: raw["constants"]["host_us_per_sequence"]["provenance"].update(kind="fitted"), "points"),
    (lambda raw: raw["constants"]["prefill_chunk"]["tiers"].reverse(), "below_gib"),
    (lambda raw: raw["constants"]["token_budget"].update(value=-1), "non-negative"),
    (lambda raw: raw["constants"]["token_budget"]["provenance"].update(ref=""), "ref"),
    (lambda raw: raw.update(version="0.5.15"), "named"),
])
def test_a_malformed_preset_is_refused_naming_the_problem(tmp_path, edit, field):
    raw = _raw("sglang-0.5.14.yaml")
    edit(raw)
    with pytest.raises(ConfigurationError, match=field):
        load_engine_preset_file(_write(tmp_path, "sglang-0.5.14.yaml", raw))


def test_the_schema_takes_each_shipped_file_and_versions_order_as_releases():
    for name in PINS:
        EnginePresetFile.model_validate(_raw(name))
    assert sorted(["0.5.14", "0.5.9", "1.3.0", "1.3.0rc20", "1.3.0rc5"], key=version_key) == \
        ["0.5.9", "0.5.14", "1.3.0rc5", "1.3.0rc20", "1.3.0"]


def test_trtllm_takes_sglang_s_fitted_deepseek_launch_over_unchanged():
    """TensorRT-LLM's eager launch of an MLA + MoE layer stands in with SGLang's fit: the same value and the same
    fit points (so the validation labels those SGLang rows and judges the constant on every TensorRT-LLM row)."""
    sglang = _raw("sglang-0.5.14.yaml")["constants"]["eager_launch_us_per_layer_mla_moe"]
    trtllm = _raw("trtllm-1.3.0rc20.yaml")["constants"]["eager_launch_us_per_layer_mla_moe"]
    assert trtllm["value"] == sglang["value"]
    assert trtllm["provenance"]["points"] == sglang["provenance"]["points"]
    assert not any("trtllm" in point for point in trtllm["provenance"]["points"])


def test_the_flashinfer_gemm_bound_is_the_fastest_published_rate_of_that_kernel():
    """flashinfer_trtllm_fp8_gemm_tflops is the fastest 2 m n k / time of the published B200 rows of FlashInfer's
    TRT-LLM-gen FP8 GEMM at prefill sizes (m >= 256; FI_GEMM_ROWS, transcribed from the PR): the n 576 row at m 4096.
    On the widest shape the kernel saturates near 440 TFLOP/s where DeepGEMM reaches 2.8 PFLOP/s (5.7-6.3x
    faster at m 1024-2048): a decode-sized tile, not a launch cost."""
    rate = {shape: 2 * shape[0] * shape[1] * shape[2] / (flashinfer * 1e-6) / 1e12
            for shape, (_, flashinfer) in FI_GEMM_ROWS.items()}
    fastest = max(rate, key=rate.get)
    assert fastest == (4096, 576, 7168)
    assert _raw("sglang-0.5.14.yaml")["constants"]["flashinfer_trtllm_fp8_gemm_tflops"]["value"] == \
        pytest.approx(rate[fastest], abs=0.05)
    assert [round(rate[(m, 24576, 7168)]) for m in (256, 1024, 2048)] == [404, 437, 442]
    assert [round(FI_GEMM_ROWS[(m, 24576, 7168)][1] / FI_GEMM_ROWS[(m, 24576, 7168)][0], 2) for m in (1024, 2048)] \
        == [5.66, 6.27]
