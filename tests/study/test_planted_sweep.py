"""A sweep's aggregation over seeds and the plan's frontier, worked by hand on rows written out here (no run): one
point per configuration and axis value, in the axis's numeric order, overloaded when any seed was; the Pareto
frontier of throughput per GPU against TPOT; a mean over seeds that leaves out a seed without the figure; a
search's status at the range's ends."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from simroute.study.plan import _mean, frontier
from simroute.study.report import aggregate
from simroute.study.search import Goal, Refinement, SearchStatus

NAN = math.nan
COLUMNS = {"ttft_ms_p50": 1.0, "ttft_ms_p99": 10.0, "tpot_ms_p50": 1.0, "tpot_ms_p99": 1.0, "slo_attainment": 1.0,
           "bytes_route": 0.0, "bytes_fetch": 0.0, "bytes_pd_transfer": 0.0, "output_tokens_per_s_per_gpu": 1.0,
           "n_route": 0.0, "n_fetch": 0.0, "n_local": 0.0, "max_link_utilisation": 0.0, "peak_spine_flows": 0.0,
           "fct_pd_mean_ms": NAN, "fct_pd_p95_ms": NAN, "ttft_growth": 1.0, "status": "ok", "requests": 100.0,
           "completed": 100.0, "overloaded": 0.0}


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{**COLUMNS, "key": f"k{i}", **row} for i, row in enumerate(rows)])


def test_one_point_per_series_and_axis_value_in_numeric_order():
    """Two policies x QPS 16, 8, 32 (written in that order) x 2 seeds: six points, each the mean of its two
    seeds' p99 TTFT (QPS x policy's factor + seed), QPS ascending as numbers within each series."""
    factor = {"route": 1.0, "fetch": 2.0}
    rows = [{"axis:policy": policy, "axis:qps": qps, "seed": seed, "ttft_ms_p99": qps * factor[policy] + seed}
            for policy in ("route", "fetch") for qps in (16, 8, 32) for seed in (0, 1)]
    agg = aggregate(_frame(rows), "qps", ["policy"], [])
    assert list(zip(agg["policy"], agg["qps"])) == [("route", 8), ("route", 16), ("route", 32),
                                                    ("fetch", 8), ("fetch", 16), ("fetch", 32)]
    assert list(agg["seeds"]) == [2] * 6
    assert agg["ttft_ms_p99"].tolist() == pytest.approx([8.5, 16.5, 32.5, 16.5, 32.5, 64.5])


def test_a_point_is_overloaded_when_any_seed_was():
    """Seed 0 kept up, seed 1's arrivals outran service (its late TTFT grew 7x): the point is overloaded, its
    growth the worse seed's."""
    rows = [{"axis:qps": 8, "seed": 0, "overloaded": 0.0, "ttft_growth": 1.2},
            {"axis:qps": 8, "seed": 1, "overloaded": 1.0, "ttft_growth": 7.0}]
    point = aggregate(_frame(rows), "qps", [], []).iloc[0]
    assert point["overloaded"] == 1.0 and point["ttft_growth"] == pytest.approx(7.0)
    assert point["marks"].startswith("arrivals above service")


def test_the_plan_frontier_keeps_only_probes_no_other_beats_on_both():
    """(TPOT ms, tokens/s per GPU): a (10, 100), b (11, 100) ties a's throughput at a worse TPOT (dominated),
    c (12, 150), d (15, 140) (dominated by c), e (20, 200). The frontier: a, c, e."""
    def probe(hosts, tpot, rate):
        return {"hosts": hosts, "gpus": 8 * hosts, "tpot_ms_p99": tpot, "output_tokens_per_s_per_gpu": rate,
                "seeds": 1, "met": 1, "served": 1, "busiest": "-", "resources": {}}
    deployments = {"x": {"probes": [probe(1, 10.0, 100.0), probe(2, 11.0, 100.0), probe(3, 12.0, 150.0)]},
                   "y": {"probes": [probe(4, 15.0, 140.0), probe(5, 20.0, 200.0)]}}
    assert [(point["deployment"], point["hosts"]) for point in frontier(deployments)] == [("x", 1), ("x", 3),
                                                                                          ("y", 5)]


def test_a_mean_over_seeds_leaves_out_a_seed_without_the_figure():
    assert _mean([10.0, None, 30.0, NAN]) == pytest.approx(20.0)
    assert _mean([None, NAN]) is None


@pytest.mark.parametrize("goal, feasible, answer, status", [
    (Goal.MIN, {1: False, 3: True, 8: True}, 3, SearchStatus.FOUND),
    (Goal.MIN, {1: True, 3: True, 8: True}, 1, SearchStatus.BOUND),     # even the fewest hosts meet it
    (Goal.MAX, {1: True, 3: True, 8: False}, 3, SearchStatus.FOUND),
    (Goal.MAX, {1: True, 3: True, 8: True}, 8, SearchStatus.BOUND),     # even the heaviest load meets it
])
def test_a_search_is_bound_only_when_the_ranges_bad_end_meets_the_slo(goal, feasible, answer, status):
    """Hosts 1 to 8 over a coarse grid of three (1, 3, 8: geometric) and a tolerance wider than the range (no
    bisection): the answer is the best feasible probe, and the search is bound when it is the range's bad end."""
    search = Refinement(goal, 1, 8, integer=True, tolerance=100, coarse=3)
    assert search.probes() == [1.0, 3.0, 8.0]
    for value, met in feasible.items():
        search.observe(float(value), met)
    assert search.probes() == []
    assert (search.answer, search.status) == (answer, status)
