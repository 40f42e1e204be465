"""The studies' SLO comparison, worked by hand on rows written out here (no run): a condition's operator at its
threshold, the column a statistic names, every seed and every condition, finished points only; the report's
aggregation over seeds (SLO met by all, the t-interval, the worst completion) and its frontier's side; the plan's
answer (probes met, the band, the binding count below the answer); and the columns a point stores."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from simroute.defaults import MIN_COMPLETION
from simroute.study.plan import _deployment_answer
from simroute.study.report import aggregate, frontier_goal, frontier_value
from simroute.study.search import Condition, Goal, Refinement, SearchStatus, finished, meets, parse, parse_slo
from simroute.study.store import flatten

NAN = math.nan


def _row(**metrics) -> dict:
    """A finished point (all 100 requests completed, not overloaded) with the given metrics."""
    return {"status": "ok", "requests": 100.0, "completed": 100.0, "overloaded": 0.0, **metrics}


# ---- one condition ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op, at, below, above", [("<=", True, True, False), ("<", False, True, False),
                                                  (">=", True, False, True), (">", False, False, True)])
def test_a_condition_at_below_and_above_its_threshold(op, at, below, above):
    condition = Condition("ttft_ms_p99", op, 50.0)
    assert [condition.holds({"ttft_ms_p99": value}) for value in (50.0, 49.9, 50.1)] == [at, below, above]


@pytest.mark.parametrize("text", ["p99 ttft_ms <= 50", "slo_attainment >= 0.9", "p50 tpot_ms < 3"])
def test_a_metric_a_run_did_not_report_never_meets(text):
    condition = parse_slo(text)
    assert not condition.holds({}) and not condition.holds({condition.column: None})
    assert not condition.holds({condition.column: NAN})


@pytest.mark.parametrize("stat", ["mean", "p50", "p95", "p99", "max"])
@pytest.mark.parametrize("metric", ["ttft_ms", "tpot_ms", "e2e_ms", "itl_ms"])
def test_each_statistic_reads_its_own_column(stat, metric):
    condition = parse_slo(f"{stat} {metric} <= 10")
    assert (condition.column, condition.op, condition.value) == (f"{metric}_{stat}", "<=", 10.0)
    row = {f"{metric}_{other}": 100.0 for other in ("mean", "p50", "p95", "p99", "max")}
    row[f"{metric}_{stat}"] = 5.0                 # only the named statistic meets the target
    assert condition.holds(row)


def test_a_metric_name_with_digits_is_read():
    """Regression: the metric's pattern was `[a-z_]+`, so 'p99 e2e_ms <= 2000' (listed as valid by the error
    message itself) and the stored 'fct_pd_p95_ms' column could not be named in an SLO."""
    assert parse_slo("p99 e2e_ms <= 2000").column == "e2e_ms_p99"
    assert parse_slo("fct_pd_p95_ms < 5").column == "fct_pd_p95_ms"
    with pytest.raises(ValueError, match="unknown SLO metric"):
        parse_slo("p99 e3e_ms <= 1")


# ---- seeds, conditions, finished points --------------------------------------------------------------------------
SLO = ("p99 ttft_ms <= 50", "p99 tpot_ms <= 20")


def test_every_seed_must_meet_every_condition():
    good = _row(ttft_ms_p99=50.0, tpot_ms_p99=20.0)           # exactly at both targets
    slow_ttft, slow_tpot = {**good, "ttft_ms_p99": 51.0}, {**good, "tpot_ms_p99": 21.0}
    assert meets([good, good, good], SLO)
    assert not meets([good, slow_ttft, good], SLO)             # one seed of three misses
    assert not meets([slow_tpot], SLO) and not meets([slow_ttft], SLO)   # one condition of two
    assert not meets([], SLO)


def test_a_point_that_did_not_finish_never_meets_even_with_good_latencies():
    good = _row(ttft_ms_p99=1.0, tpot_ms_p99=1.0)
    assert not meets([good, {**good, "completed": 50.0}], SLO)          # half its requests dropped
    assert not meets([good, {**good, "overloaded": 1.0}], SLO)          # its queue grew for the whole run
    assert not meets([good, {**good, "status": "failed"}], SLO)


def test_completion_exactly_at_the_minimum_is_finished():
    at = _row(completed=MIN_COMPLETION * 100.0)
    assert finished(at) and not finished({**at, "completed": MIN_COMPLETION * 100.0 - 1.0})
    assert not finished({**at, "overloaded": 1.0}) and finished({**at, "overloaded": NAN})
    assert not finished({**at, "requests": 0.0, "completed": 0.0})


@pytest.mark.parametrize("goal, meets_at, probes, answer", [
    (Goal.MIN, lambda hosts: hosts >= 6, [1, 16, 8, 4, 6, 5], 6),          # fewest hosts meeting the SLO
    (Goal.MAX, lambda qps: qps <= 6, [1, 16, 8, 4, 6, 7], 6)])               # most load meeting it
def test_the_search_keeps_the_half_where_the_slo_changes(goal, meets_at, probes, answer):
    """Integer range 1-16, tolerance 1, a coarse grid of its two ends: then the middle (floor) of the pair whose
    verdicts differ, down to neighbours; the answer is the fewest (MIN) or most (MAX) probe meeting the SLO."""
    search = Refinement(goal=goal, lo=1, hi=16, integer=True, tolerance=1.0)
    seen = []
    while not search.done:
        for value in search.probes():
            seen.append(int(value))
            search.observe(value, meets_at(value))
    assert (seen, search.answer, search.status) == (probes, answer, SearchStatus.FOUND)


# ---- the report's aggregation over seeds and its frontier --------------------------------------------------------
def _frame(rows: list[dict]) -> pd.DataFrame:
    columns = {"ttft_ms_p50": 1.0, "tpot_ms_p50": 1.0, "tpot_ms_p99": 1.0, "slo_attainment": 1.0, "bytes_route": 0.0,
               "bytes_fetch": 0.0, "bytes_pd_transfer": 0.0, "output_tokens_per_s_per_gpu": 1.0, "n_route": 0.0,
               "n_fetch": 0.0, "n_local": 0.0, "max_link_utilisation": 0.0, "peak_spine_flows": 0.0,
               "fct_pd_mean_ms": NAN, "fct_pd_p95_ms": NAN, "ttft_growth": 1.0}
    return pd.DataFrame([{**columns, "key": f"k{i}", **row} for i, row in enumerate(rows)])


def test_a_configuration_meets_the_slo_only_when_all_its_seeds_do():
    """hosts 4: seeds' p99 TTFT 40, 45, 60 ms (the third misses 50); hosts 8: 30, 35, 40 ms."""
    rows = [_row(**{"axis:hosts": 4, "seed": s, "ttft_ms_p99": v}) for s, v in enumerate((40.0, 45.0, 60.0))]
    rows += [_row(**{"axis:hosts": 8, "seed": s, "ttft_ms_p99": v}) for s, v in enumerate((30.0, 35.0, 40.0))]
    agg = aggregate(_frame(rows), "hosts", [], ["p99 ttft_ms <= 50"]).set_index("hosts")
    assert list(agg["meets"]) == [False, True]
    assert frontier_value(agg.reset_index(), "hosts", frontier_goal("hosts")) == 8


