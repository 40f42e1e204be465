"""Engine presets resolved for a deployment (simroute.sim.presets, simroute/sim/frameworks/): each framework's rules
by hand, the override rules (explicit flags win, each setting says where it came from), the tables a preset
selects, and the checks (docs/ENGINES.md)."""

from __future__ import annotations

import dataclasses

import pytest

from simroute.calib import load_profile
from simroute.calib.engines import load_engine_preset
from simroute.errors import ConfigurationError, UnknownNameError
from simroute.sim import RunConfig
from simroute.sim.frameworks import FRAMEWORKS, Deployment
from simroute.sim.presets import resolve_engine
from simroute.sim.runner import engine_options

BASE = dict(topology="t.yaml", trace="t.parquet", calib="c.yaml")
GIB = float(1 << 30)


def _settings(framework: str, gib: float, tp: int = 8, gpu: str = "h200-sxm", layers: int = 61, kv: int = 794_880,
              mla: bool = False, moe: bool = False, **flags):
    deployment = Deployment(gpu=gpu, hbm_bytes=gib * GIB, tp=tp, layers=layers, kv_capacity_tokens=kv, mla=mla,
                            moe=moe)
    resolved = FRAMEWORKS.get(framework)().settings(load_engine_preset(framework), deployment, flags)
    return {key: setting.value for key, setting in resolved.items()}, resolved


@pytest.mark.parametrize("gib,tp,chunk,graphs", [
    (131.3, 8, 8192, 512), (131.3, 2, 8192, 256), (74.5, 8, 8192, 512), (40.0, 1, 4096, 32), (40.0, 4, 4096, 160),
    (16.0, 8, 2048, 8), (179.0, 8, 16384, 512),
])
def test_sglang_picks_its_chunk_and_graph_sizes_by_gpu_memory(gib, tp, chunk, graphs):
    """server_args.py _handle_gpu_memory_settings: the tier below the GPU's memory, the graph size by TP."""
    values, _ = _settings("sglang", gib, tp=tp)
    assert (values["prefill_chunk"], values["cuda_graph_max_batch"]) == (chunk, graphs)
    assert values["scheduler"] == "sglang" and values["token_budget"] == 16384 and values["overlap_scheduling"]


def test_sglang_caps_its_running_requests_at_half_the_kv_room():
    assert _settings("sglang", 131.3)[0]["max_running_seqs"] == 2048
    assert _settings("sglang", 131.3, kv=3000)[0]["max_running_seqs"] == 1500          # 3000 // 2 < 2048


def test_vllm_takes_its_larger_defaults_on_a_large_gpu_that_is_not_an_a100():
    h200, _ = _settings("vllm", 131.3)
    assert (h200["token_budget"], h200["max_running_seqs"], h200["prefill_chunk"]) == (8192, 1024, 8192)
    assert h200["cuda_graph_max_batch"] == 512                       # min(2 x 1024, 512, 8192)
    a100, _ = _settings("vllm", 74.5, gpu="a100-80gb")
    assert (a100["token_budget"], a100["max_running_seqs"], a100["cuda_graph_max_batch"]) == (2048, 256, 512)
    small, _ = _settings("vllm", 44.7, gpu="l40s")
    assert small["token_budget"] == 2048
    flagged, _ = _settings("vllm", 131.3, token_budget=384, max_running_seqs=100)
    assert (flagged["prefill_chunk"], flagged["cuda_graph_max_batch"]) == (384, 200)   # min(200, 512, 384)
    assert h200["request_ingress_us"] == pytest.approx(1550 + 61 * 800)               # + aiconfigurator's dispatch


def test_trtllm_runs_whole_prompts_under_its_token_budget():
    values, resolved = _settings("trtllm", 131.3)
    assert (values["scheduler"], values["token_budget"], values["max_running_seqs"]) == ("trtllm", 8192, 2048)
    assert values["cuda_graph_max_batch"] == 128 and values["request_ingress_us"] == 1550
    assert "not read" in resolved["prefill_chunk"].source


def _cfg(**kw) -> RunConfig:
    return RunConfig(**BASE, **kw)


def _h200():
    from simroute.calib import default_profile_path
    return load_profile(default_profile_path()).find_gpu_spec("h200-sxm")


def test_auto_takes_the_framework_of_the_gpu_tables_and_explicit_flags_win():
    engine, spec = resolve_engine(_cfg(), _h200(), layers=61, kv_capacity_tokens=794_880)
    assert engine.engine == "sglang@0.5.14" and engine.tables == "h200-sxm sglang 0.5.14" and not engine.notes
    assert engine.settings["prefill_chunk"].source.startswith("preset sglang@0.5.14 prefill_chunk at 131 GiB")
    flagged, _ = resolve_engine(_cfg(token_budget=4096, scheduler="sarathi", overlap_scheduling=False,
                                     max_running_seqs=64), _h200(), layers=61, kv_capacity_tokens=794_880)
    values = {key: setting.value for key, setting in flagged.settings.items()}
    assert (values["token_budget"], values["scheduler"], values["overlap_scheduling"]) == (4096, "sarathi", False)
    assert values["prefill_chunk"] == 4096 and "cut to the token budget" in flagged.settings["prefill_chunk"].source
    assert flagged.settings["max_running_seqs"].source == "flag (--max-running-seqs)"
    assert flagged.host is not None and not flagged.host.overlap and not flagged.schedule_ahead
    applied = flagged.applied(_cfg(token_budget=4096))
    assert (applied.engine, applied.prefill_chunk, applied.cuda_graph_max_batch) == ("sglang@0.5.14", 4096, 512)


