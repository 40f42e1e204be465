"""simroute.arrow reads Arrow columns as pyarrow's own conversions do (same values, same dtype), without pandas;
and the default run reaches its first simulated event without pandas, networkx or pyarrow.compute (checked by
what a fresh interpreter has imported there, not by timing: bench/bench_run_startup.py times it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from simroute.arrow import (array, filled, frame_table, list_lengths, list_null_values, list_offsets, list_values,
                            table, to_numpy)

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("values, kind", [([1, 2, 3, 4, 5], pa.int64()), ([1, 2, 3, 4, 5], pa.int16()),
                                          ([0.5, 1.5, -2.0, 3.0, 4.0], pa.float32()),
                                          ([0.5, 1.5, -2.0, 3.0, 4.0], pa.float64()),
                                          ([True, False, True, True, False], pa.bool_())])
def test_to_numpy_matches_pyarrow_on_whole_sliced_and_chunked_columns(values, kind):
    array = pa.array(values, kind)
    for column in (array, array.slice(1, 3), array.slice(3), pa.chunked_array([array.slice(0, 2), array.slice(2)]),
                   pa.chunked_array([array.slice(4), array.slice(1, 2)])):
        mine, theirs = to_numpy(column), column.to_numpy(zero_copy_only=False) if isinstance(column, pa.Array) \
            else column.to_numpy()
        assert mine.dtype == theirs.dtype
        assert mine.tolist() == theirs.tolist()


def test_to_numpy_of_an_empty_column_keeps_its_dtype():
    assert to_numpy(pa.array([], pa.int32())).dtype == np.int32
    assert to_numpy(pa.chunked_array([], pa.float64())).dtype == np.float64


def test_a_column_with_nulls_goes_through_pyarrow_and_filled_replaces_them():
    column = pa.array([1, None, 3], pa.int64())
    assert np.isnan(to_numpy(column)[1])            # pyarrow's own answer: floats, NaN for the null
    assert filled(column, -1).tolist() == [1, -1, 3]
    assert filled(pa.array([1, 2], pa.int64()), -1).tolist() == [1, 2]


def test_list_helpers_on_a_sliced_chunked_list_column_match_flatten_and_the_hand_count():
    lists = pa.array([[1, 2], [], [3], [4, 5, 6], [7]], pa.list_(pa.int64()))
    column = pa.chunked_array([lists.slice(1, 3), lists.slice(4)])     # [], [3], [4, 5, 6] | [7]
    assert list_lengths(column).tolist() == [0, 1, 3, 1]
    assert list_values(column).tolist() == [3, 4, 5, 6, 7]
    assert list_values(lists.slice(3, 2)).tolist() == lists.slice(3, 2).flatten().to_numpy().tolist() == [4, 5, 6, 7]
    assert list_offsets(lists.slice(3, 2)).tolist() == [0, 3, 4]
    with_nulls = pa.array([[1, None], None, [None]], pa.list_(pa.int64()))
    assert list_lengths(with_nulls).tolist() == [2, 0, 1]
    assert list_null_values(with_nulls) == 2
    assert list_null_values(lists) == 0


def test_list_values_of_booleans_read_the_bits_at_the_slice():
    lists = pa.array([[True, False], [False], [True, True, False]], pa.list_(pa.bool_()))
    assert list_values(lists.slice(1)).tolist() == [False, True, True, False]


STARTUP = """
import json, sys
import simpy.core
seen = {}
run = simpy.core.Environment.run
def first(self, until=None):
    seen.setdefault("loaded", [m for m in ("pandas", "networkx", "pyarrow.compute") if m in sys.modules])
    return run(self, until)
