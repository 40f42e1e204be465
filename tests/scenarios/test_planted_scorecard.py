"""The serving scorecard's summary (simroute.scenarios.serving.summary) on five points written by hand: fitted points
stay out of every figure (the totals, the holdout split, the per framework / GPU groups), the error is the median of
|ratio - 1|, and a ratio at a band end is inside the band in the groups as in the verdict."""

from __future__ import annotations

import dataclasses
import json

import pytest

from simroute.scenarios import serving as sv


def _point(row: str, framework: str, ratio: float, holdout: bool, fitted_to: str = "") -> sv.Point:
    return sv.Point(row, "ttft", framework, "1.0", "h200-sxm", "1k/1k c4", holdout, fitted_to, 100.0, 100.0 * ratio,
                    "ms", ratio, sv.BAND[0], sv.BAND[1], sv.verdict(ratio))


POINTS = [_point("a", "sglang", 0.5, True), _point("b", "sglang", 1.2, False), _point("c", "sglang", 1.5, True),
          _point("d", "trtllm", 0.9, False), _point("f", "sglang", 3.0, True, fitted_to="calib/engines/x.yaml:c")]


def test_the_judged_totals_leave_the_fitted_point_out():
    s = sv.summary(POINTS)
    assert (s["points"], s["judged"], s["fitted"], s["passed"], s["failed"], s["rows"]) == (5, 4, 1, 3, 1, 4)
    assert (s["frameworks"], s["gpus"]) == (["sglang", "trtllm"], ["h200-sxm"])


def test_the_error_is_the_median_of_the_judged_points_and_the_holdout_split_judged_only():
    """|ratio - 1| of a, b, c, d: 0.5, 0.2, 0.5, 0.1, median (0.2 + 0.5) / 2 = 0.35 (their mean is 0.325); holdout a
    and c (not the fitted f): 0.5; not holdout b and d: 0.15."""
    ttft = sv.summary(POINTS)["metrics"]["ttft"]
    assert ttft["all"] == pytest.approx({"n": 4, "median_abs_err": 0.35, "min_ratio": 0.5, "max_ratio": 1.5,
                                         "outside_band": 1})
    assert ttft["holdout"] == pytest.approx({"n": 2, "median_abs_err": 0.5, "min_ratio": 0.5, "max_ratio": 1.5,
                                             "outside_band": 1})
    assert ttft["not holdout"] == pytest.approx({"n": 2, "median_abs_err": 0.15, "min_ratio": 0.9, "max_ratio": 1.2,
                                                 "outside_band": 0})


def test_the_groups_count_judged_points_and_a_band_end_as_inside():
    """SGLang on H200: a, b, c (f is fitted): errors 0.5, 0.2, 0.5, median 0.5; only a (0.5x) outside, c at 1.5x is
    the band's end (a pass). TensorRT-LLM: d alone."""
    groups = sv.summary(POINTS)["groups"]
    assert groups["sglang h200-sxm"]["ttft"] == pytest.approx({"n": 3, "median_abs_err": 0.5, "outside_band": 1})
    assert groups["trtllm h200-sxm"]["ttft"] == pytest.approx({"n": 1, "median_abs_err": 0.1, "outside_band": 0})
    assert sv.verdict(1.5) == "pass"


def test_a_cookbook_row_replays_the_lengths_its_client_drew(monkeypatch, tmp_path):
    """The SGLang cookbook's 8k/1k run at 1 client (10 prompts, random 8000 / 1000 at range ratio 0, bench_serving's
    default --seed 1) printed 'Total input tokens: 41941' and 'Total generated tokens: 4210': the trace its replay
    runs holds those same lengths, not another draw of the rule."""
    from simroute.workload import read_requests
    row = next(r for r in sv.load_serving_table() if r.id == "sgc-2025-12-14-b200-sglang-8k1k-tp8ep1-c1")
    seen = {}

    def replay(trace, values, seed=0):
        requests = read_requests(trace)
        seen["totals"] = (int(requests["prompt_tokens"].to_numpy().sum()),
                          int(requests["output_tokens"].to_numpy().sum()))
        return {}

    monkeypatch.setattr(sv, "replay", replay)
    sv.simulate_row(row, tmp_path)
    assert seen["totals"] == (41_941, 4_210)


