"""The `elementwise` operator-table kind (docs/STEP_TIME.md, "Elementwise kernels"): the step model reads each of a
layer's memory-bound kernels (steptime.elementwise_kernels, the one list) from the table at its width, raised to the
GPU's kernel floor, and falls back to the roofline kernel by kernel; every kernel says what it rests on."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from simroute.calib import load_profile, shipped_dir
from simroute.model.geometry import get_model
from simroute.model.optables import ELEMENTWISE_KERNEL_NAMES, OperatorTables, OpKind, OpTable
from simroute.model.steptime import BatchShape, StepTimeModel, elementwise_kernels

TOKEN_GRID = (1, 4, 16, 64, 256, 1024, 4096, 16384)
MODEL, GPU = "llama-3.1-8b", "h100-sxm"


def _synthetic_us(tokens: float, width: float) -> float:
    """A made-up kernel: 6 us to launch plus 2 bytes per element at 2 TB/s, read and written once."""
    return 6.0 + tokens * width * 2 * 2 / 2e12 * 1e6


def _elementwise_table(widths: dict[str, list[int]], latency=_synthetic_us) -> OpTable:
    kernels, dtypes, tokens, width_col, latency_col = [], [], [], [], []
    for kernel, kernel_widths in widths.items():
        for width in kernel_widths:
            for count in TOKEN_GRID:
                kernels.append(kernel)
                dtypes.append("bf16")
                tokens.append(float(count))
                width_col.append(float(width))
                latency_col.append(latency(count, width))
    return OpTable(OpKind.ELEMENTWISE, {"kernel": np.asarray(kernels), "dtype": np.asarray(dtypes)},
                   {"tokens": np.asarray(tokens), "width": np.asarray(width_col)}, np.asarray(latency_col),
                   {"file": "test/elementwise.parquet"})


def _model_widths(skip: tuple[str, ...] = ()) -> dict[str, list[int]]:
    """Each kernel the model launches at its own width and at twice it (a grid of two widths)."""
    widths: dict[str, set[int]] = {}
    for kind in get_model(MODEL).layer_kinds():
        for kernel in elementwise_kernels(get_model(MODEL), 1, kind):
            widths.setdefault(kernel.kernel, set()).update({kernel.width, 2 * kernel.width})
    return {name: sorted(found) for name, found in widths.items() if name not in skip}


def _step(table: OpTable | None, floor_us: float | None = None) -> StepTimeModel:
    gpu_file = load_profile(shipped_dir() / "gpus" / f"{GPU}.yaml")
    spec = gpu_file.gpu_spec(GPU)
    shipped = spec.operator_tables
    assert shipped is not None and shipped.get(OpKind.ELEMENTWISE) is None      # the shipped extract has none
    if table is not None:
        merged = OperatorTables(shipped.gpu, shipped.framework, shipped.version,
                                {**shipped.tables, OpKind.ELEMENTWISE: table}, shipped.provenance, shipped.path)
        spec = dataclasses.replace(spec, operator_tables=merged)
    if floor_us is not None:
        spec = dataclasses.replace(spec, kernel_floor_s=floor_us * 1e-6)
    return load_profile("paper-all").step_model(MODEL, tp=1, gpu_spec=spec)


def test_the_kernel_names_are_the_tables():
    names = {kernel.kernel for kind in ("dense", "moe") for model in ("llama-3.1-8b", "deepseek-v3")
             for kernel in elementwise_kernels(get_model(model), 8, kind)}
    assert names == set(ELEMENTWISE_KERNEL_NAMES)


def test_table_points_reproduced_within_two_percent():
    step = _step(_elementwise_table(_model_widths()))
    for tokens in TOKEN_GRID:
        rows = step.iteration(BatchShape.uniform(prefill_tokens=tokens)).elementwise_kernels
        assert len(rows) == 4                                   # 2 add_rmsnorms, RoPE, the FFN activation
        for row in rows:
            expected_ms = row["layers"] * _synthetic_us(tokens, row["width"]) * 1e-3
            assert row["ms"] == pytest.approx(expected_ms, rel=0.02), row
            assert row["lookup"] == "measured"
            assert row["table"] == "elementwise (test/elementwise.parquet)"


def test_elementwise_term_is_the_sum_of_its_kernels_and_monotone_in_tokens():
    step = _step(_elementwise_table(_model_widths()))
    previous = 0.0
    for tokens in (1, 2, 3, 5, 17, 100, 300, 1000, 5000, 16384, 40000):
        terms = step.iteration(BatchShape.uniform(prefill_tokens=tokens))
        total_ms = terms.elementwise_s_per_layer * terms.layers * 1e3
        assert total_ms == pytest.approx(sum(row["ms"] for row in terms.elementwise_kernels), rel=1e-12)
        assert total_ms >= previous
        previous = total_ms
    # between grid points interpolated, past the last extrapolated (along the last segment), never clamped
    between = step.iteration(BatchShape.uniform(prefill_tokens=100))
    past = step.iteration(BatchShape.uniform(prefill_tokens=40000))
    assert {row["lookup"] for row in between.elementwise_kernels} == {"interpolated"}
    assert between.lookups["elementwise"] == "interpolated"
    assert past.lookups["elementwise"] == "extrapolated"
    last = step.iteration(BatchShape.uniform(prefill_tokens=16384))
    assert past.elementwise_s_per_layer > last.elementwise_s_per_layer * 2


def test_table_values_below_the_kernel_floor_are_raised_to_it():
    tiny = _elementwise_table(_model_widths(), latency=lambda tokens, width: 0.5 + tokens * 1e-3)
    step = _step(tiny, floor_us=2.5)
    rows = step.iteration(BatchShape.uniform(8, 1024)).elementwise_kernels
    for row in rows:
        assert row["ms"] == pytest.approx(row["layers"] * 2.5e-3, rel=1e-12), row
    assert any("kernel floor" in note and "raised to it" in note for note in step.notes)
    # the note gives the row it raised, in us: 0.5 + 1 x 1e-3 us at one token
    assert any("(0.50 us at the fewest tokens)" in note for note in step.notes)
    # above the floor, the table's own value
    big = step.iteration(BatchShape.uniform(prefill_tokens=16384)).elementwise_kernels
    assert big[0]["ms"] == pytest.approx(big[0]["layers"] * (0.5 + 16384 * 1e-3) * 1e-3, rel=0.02)


def test_a_kernel_the_table_lacks_falls_back_to_the_roofline_alone():
    step = _step(_elementwise_table(_model_widths(skip=("rope",))))
    roofline = _step(None)
    terms = step.iteration(BatchShape.uniform(prefill_tokens=256))
    by_role = {row["role"]: row for row in terms.elementwise_kernels}
    rope = by_role["rope (q and k heads)"]
    assert rope["lookup"] == "roofline" and rope["table"] == "roofline"
    roof_rows = {row["role"]: row for row in roofline.iteration(BatchShape.uniform(prefill_tokens=256)).elementwise_kernels}
    assert rope["ms"] == pytest.approx(roof_rows["rope (q and k heads)"]["ms"], rel=1e-12)
    assert by_role["input norm"]["lookup"] == "measured"
    assert terms.lookups["elementwise"] == "roofline"                 # the worst of its kernels
    assert terms.sources["elementwise"] == "elementwise (test/elementwise.parquet); roofline"
    assert any("no elementwise rope rows" in note for note in step.notes)


def test_the_shipped_tables_keep_the_roofline_for_every_kernel():
    step = _step(None)
    terms = step.iteration(BatchShape.uniform(32, 4096))
    assert terms.sources["elementwise"] == "roofline" == terms.lookups["elementwise"]
    assert {row["lookup"] for row in terms.elementwise_kernels} == {"roofline"}
    per_kernel = sum(step.elementwise_kernel_s(kernel, 32) * count for count, kernels in step.elementwise_layers
                     for kernel in kernels)
    # the one list drives the roofline total (hand count: layers x kernels x (bytes / bw + floor))
    assert terms.elementwise_s_per_layer * terms.layers == pytest.approx(per_kernel, rel=1e-12)
    geometry = step.geometry
    width_sum = 2 * 4 * geometry.hidden + 2 * (geometry.heads_q + geometry.kv_heads) * geometry.rope_dims \
        + 3 * geometry.intermediate
    by_hand = geometry.layers * (32 * width_sum * 2 / step.gpu.achievable_hbm_Bps + 4 * step.gpu.kernel_floor_s)
    assert per_kernel == pytest.approx(by_hand, rel=1e-12)
    assert not math.isnan(per_kernel)


def test_model_step_names_each_elementwise_kernels_source(cli):
    import json
    code, out, err = cli("model", "step", "--model", "deepseek-v3", "--gpu", "h200-sxm", "--tp", "8", "--tokens", "8",
                         "--decode-seqs", "8", "--context", "4096", "--json")
    assert code == 0, err
    found = json.loads(out)
    rows = found["elementwise_kernels"]
    # DeepSeek-V3: 3 dense layers and 58 MoE layers; the measured fused MoE holds the routed experts' activation
    assert [(row["kernel"], row["layers"]) for row in rows] == [
        ("add_rmsnorm", 3), ("add_rmsnorm", 3), ("rope", 3), ("rmsnorm", 3), ("silu_mul", 3),
        ("add_rmsnorm", 58), ("add_rmsnorm", 58), ("rope", 58), ("rmsnorm", 58), ("silu_mul", 58)]
    assert {(row["lookup"], row["table"]) for row in rows} == {("roofline", "roofline")}
    assert sum(row["ms"] for row in rows) == pytest.approx(found["elementwise_ms_per_layer"] * found["layers"],
                                                           rel=1e-12)
    code, out, err = cli("model", "step", "--model", "deepseek-v3", "--gpu", "h200-sxm", "--tp", "8", "--tokens", "8",
                         "--decode-seqs", "8", "--context", "4096")
    assert code == 0 and "elementwise kernels" in out and "mla latent norms (q_a, kv_a)" in out
