"""Arrow columns as NumPy arrays without pandas.

pyarrow's own conversions (`Array.to_numpy`, `ChunkedArray.to_numpy`, `pa.array` of a list) import pandas on
their first use, whether or not pandas is needed: 0.25-0.4 s of CPU on this 2-core box, more than the whole
default `simroute run` spends simulating. A run reads its trace before its first event through these, so it
reaches that event without pandas. The conversions read the column's buffers: a copy-free view where
pyarrow's would be one, the same values and dtype.
"""

from __future__ import annotations

import functools
from itertools import chain
from typing import Any

import numpy as np


def _chunks(column: Any) -> list[Any]:
    return list(column.chunks) if hasattr(column, "chunks") else [column]


def _primitive(chunk: Any) -> np.ndarray | None:
    """One chunk's values as NumPy, or None where the buffers cannot be read directly (nulls, other types)."""
    import pyarrow as pa
    kind = chunk.type
    if chunk.null_count:
        return None
    if pa.types.is_boolean(kind):
        bits = np.frombuffer(chunk.buffers()[1], dtype=np.uint8)
        return np.unpackbits(bits, bitorder="little")[chunk.offset:chunk.offset + len(chunk)].astype(bool)
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        dtype = np.dtype(kind.to_pandas_dtype())
        if not len(chunk):
            return np.empty(0, dtype=dtype)
        return np.frombuffer(chunk.buffers()[1], dtype=dtype, count=len(chunk), offset=chunk.offset * dtype.itemsize)
    return None


def to_numpy(column: Any) -> np.ndarray:
    """An Arrow Array or ChunkedArray of numbers or booleans without nulls as a NumPy array (read-only where it
    views the buffers); any other column through pyarrow's `to_numpy` (which imports pandas)."""
    parts = [_primitive(chunk) for chunk in _chunks(column)]
    if any(part is None for part in parts):
        return column.to_numpy(zero_copy_only=False)
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return np.empty(0, dtype=np.dtype(column.type.to_pandas_dtype()))
    return np.concatenate(parts)


def list_offsets(column: Any) -> np.ndarray:
    """A list Array's offsets (len + 1 values, relative to its flattened values) as NumPy int64."""
    offsets = to_numpy(column.offsets).astype(np.int64)
    return offsets - offsets[0] if len(offsets) else offsets


def list_lengths(column: Any) -> np.ndarray:
    """Each list's length, over every chunk of a list Array or ChunkedArray (a null list counts 0)."""
    parts = []
    for chunk in _chunks(column):
        lengths = np.diff(to_numpy(chunk.offsets).astype(np.int64))
        if chunk.null_count:
            lengths[to_numpy(chunk.is_null())] = 0
        parts.append(lengths)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def list_values(column: Any) -> np.ndarray:
    """The flattened values of a list Array or ChunkedArray (each chunk's slice only) as NumPy, as `flatten` gives
    them (which imports pyarrow.compute: read here between the first and last offsets)."""
    parts = []
    for chunk in _chunks(column):
        if chunk.null_count:
            parts.append(to_numpy(chunk.flatten()))
            continue
        offsets = to_numpy(chunk.offsets)
        first, last = (int(offsets[0]), int(offsets[-1])) if len(offsets) else (0, 0)
        parts.append(to_numpy(chunk.values.slice(first, last - first)))
    return np.concatenate(parts) if len(parts) != 1 else parts[0]


def list_null_values(column: Any) -> int:
    """Null values inside the lists of a list Array or ChunkedArray (each chunk's slice only)."""
    total = 0
    for chunk in _chunks(column):
        if chunk.null_count:
            total += chunk.flatten().null_count
            continue
        offsets = to_numpy(chunk.offsets)
        if len(offsets):
            total += chunk.values.slice(int(offsets[0]), int(offsets[-1]) - int(offsets[0])).null_count
    return total


def filled(column: Any, value: Any) -> np.ndarray:
    """`to_numpy` of the column with its nulls (if any) read as `value` (pyarrow's `fill_null`, only where needed:
    it loads pyarrow.compute)."""
    return to_numpy(column if not column.null_count else column.fill_null(value))


