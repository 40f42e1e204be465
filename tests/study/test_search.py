"""SLO parsing and the bisection (Vidur-style capacity search), then a search study end to end."""

from __future__ import annotations

import json

import pytest

from simroute.study import load_study, run_study
from simroute.study.search import Bisection, parse_slo
from studyutil import write_study


def test_parse_slo():
    c = parse_slo("p99 ttft_ms <= 50")
    assert (c.column, c.op, c.value) == ("ttft_ms_p99", "<=", 50.0)
    assert parse_slo("slo_attainment >= 0.99").column == "slo_attainment"
    with pytest.raises(ValueError):
        parse_slo("p99 latency <= 3")


def _solve(goal: str, answer: float, lo=1, hi=64, integer=True, tol=1.0) -> Bisection:
    b = Bisection(goal, lo, hi, integer, tol)
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
