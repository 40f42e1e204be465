"""Arrow columns as NumPy arrays without pandas.

pyarrow's own conversions (`Array.to_numpy`, `ChunkedArray.to_numpy`, `pa.array` of a list) import pandas on
their first use, whether or not pandas is needed: 0.25-0.4 s of CPU on this 2-core box, more than the whole
default `simroute run` spends simulating. A run reads its trace before its first event through these, so it
reaches that event without pandas. The conversions read the column's buffers: a copy-free view where
pyarrow's would be one, the same values and dtype.
"""

from __future__ import annotations

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