def test_none_is_the_engine_of_the_flags_and_the_gpu_entry_s_overhead():
    engine, spec = resolve_engine(_cfg(engine="none", token_budget=512, prefill_chunk=512), _h200(), layers=61,
                                  kv_capacity_tokens=794_880)
    assert {key: s.value for key, s in engine.settings.items()} == {"scheduler": "sarathi", "token_budget": 512,
                                                                    "prefill_chunk": 512, "max_running_seqs": 256}
    assert engine.host is None and engine.ingress_s == engine.egress_s == 0.0 and not engine.schedule_ahead


def test_a_preset_reads_its_own_framework_s_tables_where_they_are_shipped():
    """calib/ops/h200-sxm/vllm-0.24.0 and trtllm-1.3.0rc20 are shipped: the presets read them."""
    for name, tables in (("vllm", ("vllm", "0.24.0")), ("trtllm", ("trtllm", "1.3.0rc20"))):
        engine, spec = resolve_engine(_cfg(engine=name), _h200(), layers=61, kv_capacity_tokens=794_880)
        assert (spec.operator_tables.framework, spec.operator_tables.version) == tables
        assert not any("no calib/ops" in note for note in engine.notes)


def test_a_preset_without_tables_for_the_gpu_reads_the_gpu_entry_s_own_and_says_so():
    """RTX PRO 6000 ships SGLang 0.5.14 tables only: the vllm preset reads those, and says so."""
    from simroute.calib import default_profile_path
    rtx = load_profile(default_profile_path()).find_gpu_spec("rtxpro6000")
    engine, spec = resolve_engine(_cfg(engine="vllm"), rtx, layers=32, kv_capacity_tokens=100_000)
    assert (spec.operator_tables.framework, spec.operator_tables.version) == ("sglang", "0.5.14")
    assert any("no calib/ops/rtxpro6000/vllm-0.24.0 tables" in note for note in engine.notes)


def test_a_gpu_without_tables_takes_the_default_framework_and_says_so():
    bare = dataclasses.replace(_h200(), operator_tables=None)
    engine, _ = resolve_engine(_cfg(), bare, layers=61, kv_capacity_tokens=794_880)
    assert engine.engine == "sglang@0.5.14" and any("no operator tables" in note for note in engine.notes)


@pytest.mark.parametrize("kw,error,match", [
    (dict(engine="nosuch"), UnknownNameError, "engine"),
    (dict(engine="sglang@9.9.9"), UnknownNameError, "'sglang@9.9.9'; valid: sglang@0.5.14$"),
    (dict(engine="vllm@"), UnknownNameError, "'vllm@'; valid: vllm@0.24.0$"),
    (dict(engine="none", overlap_scheduling=True), ConfigurationError, "overlap_scheduling"),
    (dict(token_budget=512, prefill_chunk=2048), ConfigurationError, "prefill_chunk"),
    (dict(cuda_graph_max_batch=-1), ConfigurationError, "cuda_graph_max_batch"),
])
def test_bad_engine_settings_are_refused_naming_the_field(kw, error, match):
    with pytest.raises(error, match=match):
        _cfg(**kw)


@pytest.mark.parametrize("args,flag", [
    (("run", "--engine", "sglang@0.4"), "unknown engine 'sglang@0.4'; valid: sglang@0.5.14"),
    (("run", "--engine", "tensorrt"), "unknown engine 'tensorrt'; valid: auto, none, sglang, trtllm, vllm"),
    (("plan", "--engine", "trtllm@1.2"), "unknown engine 'trtllm@1.2'; valid: trtllm@1.3.0rc20"),
])
def test_a_bad_engine_on_the_command_line_is_one_line_and_exit_2_before_any_output(cli, tmp_path, args, flag):
    code, out, err = cli(*args, "-o", str(tmp_path / "out"))
    assert (code, out) == (2, "") and err.strip() == f"error: field '--engine': {flag}"
    assert not (tmp_path / "out").exists()