# ---- building tables without pandas -------------------------------------------------------------------------
# `pa.array` / `pa.table` of NumPy arrays or lists import pandas on their first call as well (0.25-0.3 s of the
# default run's CPU, all of it after the last event). The builders below assemble the same arrays from their
# buffers; anything they do not cover goes through pyarrow's own conversion.


def _buffer(values: np.ndarray) -> Any:
    import pyarrow as pa
    return pa.py_buffer(np.ascontiguousarray(values))


def _validity(valid: np.ndarray) -> Any:
    """A validity bitmap (None where every value is valid)."""
    return None if valid.all() else _buffer(np.packbits(valid, bitorder="little"))


def _text(values: Any, large: bool) -> Any:
    """A string (or large_string) Array of Python str values and None (null)."""
    import pyarrow as pa
    values = values if isinstance(values, list) else list(values)
    validity = None
    if values.count(None):      # (C loops where there is no null: a DP run's flow table has ~10^5-10^6 rows)
        valid = np.fromiter((value is not None for value in values), dtype=bool, count=len(values))
        validity = _validity(valid)
        values = ["" if value is None else value for value in values]
    encoded = list(map(str.encode, values))
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64 if large else np.int32)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    return pa.Array.from_buffers(pa.large_string() if large else pa.string(), len(encoded),
                                 [validity, _buffer(offsets), pa.py_buffer(b"".join(encoded))])


def array(values: Any) -> Any:
    """`pa.array(values)` without pandas for a 1-D NumPy array of booleans, integers, floats or text, or a list of
    Python str: the same type and values (NaN stays a value, as pyarrow keeps it); any other input through
    `pa.array`."""
    import pyarrow as pa
    if isinstance(values, pa.Array):
        return values
    if isinstance(values, list) and values and all(type(value) is str for value in values):
        return _text(values, large=False)
    if not isinstance(values, np.ndarray) or values.ndim != 1 or not values.dtype.isnative:
        return pa.array(values)
    kind = values.dtype.kind
    if kind == "b":
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, _buffer(np.packbits(values, bitorder="little"))])
    if kind in "iuf" and values.dtype.itemsize in (1, 2, 4, 8) and not (kind == "f" and values.dtype.itemsize == 1):
        return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, _buffer(values)])
    if kind == "U":
        return _text(values.tolist(), large=False)
    return pa.array(values)


def table(columns: dict[str, Any]) -> Any:
    """`pa.table(columns)` with each column through `array` (no pandas for the columns it covers)."""
    import pyarrow as pa
    return pa.Table.from_arrays([array(values) for values in columns.values()], names=list(columns))


@functools.lru_cache(maxsize=1)
def _pandas_version() -> str | None:
    """The installed pandas's version, read from its distribution (no import), None where it is not installed."""
    from importlib import metadata
    try:
        return metadata.version("pandas")
    except metadata.PackageNotFoundError:
        return None


def _pandas_major() -> int | None:
    version = _pandas_version()
    try:
        return int(version.split(".")[0]) if version is not None else None
    except ValueError:
        return None


def _frame_column(values: Any, from_rows: bool = False) -> tuple[Any, str, str] | None:
    """One column as pandas >= 3 types it in a DataFrame and pyarrow's `from_pandas` converts it (NaN and None
    read as null): (Arrow array, pandas_type, numpy_type) for the kinds a simulation's tables hold (int64 and
    float64 numbers, text with None, lists of int64, and no rows: an empty list is float64 in a DataFrame of
    columns, of no type in one of rows), None for any other (the caller uses pandas)."""
    import pyarrow as pa
    if isinstance(values, np.ndarray):
        if values.ndim != 1 or values.dtype not in (np.dtype(np.int64), np.dtype(np.float64)):
            return None
        if values.dtype.kind == "f" and np.isnan(values).any():
            return None
        name = str(values.dtype)
        return array(values), name, name
    values = list(values)
    if not values:
        if from_rows:
            return pa.nulls(0), "empty", "object"
        return array(np.zeros(0)), "float64", "float64"
    kinds = set(map(type, values))
    if kinds == {int}:
        try:
            ints = np.array(values, dtype=np.int64)
        except OverflowError:       # outside int64: pandas makes it another dtype
            return None
        return array(ints), "int64", "int64"
    if kinds <= {int, float} and float in kinds:
        floats = np.array(values, dtype=np.float64)
        return (array(floats), "float64", "float64") if not np.isnan(floats).any() else None
    if kinds <= {str, type(None)} and str in kinds:
        return _text(values, large=True), "object", "str"
    if kinds <= {list, tuple}:
        items = list(chain.from_iterable(values))
        if not items or set(map(type, items)) != {int}:
            return None
        offsets = np.zeros(len(values) + 1, dtype=np.int32)
        np.cumsum(np.fromiter(map(len, values), dtype=np.int64, count=len(values)), out=offsets[1:])
        flat = _frame_column(items)
        if flat is None:
            return None
        return pa.ListArray.from_arrays(array(offsets), flat[0]), "list[int64]", "object"
    return None


