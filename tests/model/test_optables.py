"""Measured operator tables (simroute.model.optables, simroute.model.opstep): interpolation on the data's own
grid, what each answer rests on, the monotone fit, and the table-driven iteration against the shipped tables.

Each shipped op kind: a curve through one selection of the table (model shapes on the grid) gives back every
measured point within 2% of its isotonic fit, every point the fit left in place within 2% of the measured
value, and no bias over the table (mean log deviation within 1%)."""

from __future__ import annotations

import collections
import math
import zlib

import numpy as np
import pytest

from simroute.calib import load_profile, shipped_dir
from simroute.calib.optables import load_operator_tables
from simroute.model.optables import (SCHEMA, Curve, Lookup, OpKind, OpTable, Surface, TableMiss,
                                     gemm_rows_no_faster_than, isotonic)
from simroute.model.steptime import BatchShape

OPS = shipped_dir() / "ops"
H200 = OPS / "h200-sxm" / "sglang-0.5.14"
H100 = OPS / "h100-sxm" / "sglang-0.5.14"
AXIS = {OpKind.GEMM: "m", OpKind.MOE: "tokens", OpKind.ATTENTION_PREFILL: "isl", OpKind.ATTENTION_DECODE: "context",
        OpKind.MLA_PREFILL: "isl", OpKind.MLA_DECODE: "context", OpKind.MLA_BMM: "tokens",
        OpKind.ALLREDUCE: "message_elements"}
TWO_PERCENT = math.log(1.02)


@pytest.fixture(scope="module")
def h200():
    return load_operator_tables(H200)


def _selections(table: OpTable, axis: str, count: int, seed: int):
    """`count` selections (categorical values + the other numeric coordinates) with at least 4 axis points."""
    cats, nums = SCHEMA[table.kind]
    others = [n for n in nums if n != axis]
    keys = zip(*(table.categorical[c].tolist() for c in cats), *(table.numeric[c].tolist() for c in others))
    groups: dict[tuple, list[int]] = collections.defaultdict(list)
    for row, key in enumerate(keys):
        groups[key].append(row)
    candidates = sorted(k for k, rows in groups.items() if len(rows) >= 4)
    rng = np.random.default_rng(seed)
    for pick in rng.choice(len(candidates), size=min(count, len(candidates)), replace=False):
        key = candidates[pick]
        yield dict(zip(cats, key[:len(cats)])), dict(zip(others, key[len(cats):])), groups[key]


@pytest.mark.parametrize("kind", list(AXIS), ids=lambda k: k.value)
def test_table_points_reproduced_by_the_interpolation(h200, kind):
    table = h200.get(kind)
    axis = AXIS[kind]
    deviations, exact_points = [], 0
    for where, fixed, rows in _selections(table, axis, 12, seed=zlib.crc32(kind.value.encode())):
        curve = table.curve(axis, fixed, where)
        assert curve.status is Lookup.MEASURED                   # every fixed coordinate is a grid value
        order = np.argsort(table.numeric[axis][rows])
        xs = table.numeric[axis][rows][order]
        measured = np.log(table.latency_us[rows][order] * 1e-6)
        keep = xs > 0
        xs, measured = xs[keep], measured[keep]
        fit = np.asarray(isotonic(measured.tolist()))
        got = np.log([curve.seconds(x) for x in xs])
        assert np.all(np.abs(got - fit) < TWO_PERCENT)            # the curve goes through its fitted points
        assert np.all(np.diff(got) >= -1e-12)                     # and is monotone
        untouched = np.abs(fit - measured) < 1e-12               # points the monotone fit left as measured
        assert np.all(np.abs(got - measured)[untouched] < TWO_PERCENT)
        exact_points += int(untouched.sum())
        assert sum(abs(a - b) > TWO_PERCENT for a, b in zip(fit, measured)) == curve.adjusted
        deviations.extend(got - measured)
    assert exact_points > 0                                     # measured points given back as measured
    assert abs(float(np.mean(deviations))) < 0.01               # the monotone fit adds no bias
    assert [curve.lookup(x)[1] for x in (xs[0], xs[-1])] == [Lookup.MEASURED, Lookup.MEASURED]


def _toy(latencies: dict[float, float]) -> OpTable:
    xs = sorted(latencies)
    return OpTable(OpKind.MLA_BMM, {"stage": np.array(["pre"] * len(xs)), "dtype": np.array(["bf16"] * len(xs))},
                   {"tokens": np.array(xs, dtype=float), "heads": np.full(len(xs), 16.0)},
                   np.array([latencies[x] for x in xs], dtype=float))


