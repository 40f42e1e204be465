"""The measured serving-benchmark table (calib/serving/measured.csv): every row attributed, named as simroute names
things, consistent with itself (a closed loop's latency and throughput obey the identities every benchmark client
computes them by), and bad rows refused with one line naming the file, the line and the field."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest

from simroute.calib import shipped_dir
from simroute.calib.serving import (COLUMNS, FRAMEWORKS, GPUS, PENDING_GPUS, PER_GPU, SERVING_TABLE,
                                    load_serving_table)
from simroute.errors import ConfigurationError
from simroute.model.geometry import MODELS

ROWS = load_serving_table()
README = (SERVING_TABLE.parent / "README.md").read_text()
SCORECARD = ("tpot_mean_ms", "ttft_median_ms", "output_throughput_per_gpu_tok_s")


def _mean_output_tokens(row) -> float:
    """The mean output length the client drew: uniform integers in [r L, L] (or [max(1, r L), L]), or L."""
    if row.length_rule == "fixed":
        return float(row.osl)
    return (max(1.0, math.floor(row.range_ratio * row.osl)) + row.osl) / 2


def _identity_holds_to(row, rel: float) -> bool:
    """Whether a closed loop's identities can be checked to `rel`: at least 10 requests per client (with fewer the
    loop's ramp and drain weigh: the SGLang cookbook's 5-per-client runs print an achieved concurrency of 13.9 of
    16), and the rule's mean output known to within rel / 2 over the row's prompts (the standard error of the
    mean of n uniform draws, (high - low) / sqrt(12 n); 10 draws of [1, L] stray ~18%, of [0.8 L, L] ~2%)."""
    if row.num_prompts < 10 * row.concurrency:
        return False
    if row.length_rule == "fixed":
        return True
    low = max(1.0, math.floor(row.range_ratio * row.osl))
    return (row.osl - low) / math.sqrt(12 * row.num_prompts) <= rel / 2 * _mean_output_tokens(row)


def test_table_is_the_shipped_file_and_large_enough():
    assert SERVING_TABLE.resolve().parent == (shipped_dir() / "serving").resolve()
    assert len(ROWS) >= 40


def test_scorecard_has_its_points():
    """Issue 35: >= 20 baseline points over >= 2 frameworks and >= 2 GPUs with the three scored metrics, on both
    sides of the suggested split."""
    scored = [r for r in ROWS if r.deployment == "baseline" and all(m in r.metrics for m in SCORECARD)]
    simulable = [r for r in scored if r.gpu not in PENDING_GPUS]
    assert len(simulable) >= 20
    assert len({r.framework for r in simulable}) >= 2
    for holdout in (False, True):
        side = [r for r in scored if r.holdout is holdout]
        assert len({r.framework for r in side}) >= 2 and len({r.gpu for r in side}) >= 2, holdout


def test_every_row_is_attributed_and_every_source_documented():
    for row in ROWS:
        assert row.source_url.startswith("https://") and row.source_ref and row.author and row.date, row.id
        assert f"### `{row.source}`" in README, f"{row.source} has no section in calib/serving/README.md"


def test_names_are_simroute_names():
    gpu_entries = {p.stem for p in (shipped_dir() / "gpus").glob("*.yaml")}
    for row in ROWS:
        assert row.gpu in gpu_entries or row.gpu in PENDING_GPUS, row.id
        assert row.model in MODELS and row.framework in FRAMEWORKS, row.id
    assert set(GPUS) - set(PENDING_GPUS) <= gpu_entries


def test_unstated_kv_cache_says_the_default():
    for row in ROWS:
        assert row.kv_cache_dtype != "unstated" or row.kv_cache_default, row.id


def test_closed_loop_latency_identity():
    """Mean E2E = mean TTFT + mean TPOT x (mean output - 1) for ignore-eos random closed loops (the client's own
    definitions; exact but for requests of different lengths weighting TPOT differently): catches a unit slip
    or a transposed column."""
    checked = 0
    for row in ROWS:
        metrics = row.metrics
        if not (row.closed_loop and row.dataset == "random" and row.ignore_eos and "e2e_mean_s" in metrics
                and "ttft_mean_ms" in metrics and "tpot_mean_ms" in metrics and _identity_holds_to(row, 0.05)):
            continue
        e2e = (metrics["ttft_mean_ms"] + metrics["tpot_mean_ms"] * (_mean_output_tokens(row) - 1)) / 1e3
        assert e2e == pytest.approx(metrics["e2e_mean_s"], rel=0.05), row.id
        checked += 1
    assert checked >= 40


def test_closed_loop_throughput_obeys_littles_law():
    """N clients each finishing a request of mean output O every mean E2E seconds produce N O / E2E tokens/s:
    the per-GPU figure times the GPUs must match it (warm-up and drain tails keep it to ~5%)."""
    checked = 0
    for row in ROWS:
        metrics = row.metrics
        if not (row.closed_loop and row.dataset == "random" and row.ignore_eos and "e2e_mean_s" in metrics
                and "output_throughput_per_gpu_tok_s" in metrics and _identity_holds_to(row, 0.10)):
            continue
        little = row.concurrency * _mean_output_tokens(row) / metrics["e2e_mean_s"]
        assert metrics["output_throughput_per_gpu_tok_s"] * row.gpus == pytest.approx(little, rel=0.10), row.id
        checked += 1
    assert checked >= 40


def test_figures_not_printed_are_marked_derived():
    """A source printing totals gives per-GPU figures only by division: those are marked, and equal total / GPUs."""
    for row in ROWS:
        for per_gpu, total in PER_GPU.items():
            if per_gpu in row.metrics and total in row.metrics:
                assert per_gpu in row.derived, row.id
                assert row.metrics[per_gpu] == pytest.approx(row.metrics[total] / row.gpus, rel=1e-3), row.id


def test_labelled_deployments_are_kept_apart():
    """MTP and DP-attention rows are recorded for the next issue, labelled, never as baseline."""
    for row in ROWS:
        assert (row.deployment == "baseline") == (row.speculative == "none" and not row.dp_attention), row.id
    assert {r.deployment for r in ROWS} >= {"baseline", "mtp", "dp-attention"}


# ------------------------------------------------------------------------------------------------ bad input

def _good_row() -> dict[str, str]:
    with SERVING_TABLE.open(newline="") as handle:
        return next(csv.DictReader(handle))


def _write(tmp_path: Path, rows: list[dict[str, str]], header: tuple[str, ...] = COLUMNS) -> Path:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(header), lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    path = tmp_path / "table.csv"
    path.write_text(out.getvalue())
    return path


@pytest.mark.parametrize("column,value,problem", [
    ("gpu", "h100", "is not one of"),
    ("framework", "tensorrt", "is not one of"),
    ("model", "llama-9b", "is not a simroute model"),
    ("ttft_median_ms", "-3", "positive finite"),
    ("tpot_mean_ms", "nan", "positive finite"),
    ("date", "2026-13-01", "YYYY-MM-DD"),
    ("source_url", "http://example.com", "https"),
    ("source_url", "", "is empty"),
    ("author", "", "is empty"),
    ("request_rate_req_s", "4", "closed loop"),
    ("derived", "itl_p99_ms=x", "METRIC=FORMULA"),
    ("range_ratio", "1.5", "ratio in [0, 1]"),
    ("tp", "3", "does not divide"),
    ("deployment", "mtp", "disagrees with speculative"),
    ("e2e_mean_s", "0.001", "shorter than mean TTFT"),
    ("holdout", "yes", "is not one of"),
    ("client_seed", "1", "bench_serving only"),     # the first row is InferenceX's: its client's rule is another
    ("client_seed", "-1", "is not an integer >= 0"),
])
def test_bad_field_names_file_line_and_field(tmp_path, column, value, problem):
    row = _good_row()
    assert row[column] != value
    row[column] = value
    path = _write(tmp_path, [_good_row(), row])
    with pytest.raises(ConfigurationError) as err:
        load_serving_table(path)
    message = str(err.value)
    assert f"{path}:3" in message and f"field '{column}'" in message and problem in message, message


def test_unstated_kv_without_default_is_refused(tmp_path):
    row = _good_row() | {"kv_cache_dtype": "unstated", "kv_cache_default": ""}
    with pytest.raises(ConfigurationError, match="field 'kv_cache_default'.*default would be"):
        load_serving_table(_write(tmp_path, [row]))


def test_per_gpu_disagreeing_with_total_is_refused(tmp_path):
    row = next(r for r in ROWS if r.derived)
    raw = next(r for r in csv.DictReader(SERVING_TABLE.open(newline="")) if r["id"] == row.id)
    raw["output_throughput_per_gpu_tok_s"] = str(float(raw["output_throughput_tok_s"]))    # forgot to divide
    problem = "field 'output_throughput_per_gpu_tok_s': .* is not output_throughput_tok_s / gpus"
    with pytest.raises(ConfigurationError, match=problem):
        load_serving_table(_write(tmp_path, [raw]))


def test_repeated_id_missing_column_and_short_line_are_refused(tmp_path):
    with pytest.raises(ConfigurationError, match=r"table.csv:3, field 'id': '.*' repeats line 2"):
        load_serving_table(_write(tmp_path, [_good_row(), _good_row()]))
    with pytest.raises(ConfigurationError, match="field 'header': missing column.*notes"):
        load_serving_table(_write(tmp_path, [_good_row()], header=COLUMNS[:-1]))
    path = tmp_path / "short.csv"
    path.write_text(",".join(COLUMNS) + "\nonly,three,fields\n")
    with pytest.raises(ConfigurationError, match=r"short.csv:2: has not \d+ fields"):
        load_serving_table(path)
    with pytest.raises(ConfigurationError, match="no such file"):
        load_serving_table(tmp_path / "absent.csv")


def test_the_scheduler_poll_interval_is_the_script_s_rule_where_the_flags_name_it():
    """InferenceX's B200 SGLang scripts: SCHEDULER_RECV_INTERVAL 30 at TP 8 with 16 or more clients, else 10; no
    other row's launch names --scheduler-recv-interval (SGLang's default polls every iteration)."""
    for r in ROWS:
        if "--scheduler-recv-interval" in r.server_flags:
            assert r.framework == "sglang" and r.gpu == "b200-sxm"
            assert r.scheduler_recv_interval == (30 if r.tp == 8 and r.concurrency >= 16 else 10), r.id
        else:
            assert r.scheduler_recv_interval is None, r.id


def test_batch_waiting_is_recorded_where_the_trtllm_launch_sets_it():
    """InferenceX's B200 TensorRT-LLM scripts from 2026-01 set batch_wait_timeout_iters 40 and
    batch_wait_max_tokens_ratio 0.8 for 1k/1k at 64 or more clients (DELAY_BATCHING); the row records both and its
    server_flags say so; no other row carries either (0: off, the preset's)."""
    waiting = [r for r in ROWS if r.batch_wait_timeout_iters is not None or r.batch_wait_max_tokens_ratio is not None]
    assert [r.id for r in waiting] == ["ix-2026-01-29-b200-trtllm-1k1k-tp8ep1-c128"]
    for r in ROWS:
        names = "batch_wait_timeout_iters 40; batch_wait_max_tokens_ratio 0.8" in r.server_flags
        assert names == (r in waiting), r.id
        if names:
            assert (r.framework, r.isl, r.osl, r.batch_wait_timeout_iters, r.batch_wait_max_tokens_ratio) == \
                ("trtllm", 1024, 1024, 40, 0.8) and r.concurrency >= 64


def test_early_h200_trtllm_rows_follow_the_script_s_attention_dp_rule():
    """InferenceX's dsr1_fp8_h200_trt_slurm.sh at e06929c701a0 (the 2025-11-02 runs) chose attention DP itself,
    and the API of that time recorded none: DP_ATTENTION=true for 8k/1k above 32 clients and for 1k/1k and 1k/8k
    above 64, with attention_dp_config (enable_balance, timeout_iters 60). Each such row records the script's
    choice (8k/1k at 64 clients is a DP-attention run, like the 2025-12-15 one of the same setup), not the API's."""
    script = "InferenceX/blob/e06929c701a0/benchmarks/dsr1_fp8_h200_trt_slurm.sh"
    rows = [r for r in ROWS if script in r.source_ref]
    assert {(r.isl, r.osl) for r in rows} == {(1024, 1024), (1024, 8192), (8192, 1024)}
    for r in rows:
        dp = r.concurrency > (32 if (r.isl, r.osl) == (8192, 1024) else 64)
        assert r.dp_attention is dp and (r.deployment == "dp-attention") is dp, r.id
        assert (f"enable_attention_dp {'true' if dp else 'false'}" in r.server_flags), r.id
        assert ("enable_balance true timeout_iters 60" in r.server_flags) is dp, r.id
    assert [r.id for r in rows if r.dp_attention] == ["ix-2025-11-02-h200-trtllm-8k1k-tp8ep8-dpa-c64"]


def test_attention_dp_balancing_is_recorded_on_every_trtllm_dp_attention_row():
    """InferenceX's TensorRT-LLM scripts write attention_dp_config {batching_wait_iters 0, enable_balance true,
    timeout_iters 60} whenever DP attention is on (every dsr1_fp8_*_trt*.sh found); each such row carries it (the
    launches spelled out in server_flags name it), no other row any part of it."""
    for r in ROWS:
        adp = (r.adp_balance, r.adp_timeout_iters, r.adp_batching_wait_iters)
        if r.framework == "trtllm" and r.dp_attention:
            assert adp == (True, 60, 0), r.id
            if "enable_attention_dp true" in r.server_flags:
                assert "attention_dp_config batching_wait_iters 0 enable_balance true timeout_iters 60" \
                    in r.server_flags, r.id
        else:
            assert adp == (None, None, None), r.id
    assert sum(r.adp_balance is True for r in ROWS) == 12


@pytest.mark.parametrize("framework,dp,values,problem", [
    ("sglang", "true", ("true", "60", "0"), "TensorRT-LLM's with DP attention"),
    ("trtllm", "false", ("true", "60", "0"), "TensorRT-LLM's with DP attention"),
    ("trtllm", "true", ("true", "60", ""), "come together"),
    ("trtllm", "true", ("yes", "60", "0"), "not one of"),
    ("trtllm", "true", ("true", "-1", "0"), "not an integer"),
])
def test_a_bad_adp_field_is_refused(tmp_path, framework, dp, values, problem):
    bad = {**_good_row(), "framework": framework, "dp_attention": dp,
           "deployment": "dp-attention" if dp == "true" else "baseline",
           **dict(zip(("adp_balance", "adp_timeout_iters", "adp_batching_wait_iters"), values))}
    with pytest.raises(ConfigurationError, match=problem):
        load_serving_table(_write(tmp_path, [bad]))


@pytest.mark.parametrize("framework,iters,ratio,problem", [
    ("trtllm", "40", "1.5", "not a share of max_num_tokens"),
    ("trtllm", "40", "0", "positive finite"),
    ("sglang", "40", "0.8", "batch waiting is TensorRT-LLM's"),
    ("trtllm", "-1", "0.8", "not an integer"),
])
def test_a_bad_batch_wait_field_is_refused(tmp_path, framework, iters, ratio, problem):
    bad = {**_good_row(), "framework": framework, "batch_wait_timeout_iters": iters,
           "batch_wait_max_tokens_ratio": ratio}
    with pytest.raises(ConfigurationError, match=problem):
        load_serving_table(_write(tmp_path, [bad]))


def test_sglang_rows_before_0_5_12_record_no_prefill_graphs():
    """sglang <= 0.5.9 default enable_piecewise_cuda_graph = False (0.5.12 turns it on, but disables it for the
    flashinfer_trtllm MoE runner the B200 launches name): those rows carry 0, the other 0.5.12 rows nothing (the
    preset's), no other framework's rows anything."""
    trtllm_moe = [r.id for r in ROWS if "--moe-runner-backend flashinfer_trtllm" in r.server_flags]
    assert len(trtllm_moe) > 6 and all("b200" in i for i in trtllm_moe)
    for r in ROWS:
        digits = r.framework_version.split(".")[:3] if r.framework == "sglang" else []
        version = tuple(int(x) for x in digits) if all(x.isdigit() for x in digits) else ()
        if r.framework == "sglang" and (version < (0, 5, 12) or r.id in trtllm_moe):
            assert r.prefill_graph_max_tokens == 0, r.id
        else:
            assert r.prefill_graph_max_tokens is None, r.id


def test_sglang_cookbook_rows_obey_the_identities_with_the_client_s_own_draws():
    """The SGLang cookbook's runs have 1-10 requests per client, too few for the rule's mean (above), but
    sglang.bench_serving draws its lengths with numpy's global generator seeded by --seed (default 1): input
    randint(max(int(r L_in), 1), L_in + 1, n), then output randint(int(r L_out), L_out + 1, n). Those draws give
    the mean output each row's requests had; with it the latency identity holds, and output over request
    throughput is that mean (request throughput printed to 0.01 req/s)."""
    np = pytest.importorskip("numpy")
    rows = [r for r in ROWS if r.source == "sglang-cookbook-dsr1-b200"]
    assert len(rows) == 9 and all(r.client_seed == 1 for r in rows)     # bench_serving's default --seed
    for row in rows:
        np.random.seed(row.client_seed)
        np.random.randint(max(int(row.isl * row.range_ratio), 1), row.isl + 1, size=row.num_prompts)
        mean_out = float(np.random.randint(int(row.osl * row.range_ratio), row.osl + 1, size=row.num_prompts).mean())
        m = row.metrics
        e2e = (m["ttft_mean_ms"] + m["tpot_mean_ms"] * (mean_out - 1)) / 1e3
        assert e2e == pytest.approx(m["e2e_mean_s"], rel=0.05), row.id
        requests_per_s = m["output_throughput_tok_s"] / mean_out
        assert abs(requests_per_s - m["request_throughput_req_s"]) <= 0.005 + 0.01 * requests_per_s, row.id


def test_start_up_stalls_are_b200_sglang_runs_without_warm_up():
    """A p99 TTFT over a minute with a median under a second is a one-off wait of a run's first requests, not
    queueing (calib/serving/README.md, "Start-up stalls without warm-up"): every such InferenceX row is a B200 SGLang
    run whose client sent no warm-up requests, and it is in no run that sent them. Their medians are the server's:
    within 15% of the same setup's next version measured with warm-ups (0.5.6 -> 0.5.12 at 1k/1k, 64 clients)."""
    def stalls(r) -> bool:
        return (r.metric("ttft_p99_ms") or 0) > 60_000 and r.metric("ttft_median_ms") < 1_000

    ix = [r for r in ROWS if r.source == "inferencex" and r.metric("ttft_p99_ms") is not None]
    stalled = [r for r in ix if stalls(r)]
    assert len(stalled) >= 5
    for r in stalled:
        assert (r.gpu, r.framework, r.warmups) == ("b200-sxm", "sglang", 0), r.id
    warmed = [r for r in ix if r.warmups]
    assert len(warmed) >= 20 and not any(stalls(r) for r in warmed)
    old = next(r for r in ROWS if r.id == "ix-2025-12-31-b200-sglang-1k1k-tp8ep1-c64")
    new = next(r for r in ROWS if r.id == "ix-2026-05-22-b200-sglang-1k1k-tp8ep1-c64")
    assert old in stalled and new.warmups > 0
    for column in ("ttft_median_ms", "tpot_median_ms", "e2e_median_s"):
        assert old.metric(column) == pytest.approx(new.metric(column), rel=0.15), column


# The speculative settings of each MTP launch, as its script (the commit in source_ref) or page sets them: SGLang's
# EAGLE on the checkpoint's MTP module (--speculative-num-steps 2, --speculative-num-draft-tokens 3, top-k 1: a chain
# of 2 draft tokens, 3 verified), TensorRT-LLM's num_nextn_predict_layers (MTP=3, or MTP=1 where DP_ATTENTION=true),
# GPUStack's SGLang launch (--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2).
MTP_SCRIPTS = {
    "InferenceX/blob/12ba0ae07289/benchmarks/single_node/dsr1_fp8_b200_mtp.sh": (2, 2),
    "InferenceX/blob/d4948f993748/benchmarks/single_node/dsr1_fp8_b200_mtp.sh": (2, 2),
    "InferenceX/blob/70bf3a25b6b1/benchmarks/single_node/dsr1_fp8_h200_mtp.sh": (2, 2),
    "InferenceX/blob/008b91a9dd78/benchmarks/dsr1_fp8_h200_trt_mtp_slurm.sh": (3, 1),
    "InferenceX/blob/d7dbd045b234/benchmarks/dsr1_fp8_b200_trt_mtp.sh": (3, 1),
    "InferenceX/blob/f3dbc40c99a6/benchmarks/single_node/dsr1_fp8_b200_trt_mtp.sh": (3, 1),
    "InferenceX/blob/f3dbc40c99a6/benchmarks/single_node/dsr1_fp8_h200_trt_mtp.sh": (3, 1),
    "gpustack/gpustack@47277d79 docs/performance-lab/deepseek-r1/h200.md": (None, 1),
}


def test_every_mtp_row_records_its_launch_s_draft_tokens_per_step():
    """(draft tokens without DP attention, with it) per script; the launch flags spelled out name the setting."""
    mtp = [r for r in ROWS if r.speculative == "mtp"]
    assert len(mtp) == 43
    for r in ROWS:
        if r.speculative != "mtp":
            assert r.mtp_draft_tokens is None and r.mtp_accept_length is None, r.id
            continue
        script = [s for s in MTP_SCRIPTS if s in r.source_ref]
        assert len(script) == 1, r.id
        assert r.mtp_draft_tokens == MTP_SCRIPTS[script[0]][r.dp_attention], r.id
        if r.framework == "sglang":
            flags = r.server_flags.replace(";", "")
            assert f"--speculative-num-steps {r.mtp_draft_tokens}" in flags, r.id
            assert f"--speculative-num-draft-tokens {r.mtp_draft_tokens + 1}" in flags, r.id   # the chain + root
            assert "--speculative-eagle-topk 1" in flags, r.id     # a chain, as simroute's MTP step models it
        else:
            assert f"num_nextn_predict_layers {r.mtp_draft_tokens}" in r.server_flags, r.id
    assert {r.mtp_draft_tokens for r in mtp} == {1, 2, 3}


def test_no_inferencex_mtp_row_carries_an_acceptance_length():
    """InferenceX's client (utils/bench_serving/benchmark_serving.py, or kimbochen/bench_serving before 2026-01-21)
    prints no acceptance, utils/process_result.py keeps only the client's figures, and the API records none: the
    runs' acceptance lived in the server log alone. A figure on an InferenceX row would have come from elsewhere."""
    inferencex = [r for r in ROWS if r.source == "inferencex" and r.speculative == "mtp"]
    assert len(inferencex) == 42
    assert all(r.mtp_accept_length is None for r in inferencex)
    for r in inferencex:
        assert "--use-chat-template" in r.server_flags, r.id    # random token ids wrapped in the chat template


@pytest.mark.parametrize("changes,column,problem", [
    ({"mtp_draft_tokens": "2"}, "mtp_draft_tokens", "empty for other rows"),
    ({"speculative": "mtp", "deployment": "mtp"}, "mtp_draft_tokens", "states the draft tokens"),
    ({"speculative": "mtp", "deployment": "mtp", "mtp_draft_tokens": "2", "mtp_accept_length": "3.5"},
     "mtp_accept_length", "in [1, mtp_draft_tokens + 1 = 3]"),
    ({"speculative": "mtp", "deployment": "mtp", "mtp_draft_tokens": "0"}, "mtp_draft_tokens", "integer >= 1"),
    ({"mtp_accept_length": "1.5"}, "mtp_accept_length", "needs an MTP row"),
])
def test_a_bad_mtp_field_is_refused(tmp_path, changes, column, problem):
    path = _write(tmp_path, [_good_row() | changes])
    with pytest.raises(ConfigurationError) as err:
        load_serving_table(path)
    message = str(err.value)
    assert f"{path}:2" in message and f"field '{column}'" in message and problem in message, message


def test_mtp_rows_record_the_rest_of_their_script_s_launch():
    """The other launch settings of each InferenceX MTP row, as its script sets them (so a replay would need only
    the acceptance): SGLang B200 (dsr1_fp8_b200_mtp.sh): chunked prefill 16384, 512 running requests and CUDA-graph
    batch, memory fraction 0.82, stream interval 30, the poll interval 30 from 16 clients (else 10), no prefill
    graphs (0.5.9's default; 0.5.12 with the flashinfer_trtllm MoE runner); SGLang H200 (dsr1_fp8_h200_mtp.sh):
    32768, 512 running for 1k/1k (else 256), 0.82, interval 10. TensorRT-LLM: max_num_tokens = ((MTP + 1) x
    max_batch_size + ISL + 64 + 63) / 64 x 64, max_batch_size the clients (with DP attention the per-rank share:
    CONC / TP on H200, CONC / 8 from 8 clients on B200); H200 CUDA graphs to 128 and fraction 0.75, B200 CUDA graphs
    to max_batch_size and fraction 0.8 (0.7 with DP attention); stream interval 10."""
    rows = [r for r in ROWS if r.speculative == "mtp" and r.source == "inferencex"]
    assert len(rows) == 42
    for r in rows:
        got = (r.chunked_prefill_tokens, r.max_num_tokens, r.max_running_requests, r.cuda_graph_max_bs,
               r.mem_fraction, r.stream_interval, r.scheduler_recv_interval, r.prefill_graph_max_tokens)
        if r.framework == "sglang" and r.gpu == "b200-sxm":
            want = (16384, None, 512, 512, 0.82, 30, 30 if r.concurrency >= 16 else 10, 0)
        elif r.framework == "sglang":
            cap = 512 if (r.isl, r.osl) == (1024, 1024) else 256
            want = (32768, None, cap, cap, 0.82, 10, None, None)
        else:
            if not r.dp_attention:
                batch = r.concurrency
            elif r.gpu == "h200-sxm":
                batch = max(1, r.concurrency // r.tp)
            else:
                batch = r.concurrency if r.concurrency < 8 else r.concurrency // 8
            tokens = ((r.mtp_draft_tokens + 1) * batch + r.isl + 64 + 63) // 64 * 64
            graphs, fraction = (128, 0.75) if r.gpu == "h200-sxm" else (batch, 0.7 if r.dp_attention else 0.8)
            want = (None, tokens, None, graphs, fraction, 10, None, None)
            assert f"max_batch_size {batch};" in r.server_flags and f"max_num_tokens {tokens} " in r.server_flags
        assert got == want, (r.id, got, want)


# The MoE backend each InferenceX TensorRT-LLM script writes into moe_config (MOE_BACKEND), at the rows' commits:
# the B200 1.1.0rc2.post2 slurm script DEEPGEMM always; the B200 dsr1_fp8_b200_trt.sh of 2026-01-29 (dcc0f53a889d)
# TRTLLM, DEEPGEMM for 1k/8k at 256 or more clients; its single_node successor (f3dbc40c99a6) TRTLLM; the B200 MTP
# scripts TRTLLM, DEEPGEMM with DP attention; every H200 script CUTLASS.
def _script_moe_backend(row) -> str:
    ref = row.source_ref
    if "dsr1_fp8_h200_trt" in ref:
        return "CUTLASS"
    if "dsr1_fp8_b200_trt_slurm.sh" in ref:
        return "DEEPGEMM"
    if "dsr1_fp8_b200_trt_mtp.sh" in ref:
        return "DEEPGEMM" if row.dp_attention else "TRTLLM"
    if "dsr1_fp8_b200_trt.sh" in ref:
        late_1k8k = "dcc0f53a889d" in ref and (row.isl, row.osl) == (1024, 8192) and row.concurrency >= 256
        return "DEEPGEMM" if late_1k8k else "TRTLLM"
    raise AssertionError(f"no MOE_BACKEND rule for {row.id}")


def test_every_inferencex_trtllm_row_records_its_script_s_moe_backend():
    """moe_backend is the script's MOE_BACKEND (above) on every InferenceX TensorRT-LLM row, and server_flags name
    it; the one non-InferenceX TensorRT-LLM row (a launch that names none) and every other framework's row carry
    none. The 1k/8k DP-attention run at 256 clients of 2026-01-29 also carries the rest of that rule (CUDA graphs
    to CONC / 8, free_gpu_memory_fraction 0.7)."""
    for r in ROWS:
        if r.framework == "trtllm" and r.source == "inferencex":
            assert r.moe_backend == _script_moe_backend(r), r.id
            assert f"moe backend {r.moe_backend};" in r.server_flags, r.id
        else:
            assert r.moe_backend is None, r.id
    late = next(r for r in ROWS if r.id == "ix-2026-01-29-b200-trtllm-1k8k-tp8ep8-dpa-c256")
    assert (late.moe_backend, late.cuda_graph_max_bs, late.mem_fraction) == ("DEEPGEMM", 32, 0.7)


def test_replayed_trtllm_rows_name_trtllm_or_the_backend_the_preset_s_rows_time():
    """The trtllm preset's own MoE rows (aiconfigurator-core 0.12.0, TensorRT-LLM 1.3.0rc20, FP8 block scales at
    DeepSeek's shape) were timed with DeepGEMM on B200 and CUTLASS on H200 (their kernel_source column): a row
    whose launch names that backend reads them as they are; a row naming TRTLLM (the TRT-LLM-gen fused MoE) reads
    the preset's trtllm_gen_moe_tables (docs/ENGINES.md); no other backend is launched by a row."""
    own = {"b200-sxm": "DEEPGEMM", "h200-sxm": "CUTLASS"}
    backends = {(r.gpu, r.moe_backend) for r in ROWS if r.framework == "trtllm" and r.moe_backend is not None}
    assert backends == {("b200-sxm", "DEEPGEMM"), ("b200-sxm", "TRTLLM"), ("h200-sxm", "CUTLASS")}
    assert all(backend in (own[gpu], "TRTLLM") for gpu, backend in backends)


@pytest.mark.parametrize("framework,value,problem", [
    ("sglang", "TRTLLM", "TensorRT-LLM's moe_config backend"),
    ("trtllm", "FLASHINFER", "not one of"),
])
def test_a_bad_moe_backend_is_refused(tmp_path, framework, value, problem):
    bad = {**_good_row(), "framework": framework, "moe_backend": value}
    with pytest.raises(ConfigurationError, match=problem):
        load_serving_table(_write(tmp_path, [bad]))


# Every InferenceX B200 SGLang script of the table exports SGL_ENABLE_JIT_DEEPGEMM=false (SGLANG_ENABLE_JIT_DEEPGEMM
# in the MTP scripts) and SGLANG_ENABLE_FLASHINFER_GEMM=true, or (MTP) passes --fp8-gemm-backend=flashinfer_trtllm:
# dsr1_fp8_b200_docker.sh at 189ae51cc64d lines 18-19, dsr1_fp8_b200_slurm.sh at d27433dffb7b lines 19-20,
# single_node/dsr1_fp8_b200.sh at 12ba0ae07289 and d4948f993748 lines 23-24, single_node/dsr1_fp8_b200_mtp.sh at
# both lines 23 and 78 / 83. The SGLang cookbook's runs launch `--tp 8` alone (DeepGEMM, the default).
B200_SGLANG_SCRIPTS = ("189ae51cc64d/benchmarks/dsr1_fp8_b200_docker.sh", "d27433dffb7b/benchmarks/dsr1_fp8_b200_slurm.sh",
                       "12ba0ae07289/benchmarks/single_node/dsr1_fp8_b200.sh",
                       "12ba0ae07289/benchmarks/single_node/dsr1_fp8_b200_mtp.sh",
                       "d4948f993748/benchmarks/single_node/dsr1_fp8_b200.sh",
                       "d4948f993748/benchmarks/single_node/dsr1_fp8_b200_mtp.sh")


def test_every_inferencex_b200_sglang_row_records_the_flashinfer_fp8_gemm_its_script_runs():
    """fp8_gemm_backend is flashinfer_trtllm on every InferenceX B200 SGLang row (each from one of the scripts
    above, whose environment or flag its server_flags name) and empty on every other row."""
    flagged = [r for r in ROWS if r.fp8_gemm_backend is not None]
    assert {r.fp8_gemm_backend for r in flagged} == {"flashinfer_trtllm"}
    for r in ROWS:
        mine = r.framework == "sglang" and r.gpu == "b200-sxm" and r.source == "inferencex"
        assert (r.fp8_gemm_backend is not None) == mine, r.id
        if mine:
            assert any(script in r.source_ref for script in B200_SGLANG_SCRIPTS), r.id
            assert "JIT_DEEPGEMM=false" in r.server_flags, r.id
            assert ("SGLANG_ENABLE_FLASHINFER_GEMM=true" in r.server_flags
                    or "--fp8-gemm-backend flashinfer_trtllm" in r.server_flags), r.id
    assert len(flagged) == 34


@pytest.mark.parametrize("framework,value,problem", [
    ("trtllm", "flashinfer_trtllm", "SGLang's --fp8-gemm-backend"),
    ("sglang", "deepgemm", "not one of"),
])
def test_a_bad_fp8_gemm_backend_is_refused(tmp_path, framework, value, problem):
    bad = {**_good_row(), "framework": framework, "fp8_gemm_backend": value}
    with pytest.raises(ConfigurationError, match=problem):
        load_serving_table(_write(tmp_path, [bad]))


def _row(row_id: str):
    return next(r for r in ROWS if r.id == row_id)


def test_the_b200_sglang_8k_ttft_inversion_is_in_the_data():
    """The table facts docs/VALIDATION.md ("FlashInfer's FP8 GEMM on InferenceX's B200") rests on. (1) InferenceX's
    B200 SGLang servers take longer for a ~8k prompt at 4 clients (393-609 ms) than its H200 SGLang servers
    (312-343 ms), though a B200 prefills faster; at ~1k prompts and 4 clients the two are close (147-178 ms
    against 85-157). (2) On B200 alone, a ~8k prompt at one client takes 314 ms under InferenceX's launch
    (0.5.12) where the SGLang cookbook's default launch (0.5.6.post1) takes 241 ms at its p99 (its two ~7.9k
    prompts): the launches differ in the FP8 GEMM kernel among others."""
    def ttft(gpu: str, isl: int, clients: int) -> list[float]:
        return sorted(r.metrics["ttft_median_ms"] for r in ROWS
                      if r.source == "inferencex" and r.framework == "sglang" and r.gpu == gpu and r.tp == 8
                      and r.isl == isl and r.concurrency == clients and r.speculative == "none"
                      and not r.dp_attention)
    b200_8k, h200_8k = ttft("b200-sxm", 8192, 4), ttft("h200-sxm", 8192, 4)
    assert [round(v) for v in b200_8k] == [393, 408, 609] and [round(v) for v in h200_8k] == [312, 317, 320, 327,
                                                                                              343]
    assert min(b200_8k) > max(h200_8k)
    b200_1k, h200_1k = ttft("b200-sxm", 1024, 4), ttft("h200-sxm", 1024, 4)
    assert (round(min(b200_1k)), round(max(b200_1k))) == (147, 178)
    assert (round(min(h200_1k)), round(max(h200_1k))) == (85, 157)
    inferencex = _row("ix-2026-05-22-b200-sglang-8k1k-tp8ep1-c1")
    cookbook = _row("sgc-2025-12-14-b200-sglang-8k1k-tp8ep1-c1")
    assert inferencex.fp8_gemm_backend == "flashinfer_trtllm" and cookbook.fp8_gemm_backend is None
    assert (round(inferencex.metrics["ttft_median_ms"]), round(cookbook.metrics["ttft_p99_ms"])) == (314, 241)
