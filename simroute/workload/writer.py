"""Streaming, atomic, deterministic trace writer.

Producers (generators, importers) hand over column batches as they go; the writer cuts them into
fixed-size row groups, so the bytes depend only on the rows, never on how they were batched. The
dataset appears at its final path only when `finish()` succeeded (temp directory + rename).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from simroute.errors import ConfigurationError
from simroute.ioutil import atomic_path
from simroute.workload.schema import (CHUNK_DEFAULTS, CHUNK_FIELDS, CHUNK_SCHEMA, CHUNKS_FILE,
                                      REQUEST_DEFAULTS, REQUEST_FIELDS, REQUEST_SCHEMA, REQUESTS_FILE,
                                      ROW_GROUP_ROWS, schema_metadata)

_WRITE_OPTS: dict[str, Any] = {"compression": "zstd", "write_statistics": True}


def list_array(offsets: np.ndarray, values: np.ndarray, value_type: pa.DataType) -> pa.ListArray:
    """A list column from CSR form (offsets of length n+1 into a flat values array)."""
    return pa.ListArray.from_arrays(pa.array(np.asarray(offsets, dtype=np.int32)),
                                    pa.array(values, type=value_type))


def _column(field: pa.Field, value: Any, n: int) -> pa.Array:
    """Coerce one producer column (numpy array, list, Arrow array or scalar default) to the schema type."""
    if isinstance(value, (pa.Array, pa.ChunkedArray)):
        arr = value
    elif np.isscalar(value) or value is None:
        if pa.types.is_dictionary(field.type):
            return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)),
                                                  pa.array([value], type=pa.string()))
        arr = pa.array(np.full(n, value))
    else:
        arr = pa.array(value)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(field.type):
        if not pa.types.is_dictionary(arr.type):
            import pyarrow.compute as pc
            arr = pc.dictionary_encode(arr.cast(pa.string()))
        return arr.cast(field.type)
    return arr.cast(field.type)


def _take(value: Any, order: np.ndarray) -> Any:
    if isinstance(value, (pa.Array, pa.ChunkedArray)):
        return value.take(pa.array(order))
    if np.isscalar(value) or value is None:
        return value
    return np.asarray(value)[order]


def _table(fields: list[pa.Field], schema: pa.Schema, defaults: dict[str, Any],
           cols: dict[str, Any], n: int) -> pa.Table:
    unknown = set(cols) - {f.name for f in fields}
    if unknown:
        raise ValueError(f"unknown trace columns {sorted(unknown)}")
    arrays = []
    for f in fields:
        if f.name in cols:
            arrays.append(_column(f, cols[f.name], n))
        elif f.name in defaults:
            arrays.append(_column(f, defaults[f.name], n))
        elif f.name == "chunk_at_cached_offset":
            ids = arrays[-1]
            arrays.append(list_array(ids.offsets.to_numpy(), np.ones(len(ids.values), dtype=bool),
                                     pa.bool_()))
        elif f.name == "chunk_ids":
            arrays.append(list_array(np.zeros(n + 1, dtype=np.int32), np.zeros(0, np.int64), pa.int64()))
        else:
            raise ValueError(f"trace column {f.name!r} is required")
    for a in arrays:
        if len(a) != n:
            raise ValueError(f"column lengths differ ({len(a)} vs {n})")
    return pa.Table.from_arrays(arrays, schema=schema)


MAX_ARRIVAL_S = 1e9        # ~31 years after the trace's start: past it, a time is in other units or corrupted


def _empty_requests(cols: dict[str, Any], n: int) -> np.ndarray:
    """Rows with no prompt token and no chunk: requests that ask for nothing."""
    prompt = cols.get("prompt_tokens")
    if prompt is None:
        return np.zeros(0, dtype=np.int64)
    prompt = np.broadcast_to(np.asarray(prompt.to_numpy(zero_copy_only=False) if isinstance(prompt, pa.Array)
                                        else prompt), (n,))
    chunks = cols.get("chunk_ids")
    if isinstance(chunks, (pa.ListArray, pa.LargeListArray)):
        import pyarrow.compute as pc
        counts = pc.list_value_length(chunks).fill_null(0).to_numpy(zero_copy_only=False)
    else:
        counts = np.zeros(n, dtype=np.int64)
    return np.flatnonzero((prompt == 0) & (counts == 0))


class TraceWriter:
    """Writes requests.parquet and chunks.parquet into `directory` (a temp dir from `open_trace_writer`).

    `add_requests` takes columns for requests in input order; `request_id` is assigned as the row
    position, and producers express `parent_id` / `after_id` as input positions. Arrivals out of
    order are an error when `strict`, otherwise the requests are re-sorted (stably) at `finish()`
    with one warning, and the ids are remapped.
    """

    def __init__(self, directory: Path, meta: dict[str, Any], *, strict: bool = False,
                 source: str | Path | None = None, warn: Callable[[str], None] | None = None,
                 row_group_rows: int = ROW_GROUP_ROWS) -> None:
        self.directory = Path(directory)
        self.meta = meta
        self.strict = strict
        self.source = source
        self.warn = warn or (lambda msg: warnings.warn(msg, stacklevel=3))
        self.rows = row_group_rows
        self._req_schema = REQUEST_SCHEMA.with_metadata(schema_metadata(meta, "requests"))
        self._chunk_schema = CHUNK_SCHEMA.with_metadata(schema_metadata(meta, "chunks"))
        self._writer = pq.ParquetWriter(self.directory / REQUESTS_FILE, self._req_schema, **_WRITE_OPTS)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self.n_requests = 0
        self._last_arrival = -np.inf
        self._unsorted_at: int | None = None  # line (or row) of the first out-of-order arrival
        self._finished = False

    # -- requests -------------------------------------------------------------------------
    def add_requests(self, cols: dict[str, Any], *, lines: np.ndarray | None = None) -> None:
        """Append a batch (columns of equal length). `lines` maps rows to input lines for messages."""
        arrival = np.asarray(cols["arrival_s"], dtype=np.float64)
        n = len(arrival)
        if n == 0:
            return
        if not np.all(np.isfinite(arrival)):
            bad = int(np.flatnonzero(~np.isfinite(arrival))[0])
            raise ConfigurationError("arrival time is not finite", file=self.source, field="arrival_s",
                                     line=int(lines[bad]) if lines is not None else None)
        late = np.flatnonzero(arrival > MAX_ARRIVAL_S)
        if len(late):
            raise ConfigurationError(f"arrival time {arrival[late[0]]:g} s is past {MAX_ARRIVAL_S:g} s (a "
                                     "timestamp in other units, or corrupted?)", file=self.source,
                                     field="arrival_s", line=int(lines[late[0]]) if lines is not None else None)
        empty = _empty_requests(cols, n)
        if len(empty):
            raise ConfigurationError("a request of zero tokens (no prompt and no chunks): nothing to serve",
                                     file=self.source, field="prompt_tokens",
                                     line=int(lines[empty[0]]) if lines is not None else None)
        prev = np.concatenate(([self._last_arrival], arrival[:-1]))
        back = np.flatnonzero(arrival < prev)
        if len(back) and self._unsorted_at is None:
            where = int(lines[back[0]]) if lines is not None else self.n_requests + int(back[0])
            if self.strict:
                raise ConfigurationError("timestamps are not sorted (earlier than the previous request); "
                                         "drop --strict to sort them", file=self.source, line=where,
                                         field="arrival_s")
            self._unsorted_at = where
        self._last_arrival = max(self._last_arrival, float(arrival.max()))
        cols = dict(cols)
        cols["request_id"] = np.arange(self.n_requests, self.n_requests + n, dtype=np.int64)
        table = _table(REQUEST_FIELDS, self._req_schema, REQUEST_DEFAULTS, cols, n)
        self.n_requests += n
        self._push(table)

    def _push(self, table: pa.Table) -> None:
        self._pending.append(table)
        self._pending_rows += table.num_rows
        if self._pending_rows >= self.rows:
            self._flush(final=False)

    def _flush(self, *, final: bool) -> None:
        if not self._pending:
            return
        table = pa.concat_tables(self._pending).combine_chunks()
        full = (table.num_rows // self.rows) * self.rows
        cut = table.num_rows if final else full
        for start in range(0, cut, self.rows):
            self._writer.write_table(table.slice(start, min(self.rows, cut - start)),
                                     row_group_size=self.rows)
        rest = table.slice(cut)
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows

    # -- finish ---------------------------------------------------------------------------
    def finish(self, chunks: dict[str, Any]) -> None:
        """Write the chunk table (sorted by chunk_id) and close; re-sort requests if needed."""
        self._flush(final=True)
        self._writer.close()
        ids = np.asarray(chunks.get("chunk_id", np.zeros(0, np.int64)), dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        if len(ids) and np.any(np.diff(ids[order]) == 0):
            raise ValueError("duplicate chunk ids in the chunk table")
        cols = {k: _take(v, order) for k, v in chunks.items()}
        cols.setdefault("chunk_id", ids)
        cols.setdefault("tokens", np.zeros(0, np.int32))
        table = _table(CHUNK_FIELDS, self._chunk_schema, CHUNK_DEFAULTS, cols, len(ids))
        with pq.ParquetWriter(self.directory / CHUNKS_FILE, self._chunk_schema, **_WRITE_OPTS) as w:
            w.write_table(table, row_group_size=self.rows)
        if self._unsorted_at is not None:
            self.warn(f"{self.source or 'input'}:{self._unsorted_at}: timestamps are not sorted; "
                      f"requests were re-sorted by arrival (use --strict to reject)")
            self._resort()
        self._finished = True

    def _resort(self) -> None:
        """Stable sort by arrival in columnar memory (no per-request Python objects), ids remapped."""
        path = self.directory / REQUESTS_FILE
        table = pq.read_table(path)
        perm = np.argsort(table["arrival_s"].to_numpy(), kind="stable")
        inv = np.empty_like(perm)
        inv[perm] = np.arange(len(perm))
        table = table.take(pa.array(perm))
        cols = {name: table[name] for name in table.column_names}
        cols["request_id"] = pa.array(np.arange(len(perm), dtype=np.int64))
        for ref in ("parent_id", "after_id"):
            old = table[ref].to_numpy()
            cols[ref] = pa.array(np.where(old >= 0, inv[np.maximum(old, 0)], -1).astype(np.int64))
        table = _table(REQUEST_FIELDS, self._req_schema, {}, cols, len(perm))
        self._writer = pq.ParquetWriter(path, self._req_schema, **_WRITE_OPTS)
        self._pending, self._pending_rows = [table], table.num_rows
        self._flush(final=True)
        self._writer.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()


@contextlib.contextmanager
def open_trace_writer(target: str | Path, meta: dict[str, Any], **kwargs: Any) -> Iterator[TraceWriter]:
    """Open a writer on a temp directory; the trace appears at `target` only if `finish()` ran."""
    target = Path(target)
    if target.suffix != ".parquet":
        raise ConfigurationError("a trace is a directory named *.parquet", file=target)
    with atomic_path(target, directory=True, what="trace") as tmp:
        writer = TraceWriter(tmp, meta, **kwargs)
        try:
            yield writer
        finally:
            writer.close()
        if not writer._finished:
            raise RuntimeError("TraceWriter.finish() was not called")
        _validate_before_rename(tmp, writer.source or target)


def _validate_before_rename(tmp: Path, source: str | Path) -> None:
    """Run the readers' checks on the finished temp trace: a producer never writes what `run` would reject."""
    from simroute.workload.validate import validate_trace
    try:
        validate_trace(tmp)
    except ConfigurationError as exc:
        where = f"{Path(exc.file).name if exc.file else 'trace'}, field '{exc.field}'" if exc.field else "trace"
        raise ConfigurationError(f"the resulting trace would be rejected by readers ({where}: {exc.problem})",
                                 file=source) from None