def test_log_log_interpolation_extrapolation_and_what_each_rests_on():
    table = _toy({1: 10.0, 4: 10.0, 16: 40.0, 64: 160.0})
    curve = table.curve("tokens", {"heads": 16}, {"stage": "pre", "dtype": "bf16"})
    assert curve.lookup(4) == (pytest.approx(10e-6), Lookup.MEASURED)
    # between 4 and 16 on a log-log line of slope 1: 8 tokens take 20 us
    assert curve.lookup(8) == (pytest.approx(20e-6), Lookup.INTERPOLATED)
    # past the grid along the last segment (slope 1), flagged, never clamped at the last point
    assert curve.lookup(256) == (pytest.approx(640e-6), Lookup.EXTRAPOLATED)
    # below the grid: the smallest launch's time, flagged
    assert curve.lookup(0.5) == (pytest.approx(10e-6), Lookup.EXTRAPOLATED)
    assert curve.seconds(0) == 0.0
    # a fixed coordinate between grid values: log-log between the two rows, and the status says so
    two = OpTable(OpKind.MLA_BMM, {"stage": np.array(["pre"] * 4), "dtype": np.array(["bf16"] * 4)},
                  {"tokens": np.array([1.0, 2.0, 1.0, 2.0]), "heads": np.array([16.0, 16.0, 64.0, 64.0])},
                  np.array([10.0, 20.0, 40.0, 80.0]))
    mid = two.curve("tokens", {"heads": 32}, {"stage": "pre", "dtype": "bf16"})
    assert mid.status is Lookup.INTERPOLATED and mid.seconds(1) == pytest.approx(20e-6)
    past = two.curve("tokens", {"heads": 128}, {"stage": "pre", "dtype": "bf16"})
    assert past.status is Lookup.EXTRAPOLATED and past.seconds(1) == pytest.approx(80e-6)
    with pytest.raises(TableMiss):
        two.curve("tokens", {"heads": 16}, {"stage": "post", "dtype": "bf16"})