def test_a_study_s_bad_engine_names_the_file_and_the_field(cli, tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text("name: s\nbase: {topology: fattree, calib: h100-ibgda, trace: agents-default, engine: vllm@0.6}\n"
                     "seeds: 1\n")
    code, out, err = cli("sweep", str(study), "-o", str(tmp_path / "out"))
    assert (code, out) == (2, "") and err.strip() == (f"error: {study}, field 'base: engine': unknown engine "
                                                      "'vllm@0.6'; valid: vllm@0.24.0")
    assert not (tmp_path / "out").exists()


def test_a_flagged_sarathi_chunk_over_the_preset_s_budget_is_refused():
    with pytest.raises(ConfigurationError, match="prefill_chunk"):
        resolve_engine(_cfg(engine="trtllm", scheduler="sarathi", prefill_chunk=9000), _h200(), layers=61,
                       kv_capacity_tokens=794_880)


def test_run_help_lists_each_preset_with_its_line():
    from simroute.cli.run_cmd import run_options
    help_text = dict(run_options())["engine"].default.help
    for name in ("sglang@0.5.14", "vllm@0.24.0", "trtllm@1.3.0rc20"):
        assert name in help_text
    assert "in-flight batching" in help_text and "prefill batches first" in help_text


def test_the_per_request_path_adds_to_ttft_and_e2e_by_hand(tmp_path):
    """One request of a 512-token prompt on an idle engine, then a closed-loop child: TTFT is the preset's ingress,
    the prompt's one prefill iteration (the step model's, the preset's host costs in it) and the egress of the
    first token; E2E adds the decode iterations and the last token's egress, which the child waits for."""
    from simroute.network import shipped_topology
    from simroute.scenarios.traces import write_trace
    from simroute.sim import Simulation
    from simroute.defaults import PAPER_DEPLOYMENT
    from simroute.calib import default_profile_path
    reqs = [{"arrival_s": 0.0, "requester_hint": 0, "prompt_tokens": 512, "output_tokens": 4, "after_id": -1,
             "think_s": 0.0},
            {"arrival_s": 0.0, "requester_hint": 0, "prompt_tokens": 512, "output_tokens": 1, "after_id": 0,
             "think_s": 0.0}]
    trace = write_trace(tmp_path / "t.parquet", reqs, [])
    sim = Simulation(RunConfig(topology=str(shipped_topology("paper-testbed")), trace=str(trace),
                               calib=str(default_profile_path()), **{**PAPER_DEPLOYMENT, "engine": "sglang"}))
    sim.run()
    engine, step, rec = sim.engine, sim.ctx.engines.step, sim.rec
    assert (engine.ingress_s, engine.egress_s) == (1550e-6, 300e-6)
    pairs = 512 * 513 / 2
    prefill = step.iteration_s(512, 1, 512, pairs, pairs, 0.0)
    assert rec.ttft[0] == pytest.approx(engine.ingress_s + prefill + engine.egress_s, rel=1e-12)
    assert rec.ttft_frontend[0] == engine.ingress_s + engine.egress_s
    # the 3 decodes run as one engine event at its mid-point context (docs/MODEL.md, "Macro events")
    decodes = 3 * step.iteration_s(1, 1, 514, 514, 0.0, 1)
    assert rec.e2e[0] - rec.ttft[0] == pytest.approx(decodes, rel=1e-12)      # every token pays the same egress
    assert rec.tpot[0] == pytest.approx(decodes / 3, rel=1e-12)
    assert rec.arrival[1] == pytest.approx(rec.e2e[0], rel=1e-12)              # the child left after the last token
    assert rec.ttft[0] >= rec.ttft_floor[0] - 1e-12


def test_the_scheduler_poll_interval_is_sglang_s_alone_and_a_flag_wins():
    """SGLang's --scheduler-recv-interval: the preset's 1 (every iteration), a run's flag on top; TensorRT-LLM and
    vLLM have no such option (their loops take new requests every iteration), so the flag is refused there."""
    engine, _ = resolve_engine(_cfg(), _h200(), layers=61, kv_capacity_tokens=794_880)
    assert engine.recv_interval == 1
    assert engine.settings["scheduler_recv_interval"].source.startswith("preset sglang@0.5.14 scheduler_recv_interval")
    flagged, _ = resolve_engine(_cfg(scheduler_recv_interval=30), _h200(), layers=61, kv_capacity_tokens=794_880)
    assert flagged.recv_interval == 30 and flagged.applied(_cfg()).scheduler_recv_interval == 30
    trt, _ = resolve_engine(_cfg(engine="trtllm"), _h200(), layers=61, kv_capacity_tokens=794_880)
    assert trt.recv_interval == 1 and "scheduler_recv_interval" not in trt.settings
    with pytest.raises(ConfigurationError, match="scheduler_recv_interval.*only of: sglang"):
        resolve_engine(_cfg(engine="vllm", scheduler_recv_interval=10), _h200(), layers=61, kv_capacity_tokens=1000)
    with pytest.raises(ConfigurationError, match="scheduler_recv_interval"):
        _cfg(engine="none", scheduler_recv_interval=10)


def test_batch_waiting_is_trtllm_s_alone_off_by_default_and_a_flag_wins():
    """TensorRT-LLM's batch_wait_timeout_iters / batch_wait_max_tokens_ratio: the preset's 0 / 0 (off), a run's
    flags on top (and into the engine options); SGLang and vLLM have no such option, so the flags are refused."""
    trt, _ = resolve_engine(_cfg(engine="trtllm"), _h200(), layers=61, kv_capacity_tokens=794_880)
    assert trt.batch_wait == (0, 0.0)
    assert trt.settings["batch_wait_timeout_iters"].source.startswith("preset trtllm@1.3.0rc20 batch_wait_timeout")
    cfg = _cfg(engine="trtllm", batch_wait_timeout_iters=40, batch_wait_max_tokens_ratio=0.8)
    flagged, _ = resolve_engine(cfg, _h200(), layers=61, kv_capacity_tokens=794_880)
    assert flagged.batch_wait == (40, 0.8)
    options = engine_options(flagged.applied(cfg), batch_wait=flagged.batch_wait)
    assert (options.batch_wait_iters, options.batch_wait_ratio) == (40, 0.8)
    sgl, _ = resolve_engine(_cfg(), _h200(), layers=61, kv_capacity_tokens=794_880)
    assert sgl.batch_wait == (0, 0.0) and "batch_wait_timeout_iters" not in sgl.settings
    with pytest.raises(ConfigurationError, match="batch_wait_timeout_iters.*only of: trtllm"):
        resolve_engine(_cfg(batch_wait_timeout_iters=40), _h200(), layers=61, kv_capacity_tokens=1000)
    with pytest.raises(ConfigurationError, match="batch_wait_max_tokens_ratio"):
        _cfg(engine="trtllm", batch_wait_max_tokens_ratio=1.5)
    with pytest.raises(ConfigurationError, match="batch_wait_timeout_iters"):
        _cfg(engine="none", batch_wait_timeout_iters=40)


def test_sglang_graphs_mla_prefills_to_2048_tokens_and_launches_a_deepseek_layer_at_its_fitted_cost():
    """An MLA model's prefill batches replay piecewise CUDA graphs up to 2048 tokens (a dense model's up to the
    chunk); an MLA + MoE layer launches eagerly at the fitted 1770 us, any other at the published 262 us."""
    deepseek, resolved = _settings("sglang", 131.3, mla=True, moe=True)
    assert (deepseek["prefill_graph_max_tokens"], deepseek["eager_launch_us_per_layer"]) == (2048, 1770)
    assert resolved["eager_launch_us_per_layer"].source.startswith(
        "preset sglang@0.5.14 eager_launch_us_per_layer_mla_moe: fitted")
    dense, _ = _settings("sglang", 74.5, layers=32)
    assert (dense["prefill_graph_max_tokens"], dense["eager_launch_us_per_layer"]) == (8192, 262)
    flagged, _ = _settings("sglang", 131.3, mla=True, moe=True, prefill_graph_max_tokens=0)
    assert flagged["prefill_graph_max_tokens"] == 0


def test_trtllm_launches_a_deepseek_layer_eagerly_at_the_fitted_cost_and_a_dense_one_at_the_published():
    """TensorRT-LLM runs context batches eagerly (CUDA graphs hold decode-only batches): an MLA + MoE layer at the
    1770 us its preset takes over from SGLang's fit, a dense layer at the published 262 us; no prefill graphs."""
    deepseek, resolved = _settings("trtllm", 131.3, mla=True, moe=True)
    assert deepseek["eager_launch_us_per_layer"] == 1770 and "prefill_graph_max_tokens" not in deepseek
    assert resolved["eager_launch_us_per_layer"].source.startswith(
        "preset trtllm@1.3.0rc20 eager_launch_us_per_layer_mla_moe: fitted: stands in")
    mla_only, _ = _settings("trtllm", 131.3, mla=True)
    dense, _ = _settings("trtllm", 131.3, layers=32)
    assert mla_only["eager_launch_us_per_layer"] == dense["eager_launch_us_per_layer"] == 262
    vllm, _ = _settings("vllm", 131.3, mla=True, moe=True)        # no such constant in the vLLM preset
    assert vllm["eager_launch_us_per_layer"] == 262


# DeepSeek-R1 FP8 at TP 8: the weights one GPU holds (simroute's geometry: 79.29 GiB) and the MLA latent per token
# (bf16: (512 + 64) x 61 layers x 2 bytes; fp8 half of it)
R1_WEIGHTS, R1_KV_BF16, R1_KV_FP8 = 85_138_051_440, 70_272, 35_136


def _pool(framework: str, gib: float, weights: float, **flags) -> float | None:
    _, resolved = _settings(framework, gib, **flags)
    return FRAMEWORKS.get(framework)().kv_pool_bytes(resolved, weights)


def test_sglang_sizes_its_kv_pool_from_mem_fraction_static_and_the_published_start_up_memory():
    """profile_max_num_token: f x the memory free at start-up - the weights. On an H200 (the entry's 141 GB is
    131.3 GiB) the published start-up figure is 138.09 GiB, so at --mem-fraction-static 0.82: 0.82 x 138.09 =
    113.234 GiB, less 79.291 GiB of weights = 33.943 GiB, 518,639 bf16 latents of 70,272 B."""
    values, resolved = _settings("sglang", 131.3, mem_fraction=0.82)
    assert values["startup_free_gib"] == 138.09 and "sglang/issues/24607" in resolved["startup_free_gib"].source
    pool = _pool("sglang", 131.3, R1_WEIGHTS, mem_fraction=0.82)
    assert pool == pytest.approx(0.82 * 138.09 * GIB - R1_WEIGHTS)
    assert int(pool // R1_KV_BF16) == 518_639
    assert resolved["mem_fraction"].source == "flag (--mem-fraction)"     # the flag wins over SGLang's default
    assert _pool("sglang", 74.5, R1_WEIGHTS, mem_fraction=0.82) is None   # no published start-up figure (H100)


def test_sglang_s_default_mem_fraction_static_by_hand_for_deepseek_r1_fp8_at_tp_8_on_an_h200():
    """_handle_gpu_memory_settings (sglang 0.5.14) without --mem-fraction-static: nvidia-smi's 143,771 MiB less
    512 (attention metadata) + 1.5 x 8192 (the chunk's activations) + 2 x 512 (decode graph slots) + 8 / 8 x 1024
    (TP) + 1536 (MLA piecewise prefill graphs) = 16,384 MiB reserved; (143,771 - 16,384) / 143,771 = 0.88604 ->
    0.886. The pool: 0.886 x 138.09 = 122.348 GiB free at start-up, less 79.291 GiB of weights = 43.057 GiB,
    657,898 bf16 latents of 70,272 B (all HBM after the weights: 794,880)."""
    values, resolved = _settings("sglang", 131.3, mla=True, moe=True)
    assert values["device_memory_mib"] == 143_771 and "sglang/issues/3196" in resolved["device_memory_mib"].source
    assert values["mem_fraction"] == 0.886
    assert "server_args.py _handle_gpu_memory_settings" in resolved["mem_fraction"].source
    assert "16384 MiB reserved" in resolved["mem_fraction"].source
    pool = _pool("sglang", 131.3, R1_WEIGHTS, mla=True, moe=True)
    assert pool == pytest.approx(0.886 * 138.09 * GIB - R1_WEIGHTS)
    assert int(pool // R1_KV_BF16) == 657_898


@pytest.mark.parametrize("gib,gpu,tp,mla,dp,fraction", [
    # non-MLA (a dense model): the piecewise prefill graphs cost 8 MiB per captured size, 58 sizes to the 8192-token
    # chunk (8 of 4-32, 14 of 48-256, 8 of 288-512, 8 of 576-1024, 12 of 1280-4096, 8 of 4608-8192): 464 MiB; 15,312
    # reserved; 128,459 / 143,771 = 0.8935
    (131.3, "h200-sxm", 8, False, 1, 0.893),
    # B200 (183,359 MiB, 16384-token chunk): 512 + 24,576 + 1024 + 1024 + 1536 = 28,672; 154,687 / 183,359 = 0.8436
    (167.6, "b200-sxm", 8, True, 1, 0.844),
    # DP attention over 8 ranks: + 3 x 512 x 8 + 1.5 x 512 x 8 (over 300 slots), no prefill graphs: 33,280 reserved;
    # 110,491 / 143,771 = 0.7685
    (131.3, "h200-sxm", 8, True, 8, 0.769),
    # TP 1: 512 + 12,288 + 2 x 256 + 128 + 1536 = 14,976 reserved; 128,795 / 143,771 = 0.8958
    (131.3, "h200-sxm", 1, True, 1, 0.896),
    # no published nvidia-smi figure (H100): the GPU entry's 80 GB = 76,294 MiB; 59,910 / 76,294 = 0.7853
    (74.5, "h100-sxm", 8, True, 1, 0.785),
])
def test_sglang_s_default_fraction_reads_the_gpu_s_memory_chunk_graphs_tp_and_dp_attention(gib, gpu, tp, mla, dp,
                                                                                         fraction):
    deployment = Deployment(gpu=gpu, hbm_bytes=80e9 if gpu == "h100-sxm" else gib * GIB, tp=tp, layers=61,
                            kv_capacity_tokens=794_880, mla=mla, moe=mla, dp_attention=dp)
    resolved = FRAMEWORKS.get("sglang")().settings(load_engine_preset("sglang"), deployment, {})
    assert resolved["mem_fraction"].value == fraction


def test_prefill_graph_sizes_are_sglang_s_capture_list():
    from simroute.sim.frameworks.sglang import prefill_graph_sizes
    assert len(prefill_graph_sizes(8192)) == 58 and prefill_graph_sizes(8192)[-1] == 8192
    assert prefill_graph_sizes(32) == [4, 8, 12, 16, 20, 24, 28, 32]
    assert len(prefill_graph_sizes(16384)) == 58 + 16


def test_a_flagged_chunk_moves_sglang_s_default_fraction_as_its_launch_flag_would():
    """--chunked-prefill-size feeds the rule: a 16,384-token chunk reserves 1.5 x 16,384 = 24,576 MiB instead of
    12,288: 28,672 reserved, 115,099 / 143,771 = 0.8006 -> 0.801."""
    values, _ = _settings("sglang", 131.3, mla=True, moe=True, prefill_chunk=16384)
    assert values["mem_fraction"] == 0.801


def test_trtllm_sizes_its_kv_pool_from_free_gpu_memory_fraction_of_what_the_weights_leave():
    """_cal_max_memory: fraction x (device memory - the profiling peak), the peak here (a launch whose profiling
    is not published: trtllm-serve's default max_num_tokens and CUDA graphs) the weights and what is held at
    start-up: on a B200 (180 GB = 167.6 GiB entry; 175.34 GiB free at start-up) at 0.8: 0.8 x (175.34 -
    79.291 GiB) = 0.8 x 96.049 GiB = 76.839 GiB, 2,348,174 fp8 latents of 35,136 B."""
    pool = _pool("trtllm", 167.6, R1_WEIGHTS, gpu="b200-sxm", mem_fraction=0.8)
    assert pool == pytest.approx(0.8 * (175.34 * GIB - R1_WEIGHTS))
    assert int(pool // R1_KV_FP8) == 2_348_174


# TensorRT-LLM's published start-up profiling (calib/engines/trtllm-1.3.0rc20.yaml profiled_free_gib_mla_moe): the
# launch InferenceX's dsr1_fp8_b200_trt.sh makes for 8k/1k at 256 clients, logged by a real 1.2.0rc6.post3 server
PROFILED_LAUNCH = {"token_budget": 8512, "cuda_graph_max_batch": 256}


def test_trtllm_s_profiled_pool_bracket_is_its_start_up_log_s_figures():
    """The datum is the log's own arithmetic (KvCacheCreator._cal_max_tokens: (device - peak + temporary KV) x
    fraction): max_gpu_total_bytes 70,090,869,555 B at fraction 0.8 is a bracket of 81.5965 GiB, and 0.8 of it is
    the log's max_tokens, 1,994,844 fp8 latents of 35,136 B. The log's other lines give the same bracket to their
    rounding: the device 106.3609619 / 0.5963572823 = 178.351 GiB ("Setting PyTorch memory fraction", mem_total =
    mem_torch_max / fraction), the peak 97.03 GiB, the temporary pool of the one 8512-token dummy request (+2
    tokens: the generated one and the overlap scheduler's) in 32-token blocks, 267 x 32 = 8,544 tokens."""
    values, resolved = _settings("trtllm", 167.6, gpu="b200-sxm", mla=True, moe=True, **PROFILED_LAUNCH)
    bracket = values["profiled_free_gib"]
    source = resolved["profiled_free_gib"].source
    assert "published" in source and "zufayu/ClaudeSkillsE2EPerf" in source and "summarize_ep1_c256" in source
    assert bracket == round(70_090_869_555 / 0.8 / GIB, 4) == 81.5965
    assert int(0.8 * bracket * GIB // R1_KV_FP8) == 1_994_844
    device = 106.3609619140625 / 0.5963572822870097
    temporary = -(-(8512 + 2) // 32) * 32 * R1_KV_FP8 / GIB
    assert device == pytest.approx(178.351, abs=5e-4) and temporary == pytest.approx(0.2796, abs=1e-4)
    assert abs(device - 97.03 + temporary - bracket) < 0.005 / 0.8 + 0.005        # the log's 0.01 GiB rounding


def test_trtllm_s_pool_at_the_published_launch_by_hand():
    """DeepSeek-R1 FP8 at TP 8 on a B200, max_num_tokens 8512, CUDA graphs to 256 (the B200 8k/1k row at 256
    clients): at --mem-fraction 0.8 the pool is 0.8 x 81.5965 GiB = 65.277 GiB, 1,994,844 latents, where the upper
    bound of the start-up figure was 0.8 x (175.34 GiB - 79.291 GiB of weights) = 76.839 GiB, 2,348,174: a peak
    11.56 / 0.8 = 14.45 GiB above the weights and the start-up context. At trtllm-serve's default 0.9: 0.9 x
    81.5965 = 73.437 GiB, 2,244,200 latents."""
    pool = _pool("trtllm", 167.6, R1_WEIGHTS, gpu="b200-sxm", mla=True, moe=True, mem_fraction=0.8,
                 **PROFILED_LAUNCH)
    assert pool == pytest.approx(0.8 * 81.5965 * GIB) and int(pool // R1_KV_FP8) == 1_994_844
    bound = _pool("trtllm", 167.6, R1_WEIGHTS, gpu="b200-sxm", mla=True, moe=True, mem_fraction=0.8)
    assert int(bound // R1_KV_FP8) == 2_348_174
    assert (bound - pool) / 0.8 / GIB == pytest.approx(14.45, abs=0.01)
    default = _pool("trtllm", 167.6, R1_WEIGHTS, gpu="b200-sxm", mla=True, moe=True, **PROFILED_LAUNCH)
    assert int(default // R1_KV_FP8) == 2_244_200


@pytest.mark.parametrize("change,why", [
    ({"token_budget": 8320}, "token_budget 8320, the published launch's 8512"),
    ({"cuda_graph_max_batch": 128}, "cuda_graph_max_batch 128, the published launch's 256"),
    ({"tp": 4}, "tp 4, the published launch's 8"),
    ({"ep": 8}, "ep 8, the published launch's 1"),
    ({"dp_attention": 8}, "DP attention"),
    ({"mla": False, "moe": False}, "no published profiling for this model"),
    ({"gib": 131.3, "gpu": "h200-sxm"}, "no published profiling for h200-sxm"),
    ({"hbm_override": True}, "--hbm-gb"),
])
def test_trtllm_s_published_profiling_holds_only_at_its_launch(change, why):
    """The profiling peak moves with the model, the GPU, TP, EP, DP attention, max_num_tokens (the dummy requests'
    activations, the piecewise graphs) and the CUDA-graph batch (the graphs' memory), and no source says by how
    much: any other deployment keeps the upper bound (the published logs of other launches of the same server peak
    0.3-5.3 GiB lower: docs/VALIDATION.md)."""
    args = {"gib": 167.6, "gpu": "b200-sxm", "tp": 8, "ep": 1, "dp_attention": 1, "mla": True, "moe": True,
            "hbm_override": False, **PROFILED_LAUNCH, **change}
    deployment = Deployment(gpu=args["gpu"], hbm_bytes=args["gib"] * GIB, tp=args["tp"], layers=61,
                            kv_capacity_tokens=794_880, mla=args["mla"], moe=args["moe"], ep=args["ep"],
                            dp_attention=args["dp_attention"], hbm_override=args["hbm_override"])
    flags = {"mem_fraction": 0.8, "token_budget": args["token_budget"],
             "cuda_graph_max_batch": args["cuda_graph_max_batch"]}
    framework = FRAMEWORKS.get("trtllm")()
    resolved = framework.settings(load_engine_preset("trtllm"), deployment, flags)
    assert resolved["profiled_free_gib"].value is None and why in resolved["profiled_free_gib"].source
    startup = resolved["startup_free_gib"].value
    expected = None if startup is None else 0.8 * (startup * GIB - R1_WEIGHTS)
    assert framework.kv_pool_bytes(resolved, R1_WEIGHTS) == (None if expected is None else pytest.approx(expected))


def test_a_trtllm_run_at_the_published_launch_holds_the_logged_pool(tmp_path):
    """End to end (RunConfig -> preset -> EngineSet -> HbmBudget): DeepSeek-R1 FP8 at TP 8 on one B200 host under
    --engine trtllm at the published launch holds the log's 1,994,844 latents in whole blocks of 64: 31,169 x 64 =
    1,994,816 tokens."""
    from simroute.sim import simulate
    from simroute.workload import generate
    trace = generate("serving", tmp_path / "s.parquet", seed=0,
                     params={"requests": 1, "input_tokens": 64, "output_tokens": 2, "concurrency": 1})
    summary = simulate(RunConfig(topology="fattree", calib="h100-ibgda", trace=str(trace), hosts=1, telemetry=False,
                                 engine="trtllm", gpu="b200-sxm", tp=8, model="deepseek-r1", kv_cache="fp8",
                                 mem_fraction=0.8, **PROFILED_LAUNCH)).summary
    assert summary["engine"]["hbm"]["kv_capacity_tokens"] == 1_994_816
    assert summary["engine"]["preset"]["settings"]["profiled_free_gib"]["value"] == 81.5965


def test_mem_fraction_is_refused_under_a_framework_without_one_and_with_engine_none():
    with pytest.raises(ConfigurationError, match="mem_fraction"):
        _settings("vllm", 131.3, mem_fraction=0.9)
    with pytest.raises(ConfigurationError, match="mem_fraction"):
        RunConfig(**BASE, engine="none", mem_fraction=0.8)
    with pytest.raises(ConfigurationError, match="mem_fraction"):
        RunConfig(**BASE, engine="sglang", mem_fraction=1.5)


def test_a_run_s_kv_room_is_the_framework_s_pool(tmp_path):
    """End to end (RunConfig -> preset -> EngineSet -> HbmBudget): DeepSeek-R1 at TP 8 on one H200 host under
    --engine sglang --mem-fraction 0.82 holds the 518,639 latents above in whole blocks of 64: 8,103 x 64 = 518,592
    tokens (all HBM after the weights would be 794,880)."""
    from simroute.sim import simulate
    from simroute.workload import generate
    trace = generate("serving", tmp_path / "s.parquet", seed=0,
                     params={"requests": 1, "input_tokens": 64, "output_tokens": 2, "concurrency": 1})
    summary = simulate(RunConfig(topology="fattree", calib="h100-ibgda", trace=str(trace), hosts=1, telemetry=False,
                                 engine="sglang", gpu="h200-sxm", tp=8, model="deepseek-r1",
                                 mem_fraction=0.82)).summary
    assert summary["engine"]["hbm"]["kv_capacity_tokens"] == 518_592
    assert summary["engine"]["preset"]["settings"]["startup_free_gib"]["value"] == 138.09


def test_the_default_run_s_kv_room_is_sglang_s_default_pool(tmp_path):
    """The default deployment (DeepSeek-V3 FP8 at TP 8 on H200 under the sglang preset) with no --mem-fraction: the
    657,898 latents of SGLang's default 0.886 (above) in whole blocks of 64: 10,279 x 64 = 657,856 tokens."""
    from simroute.sim import simulate
    from simroute.workload import generate
    trace = generate("serving", tmp_path / "s.parquet", seed=0,
                     params={"requests": 1, "input_tokens": 64, "output_tokens": 2, "concurrency": 1})
    summary = simulate(RunConfig(topology="fattree", calib="h100-ibgda", trace=str(trace), hosts=1,
                                 telemetry=False)).summary
    settings = summary["engine"]["preset"]["settings"]
    assert settings["mem_fraction"]["value"] == 0.886 and summary["config"]["mem_fraction"] == 0.886
    assert summary["engine"]["hbm"]["kv_capacity_tokens"] == 657_856


def test_trtllm_s_default_free_gpu_memory_fraction_is_0_9_and_a_flag_wins():
    """trtllm-serve's --kv_cache_free_gpu_memory_fraction default 0.9: on a B200, 0.9 x (175.34 - 79.291 GiB) =
    86.444 GiB, 2,641,696 fp8 latents; --mem-fraction 0.8 gives the 0.8 pool above."""
    values, resolved = _settings("trtllm", 167.6, gpu="b200-sxm")
    assert values["mem_fraction"] == 0.9 and "serve.py" in resolved["mem_fraction"].source
    pool = _pool("trtllm", 167.6, R1_WEIGHTS, gpu="b200-sxm")
    assert pool == pytest.approx(0.9 * (175.34 * GIB - R1_WEIGHTS))
    assert int(pool // R1_KV_FP8) == 2_641_696
    assert _pool("trtllm", 167.6, R1_WEIGHTS, gpu="b200-sxm", mem_fraction=0.8) == pytest.approx(
        0.8 * (175.34 * GIB - R1_WEIGHTS))


def test_vllm_keeps_all_hbm_after_the_weights():
    values, _ = _settings("vllm", 131.3)
    assert "mem_fraction" not in values


def test_hbm_gb_leaves_the_pool_unmodelled_the_published_start_up_figure_being_the_real_device_s():
    _, resolved = _settings("sglang", 131.3, mem_fraction=0.82)
    deployment = Deployment(gpu="h200-sxm", hbm_bytes=131.3 * GIB, tp=8, layers=61, kv_capacity_tokens=794_880,
                            hbm_override=True)
    overridden = FRAMEWORKS.get("sglang")().settings(load_engine_preset("sglang"), deployment, {"mem_fraction": 0.82})
    assert resolved["startup_free_gib"].value == 138.09 and overridden["startup_free_gib"].value is None
    assert FRAMEWORKS.get("sglang")().kv_pool_bytes(overridden, R1_WEIGHTS) is None


def _b200():
    from simroute.calib import default_profile_path
    return load_profile(default_profile_path()).find_gpu_spec("b200-sxm")


def _moe_us(spec, tokens: int, tp: int = 8) -> float:
    """DeepSeek-R1's routed experts (FP8 block scales, skewed routing) at `tokens` and moe TP `tp` in `spec`'s
    tables, us."""
    from simroute.model.optables import OpKind
    curve = spec.operator_tables.get(OpKind.MOE).curve(
        "tokens", {"hidden": 7168, "inter": 2048, "topk": 8, "experts": 256, "moe_tp": tp, "moe_ep": 1},
        {"dtype": "fp8_block", "distribution": "power_law_1.01"})
    return curve.seconds(tokens) * 1e6


def test_moe_backend_trtllm_reads_the_trtllm_gen_rows_on_b200_and_only_there():
    """--moe-backend TRTLLM (TensorRT-LLM's TRT-LLM-gen fused MoE): the routed experts read the preset's
    trtllm_gen_moe_tables (calib/ops/b200-sxm/sglang-0.5.14: flashinfer's trtllm_fp8_block_scale_moe), every other
    kernel the preset's own tables; unset, the preset's own MoE rows (DeepGEMM on B200). Refused where no table
    times that kernel (H200), for another framework, and without a preset."""
    from simroute.calib.optables import load_operator_tables_cached
    from simroute.calib.profile import shipped_dir
    from simroute.model.optables import OpKind
    ops = shipped_dir() / "ops" / "b200-sxm"
    own = load_operator_tables_cached(str((ops / "trtllm-1.3.0rc20").resolve()))
    gen = load_operator_tables_cached(str((ops / "sglang-0.5.14").resolve()))
    plain, plain_spec = resolve_engine(_cfg(engine="trtllm"), _b200(), layers=61, kv_capacity_tokens=2_000_000)
    assert plain.settings["moe_backend"].value is None and plain.tables == "b200-sxm trtllm 1.3.0rc20"
    assert plain_spec.operator_tables.get(OpKind.MOE) is own.get(OpKind.MOE)
    engine, spec = resolve_engine(_cfg(engine="trtllm", moe_backend="TRTLLM"), _b200(), layers=61,
                                  kv_capacity_tokens=2_000_000)
    assert engine.settings["moe_backend"].source == "flag (--moe-backend)"
    assert engine.tables == "b200-sxm trtllm 1.3.0rc20; moe: b200-sxm sglang 0.5.14"
    tables = spec.operator_tables
    assert tables.get(OpKind.MOE) is gen.get(OpKind.MOE)
    assert all(tables.get(kind) is own.get(kind) for kind in own.tables if kind is not OpKind.MOE)
    # at a decode batch of 4 the TRT-LLM-gen kernel is ~2.7x faster than DeepGEMM at TP 8 (aiconfigurator's rows)
    assert _moe_us(spec, 4) == pytest.approx(49.7, abs=0.1) and _moe_us(plain_spec, 4) == pytest.approx(133.5, abs=0.1)
    with pytest.raises(ConfigurationError, match="moe_backend.*Blackwell only.*h200-sxm"):
        resolve_engine(_cfg(engine="trtllm", moe_backend="TRTLLM"), _h200(), layers=61, kv_capacity_tokens=794_880)
    with pytest.raises(ConfigurationError, match="moe_backend.*only of: trtllm"):
        resolve_engine(_cfg(moe_backend="TRTLLM"), _b200(), layers=61, kv_capacity_tokens=2_000_000)
    with pytest.raises(ConfigurationError, match="moe_backend"):
        _cfg(engine="none", moe_backend="TRTLLM")
    with pytest.raises(UnknownNameError, match="moe_backend 'CUTLASS'"):     # the preset's own rows: unset
        _cfg(engine="trtllm", moe_backend="CUTLASS")


def test_two_collections_of_the_trtllm_gen_moe_kernel_agree():
    """The trtllm preset's trtllm_gen_moe_tables cites two independent timings of flashinfer's TRT-LLM-gen FP8
    block-scale MoE on B200 (aiconfigurator's SGLang 0.5.14 and vLLM 0.24.0 collectors): at TP 8 they agree within
    10% from 1 to 8192 tokens, while the preset's own DeepGEMM rows are 1.9-2.8x slower at decode batches (up to
    64 tokens) and no faster beyond."""
    from simroute.calib.optables import load_operator_tables_cached
    from simroute.calib.profile import shipped_dir
    ops = shipped_dir() / "ops" / "b200-sxm"
    spec = _b200()
    sets = {name: dataclasses.replace(spec, operator_tables=load_operator_tables_cached(str((ops / name).resolve())))
            for name in ("sglang-0.5.14", "vllm-0.24.0", "trtllm-1.3.0rc20")}
    for tokens in (1, 4, 16, 64, 256, 1024, 8192):
        sgl, vllm, deepgemm = (_moe_us(sets[name], tokens) for name in sets)
        assert abs(sgl / vllm - 1) < 0.10, tokens
        assert (1.9 < deepgemm / sgl < 2.8) if tokens <= 64 else deepgemm >= sgl, tokens


def _gemm_us(spec, m: int, n: int, k: int, dtype: str = "fp8_block") -> float:
    from simroute.model.optables import OpKind
    return spec.operator_tables.get(OpKind.GEMM).curve("m", {"n": n, "k": k}, {"dtype": dtype}).seconds(m) * 1e6


def test_fp8_gemm_backend_flashinfer_trtllm_bounds_the_fp8_block_gemms_on_b200_and_only_there():
    """--fp8-gemm-backend flashinfer_trtllm (InferenceX's B200 SGLang launches): each fp8_block GEMM row runs no
    faster than the preset's flashinfer_trtllm_fp8_gemm_tflops (532.7 TFLOP/s, sglang PR #13528's B200 rows); a
    prefill-sized GEMM is slowed to that rate, a decode-sized one keeps its DeepGEMM row, the bf16 rows and every
    other table are the preset's. Unset, the preset's own rows. Refused on a GPU without a published timing,
    for another framework, without a preset, and for a backend whose rows the preset already times."""
    from simroute.model.optables import OpKind
    plain, plain_spec = resolve_engine(_cfg(), _b200(), layers=61, kv_capacity_tokens=2_000_000)
    assert plain.settings["fp8_gemm_backend"].value is None and plain.tables == "b200-sxm sglang 0.5.14"
    engine, spec = resolve_engine(_cfg(fp8_gemm_backend="flashinfer_trtllm"), _b200(), layers=61,
                                  kv_capacity_tokens=2_000_000)
    assert engine.settings["fp8_gemm_backend"].source == "flag (--fp8-gemm-backend)"
    assert engine.tables == "b200-sxm sglang 0.5.14; fp8_block GEMMs <= 532.7 TFLOP/s"
    own, tables = plain_spec.operator_tables, spec.operator_tables
    assert all(tables.get(kind) is own.get(kind) for kind in own.tables if kind is not OpKind.GEMM)
    # o_proj at TP 8 (n 7168, k 2048) over an ~8k prefill: DeepGEMM's row 93.6 us; 2 x 8192 x 7168 x 2048 FLOPs at
    # 532.7 TFLOP/s = 451.4 us
    assert _gemm_us(plain_spec, 8192, 7168, 2048) == pytest.approx(93.6, abs=0.1)
    assert _gemm_us(spec, 8192, 7168, 2048) == pytest.approx(2 * 8192 * 7168 * 2048 / 532.7e12 * 1e6, rel=1e-6)
    for m in (1, 8, 64):                                        # decode batches: the DeepGEMM rows, unchanged
        assert _gemm_us(spec, m, 7168, 2048) == _gemm_us(plain_spec, m, 7168, 2048)
    assert _gemm_us(spec, 8192, 7168, 2048, "bf16") == _gemm_us(plain_spec, 8192, 7168, 2048, "bf16")
    with pytest.raises(ConfigurationError, match="fp8_gemm_backend.*no published timing on h200-sxm"):
        resolve_engine(_cfg(fp8_gemm_backend="flashinfer_trtllm"), _h200(), layers=61, kv_capacity_tokens=794_880)
    with pytest.raises(ConfigurationError, match="fp8_gemm_backend.*only of: sglang"):
        resolve_engine(_cfg(engine="trtllm", fp8_gemm_backend="flashinfer_trtllm"), _b200(), layers=61,
                       kv_capacity_tokens=2_000_000)
    with pytest.raises(ConfigurationError, match="fp8_gemm_backend"):
        _cfg(engine="none", fp8_gemm_backend="flashinfer_trtllm")
    with pytest.raises(UnknownNameError, match="fp8_gemm_backend 'deep_gemm'"):    # the preset's own rows: unset
        _cfg(fp8_gemm_backend="deep_gemm")
