"""`calib.optables.check_table` on the expert-parallel kinds: DeepEP's low-latency rows carry no SM budget (`sms`
0, a column read only at exact values), while every interpolated axis stays > 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from simroute.calib.optables import columns_table
from simroute.errors import ConfigurationError
from simroute.model.optables import ZERO_SHAPES, OpKind

ROW = {"backend": ["deepep_ll"], "phase": ["dispatch"], "dtype": ["fp8"], "tokens": [64], "hidden": [7168],
       "topk": [8], "experts": [256], "ep": [16], "nodes": [2], "sms": [0], "latency_us": [58.0]}


def test_low_latency_rows_have_no_sm_budget() -> None:
    assert columns_table(OpKind.MOE_A2A, ROW, Path("moe_a2a.parquet")).num_rows == 1
    assert ZERO_SHAPES == {OpKind.MOE_A2A: frozenset({"sms"})}


@pytest.mark.parametrize("column, value, words", [
    ("sms", -1, "must be finite and >= 0"),
    ("tokens", 0, "must be finite and > 0"),
    ("nodes", float("nan"), "must be finite and > 0"),
])
def test_other_shapes_are_refused(column: str, value: float, words: str) -> None:
    with pytest.raises(ConfigurationError, match=words) as caught:
        columns_table(OpKind.MOE_A2A, {**ROW, column: [value]}, Path("moe_a2a.parquet"))
    assert caught.value.field == column