def test_isotonic_fit_pools_violators_to_their_mean():
    assert isotonic([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert isotonic([5.0, 1.0, 0.0]) == [2.0, 2.0, 2.0]
    assert isotonic([1.0, 2.0]) == [1.0, 2.0]
    curve = Curve.from_points([1, 2, 4], [4e-6, 1e-6, 8e-6])     # geometric mean of the violating pair: 2 us
    assert curve.seconds(1) == pytest.approx(2e-6) == curve.seconds(2) and curve.adjusted == 2


def test_surface_monotone_in_batch_and_context(h200):
    surface = Surface.from_table(h200.get(OpKind.MLA_DECODE), "batch", "context", {"heads": 16}, {"kv_dtype": "bf16"})
    batches = [1, 2, 3, 8, 24, 64, 100, 256, 1024]
    contexts = [16, 100, 1000, 4096, 10_000, 32_768, 131_072]
    grid = np.array([[surface.seconds(b, c) for c in contexts] for b in batches])
    assert np.all(np.diff(grid, axis=0) >= -1e-15) and np.all(np.diff(grid, axis=1) >= -1e-15)
    # a grid point of the table is given back within 2% where the table itself is monotone around it
    table = h200.get(OpKind.MLA_DECODE)
    rows = ((table.numeric["batch"] == 8) & (table.numeric["context"] == 4096) & (table.numeric["heads"] == 16)
            & (table.categorical["kv_dtype"] == "bf16"))
    assert surface.seconds(8, 4096) == pytest.approx(float(table.latency_us[rows][0]) * 1e-6, rel=0.02)
    assert surface.lookup(8, 4096)[1] is Lookup.MEASURED
    assert surface.lookup(8, 200_000)[1] is Lookup.EXTRAPOLATED
    assert surface.lookup(5, 4096)[1] is Lookup.INTERPOLATED


def _model(name: str, gpu: str, tp: int, profile: str = "paper-all", tables: bool = True):
    prof = load_profile(profile)
    spec = load_profile(shipped_dir() / "gpus" / f"{gpu}.yaml").gpu_spec(gpu, tables=tables)
    return prof.step_model(name, tp=tp, gpu_spec=spec, intra_host_fabric="h100-nvlink4" if tp > 1 else None)


@pytest.fixture(scope="module")
def v3():
    return _model("deepseek-v3", "h200-sxm", 8)


def test_every_term_of_the_default_regime_reads_a_table(v3):
    terms = v3.iteration(BatchShape.uniform(8, 4096))
    for term in ("linear", "attention", "allreduce", "lm_head"):
        assert terms.lookups[term] in ("measured", "interpolated"), term
    assert set(terms.sources["linear"].split(", ")) == {"gemm", "mla_bmm", "moe"}
    assert terms.sources["attention"].startswith("mla_decode (h200-sxm/")
    assert terms.sources["allreduce"].startswith("allreduce (h200-sxm/")
    assert terms.sources["lm_head"].startswith("gemm (h200-sxm/")
    assert terms.sources["elementwise"] == "roofline" == terms.lookups["elementwise"]
    # the same iteration on the hot path
    b = BatchShape.uniform(8, 4096)
    assert v3.iteration_s(b.new_tokens, b.sequences, b.kv_read_tokens, b.attention_pairs, b.prefill_pairs,
                          b.decode_sequences) == pytest.approx(terms.iteration_s, rel=1e-12)
    # past the attention table's context grid (131,072): flagged extrapolated
    assert v3.iteration(BatchShape.uniform(1, 300_000)).lookups["attention"] == "extrapolated"


@pytest.mark.parametrize("model, gpu, tp", [("deepseek-v3", "h200-sxm", 8), ("llama-3.1-70b", "h100-sxm", 4),
                                            ("llama-3.1-8b", "h100-sxm", 1)])
def test_measured_iteration_monotone_in_tokens_batch_and_context(model, gpu, tp):
    step = _model(model, gpu, tp)
    decode = [step.iteration(BatchShape.uniform(b, 4096)).iteration_s for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    context = [step.iteration(BatchShape.uniform(16, c)).iteration_s for c in (128, 1024, 4096, 16_384, 65_536)]
    prefill = [step.iteration(BatchShape.uniform(0, 0, prefill_tokens=t)).iteration_s
               for t in (16, 128, 512, 1024, 2048, 4096, 8192, 16_384)]
    for series in (decode, context, prefill):
        assert all(b >= a for a, b in zip(series, series[1:])), series


def test_no_term_below_its_kernel_floor(v3):
    floor = v3.gpu.kernel_floor_s
    assert floor > 0
    tiny = v3.iteration(BatchShape.uniform(1, 2))
    assert tiny.attention_s_per_layer >= floor
    assert tiny.allreduce_s_per_layer >= 2 * floor * 0.99          # two all-reduces a layer
    assert tiny.lm_head_s >= floor
    # a layer launches at least its GEMMs and its elementwise kernels, each no faster than the floor
    assert tiny.linear_s_per_layer >= 4 * floor
    assert tiny.elementwise_s_per_layer >= 3 * floor


def test_the_tables_replace_the_roofline_where_they_cover_it():
    """The point of the tables: the datasheet roofline was too fast at low batch (kernel floors it cannot see)."""
    measured, roofline = _model("deepseek-v3", "h200-sxm", 8), _model("deepseek-v3", "h200-sxm", 8, tables=False)
    one = BatchShape.uniform(1, 4096)
    assert measured.iteration(one).iteration_s > 1.3 * roofline.iteration(one).iteration_s
    assert roofline.iteration(one).lookups["linear"] == "roofline"


def test_a_shape_measured_twice_reads_the_geometric_mean_of_its_measurements():
    table = OpTable(OpKind.MLA_BMM, {"stage": np.array(["pre"] * 4), "dtype": np.array(["bf16"] * 4)},
                    {"tokens": np.array([1.0, 1.0, 2.0, 2.0]), "heads": np.full(4, 16.0)},
                    np.array([10.0, 40.0, 30.0, 30.0]))
    curve = table.curve("tokens", {"heads": 16}, {"stage": "pre", "dtype": "bf16"})
    assert curve.seconds(1) == pytest.approx(20e-6) and curve.seconds(2) == pytest.approx(30e-6)


def test_a_prefill_table_of_one_batch_size_scales_with_the_sequences_and_says_so():
    """A probe times prefill one sequence at a time: two sequences cost twice one (independent sequences one
    after another, an upper bound), flagged extrapolated; the measured batch is read as measured."""
    isl = np.array([128.0, 1024.0, 4096.0])
    table = OpTable(OpKind.MLA_PREFILL, {"kv_dtype": np.array(["bf16"] * 3)},
                    {"batch": np.ones(3), "isl": isl, "heads": np.full(3, 16.0)}, np.array([20.0, 100.0, 900.0]))
    with pytest.raises(TableMiss):
        Surface.from_table(table, "batch", "isl", {"heads": 16}, {"kv_dtype": "bf16"})
    surface = Surface.from_table(table, "batch", "isl", {"heads": 16}, {"kv_dtype": "bf16"}, one_row_scales=True)
    assert surface.lookup(1, 1024) == (pytest.approx(100e-6), Lookup.MEASURED)
    assert surface.lookup(2, 1024) == (pytest.approx(200e-6), Lookup.EXTRAPOLATED)
    assert surface.lookup(8, 1024) == (pytest.approx(800e-6), Lookup.EXTRAPOLATED)
    assert surface.lookup(3, 4096)[1] is Lookup.EXTRAPOLATED


@pytest.mark.parametrize("directory", [H200, OPS / "a100-80gb" / "vllm-0.14.0"], ids=["h200-sglang", "a100-vllm"])
def test_label_columns_read_as_codes_answer_as_the_str_arrays_do(directory):
    """A loaded table keeps its labels as Parquet's codes (LabelColumns): loading builds no str array, and the
    str array built on first use, and every row selection by label, equal what the file's values give read
    row by row (a label the table lacks selects nothing)."""
    import pyarrow.parquet as pq
    from simroute.model.optables import LabelColumns
    tables = load_operator_tables(directory)
    for kind, table in tables.tables.items():
        assert isinstance(table.categorical, LabelColumns) and not table.categorical._built, kind
        file = pq.ParquetFile(directory / f"{kind.value}.parquet").read()
        for column in SCHEMA[kind][0]:
            expected = np.asarray(file.column(column).to_pylist(), dtype=str)
            for label in sorted(set(expected.tolist())) + ["no-such-label"]:
                assert np.array_equal(table.categorical.equal(column, label), expected == label), (kind, column)
            assert table.categorical[column].dtype == expected.dtype
            assert np.array_equal(table.categorical[column], expected), (kind, column)


def test_label_columns_of_several_chunks_and_repeated_dictionary_entries():
    """A column of several chunks (each its own dictionary, narrow int8 indices) gets one list of labels; a
    label two chunks both hold selects its rows in both."""
    import pyarrow as pa
    from simroute.calib.optables import _coded, _labels, _used_labels
    from simroute.model.optables import LabelColumns
    kind = pa.dictionary(pa.int8(), pa.string())
    column = pa.chunked_array([pa.array(["a", "b", "a"]).dictionary_encode().cast(kind),
                               pa.array(["c", "a"]).dictionary_encode().cast(kind)])
    labels, codes = _coded(column)
    coded = LabelColumns({"x": (labels, codes)})
    assert coded["x"].tolist() == _labels(column).tolist() == ["a", "b", "a", "c", "a"]
    assert coded.equal("x", "a").tolist() == [True, False, True, False, True]
    assert _used_labels(labels, codes) == {"a", "b", "c"}
    assert _coded(pa.chunked_array([pa.array(["a"])])) is None      # plain text: read as it is


def test_gemm_rows_no_faster_than_a_flop_rate_by_hand():
    """Each row of the named dtype takes at least 2 m n k / rate; rows already slower and rows of other dtypes keep
    their latency; the result says what bounded it. 2 x 4096 x 1024 x 1024 FLOPs at 1 PFLOP/s = 8.589934592 us."""
    table = OpTable(OpKind.GEMM, {"dtype": np.array(["fp8_block", "fp8_block", "bf16", "fp8_block"])},
                    {"m": np.array([4096.0, 8.0, 4096.0, 4096.0]), "n": np.array([1024.0, 1024.0, 1024.0, 1024.0]),
                     "k": np.array([1024.0, 1024.0, 1024.0, 1024.0])},
                    np.array([5.0, 3.0, 5.0, 20.0]), {"file": "toy.parquet"})
    bounded = gemm_rows_no_faster_than(table, "fp8_block", 1e15, "a published rate")
    assert bounded.latency_us.tolist() == pytest.approx([8.589934592, 3.0, 5.0, 20.0])
    assert table.latency_us.tolist() == [5.0, 3.0, 5.0, 20.0]              # the loaded table is not touched
    assert "fp8_block rows no faster than 1000 TFLOP/s (a published rate)" in bounded.label
    with pytest.raises(ValueError, match="positive"):
        gemm_rows_no_faster_than(table, "fp8_block", 0.0, "none")
    with pytest.raises(ValueError, match="not a GEMM table"):
        gemm_rows_no_faster_than(_toy({1.0: 1.0, 2.0: 2.0}), "bf16", 1e15, "none")
