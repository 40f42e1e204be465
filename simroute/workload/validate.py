"""Value checks of a trace, shared by every reader that consumes one (`trace info`, `simroute run`).

The schema check at open catches missing columns and wrong types; these catch values no producer should
write: unsorted or non-finite arrivals, negative token counts, references to later requests or to chunks
that are not in the chunk table. Each error names the file, the field and the request row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from simroute.errors import ConfigurationError
from simroute.workload.schema import CHUNKS_FILE, REQUESTS_FILE


def check_chunks(path: str | Path, table: pa.Table) -> np.ndarray:
    """Validate the chunk table; returns its chunk ids sorted."""
    file = Path(path) / CHUNKS_FILE
    ids = table.column("chunk_id").to_numpy()
    for name, low in (("tokens", 1), ("cached_offset", 0)):
        if name in table.column_names:
            v = table.column(name).to_numpy()
            bad = np.flatnonzero(v < low)
            if bad.size:
                raise ConfigurationError(f"row {int(bad[0])}: {name} = {v[bad[0]]} (must be >= {low})", file=file,
                                         field=name)
    s = np.sort(ids)
    dup = np.flatnonzero(np.diff(s) == 0)
    if dup.size:
        raise ConfigurationError(f"chunk id {s[dup[0]]} appears twice", file=file, field="chunk_id")
    return s


class RequestChecker:
    """Checks request batches in order; keeps the running state (last arrival, rows seen)."""

    NON_NEGATIVE = ("prompt_tokens", "output_tokens", "think_s", "topk", "holders_spanned")

    def __init__(self, path: str | Path, chunk_ids_sorted: np.ndarray | None = None) -> None:
        self.file = Path(path) / REQUESTS_FILE
        self.ids = chunk_ids_sorted
        self.last = -np.inf
        self.row = 0

    def _fail(self, i: int, field: str, problem: str) -> None:
        raise ConfigurationError(f"row {self.row + int(i)}: {problem}", file=self.file, field=field)

    def check(self, batch: pa.RecordBatch) -> None:
        names = batch.schema.names
        n = batch.num_rows
        if "arrival_s" in names:
            a = batch.column("arrival_s").to_numpy()
            if not np.all(np.isfinite(a)):
                self._fail(np.flatnonzero(~np.isfinite(a))[0], "arrival_s", "arrival time is not finite")
            prev = np.concatenate(([self.last], a[:-1]))
            back = np.flatnonzero(a < prev)
            if back.size:
                self._fail(back[0], "arrival_s", "requests are not sorted by arrival_s")
            if n:
                self.last = float(a[-1])
        for name in self.NON_NEGATIVE:
            if name in names:
                v = batch.column(name).to_numpy()
                bad = np.flatnonzero(v < 0)
                if bad.size:
                    self._fail(bad[0], name, f"{name} = {v[bad[0]]} (must be >= 0)")
        if "request_id" in names:
            rid = batch.column("request_id").to_numpy()
            for ref in ("after_id", "parent_id"):
                if ref in names:
                    v = batch.column(ref).to_numpy()
                    bad = np.flatnonzero((v < -1) | (v >= rid))
                    if bad.size:
                        self._fail(bad[0], ref, f"{ref} = {v[bad[0]]} must be -1 or an earlier request")
        if self.ids is not None and "chunk_ids" in names:
            lists = batch.column("chunk_ids")
            flat = pc.list_flatten(lists).to_numpy()
            if flat.size:
                ids = self.ids
                idx = np.searchsorted(ids, flat)
                bad = (idx >= len(ids)) | (ids[np.minimum(idx, max(len(ids) - 1, 0))] != flat) if len(ids) \
                    else np.ones(flat.size, bool)
                if np.any(bad):
                    j = int(np.flatnonzero(bad)[0])
                    offs = lists.offsets.to_numpy()
                    i = int(np.searchsorted(offs, j, side="right") - 1)
                    self._fail(i, "chunk_ids", f"attends chunk {flat[j]}, which is not in the chunk table")
        self.row += n