def frame_table(columns: dict[str, Any], from_rows: bool = False) -> Any | None:
    """`pa.Table.from_pandas(pd.DataFrame(columns), preserve_index=False)` (with `from_rows`, of
    `pd.DataFrame(rows, columns=...)`, the rows the columns came from) built without pandas, its `pandas` schema
    metadata included (so the Parquet files are byte for byte those pandas would give), where every column is
    of a kind `_frame_column` covers and the installed pandas is 3 or later (whose text dtype is Arrow's
    large_string); else None, and the caller goes through pandas."""
    import json

    import pyarrow as pa
    major = _pandas_major()
    if major is None or major < 3:
        return None
    converted = {}
    for name, values in columns.items():
        column = _frame_column(values, from_rows)
        if column is None:
            return None
        converted[name] = column
    lengths = {len(column[0]) for column in converted.values()}
    if len(lengths) != 1:
        return None
    note = {"index_columns": [], "column_indexes": [],
            "columns": [{"name": name, "field_name": name, "pandas_type": pandas_type, "numpy_type": numpy_type,
                         "metadata": None} for name, (_, pandas_type, numpy_type) in converted.items()],
            "attributes": {}, "creator": {"library": "pyarrow", "version": pa.__version__},
            "pandas_version": _pandas_version()}
    arrays = pa.Table.from_arrays([column[0] for column in converted.values()], names=list(converted))
    return arrays.replace_schema_metadata({b"pandas": json.dumps(note).encode("utf8")})


def rows_as_columns(rows: list[tuple], names: tuple[str, ...]) -> dict[str, list]:
    """Row tuples as named columns (what `pd.DataFrame(rows, columns=names)` holds)."""
    columns: dict[str, list] = {name: [] for name in names}
    for row in rows:
        for name, value in zip(names, row):
            columns[name].append(value)
    return columns


def pandas_like_table(columns: dict[str, Any], rows: list[tuple] | None = None) -> Any:
    """The Arrow table pandas gives for `columns` (`pa.Table.from_pandas` of `pd.DataFrame(columns)`, or of
    `pd.DataFrame(rows, columns=...)` where the columns came from `rows`): built without pandas where
    `frame_table` covers the columns, else through pandas as before."""
    built = frame_table(columns, from_rows=rows is not None)
    if built is not None:
        return built
    import pandas as pd
    import pyarrow as pa
    frame = pd.DataFrame(columns) if rows is None else pd.DataFrame(rows, columns=list(columns))
    return pa.Table.from_pandas(frame, preserve_index=False)


def group_sums(keys: list[Any], values: np.ndarray) -> dict[Any, float]:
    """The sum of `values` per key, keys in sorted order: pandas' `Series.groupby(keys).sum()` without pandas,
    summed as pandas sums a group (in row order, with Kahan's compensation; an infinite value resets it), so
    the summary's figures are the same to the last bit."""
    sums: dict[Any, float] = {}
    compensation: dict[Any, float] = {}
    for key, value in zip(keys, np.asarray(values, dtype=np.float64).tolist()):
        if value != value:          # NaN: skipped, as pandas skips it
            sums.setdefault(key, 0.0)
            compensation.setdefault(key, 0.0)
            continue
        total, carry = sums.get(key, 0.0), compensation.get(key, 0.0)
        y = value - carry
        t = total + y
        carry = t - total - y
        compensation[key] = 0.0 if carry != carry else carry
        sums[key] = t
    return {key: sums[key] for key in sorted(sums)}
