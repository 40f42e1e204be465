"""`simroute plan --parallel`: parallelism choices as one case axis of the plan's study (tp, dp_attention and ep
set together), so a plan compares TP 8 instances with DP attention 8 + EP 8 at the same GPUs."""

from __future__ import annotations

import pytest

from simroute.errors import ConfigurationError
from simroute.study.plan import PlanRequest, check_request, deployment_name, parse_parallel


@pytest.mark.parametrize("label, fields", [
    ("tp8", {"tp": 8, "dp_attention": 1, "ep": 1}),
    ("dp8ep8", {"tp": 8, "dp_attention": 8, "ep": 8}),
    ("tp16dp16ep16", {"tp": 16, "dp_attention": 16, "ep": 16}),
    ("ep8dp8", {"tp": 8, "dp_attention": 8, "ep": 8}),
    ("tp8ep8", {"tp": 8, "dp_attention": 1, "ep": 8}),
])
def test_a_choice_sets_the_fields_it_names(label, fields):
    assert parse_parallel(label) == fields


@pytest.mark.parametrize("label", ["", "tp", "dp8xp8", "tp8tp8", "tp0", "8", "tp8 dp8"])
def test_a_word_that_is_no_choice_is_refused(label):
    with pytest.raises(ValueError, match="parallelism"):
        parse_parallel(label)


def test_several_choices_are_one_case_axis_one_is_the_base():
    doc = PlanRequest(parallel=("tp8", "dp8ep8")).study_document()
    assert doc["axes"]["parallel"] == {"tp8": {"tp": 8, "dp_attention": 1, "ep": 1},
                                       "dp8ep8": {"tp": 8, "dp_attention": 8, "ep": 8}}
    assert "tp" not in doc["base"] and "tp" not in doc["axes"]
    one = PlanRequest(parallel=("dp8ep8",)).study_document()
    assert one["base"]["dp_attention"] == 8 and one["base"]["tp"] == 8 and "parallel" not in one["axes"]
    assert deployment_name({"parallel": "dp8ep8", "policy": "paper"}, ["parallel", "policy"]) == "dp8ep8, paper"


def test_parallel_and_tp_together_are_refused_naming_parallel():
    with pytest.raises(ConfigurationError) as err:
        check_request(PlanRequest(tp=(4, 8), parallel=("tp8",)))
    assert err.value.field == "--parallel"
    with pytest.raises(ConfigurationError) as err:
        check_request(PlanRequest(parallel=("tp8", "tp8")))
    assert err.value.field == "--parallel"