def test_the_interval_is_students_t_on_the_sample_std_and_completion_is_the_worst_seed():
    """Three seeds' p99 TTFT 40, 45, 60 ms: mean 48.33, sample std (ddof 1) sqrt(108.33) = 10.41, t(2 df) = 4.30:
    half-width 4.30 x 10.41 / sqrt(3) = 25.84 ms. Completion 100, 95, 92 of 100: the worst, 0.92."""
    rows = [_row(**{"axis:hosts": 4, "seed": s, "ttft_ms_p99": v, "completed": c})
            for s, (v, c) in enumerate(((40.0, 100.0), (45.0, 95.0), (60.0, 92.0)))]
    point = aggregate(_frame(rows), "hosts", [], ["p99 ttft_ms <= 100"]).iloc[0]
    assert point["seeds"] == 3 and point["ttft_ms_p99"] == pytest.approx(145 / 3)
    assert point["ttft_ms_p99_ci"] == pytest.approx(4.30 * math.sqrt(325 / 3) / math.sqrt(3))
    assert point["completion"] == pytest.approx(0.92) and point["meets"]


def test_a_failed_seed_is_not_averaged_in_and_the_point_counts_its_succeeded_seeds():
    rows = [_row(**{"axis:hosts": 4, "seed": 0, "ttft_ms_p99": 40.0}),
            _row(**{"axis:hosts": 4, "seed": 1, "ttft_ms_p99": 50.0}),
            {**_row(**{"axis:hosts": 4, "seed": 2, "ttft_ms_p99": NAN, "completed": NAN}), "status": "failed"}]
    point = aggregate(_frame(rows), "hosts", [], ["p99 ttft_ms <= 50"]).iloc[0]
    assert point["seeds"] == 2 and point["ttft_ms_p99"] == pytest.approx(45.0) and point["meets"]


