"""`simroute validate --serving` (simroute.scenarios.serving): the row table, the verdict band, fitted rows kept out
of the judged summary, --strict, bad flags, and two rows replayed end to end."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from simroute.calib.serving import load_serving_table
from simroute.scenarios import serving as sv

TRT_C8 = "ix-2025-12-15-h200-trtllm-1k1k-tp8ep8-c8"
SGL_C4 = "ix-2026-05-17-h200-sglang-1k1k-tp8ep1-c4"
NO_ACCEPTANCE = "the source records no MTP acceptance length, and none is assumed"


def row(row_id: str):
    return next(r for r in load_serving_table() if r.id == row_id)


@pytest.mark.parametrize("ratio, expected", [(0.67, "pass"), (1.5, "pass"), (1.0, "pass"), (0.6699, "fail"),
                                             (1.5001, "fail"), (math.nan, "fail"), (math.inf, "fail")])
def test_verdict_is_the_band_both_ends_included(ratio, expected):
    assert sv.verdict(ratio) == expected


def test_default_rows_are_replayable_baseline_closed_loops_over_two_frameworks():
    run, skipped = sv.cases()
    assert len(run) >= 20 and {r.framework for r in run} >= {"sglang", "trtllm"}
    for r in run:
        assert (r.deployment, r.dataset, r.closed_loop, r.tp, r.nodes) == ("baseline", "random", True, 8, 1)
        assert sv.gpu_has_entry(r.gpu)
    assert len(run) + len(skipped) == len(load_serving_table())
    reasons = dict((r.id, why) for r, why in skipped)
    assert reasons["gs-h200-vllm-random4k-burst500"].startswith("open loop")
    assert all(reasons[r.id] == f"{r.deployment}: not the baseline engine" for r in load_serving_table()
               if r.deployment == "dp-attention")
    assert all(reasons[r.id] == f"{r.deployment}: {NO_ACCEPTANCE}" for r in load_serving_table()
               if r.speculative == "mtp")
    assert all(why.startswith("ShareGPT") for r, why in skipped if r.dataset == "sharegpt"
               and r.deployment == "baseline" and r.nodes == 1)
    b200 = [r for r in load_serving_table() if r.gpu == "b200-sxm" and r.deployment == "baseline"]
    if not sv.gpu_has_entry("b200-sxm"):
        assert all(reasons[r.id] == "no GPU entry b200-sxm (issue 35 item 6)" for r in b200)


def test_only_takes_an_open_loop_by_id_and_refuses_what_cannot_run():
    run, _ = sv.cases(only=["gs-h200-vllm-random4k-burst500"])
    assert [r.id for r in run] == ["gs-h200-vllm-random4k-burst500"]
    from simroute.errors import ConfigurationError
    with pytest.raises(ConfigurationError, match="not replayed: ShareGPT"):
        sv.cases(only=[next(r.id for r in load_serving_table() if r.dataset == "sharegpt")])


def test_a_row_replays_its_workload_preset_and_launch_flags():
    r = row(TRT_C8)         # InferenceX TensorRT-LLM 1.1.0rc2.post2: EP 8, max_num_tokens 1152, CUDA graphs to 128, FP8 KV
    assert sv.engine_values(r) == {"engine": "trtllm", "gpu": "h200-sxm", "tp": 8, "ep": 8, "model": "deepseek-r1",
                                   "kv_cache": "fp8", "token_budget": 1152, "cuda_graph_max_batch": 128,
                                   "mem_fraction": 0.75}     # free_gpu_memory_fraction: the KV pool as it sizes it
    assert sv.trace_params(r) == {"input_tokens": 1024, "output_tokens": 1024, "requests": 80, "range_ratio": 0.8,
                                  "concurrency": 8}
    s = row(SGL_C4)         # SGLang, EP 1: --chunked-prefill-size = --max-prefill-tokens 32768, 512 running, graphs to 512
    assert sv.engine_values(s) == {"engine": "sglang", "gpu": "h200-sxm", "tp": 8, "model": "deepseek-r1",
                                   "prefill_chunk": 32768, "token_budget": 32768, "max_running_seqs": 512,
                                   "cuda_graph_max_batch": 512, "mem_fraction": 0.82}     # --mem-fraction-static
    assert sv.workload(r) == "1k/1k c8"
    b200 = row("ix-2025-12-31-b200-sglang-1k1k-tp8ep1-c16")    # InferenceX B200 SGLang: --scheduler-recv-interval 30
    assert sv.engine_values(b200)["scheduler_recv_interval"] == 30
    assert sv.engine_values(row("ix-2025-12-31-b200-sglang-1k1k-tp8ep1-c4"))["scheduler_recv_interval"] == 10
    assert sv.engine_values(b200)["prefill_graph_max_tokens"] == 0      # SGLang 0.5.6: every prefill eager
    assert "prefill_graph_max_tokens" not in sv.engine_values(s)        # 0.5.12: the preset's prefill graphs
    # ... but not with the flashinfer_trtllm MoE runner InferenceX's B200 launches name (0.5.12 disables them)
    assert sv.engine_values(row("ix-2026-05-22-b200-sglang-1k1k-tp8ep1-c1"))["prefill_graph_max_tokens"] == 0
    # TensorRT-LLM's batch waiting where the launch sets it (InferenceX's B200 scripts: 1k/1k at 64+ clients)
    waits = sv.engine_values(row("ix-2026-01-29-b200-trtllm-1k1k-tp8ep1-c128"))
    assert (waits["batch_wait_timeout_iters"], waits["batch_wait_max_tokens_ratio"]) == (40, 0.8)
    assert "batch_wait_timeout_iters" not in sv.engine_values(row("ix-2026-01-29-b200-trtllm-1k1k-tp8ep1-c4"))
    # TensorRT-LLM's MoE backend: TRTLLM (the TRT-LLM-gen kernel) is passed on; DEEPGEMM on B200 and CUTLASS on
    # H200 are the kernels the preset's own MoE rows time, so nothing is passed
    assert sv.engine_values(row("ix-2026-05-18-b200-trtllm-1k1k-tp8ep1-c4"))["moe_backend"] == "TRTLLM"
    assert "moe_backend" not in sv.engine_values(row("ix-2025-12-15-b200-trtllm-1k1k-tp8ep8-c4"))
    assert "moe_backend" not in sv.engine_values(r) and r.moe_backend == "CUTLASS"
    # SGLang's FP8 GEMM backend: InferenceX's B200 launches run FlashInfer's TRT-LLM-gen GEMM, passed on; the
    # cookbook's default launch (DeepGEMM, the preset's own rows) and every H200 row pass nothing
    assert b200.fp8_gemm_backend == "flashinfer_trtllm"
    assert sv.engine_values(b200)["fp8_gemm_backend"] == "flashinfer_trtllm"
    assert "fp8_gemm_backend" not in sv.engine_values(s) and s.fp8_gemm_backend is None
    assert "fp8_gemm_backend" not in sv.engine_values(row("sgc-2025-12-14-b200-sglang-8k1k-tp8ep1-c1"))


def test_fitted_constants_name_the_table_rows_among_their_points():
    shipped = {(c.file, c.name): c for c in sv.fitted_constants()}
    vllm = {name for file, name in shipped if file == "calib/engines/vllm-0.24.0.yaml"}
    assert vllm == {"host_us_per_sequence", "prefill_dispatch_us_per_layer"}
    # one value is fitted to rows of the table: SGLang's eager launch of a DeepSeek layer, to one run's six
    # ~1k-prompt TTFTs (bench/fit_sglang_eager_prefill.py), which TensorRT-LLM's preset takes over; those rows are
    # labelled, every other row (every TensorRT-LLM row among them) judges it
    fit = tuple(f"ix-2025-12-15-h200-sglang-{w}-tp8ep1-c{c}" for w in ("1k1k", "1k8k") for c in (4, 16, 64))
    fitted_rows = {key: c.rows for key, c in shipped.items() if c.rows}
    assert fitted_rows == {("calib/engines/sglang-0.5.14.yaml", "eager_launch_us_per_layer_mla_moe"): fit,
                           ("calib/engines/trtllm-1.3.0rc20.yaml", "eager_launch_us_per_layer_mla_moe"): fit}
    # a row whose id a fitted constant's points name is found (the vLLM issue its host cost was fitted to)
    fake = dataclasses.replace(row(TRT_C8), id="vllm-project/vllm issue #10634")
    found = {c.name: c.rows for c in sv.fitted_constants([fake])}
    assert found["host_us_per_sequence"] == ("vllm-project/vllm issue #10634",)
    assert found["prefill_dispatch_us_per_layer"] == ()


def fake_sim(values):
    return lambda r, directory, seed=0: dict(values)


def test_points_of_fitted_rows_are_labelled_and_left_out_of_the_summary(monkeypatch):
    r = row(TRT_C8)         # measured: median TTFT 105.536 ms, mean TPOT 16.348 ms, 58.882 tok/s per GPU
    monkeypatch.setattr(sv, "simulate_row", fake_sim({"ttft_median_ms": 52.768, "tpot_mean_ms": 16.348,
                                                      "output_throughput_per_gpu_tok_s": 88.323}))
    points = sv.scorecard([r])
    assert [(p.metric, round(p.ratio, 4), p.verdict) for p in points] == [
        ("ttft", 0.5, "fail"), ("tpot", 1.0, "pass"), ("tok/s/GPU", 1.5, "pass")]
    s = sv.summary(points)
    assert (s["judged"], s["passed"], s["failed"], s["rows"]) == (3, 2, 1, 1)
    assert s["metrics"]["ttft"]["all"] == {"n": 1, "median_abs_err": 0.5, "min_ratio": 0.5, "max_ratio": 0.5,
                                           "outside_band": 1}
    assert "holdout" not in s["metrics"]["ttft"]           # a holdout=false row
    fitted = [sv.FittedConstant("calib/engines/x.yaml", "c", "ref", (TRT_C8,), (TRT_C8,))]
    labelled = sv.scorecard([r], fitted=fitted)
    assert all(p.fitted_to == "calib/engines/x.yaml:c" and not p.judged for p in labelled)
    s = sv.summary(labelled)
    assert (s["points"], s["judged"], s["fitted"], s["failed"], s["metrics"]) == (3, 0, 3, 0, {})


def test_strict_exits_1_on_a_failing_point_and_0_without(cli, monkeypatch):
    monkeypatch.setattr(sv, "simulate_row", fake_sim({"ttft_median_ms": 52.768, "tpot_mean_ms": 16.348,
                                                      "output_throughput_per_gpu_tok_s": 58.882}))
    code, out, _ = cli("validate", "--serving", "--strict", "-j", "1", "-q", "--only", TRT_C8)
    assert code == 1 and "FAIL" in out and "2 of 3 judged points pass (1 fail)" in out
    assert cli("validate", "--serving", "-j", "1", "-q", "--only", TRT_C8)[0] == 0
    monkeypatch.setattr(sv, "simulate_row", fake_sim({"ttft_median_ms": 105.536, "tpot_mean_ms": 16.348,
                                                      "output_throughput_per_gpu_tok_s": 58.882}))
    assert cli("validate", "--serving", "--strict", "-j", "1", "-q", "--only", TRT_C8)[0] == 0


@pytest.mark.parametrize("args, flag", [(("--only", "no-such-row"), "--only"), (("--only", " , "), "--only"),
                                        (("--full",), "--full"), (("--ark",), "--ark"), (("-j", "0"), "--jobs")])
def test_bad_flags_are_one_line_exit_2_before_any_replay(cli, monkeypatch, args, flag):
    monkeypatch.setattr(sv, "simulate_row", lambda *a, **k: pytest.fail("replayed before the flags were checked"))
    code, out, err = cli("validate", "--serving", *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and flag in err


def test_two_rows_end_to_end(cli):
    """Two closed loops replayed for real (TensorRT-LLM 8 clients, SGLang 4 clients, ~1 CPU s each)."""
    code, out, _ = cli("validate", "--serving", "--json", "-q", "-j", "1", "--only", f"{TRT_C8},{SGL_C4}")
    assert code == 0
    doc = json.loads(out)
    points = doc["points"]
    assert [(p["id"], p["metric"]) for p in points] == [(SGL_C4, m) for m in ("ttft", "tpot", "tok/s/GPU")] + [
        (TRT_C8, m) for m in ("ttft", "tpot", "tok/s/GPU")]        # the table's order
    for p in points:
        r = row(p["id"])
        column = dict((m, c) for m, c, _, _ in sv.SCORED)[p["metric"]]
        assert p["measured"] == r.metric(column)           # the table's figure, not a simulated one
        assert p["ratio"] == pytest.approx(p["simulated"] / p["measured"])
        assert p["verdict"] == sv.verdict(p["ratio"]) and p["judged"] and p["fitted_to"] == ""
    for row_id in (TRT_C8, SGL_C4):
        by = {p["metric"]: p["simulated"] for p in points if p["id"] == row_id}
        r = row(row_id)
        # N clients, each at most one token per TPOT: output tok/s per GPU <= N / (GPUs x TPOT), a few % of slack
        # for TPOT's spread across requests (a mean of 1/TPOT exceeds 1 / mean TPOT)
        assert 0 < by["tok/s/GPU"] <= 1.05 * r.concurrency / (r.gpus * by["tpot"] * 1e-3)
        assert 0 < by["ttft"] < 1000 * r.osl * by["tpot"]
    s = doc["summary"]
    assert (s["rows"], s["judged"], s["frameworks"], s["gpus"]) == (2, 6, ["sglang", "trtllm"], ["h200-sxm"])
    assert doc["band"] == [0.67, 1.5] and doc["fitted_constants"]


DPA = "ix-2025-11-02-h200-trtllm-8k1k-tp8ep8-dpa-c64"       # TensorRT-LLM 8k/1k, 64 clients, DP attention over TP 8


def test_dp_attention_adds_the_dp_rows_without_mtp_and_nothing_else():
    run, skipped = sv.cases()
    with_dp, skipped_dp = sv.cases(dp_attention=True)
    added = [r for r in with_dp if r not in run]
    assert [r for r in with_dp if r in run] == run                  # the default set, in its order, unchanged
    assert not any(r.dp_attention for r in run)
    assert DPA in {r.id for r in added} and len(added) >= 4
    for r in added:
        assert (r.deployment, r.speculative, r.dataset, r.closed_loop, r.tp, r.nodes) == (
            "dp-attention", "none", "random", True, 8, 1)
        assert sv.engine_values(r)["dp_attention"] == r.tp and sv.gpu_has_entry(r.gpu)
    assert len(with_dp) + len(skipped_dp) == len(load_serving_table())
    reasons = dict((r.id, why) for r, why in skipped_dp)
    mtp_dp = [r for r in load_serving_table() if r.deployment == "mtp+dp-attention"]
    assert mtp_dp and all(reasons[r.id] == f"mtp+dp-attention: {NO_ACCEPTANCE}" for r in mtp_dp)
    # a DP-attention row the flag admits still meets every other rule (ShareGPT prompts, open loops)
    assert all(not why.endswith("not the baseline engine") for r, why in skipped_dp if r.deployment == "dp-attention")
    assert "dp_attention" not in sv.engine_values(row(TRT_C8))


def test_dp_attention_rows_are_scored_apart_only_with_the_flag(cli, monkeypatch):
    monkeypatch.setattr(sv, "simulate_row", fake_sim({"ttft_median_ms": 52.768, "tpot_mean_ms": 16.348,
                                                      "output_throughput_per_gpu_tok_s": 58.882}))
    code, out, err = cli("validate", "--serving", "--json", "-j", "1", "--only", f"{TRT_C8},{DPA}")
    assert code == 2 and out == "" and "not the baseline engine" in err      # without the flag: not replayed
    code, out, _ = cli("validate", "--serving", "--json", "-q", "-j", "1", "--only", TRT_C8)
    assert code == 0 and "dp_attention" not in json.loads(out)
    code, out, err = cli("validate", "--serving", "--dp-attention", "--json", "-j", "1", "--only", f"{TRT_C8},{DPA}")
    assert code == 0 and f"] {DPA} (" in err and f"] {TRT_C8} (" in err      # progress lines for both sets
    doc = json.loads(out)
    assert {p["id"] for p in doc["points"]} == {TRT_C8}
    dp = doc["dp_attention"]
    assert {p["id"] for p in dp["points"]} == {DPA} and all(p["judged"] for p in dp["points"])
    measured = row(DPA).metrics
    assert [(p["metric"], p["verdict"]) for p in dp["points"]] == [
        (m, sv.verdict(fake / measured[c])) for (m, c, _, _), fake in zip(sv.SCORED, (52.768, 16.348, 58.882))
        if measured.get(c) is not None]
    assert (doc["summary"]["rows"], dp["summary"]["rows"]) == (1, 1)
    assert dp["summary"]["judged"] == len(dp["points"]) and DPA not in {s["id"] for s in doc["skipped"]}
    code, out, _ = cli("validate", "--serving", "--dp-attention", "-q", "-j", "1", "--only", DPA)
    assert code == 0 and "DP-attention rows (--dp-attention)" in out
    assert cli("validate", "--serving", "--dp-attention", "--strict", "-q", "-j", "1", "--only", DPA)[0] == 1


def test_dp_attention_without_serving_is_refused_and_in_the_help(cli):
    code, out, err = cli("validate", "--dp-attention", "--only", "table1")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--dp-attention" in err
    code, out, _ = cli("validate", "--help")
    assert code == 0 and "--dp-attention" in out


COOKBOOK_C1 = "sgc-2025-12-14-b200-sglang-1k1k-tp8ep1-c1"   # SGLang's cookbook: 0.5.6.post1, `--tp 8` alone, 8 x B200
# What sglang 0.5.6.post1 runs with DeepSeek-R1-0528 on 8 x B200 when told only `--tp 8`, read in its PyPI wheel
# (sglang-0.5.6.post1-py3-none-any.whl, python/sglang/srt/...). The cookbook rows set none of these, so the replay
# takes them from the shipped 0.5.14 preset's rules: each must come out as the row's own version ran it.
SGLANG_0_5_6_POST1_B200_DEFAULTS = {
    # server_args.py _handle_gpu_memory_settings lines 803-809: at 160 GiB and above ("B200, MI300")
    # chunked_prefill_size 16384 and cuda_graph_max_bs 512
    "prefill_chunk": 16384,
    "cuda_graph_max_batch": 512,
    "token_budget": 16384,              # server_args.py line 275: max_prefill_tokens = 16384
    "overlap_scheduling": True,         # line 505: disable_overlap_schedule = False, no DeepSeek-on-SM100 rule sets it
    "scheduler_recv_interval": 1,       # line 538: scheduler_recv_interval = 1
    "prefill_graph_max_tokens": 0,      # line 513: enable_piecewise_cuda_graph = False (every prefill eager)
}


def test_cookbook_rows_replay_sglang_0_5_6_post1_s_b200_defaults(tmp_path):
    """The cookbook's B200 rows state no server setting (`--tp 8` alone): the replay must run what sglang
    0.5.6.post1 picks by default there, settings and KV-cache dtype: `--kv-cache-dtype auto` keeps the model's
    bf16 (model_executor/model_runner.py init_memory_pool lines 1624-1635: FP8 only when the quant config's
    kv_cache_quant_algo is "FP8"; the checkpoint's Fp8Config, layers/quantization/fp8.py, has none), which the
    TRT-LLM MLA backend it defaults to on SM100 accepts (server_args.py lines 1040-1048, 1415-1431)."""
    from simroute.calib import default_profile_path
    from simroute.network import default_topology_path
    from simroute.sim import RunConfig, simulate
    from simroute.workload import generate

    cookbook = [r for r in load_serving_table() if r.source == "sglang-cookbook-dsr1-b200"]
    assert len(cookbook) == 9
    for r in cookbook:      # nothing the launch did not set, so every row resolves as the one replayed below
        assert (r.kv_cache_dtype, r.chunked_prefill_tokens, r.max_running_requests, r.cuda_graph_max_bs,
                r.scheduler_recv_interval, r.mem_fraction, r.server_flags) == (
            "unstated", None, None, None, None, None, "--model-path deepseek-ai/DeepSeek-R1-0528; --tp 8"), r.id
        assert sv.engine_values(r) == sv.engine_values(cookbook[0])
    r = row(COOKBOOK_C1)
    trace = generate("serving", tmp_path / "t.parquet", seed=0, params=sv.trace_params(r))
    cfg = RunConfig(topology=str(default_topology_path()), trace=str(trace), calib=str(default_profile_path()),
                    hosts=1, seed=0, **sv.engine_values(r))
    engine = simulate(cfg).summary["engine"]
    settings = {key: engine["preset"]["settings"][key]["value"] for key in SGLANG_0_5_6_POST1_B200_DEFAULTS}
    assert settings == SGLANG_0_5_6_POST1_B200_DEFAULTS
    assert engine["kv_cache"] == "bf16"
    assert engine["preset"]["tables"] == "b200-sxm sglang 0.5.14"


MTP_H200_SGL = "ix-2026-05-20-h200-sglang-1k1k-tp8ep1-mtp-c16"     # EAGLE, 2 draft tokens per step, 16 clients


def test_mtp_rows_are_skipped_for_want_of_their_acceptance_with_either_flag():
    """No source of the table records the acceptance length of an MTP run (docs/VALIDATION.md, "The MTP rows"),
    and simroute replays MTP only with one (--accept-length or --accept-rate): every MTP row, with DP attention
    or not, is skipped naming that, with --dp-attention too, and --only names the reason."""
    from simroute.errors import ConfigurationError
    table = load_serving_table()
    mtp = [r for r in table if r.speculative == "mtp"]
    assert len(mtp) == 43 and all(r.mtp_accept_length is None for r in mtp)
    for dp in (False, True):
        run, skipped = sv.cases(dp_attention=dp)
        assert not any(r.speculative == "mtp" for r in run)
        reasons = dict((r.id, why) for r, why in skipped)
        assert all(reasons[r.id] == f"{r.deployment}: {NO_ACCEPTANCE}" for r in mtp)
    with pytest.raises(ConfigurationError, match=f"not replayed: mtp: {NO_ACCEPTANCE}"):
        sv.cases(only=[MTP_H200_SGL])


def test_an_mtp_row_with_an_acceptance_length_is_still_not_the_baseline_engine():
    """The reason is the missing acceptance, not a blanket refusal: a row that carried one (none does today) would
    meet the next rule, the baseline engine's (no MTP replay is in the scorecard yet)."""
    given = dataclasses.replace(row(MTP_H200_SGL), mtp_accept_length=2.0)
    assert sv.skip_reason(given) == "mtp: not the baseline engine"
    assert sv.skip_reason(given, dp_attention=True) == "mtp: not the baseline engine"
    assert sv.skip_reason(row(MTP_H200_SGL)) == f"mtp: {NO_ACCEPTANCE}"


def _trtllm_adp_pick(active: list[int], tokens: list[int]) -> int:
    """One new request under TensorRT-LLM's ADP router (`_schedule_attention_dp_requests` and
    `balance_requests_across_ranks`, transcribed for a single request without a target rank): the ranks below
    max(ceil((active + 1) / DP), the fullest rank), the one with the fewest active tokens first."""
    dp = len(active)
    expected = max((sum(active) + 1 + dp - 1) // dp, max(active))
    open_ranks = [(tokens[r], active[r], r) for r in range(dp) if active[r] < expected]
    return min(open_ranks)[2]


def test_trtllm_dp_rows_spread_requests_as_its_adp_router_does():
    """The TensorRT-LLM DP-attention rows replay with the least-loaded router: in a closed loop (one request in
    as one ends) TensorRT-LLM's ADP router always picks a rank with the fewest active requests, so no rank passes
    the even share (the 256-client launch's CUDA-graph batch is CONC / 8: every rank graphed)."""
    import random
    rng = random.Random(1)
    dp, clients = 8, 256
    active, tokens = [0] * dp, [0] * dp
    for _ in range(clients):                    # the cold burst, one by one
        r = _trtllm_adp_pick(active, tokens)
        active[r] += 1
        tokens[r] += rng.randint(819, 1024)
    assert active == [clients // dp] * dp
    for _ in range(2000):                       # one ends, the client's next arrives
        done = rng.randrange(dp)
        if active[done] == 0:
            continue
        active[done] -= 1
        r = _trtllm_adp_pick(active, tokens)
        assert active[r] == min(active)         # the least-loaded router's set of choices
        active[r] += 1
        assert max(active) <= clients // dp
    trt = [r for r in load_serving_table() if r.dp_attention and r.framework == "trtllm"]
    assert trt and all(sv.engine_values(r)["router"] == "least-loaded" for r in trt)
    assert "router" not in sv.engine_values(row(TRT_C8))       # a row without DP attention keeps the run's default


def _context_step_ms(row_id: str, prompt: int) -> tuple[float, float, dict[str, float]]:
    """(step, kernels, kernel terms) in ms of one context step of `prompt` tokens, nothing else batched, under the
    step model a replay of the row builds (its preset, launch flags, TP 8 + EP 8 group)."""
    from simroute.calib import default_profile_path
    from simroute.model.steptime import BatchShape
    from simroute.network import default_topology_path, load_topology
    from simroute.sim import RunConfig
    from simroute.sim.calibration import resolve_calibration
    cfg = RunConfig(topology=str(default_topology_path()), trace="unused.parquet", calib=str(default_profile_path()),
                    hosts=1, seed=0, **sv.engine_values(row(row_id)))
    calibration = resolve_calibration(cfg, load_topology(cfg.topology, hosts=cfg.hosts).spec)
    result = calibration.group.iteration(BatchShape.uniform(0, 0, prefill_tokens=prompt))
    terms = result.as_ms()["terms_ms"]
    return result.iteration_s * 1e3, result.iteration_s * 1e3 - terms["overhead"], terms


def test_trtllm_h200_context_step_is_the_launch_floor_at_1k_and_the_kernels_at_8k():
    """The decomposition docs/VALIDATION.md ("TensorRT-LLM on H200: the ~1k and ~8k TTFT") rests on: at the
    InferenceX TensorRT-LLM H200 launch (TP 8, EP 8, FP8 KV) the median ~1k prompt (922 tokens) runs in the eager
    launch floor, 61 layers x 1770 us (+ 21.5 us of host work for its one sequence), its kernels (~58 ms) hidden
    under it, so no kernel term moves its TTFT; the
    median ~8k prompt (7373 tokens) runs in its kernels (~279 ms, the routed experts the largest term), the floor
    hidden, so no per-layer host constant moves its TTFT."""
    floor = 61 * 1.770 + 0.0215
    step, kernels, _ = _context_step_ms("ix-2025-12-15-h200-trtllm-1k1k-tp8ep8-c8", 922)
    assert step == pytest.approx(floor, rel=1e-9) and 40.0 < kernels < floor
    step, kernels, terms = _context_step_ms("ix-2025-12-15-h200-trtllm-8k1k-tp8ep8-c8", 7373)
    assert step == pytest.approx(kernels, rel=1e-9) and kernels > 2 * floor
    assert max((name for name in terms if name != "overhead"), key=terms.get) == "experts"
