"""Modes are enums whose values are the words of the YAML, the flags and the output files (issue 23, item 6):
a study's search goal and status, what it keeps, the report's format, the cost model's route exchanges and
the host probe's transport. Each is parsed into its enum once, and bad words keep their one-line errors."""

from __future__ import annotations

import json

import pytest

from simroute.errors import ConfigurationError
from simroute.model.cost import CostParams, RouteExchanges
from simroute.probes.host import CHANNELS, HostTransport
from simroute.probes.registry import HOST_TRANSPORT
from simroute.study import load_study
from simroute.study.backends import Keep
from simroute.study.report import ReportFormat
from simroute.study.search import Goal, Refinement, SearchStatus

STUDY = """
name: modes
base: {{topology: fattree}}
keep: {keep}
search: {{field: replicas, goal: {goal}, lo: 1, hi: 8, slo: "p99 ttft_ms <= 100"}}
"""


def _study(tmp_path, goal: str = "min", keep: str = "summary"):
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.format(goal=goal, keep=keep))
    return load_study(path)


def test_study_words_parse_into_enums(tmp_path):
    study = _study(tmp_path)
    assert study.search.goal is Goal.MIN and study.keep is Keep.SUMMARY
    assert json.dumps({"goal": study.search.goal, "keep": study.keep}) == '{"goal": "min", "keep": "summary"}'


@pytest.mark.parametrize("goal, keep, field, message", [
    ("most", "summary", "search.goal", "must be 'max' (largest value meeting the SLO) or 'min' (fewest)"),
    ("min", "some", "keep", "must be 'full' or 'summary'")])
def test_bad_words_keep_their_errors(tmp_path, goal, keep, field, message):
    with pytest.raises(ConfigurationError) as caught:
        _study(tmp_path, goal, keep)
    assert caught.value.field == field and message in str(caught.value)


def test_search_status_is_an_enum_with_the_output_words():
    search = Refinement(Goal.MAX, 1, 4, True, 1.0)
    assert search.status is SearchStatus.RUNNING
    for probe in search.probes():
        search.observe(probe, False)
    assert search.probes() == []
    assert search.status is SearchStatus.INFEASIBLE and search.status == "infeasible" and search.done


def test_every_value_is_the_word_users_write():
    assert {mode.value for mode in ReportFormat} == {"html", "md"}
    assert {mode.value for mode in Goal} == {"max", "min"}
    assert {mode.value for mode in Keep} == {"full", "summary"}


def test_cost_params_take_the_word_or_the_enum(params):
    assert params.with_(route_exchanges="once").route_exchanges is RouteExchanges.ONCE
    assert params.with_(route_exchanges=RouteExchanges.ONCE).exchanges == 1
    assert params.with_(route_exchanges="per-layer").exchanges == params.geometry.layers
    with pytest.raises(ValueError):
        params.with_(route_exchanges="twice")


def test_every_host_transport_has_a_channel_and_the_registry_names_only_those():
    assert set(CHANNELS) == set(HostTransport)
    assert {HostTransport(word) for word in HOST_TRANSPORT.values()} == set(HostTransport)


@pytest.fixture
def params() -> CostParams:
    from simroute.calib import load_profile
    return load_profile("h100-ibgda").cost_params("deepseek-v2-lite")