def test_a_point_finished_only_when_every_seed_finished():
    """Seed 0 completed all 100 requests, seed 1 only 50: the point did not finish (and cannot meet); the mean
    completed count is 75, the worst completion 0.5."""
    rows = [_row(**{"axis:hosts": 4, "seed": 0, "ttft_ms_p99": 10.0}),
            _row(**{"axis:hosts": 4, "seed": 1, "ttft_ms_p99": 10.0, "completed": 50.0})]
    point = aggregate(_frame(rows), "hosts", [], ["p99 ttft_ms <= 50"]).iloc[0]
    assert not point["finished"] and not point["meets"]
    assert point["completed"] == pytest.approx(75.0) and point["completion"] == pytest.approx(0.5)


@pytest.mark.parametrize("axis, goal", [("hosts", Goal.MIN), ("trace.params.instances", Goal.MIN),
                                        ("token_budget", Goal.MIN), ("replicas", Goal.MIN),
                                        ("trace.params.qps", Goal.MAX), ("time_scale", Goal.MAX)])
def test_a_resource_axis_takes_its_smallest_value_meeting_the_slo_and_a_load_axis_its_largest(axis, goal):
    assert frontier_goal(axis) == goal
    points = pd.DataFrame({"x": [2, 4, 8, 16], "meets": [False, True, True, False]})
    assert frontier_value(points, "x", goal) == (4 if goal == Goal.MIN else 8)


def test_the_frontier_compares_number_labels_as_numbers_in_any_order_and_other_labels_in_their_given_order():
    """Labels '32', '8', '16' (all met) in that order: the smallest is '8' and the largest '32' (as numbers, not by
    position or as text); 'small', 'large': the first and the last given."""
    numbers = pd.DataFrame({"x": ["32", "8", "16"], "meets": [True, True, True]})
    assert (frontier_value(numbers, "x", Goal.MIN), frontier_value(numbers, "x", Goal.MAX)) == ("8", "32")
    words = pd.DataFrame({"x": ["small", "large"], "meets": [True, True]})
    assert (frontier_value(words, "x", Goal.MIN), frontier_value(words, "x", Goal.MAX)) == ("small", "large")


# ---- the plan's answer --------------------------------------------------------------------------------------------
def _plan_rows() -> pd.DataFrame:
    """Two seeds per host count, SLO p99 TTFT <= 100 ms. 2 hosts: both miss (300, 250 ms). 4 hosts: seed 0 meets
    (90 ms), seed 1 misses (150 ms). 5 hosts: both miss on latency (120, 110 ms) and seed 1 also finished only 50
    of its 100 requests (its 80 ms is a few requests' latency). 6 and 8 hosts: both meet."""
    table = {2: ((300.0, 100.0), (250.0, 100.0)), 4: ((90.0, 100.0), (150.0, 100.0)),
             5: ((120.0, 100.0), (80.0, 50.0)), 6: ((70.0, 100.0), (60.0, 100.0)), 8: ((40.0, 100.0), (30.0, 100.0))}
    rows = [_row(**{"axis:hosts": hosts, "key": f"h{hosts}s{seed}", "ttft_ms_p99": ttft, "completed": completed,
                    "n_route": 10.0 * hosts, "n_fetch": 1.0, "n_local": 0.0, "n_resident": 0.0})
            for hosts, seeds in table.items() for seed, (ttft, completed) in enumerate(seeds)]
    return pd.DataFrame(rows)


