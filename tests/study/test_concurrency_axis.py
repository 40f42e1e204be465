"""Concurrency as a load axis: `plan --concurrency N` (into a serving generator's params, else the runs' field),
a study axis `concurrency: [...]` (a RunConfig field, a load whose frontier is its largest value meeting the SLO,
the report's default x), and the serving benchmark's throughput as study columns and SLO metrics."""

from __future__ import annotations

import json

import yaml

from simroute.study import load_study, run_study
from simroute.study.plan import PlanRequest
from simroute.study.report import axes_of, frontier_goal, write_report
from simroute.study.search import Goal, parse_slo
from simroute.study.store import Store

SERVING = {"generate": "serving", "params": {"requests": 24, "input_tokens": 256, "output_tokens": 32,
                                             "range_ratio": 0.5}}


def test_plan_puts_concurrency_where_the_workload_takes_it():
    generated = PlanRequest(trace=SERVING, concurrency=64, qps=4.0).study_document()
    assert generated["base"]["trace"]["params"] == {**SERVING["params"], "concurrency": 64, "qps": 4.0}
    assert "concurrency" not in generated["base"] and "qps" not in generated["base"]
    replayed = PlanRequest(trace="agents-default", concurrency=8).study_document()
    assert replayed["base"]["concurrency"] == 8 and replayed["base"]["trace"] == "agents-default"


def test_plan_cli_at_a_concurrency(cli, tmp_path):
    out = tmp_path / "plan"
    code, stdout, err = cli("plan", "--workload", "serving", *[arg for key, value in SERVING["params"].items()
                                                                for arg in ("-p", f"{key}={value}")],
                            "--concurrency", 4, "--slo", "mean ttft_ms <= 10000", "--hosts-max", 2, "--seeds", 1,
                            "--compare", "", "-j", 1, "-o", out)
    assert code == 0, err
    doc = yaml.safe_load((out / "plan.yaml").read_text())
    assert doc["base"]["trace"]["params"]["concurrency"] == 4
    assert "at most 4 requests in flight" in (out / "plan.md").read_text()
    assert json.loads((out / "plan.json").read_text())["answer_hosts"] == 1


def test_a_concurrency_axis_is_a_load(tmp_path):
    """Three points at 2, 4 and 8 clients on one host: each run keeps its limit; more clients put more requests in
    the engine's batch, so output tokens/s per GPU rise and TTFT does not fall (a decode batch of 8 is far from
    saturating an H200); the frontier is the largest concurrency meeting the SLO."""
    study_file = tmp_path / "conc.yaml"
    study_file.write_text(yaml.safe_dump({
        "name": "conc", "base": {"topology": "fattree", "calib": "h100-ibgda", "hosts": 1, "trace": SERVING},
        "axes": {"concurrency": [2, 4, 8]}, "seeds": 1, "keep": "full", "slo": "mean ttft_ms <= 10000"}))
    study = load_study(study_file)
    assert [study.config(labels, 0)["concurrency"] for labels in study.groups()] == [2, 4, 8]
    run = run_study(study, tmp_path / "out", jobs=1)
    assert run.failed == 0
    frame = Store(tmp_path / "out").read().sort_values("axis:concurrency")
    rate = frame["output_tokens_per_s_per_gpu"].to_numpy()
    assert rate[0] < rate[1] < rate[2]
    ttft = frame["ttft_ms_mean"].to_numpy()
    assert ttft[0] <= ttft[1] <= ttft[2]
    for key, limit in zip(frame["key"], (2, 4, 8)):
        summary = json.loads((tmp_path / "out" / "runs" / key / "summary.json").read_text())
        assert summary["load"]["peak_in_flight"] == limit and summary["serving"]["concurrency_limit"] == limit
    meta = json.loads((tmp_path / "out" / "study.json").read_text())
    assert axes_of(meta)[0] == "concurrency" and frontier_goal("concurrency") == Goal.MAX
    report = write_report(tmp_path / "out", fmt="md")
    assert "largest concurrency meeting the SLO" in report and "output_tokens_per_s_per_gpu" in report


def test_serving_figures_are_slo_metrics():
    assert parse_slo("mean itl_ms <= 30").column == "itl_ms_mean"
    assert parse_slo("output_tokens_per_s_per_gpu >= 100").holds({"output_tokens_per_s_per_gpu": 120.0})