simpy.core.Environment.run = first
from simroute.cli.main import main
code = main(["run", "--max-requests", "20", "--json", "-o", sys.argv[1]])
print(json.dumps({"code": code, "loaded": seen.get("loaded"), "pandas_at_end": "pandas" in sys.modules}))
"""


def test_the_default_run_reaches_its_first_event_without_pandas_networkx_or_pyarrow_compute(tmp_path):
    done = subprocess.run([sys.executable, "-c", STARTUP, str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] == 0
    assert report["loaded"] == []
    assert report["pandas_at_end"] is False       # the outputs are written without pandas too (simroute.arrow)


def _parquet_bytes(arrow_table) -> bytes:
    import io

    import pyarrow.parquet as pq
    sink = io.BytesIO()
    pq.write_table(arrow_table, sink, compression="zstd")
    return sink.getvalue()


def test_table_gives_the_parquet_bytes_of_pyarrows_own_conversion():
    flags = np.array([True, False, True, True, False, False, True, True, True, False, True])
    columns = {"i32": np.array([1, -2, 3], np.int32), "u8": np.array([3, 4, 255], np.uint8),
               "f32": np.array([1.5, 2.0, -0.0], np.float32), "f64": np.array([1.5, np.nan, np.inf]),
               "strided": np.arange(6.0)[::2], "flags": flags[3:6], "labels": np.array(["a", "bcd", ""]),
               "text": ["x", "yy", "zzz"], "given": pa.array([7, 8, 9], pa.int16())}
    assert _parquet_bytes(table(columns)) == _parquet_bytes(pa.table(columns))
    assert table(columns).schema == pa.table(columns).schema
    assert array(np.array([], np.int64)).type == pa.int64() and len(array(np.array([], np.int64))) == 0


def test_frame_table_is_what_pandas_and_from_pandas_give_or_none():
    pd = pytest.importorskip("pandas")
    if int(pd.__version__.split(".")[0]) < 3:
        pytest.skip("frame_table builds pandas >= 3's types only (it answers None under pandas 2)")
    columns = {"fid": [1, 2, 3], "src": ["a", "b", "c"], "spine": ["s1", None, "s2"], "nbytes": [1.0, 2, 3.5],
               "links": [[1, 2], [], [3]], "cap": np.array([1.0, 2.0, 3.0]), "n": np.array([4, 5, 6])}
    mine = frame_table(columns)
    theirs = pa.Table.from_pandas(pd.DataFrame(columns), preserve_index=False)
    assert mine.equals(theirs, check_metadata=True)
    assert _parquet_bytes(mine) == _parquet_bytes(theirs)
    empty = {"fid": [], "links": [], "cap": np.zeros(0), "n": np.zeros(0, np.int64)}     # a run without flows
    assert frame_table(empty).equals(pa.Table.from_pandas(pd.DataFrame(empty), preserve_index=False),
                                     check_metadata=True)
    no_rows = pa.Table.from_pandas(pd.DataFrame([], columns=["t_s", "spine"]), preserve_index=False)
    assert frame_table({"t_s": [], "spine": []}, from_rows=True).equals(no_rows, check_metadata=True)
    rows = [(0.0, "spine0", 0), (0.5, "spine1", 2)]
    by_rows = pa.Table.from_pandas(pd.DataFrame(rows, columns=["t_s", "spine", "n"]), preserve_index=False)
    assert frame_table({"t_s": [0.0, 0.5], "spine": ["spine0", "spine1"], "n": [0, 2]}, from_rows=True).equals(
        by_rows, check_metadata=True)
    for odd in ({"x": [None, None]}, {"x": [1.0, float("nan")]}, {"x": [[], []]}, {"x": [True, False]},
                {"x": np.array([1.0, np.nan])}, {"x": [1, 2], "y": [1]}):
        assert frame_table(odd) is None, odd        # kinds it does not build: the caller goes through pandas


def test_group_sums_match_pandas_groupby_sum_to_the_last_bit():
    pd = pytest.importorskip("pandas")
    from simroute.arrow import group_sums
    rng = np.random.default_rng(3)
    values = rng.lognormal(20, 4, 500) * rng.choice([1.0, 1e-9, 1e9], 500)
    values[[10, 20]] = [np.inf, np.nan]
    keys = rng.choice(["nvlink", "leaf", "spine"], 500).tolist()
    theirs = pd.Series(values).groupby(keys).sum()
    mine = group_sums(keys, values)
    assert list(mine) == list(theirs.index)
    assert [float(theirs[k]).hex() for k in theirs.index] == [mine[k].hex() for k in mine]
    plain = group_sums(["a", "b", "a"], np.array([1.0, 2.0, 3.0]))     # by hand: a = 1 + 3, b = 2
    assert plain == {"a": 4.0, "b": 2.0}
