"""SLO parsing, the capacity search (a coarse grid, then refinement; no monotonicity assumed) on constructed
evaluators, then a search study end to end."""

from __future__ import annotations

import json

import pytest

from simroute.study import load_study, run_study
from simroute.study.search import Goal, Refinement, parse_slo
from studyutil import write_study


def test_parse_slo():
    c = parse_slo("p99 ttft_ms <= 50")
    assert (c.column, c.op, c.value) == ("ttft_ms_p99", "<=", 50.0)
    assert parse_slo("slo_attainment >= 0.99").column == "slo_attainment"
    with pytest.raises(ValueError):
        parse_slo("p99 latency <= 3")


def _solve(goal: str, answer: float, lo=1, hi=64, integer=True, tol=1.0) -> Refinement:
    b = Refinement(goal, lo, hi, integer, tol)
    while not b.done:
        for x in b.probes():
            b.observe(x, x <= answer if goal == "max" else x >= answer)
    return b


@pytest.mark.parametrize("answer", [1, 2, 7, 33, 63, 64])
def test_bisection_min_finds_fewest(answer):
    b = _solve("min", answer)
    assert b.answer == answer and len(b.seen) <= 2 + 6


@pytest.mark.parametrize("answer", [1, 5, 17, 64])
def test_bisection_max_finds_largest(answer):
    assert _solve("max", answer).answer == answer


def test_bisection_edges():
    assert _solve("min", 100).status == "infeasible" and _solve("min", 100).answer is None
    assert _solve("max", 0).status == "infeasible"
    assert _solve("min", 0).status == "bound" and _solve("min", 0).answer == 1
    b = _solve("max", 12.3, lo=0.0, hi=32.0, integer=False, tol=0.5)
    assert 11.8 <= b.answer <= 12.3


def _search(feasible, goal=Goal.MIN, lo=1, hi=8, coarse=5) -> tuple[Refinement, list[float]]:
    """Run a search against a fake evaluator (`feasible(value)`), returning it and the probes in order."""
    search, order = Refinement(goal, lo, hi, True, 1.0, coarse), []
    while True:
        probes = search.probes()
        if not probes:
            return search, order
        for value in probes:
            order.append(value)
            search.observe(value, feasible(value))


def test_the_coarse_grid_spans_the_range_both_ends_included():
    assert Refinement(Goal.MIN, 1, 8, True, 1.0, 5).grid() == [1, 2, 3, 5, 8]      # geometric: 8 ** (k / 4)
    assert Refinement(Goal.MIN, 1, 64, True, 1.0, 5).grid() == [1, 3, 8, 23, 64]
    assert Refinement(Goal.MAX, 0.0, 10.0, False, 0.5, 3).grid() == [0.0, 5.0, 10.0]   # from 0: even
    assert Refinement(Goal.MIN, 1, 3, True, 1.0, 5).grid() == [1, 2, 3]             # no value twice


def test_one_host_meets_eight_do_not_the_answer_is_one_and_the_region_is_reported():
    """The README's plan bug: always-route met the SLO at 1 host and not at 8, and a bisection that trusts the
    good end (8) answered 'none within 8'."""
    search, _ = _search(lambda hosts: hosts == 1, coarse=2)
    assert (search.answer, search.status) == (1, "bound")
    assert search.nonmonotone() == [(1, 2)]          # refined: 1 meets, 2 (the next probe up) does not


def test_a_feasible_island_between_infeasible_counts_is_found_and_its_edges_refined():
    """Meets at 3 and 4 hosts only (say, 5+ hosts spread a document's holders so thin that routed fan-in
    binds). The coarse grid [1, 2, 3, 5, 8] sees 3; refinement finds 4 and stops at 5."""
    search, order = _search(lambda hosts: hosts in (3, 4))
    assert order[:5] == [1, 2, 3, 5, 8] and (search.answer, search.status) == (3, "found")
    assert search.seen == {1: False, 2: False, 3: True, 4: True, 5: False, 8: False}
    assert search.nonmonotone() == [(4, 5)]


def test_every_boundary_is_refined_not_only_the_first():
    """Feasible at 1-2, infeasible at 3-6, feasible again from 7: the answer is 1, and the dip is bounded by
    refinement on both sides."""
    search, _ = _search(lambda hosts: hosts <= 2 or hosts >= 7, lo=1, hi=16)
    assert search.answer == 1 and search.nonmonotone() == [(2, 3)]
    assert search.seen[3] is False and search.seen[6] is False and search.seen[7] is True


def test_a_monotone_metric_costs_what_a_bisection_costs():
    for answer in range(1, 65):
        search, order = _search(lambda hosts, answer=answer: hosts >= answer, lo=1, hi=64, coarse=2)
        assert search.answer == answer and search.nonmonotone() == [] and len(order) <= 2 + 6


def test_a_load_search_reports_an_infeasible_load_below_a_feasible_one():
    search, _ = _search(lambda qps: qps != 4, goal=Goal.MAX, lo=1, hi=8, coarse=2)
    assert search.answer == 8 and search.status == "bound"
    assert search.nonmonotone() == []     # both ends met: no boundary to refine, so a dip between is not seen
    search, _ = _search(lambda qps: qps in (1, 5), goal=Goal.MAX, lo=1, hi=8, coarse=5)
    assert (search.answer, search.status) == (5, "found")
    assert search.nonmonotone() == [(5, 4)]           # 5 requests/s met, the lighter 4 did not


SEARCH = """
name: search
base:
  topology: fattree
  trace: {generate: agents, params: {documents: 1, subagents: 24, requests_per_agent: 1, arrival: poisson,
                                     rate_per_agent: 2.0}}
  placement: popularity
  hot_fraction: 1.0
  policy: always-route
  route_exchanges: once
search: {field: replicas, goal: min, lo: 1, hi: 8, slo: "p99 ttft_ms <= 1000000"}
"""


def test_search_study_runs_and_resumes(tmp_path):
    s = load_study(write_study(tmp_path, SEARCH))
    first = run_study(s, tmp_path / "out", jobs=1, progress=False)
    assert first.searches[0]["answer"] == 1 and first.searches[0]["status"] == "bound"
    doc = json.loads((tmp_path / "out" / "search.json").read_text())
    assert doc[0]["answer"] == 1
    again = run_study(s, tmp_path / "out", jobs=1, progress=False)
    assert again.executed == 0 and again.skipped == first.executed
