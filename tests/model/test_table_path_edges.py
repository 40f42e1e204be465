"""Edges of the measured step time's table path that a mutation sample of `simroute/model/opstep.py` and
`simroute/model/optables.py` found unpinned (docs/MUTATION.md, "The operator-table path"): a surface read between
two batch rows, the custom all-reduce's 8 MiB limit, the fused MLA down-projection, an all-reduce table that
lacks one mode, the prefill attention's lookup status at and off its grid, and batches with no work."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from simroute.calib import load_profile, shipped_dir
from simroute.model.geometry import get_model
from simroute.model.opstep import _fused
from simroute.model.optables import Lookup, OpKind, OpTable, Surface
from simroute.model.steptime import BatchShape


def _toy_surface(latency_us_at_one_token: dict[float, float]) -> Surface:
    """An MLA-BMM surface over heads (rows) and tokens (columns): at each heads row, 1 and 2 tokens take the
    given time and twice it."""
    heads = sorted(latency_us_at_one_token)
    rows = [(head, tokens, latency_us_at_one_token[head] * tokens) for head in heads for tokens in (1.0, 2.0)]
    head_col, token_col, latency_col = (np.array(column) for column in zip(*rows))
    table = OpTable(OpKind.MLA_BMM, {"stage": np.array(["pre"] * len(rows)), "dtype": np.array(["bf16"] * len(rows))},
                    {"heads": head_col, "tokens": token_col}, latency_col)
    return Surface.from_table(table, "heads", "tokens", {}, {"stage": "pre", "dtype": "bf16"})


def test_a_surface_between_two_rows_is_log_log_between_those_two():
    surface = _toy_surface({16.0: 10.0, 64.0: 40.0, 256.0: 1000.0})
    assert surface.seconds(32, 1) == pytest.approx(math.sqrt(10.0 * 40.0) * 1e-6)      # the first pair's midpoint
    # the second pair's midpoint, not the first pair's line carried on
    assert surface.seconds(128, 1) == pytest.approx(math.sqrt(40.0 * 1000.0) * 1e-6)
    assert surface.seconds(64, 2) == pytest.approx(80e-6)                             # a grid point is its row
    assert surface.seconds(32, 0) == 0.0 and surface.seconds(0, 1) == 0.0              # no work takes no time


def _spec(gpu: str):
    """The shipped GPU entry `gpu` with its operator tables."""
    return load_profile(shipped_dir() / "gpus" / f"{gpu}.yaml").gpu_spec(gpu, tables=True)


def _step(model: str, gpu: str, tp: int, gpu_spec=None, kv_layout: str = "replicated"):
    return load_profile("paper-all").step_model(model, tp=tp, intra_host_fabric="h100-nvlink4" if tp > 1 else None,
                                                gpu_spec=gpu_spec or _spec(gpu), kv_layout=kv_layout)


def test_the_custom_all_reduce_serves_up_to_8_mib_and_nccl_past_it():
    measured = _step("llama-2-70b", "h100-sxm", 4)._measured
    limit = 8192 * 1024 // 2      # bf16 elements in SGLang's CustomAllreduce._MAX_CAR_SIZE (8 MiB), written out
    assert measured._ar_curve(False, limit) is measured._allreduce["eager"]
    assert measured._ar_curve(True, limit) is measured._allreduce["graph"]
    assert measured._ar_curve(False, limit + 1) is measured._allreduce["nccl"]
    assert measured._ar_curve(True, limit + 1) is measured._allreduce["nccl"]


def test_an_all_reduce_table_whose_graph_rows_do_not_fit_still_reads_its_eager_and_nccl_rows():
    spec = _spec("h100-sxm")
    tables = spec.operator_tables
    allreduce = tables.tables[OpKind.ALLREDUCE]
    dtype = allreduce.categorical["dtype"].copy()
    dtype[allreduce.categorical["mode"] == "graph"] = "fp32"           # graph rows, none of them bf16 messages
    relabelled = OpTable(OpKind.ALLREDUCE, {**allreduce.categorical, "dtype": dtype}, dict(allreduce.numeric),
                         allreduce.latency_us, allreduce.source)
    trimmed = dataclasses.replace(tables, tables={**tables.tables, OpKind.ALLREDUCE: relabelled})
    measured = _step("llama-2-70b", "h100-sxm", 4, dataclasses.replace(spec, operator_tables=trimmed))._measured
    assert set(measured._allreduce) == {"eager", "nccl"}
    assert measured._ar_curve(False, 1024) is measured._allreduce["eager"]    # a batch with prefill: eager rows


def test_mla_fuses_its_q_a_and_kv_a_down_projections_into_one_gemm():
    ops = get_model("deepseek-v3").linear_ops(8, "moe")
    by_name = {gemm.name: gemm for gemm in ops}
    fused = {gemm.name: gemm for gemm in _fused(ops)}
    assert "q_a" not in fused and "kv_a" not in fused
    assert fused["q_a+kv_a"].n == by_name["q_a"].n + by_name["kv_a"].n
    assert fused["q_a+kv_a"].k == by_name["q_a"].k
    assert len(fused) == len(by_name) - 1
    alone = [gemm for gemm in ops if gemm.name != "kv_a"]                        # a group with a member missing
    assert _fused(alone) == alone


def test_prefill_attention_is_measured_at_a_grid_length_and_interpolated_between():
    step = _step("llama-3.1-8b", "h100-sxm", 1)
    at_grid = step.iteration(BatchShape.uniform(prefill_tokens=512))
    between = step.iteration(BatchShape.uniform(prefill_tokens=600))
    assert at_grid.lookups["attention"] == Lookup.MEASURED.value
    assert between.lookups["attention"] == Lookup.INTERPOLATED.value


def test_a_batch_with_no_new_tokens_launches_no_all_reduce():
    measured = _step("llama-2-70b", "h100-sxm", 4)._measured
    _linear, allreduce, _head = measured.token_terms_s(0.0, 0.0, 0.0)
    assert allreduce == 0.0
    assert measured.token_terms_s(1.0, 1.0, 1.0)[1] > 0


def test_tpla_attention_with_nothing_to_attend_costs_nothing():
    measured = _step("deepseek-v3", "h200-sxm", 8, kv_layout="tpla")._measured
    assert measured.kv_shards == 8
    assert measured.attention_s(0.0, 0.0, 0.0, 0.0, 0.0) == 0.0
    assert measured.attention_s(1.0, 4096.0, 0.0, 0.0, 0.0) >= measured.kernel_floor_s