def test_the_plans_probes_band_and_binding_count(tmp_path):
    answer = _deployment_answer(tmp_path, {"answer": 6, "status": "found"}, _plan_rows(), parse("p99 ttft_ms <= 100"))
    probes = {probe["hosts"]: probe for probe in answer["probes"]}
    assert [(probes[h]["seeds"], probes[h]["served"], probes[h]["met"]) for h in (2, 4, 5, 6, 8)] == \
        [(2, 2, 0), (2, 2, 1), (2, 1, 0), (2, 2, 2), (2, 2, 2)]
    assert probes[5]["ttft_ms_p99"] == pytest.approx(120.0)      # the finished seed's alone
    assert probes[4]["ttft_ms_p99"] == pytest.approx(120.0)      # (90 + 150) / 2
    assert answer["band"] == [4, 6]              # some seed meets from 4 hosts; every seed from 6
    assert answer["at_answer"]["hosts"] == 6 and answer["at_answer"]["n_route"] == pytest.approx(60.0)
    binding = answer["binding"]                  # the largest host count below the answer that failed
    assert binding["hosts"] == 5 and binding["resource"].startswith("unknown")


# ---- the columns a point stores -----------------------------------------------------------------------------------
def _summary() -> dict:
    stats = {"mean": 1.0, "p50": 2.0, "p95": 3.0, "p99": 4.0, "max": 5.0}
    return {"requests": 10, "completed": 9, "dropped": 1, "ttft_ms": stats, "tpot_ms": stats, "e2e_ms": stats,
            "slo": {"attainment": 0.5}, "bytes": {"route": 1.0, "fetch": 2.0, "local": 0.0, "pd_transfer": 0.0},
            "primitive_counts": {"route": 3, "fetch": 4, "local": 0, "resident": 1, "first-touch": 2},
            "serving": {"itl_ms": {"mean": 7.0, "median": 6.0, "std": 1.0, "p95": 8.0, "p99": 9.0, "max": 10.0},
                        "throughput": {"requests_per_s": 2.0, "input_tokens_per_s": 800.0,
                                       "output_tokens_per_s": 160.0, "total_tokens_per_s": 960.0},
                        "throughput_per_gpu": {"requests_per_s": 0.25, "input_tokens_per_s": 100.0,
                                               "output_tokens_per_s": 20.0, "total_tokens_per_s": 120.0}},
            "network": {"peak_spine_concurrency": {"spine0": 3, "spine1": 7, "spine2": 0}},
            "load": {"overloaded": False, "ttft_growth": 1.1}}


def test_a_point_stores_the_itl_median_as_p50_the_per_gpu_rates_and_the_busiest_spine():
    row = flatten(_summary())
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):      # each statistic in its own column: 1, 2, 3, 4, 5
        assert [row[f"{metric}_{stat}"] for stat in ("mean", "p50", "p95", "p99", "max")] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert [row[f"itl_ms_{stat}"] for stat in ("mean", "p50", "p95", "p99", "max")] == [7.0, 6.0, 8.0, 9.0, 10.0]
    assert (row["request_throughput"], row["output_tokens_per_s"], row["total_tokens_per_s"]) == (2.0, 160.0, 960.0)
    assert (row["input_tokens_per_s_per_gpu"], row["output_tokens_per_s_per_gpu"],
            row["total_tokens_per_s_per_gpu"]) == (100.0, 20.0, 120.0)
    assert row["peak_spine_flows"] == 7.0 and row["overloaded"] == 0.0 and row["slo_attainment"] == 0.5
    assert (row["n_route"], row["n_fetch"], row["n_first_touch"]) == (3.0, 4.0, 2.0)
