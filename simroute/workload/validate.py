"""Value checks of a trace, shared by every reader that consumes one (`trace info`, `simroute run`) and by the
writer before it renames a new trace into place (so no producer can write a trace a reader rejects).

The schema check at open catches missing columns and wrong types; these catch values no producer should
write: nulls, unsorted or non-finite arrivals or think times, negative token counts, list columns of
different lengths, references to later requests or to chunks that are not in the chunk table, and placement
hints outside the cluster. Each error names the file, the field and the row.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa

from simroute.arrow import list_lengths, list_null_values, list_values, to_numpy
from simroute.errors import ConfigurationError
from simroute.workload.schema import CHUNKS_FILE, REQUESTS_FILE


def _no_nulls(table: pa.Table | pa.RecordBatch, file: Path, row0: int = 0) -> None:
    for name in table.schema.names:
        col = table.column(name)
        nulls = col.null_count
        if isinstance(col, (pa.ListArray, pa.ChunkedArray)) and pa.types.is_list(col.type):
            nulls += list_null_values(col)
        if nulls:
            mask = col.is_null()
            first = int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0]) if col.null_count else 0
            raise ConfigurationError(f"row {row0 + first}: null value (every field must be set)", file=file,
                                     field=name)


MAX_TIME_S = 1e9          # ~31 years: an arrival or think time past it is corrupted or in other units
STRING_COLUMNS = ("tenant",)
CONTROL = re.compile(r"[\x00-\x1f]")     # a NUL or another control character


def control_characters(column: pa.Array | pa.ChunkedArray) -> int | None:
    """The first row of a string column holding a NUL or another control character, None if there is none."""
    if not len(column):
        return None
    if isinstance(column, pa.ChunkedArray):     # one chunk (most files): itself (combining loads pandas)
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    values = column.dictionary if pa.types.is_dictionary(column.type) else column
    if not pa.types.is_string(values.type) and not pa.types.is_large_string(values.type):
        return None
    if pa.types.is_dictionary(column.type):    # a dictionary's few distinct labels, without loading pyarrow.compute
        hit = np.array([value is not None and CONTROL.search(value) is not None for value in values.to_pylist()],
                       dtype=bool)
    else:
        import pyarrow.compute as pc
        hit = pc.match_substring_regex(values, CONTROL.pattern).fill_null(False).to_numpy(zero_copy_only=False)
    if not hit.any():
        return None
    if pa.types.is_dictionary(column.type):
        rows = np.isin(column.indices.to_numpy(zero_copy_only=False), np.flatnonzero(hit))
        return int(np.flatnonzero(rows)[0]) if rows.any() else None
    return int(np.flatnonzero(hit)[0])


def _hint_range(v: np.ndarray, name: str, instances: int | None) -> np.ndarray:
    """Rows of a placement hint outside [-1, instances) (-1 = no hint)."""
    hi = instances if instances is not None else np.iinfo(np.int64).max
    return np.flatnonzero((v < -1) | (v >= hi))


def check_chunks(path: str | Path, table: pa.Table, instances: int | None = None) -> np.ndarray:
    """Validate the chunk table; returns its chunk ids sorted. `instances` bounds holder_hint when known."""
    file = Path(path) / CHUNKS_FILE
    _no_nulls(table, file)
    ids = to_numpy(table.column("chunk_id"))
    for name, low in (("tokens", 1), ("cached_offset", 0)):
        if name in table.column_names:
            v = to_numpy(table.column(name))
            bad = np.flatnonzero(v < low)
            if bad.size:
                raise ConfigurationError(f"row {int(bad[0])}: {name} = {v[bad[0]]} (must be >= {low})", file=file,
                                         field=name)
    if "holder_hint" in table.column_names:
        v = to_numpy(table.column("holder_hint"))
        bad = _hint_range(v, "holder_hint", instances)
        if bad.size:
            bound = f"-1 or below the {instances} instances" if instances is not None else ">= -1"
            raise ConfigurationError(f"row {int(bad[0])}: holder_hint = {v[bad[0]]} (must be {bound})", file=file,
                                     field="holder_hint")
    if "corpus" in table.column_names:
        bad_row = control_characters(table.column("corpus"))
        if bad_row is not None:
            raise ConfigurationError(f"row {bad_row}: holds a NUL or control character in a name", file=file,
                                     field="corpus")
    s = np.sort(ids)
    dup = np.flatnonzero(np.diff(s) == 0)
    if dup.size:
        raise ConfigurationError(f"chunk id {s[dup[0]]} appears twice", file=file, field="chunk_id")
    return s


def check_holder_hints(path: str | Path, holder_hint: np.ndarray, instances: int) -> None:
    """holder_hint of every chunk within the cluster the run built (e.g. a trace for 64 instances run at tp 2)."""
    bad = _hint_range(np.asarray(holder_hint), "holder_hint", instances)
    if bad.size:
        raise ConfigurationError(f"row {int(bad[0])}: holder_hint = {holder_hint[bad[0]]}, but this run has "
                                 f"{instances} instances (check --tp and the topology)",
                                 file=Path(path) / CHUNKS_FILE, field="holder_hint")


class RequestChecker:
    """Checks request batches in order; keeps the running state (last arrival, rows seen).

    `instances`, when the reader knows the cluster, bounds requester_hint and prefill_hint.
    """

    NON_NEGATIVE = ("prompt_tokens", "output_tokens", "think_s", "topk", "holders_spanned")
    HINTS = ("requester_hint", "prefill_hint")

    def __init__(self, path: str | Path, chunk_ids_sorted: np.ndarray | None = None,
                 instances: int | None = None) -> None:
        self.file = Path(path) / REQUESTS_FILE
        self.ids = chunk_ids_sorted
        self.instances = instances
        self.last = -np.inf
        self.row = 0

    def _fail(self, i: int, field: str, problem: str) -> None:
        raise ConfigurationError(f"row {self.row + int(i)}: {problem}", file=self.file, field=field)

    def check(self, batch: pa.RecordBatch) -> None:
        names = batch.schema.names
        _no_nulls(batch, self.file, self.row)
        if "arrival_s" in names:
            self._arrivals(to_numpy(batch.column("arrival_s")))
        if "think_s" in names:
            t = to_numpy(batch.column("think_s"))
            if not np.all(np.isfinite(t)):
                self._fail(np.flatnonzero(~np.isfinite(t))[0], "think_s", "think time is not finite")
            late = np.flatnonzero(t > MAX_TIME_S)
            if late.size:
                self._fail(late[0], "think_s", f"think time {t[late[0]]:g} s is past {MAX_TIME_S:g} s")
        if "prompt_tokens" in names and "chunk_ids" in names:
            prompt = to_numpy(batch.column("prompt_tokens"))
            counts = list_lengths(batch.column("chunk_ids"))
            empty = np.flatnonzero((prompt == 0) & (counts == 0))
            if empty.size:
                self._fail(empty[0], "prompt_tokens", "a request of zero tokens (no prompt and no chunks)")
        for name in STRING_COLUMNS:
            if name in names:
                bad = control_characters(batch.column(name))
                if bad is not None:
                    self._fail(bad, name, "holds a NUL or control character in a name")
        for name in self.NON_NEGATIVE:
            if name in names:
                v = to_numpy(batch.column(name))
                bad = np.flatnonzero(v < 0)
                if bad.size:
                    self._fail(bad[0], name, f"{name} = {v[bad[0]]} (must be >= 0)")
        for name in self.HINTS:
            if name in names:
                v = to_numpy(batch.column(name))
                bad = _hint_range(v, name, self.instances)
                if bad.size:
                    bound = (f"-1 or below the {self.instances} instances of this run (check --tp and the "
                             f"topology)" if self.instances is not None else ">= -1")
                    self._fail(bad[0], name, f"{name} = {v[bad[0]]} (must be {bound})")
        if "request_id" in names:
            self._references(batch, names)
        if "chunk_ids" in names and "chunk_at_cached_offset" in names:
            a = list_lengths(batch.column("chunk_ids"))
            b = list_lengths(batch.column("chunk_at_cached_offset"))
            bad = np.flatnonzero(a != b)
            if bad.size:
                self._fail(bad[0], "chunk_at_cached_offset", f"has {b[bad[0]]} entries but chunk_ids has {a[bad[0]]}")
        if self.ids is not None and "chunk_ids" in names:
            self._chunks(batch.column("chunk_ids"))
        self.row += batch.num_rows

    def _arrivals(self, a: np.ndarray) -> None:
        if not np.all(np.isfinite(a)):
            self._fail(np.flatnonzero(~np.isfinite(a))[0], "arrival_s", "arrival time is not finite")
        late = np.flatnonzero(a > MAX_TIME_S)
        if late.size:
            self._fail(late[0], "arrival_s", f"arrival time {a[late[0]]:g} s is past {MAX_TIME_S:g} s (corrupted, "
                                             "or in other units?)")
        prev = np.concatenate(([self.last], a[:-1]))
        back = np.flatnonzero(a < prev)
        if back.size:
            self._fail(back[0], "arrival_s", "requests are not sorted by arrival_s")
        if len(a):
            self.last = float(a[-1])

    def _references(self, batch: pa.RecordBatch, names: list[str]) -> None:
        rid = to_numpy(batch.column("request_id"))
        expect = np.arange(self.row, self.row + len(rid))
        bad = np.flatnonzero(rid != expect)
        if bad.size:
            self._fail(bad[0], "request_id", f"request_id = {rid[bad[0]]} (must be the row number, {expect[bad[0]]})")
        for ref in ("after_id", "parent_id"):
            if ref in names:
                v = to_numpy(batch.column(ref))
                bad = np.flatnonzero((v < -1) | (v >= rid))
                if bad.size:
                    self._fail(bad[0], ref, f"{ref} = {v[bad[0]]} must be -1 or an earlier request")

    def _chunks(self, lists: pa.ListArray) -> None:
        flat = list_values(lists)
        if not flat.size:
            return
        ids = self.ids
        idx = np.searchsorted(ids, flat)
        bad = (idx >= len(ids)) | (ids[np.minimum(idx, max(len(ids) - 1, 0))] != flat) if len(ids) \
            else np.ones(flat.size, bool)
        if np.any(bad):
            j = int(np.flatnonzero(bad)[0])
            offs = lists.offsets.to_numpy()
            i = int(np.searchsorted(offs, j, side="right") - 1)
            self._fail(i, "chunk_ids", f"attends chunk {flat[j]}, which is not in the chunk table")


def validate_trace(path: str | Path, instances: int | None = None, batch_rows: int = 65_536) -> None:
    """Stream a whole trace through the same checks `trace info` and `simroute run` apply."""
    from simroute.workload.reader import iter_request_batches, read_chunks
    ids = check_chunks(path, read_chunks(path), instances)
    checker = RequestChecker(path, ids, instances)
    for batch in iter_request_batches(path, batch_rows=batch_rows):
        checker.check(batch)