def test_validate_s_closing_line_counts_the_rows_it_printed(cli, monkeypatch):
    """The paper scorecard's text output ends with the counts of the rows above it: two predicted rows (one inside
    its band, one outside: a finding) and three implementation checks (two inside, one outside): '1 of 2 predicted
    rows pass (1 findings); 2 of 3 implementation checks pass'."""
    from simroute.scenarios import validate as v

    def rows(sections, jobs=1, progress=None):
        band = dict(unit="x", lo=1.0, hi=2.0, tolerance="band", basis="by hand")
        return [v.Row("p1", "e", "s", 1.5, 1.5, **band), v.Row("p2", "e", "s", 1.5, 3.0, **band),
                v.Row("i1", "e", "s", 1.5, 1.2, kind=v.INPUT, **band), v.Row("i2", "e", "s", 1.5, 1.8, kind=v.INPUT,
                                                                              **band),
                v.Row("i3", "e", "s", 1.5, 0.5, kind=v.INPUT, **band)]

    monkeypatch.setattr(v, "scorecard", rows)
    code, out, _ = cli("validate", "-q", "-j", "1", "--only", "table1")
    assert code == 0
    assert "1 of 2 predicted rows pass (1 findings); 2 of 3 implementation checks pass" in out


def test_each_set_s_json_summary_counts_its_own_points(cli, monkeypatch):
    """`validate --serving --dp-attention --json`: the default set's summary is of its points and the DP-attention
    set's of its own (fake replays: the InferenceX TensorRT-LLM 8-client row fails its TTFT at 0.5x; the DP row
    scores whatever these figures give against its own measurements): passed / failed and each metric's smallest
    ratio as counted from the points listed beside each summary."""
    monkeypatch.setattr(sv, "simulate_row", lambda r, directory, seed=0: {
        "ttft_median_ms": 52.768, "tpot_mean_ms": 16.348, "output_throughput_per_gpu_tok_s": 58.882})
    code, out, _ = cli("validate", "--serving", "--dp-attention", "--json", "-q", "-j", "1", "--only",
                       "ix-2025-12-15-h200-trtllm-1k1k-tp8ep8-c8,ix-2025-11-02-h200-trtllm-8k1k-tp8ep8-dpa-c64")
    assert code == 0
    doc = json.loads(out)
    for points, summary in ((doc["points"], doc["summary"]),
                            (doc["dp_attention"]["points"], doc["dp_attention"]["summary"])):
        assert summary["passed"] == sum(p["verdict"] == "pass" for p in points)
        assert summary["failed"] == sum(p["verdict"] != "pass" for p in points)
        for metric, entry in summary["metrics"].items():
            assert entry["all"]["min_ratio"] == min(p["ratio"] for p in points if p["metric"] == metric)
    ratios = {p["metric"]: p["ratio"] for p in doc["dp_attention"]["points"]}
    assert ratios != {p["metric"]: p["ratio"] for p in doc["points"]}     # the two sets' points differ


def test_the_dp_flag_admits_dp_attention_without_mtp_only():
    """`--dp-attention` adds the DP-attention rows without MTP; an MTP + DP-attention row stays out even once its
    acceptance were recorded (MTP rows replay under no flag of this scorecard), and so does a plain MTP row."""
    table = sv.load_serving_table()
    mtp_dp = next(r for r in table if r.deployment == "mtp+dp-attention")
    mtp = next(r for r in table if r.deployment == "mtp")
    for r in (mtp_dp, mtp):
        known = dataclasses.replace(r, mtp_accept_length=2.5)
        assert sv.skip_reason(known, dp_attention=True) == f"{r.deployment}: not the baseline engine"
    dp = next(r for r in table if r.id == "ix-2025-11-02-h200-trtllm-8k1k-tp8ep8-dpa-c64")
    assert sv.skip_reason(dp) == "dp-attention: not the baseline engine" and sv.skip_reason(dp, dp_attention=True) is None
