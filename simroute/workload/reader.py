"""Streaming trace readers: validated at open, request rows delivered one row group at a time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from simroute.errors import ConfigurationError
from simroute.workload.schema import CHUNKS_FILE, REQUESTS_FILE, trace_concurrency, validate_schema


def _open(path: str | Path, name: str, table: str) -> tuple[pq.ParquetFile, dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        from simroute.shipped import shipped_names
        raise ConfigurationError(f"trace not found (write one with `simroute trace gen` or `simroute trace import`, "
                                 f"or name a shipped trace: {', '.join(shipped_names('trace'))})", file=path)
    if not path.is_dir():
        raise ConfigurationError(f"a trace is a directory holding {REQUESTS_FILE} and {CHUNKS_FILE}",
                                 file=path)
    file = path / name
    if not file.is_file():
        raise ConfigurationError(("missing: not a simroute trace (a directory holding requests.parquet and "
                                  "chunks.parquet)") if not file.exists() else "is not a file", file=file)
    try:
        pf = pq.ParquetFile(file)
    except (pa.ArrowException, OSError) as exc:
        raise ConfigurationError(f"not a readable Parquet file: {exc}", file=file) from None
    meta = validate_schema(pf.schema_arrow, file, table)
    if table == "requests" and pf.metadata.num_rows == 0:
        raise ConfigurationError("holds no requests: nothing to replay", file=file)
    return pf, meta


def read_trace_meta(path: str | Path) -> dict[str, Any]:
    """Producer metadata (generator/importer, params, seed, source sha256, the clients' `max_concurrency`) plus
    row counts."""
    pf, meta = _open(path, REQUESTS_FILE, "requests")
    trace_concurrency(meta, Path(path) / REQUESTS_FILE)       # checked where every reader of the metadata passes
    cf, _ = _open(path, CHUNKS_FILE, "chunks")
    return {**meta, "requests": pf.metadata.num_rows, "chunks": cf.metadata.num_rows}


def iter_request_batches(path: str | Path, batch_rows: int = 65_536,
                         columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
    """Yield the requests in arrival order as RecordBatches of at most `batch_rows` rows.

    Memory is bounded by one row group plus one batch, whatever the trace size.
    """
    pf, _ = _open(path, REQUESTS_FILE, "requests")
    try:
        yield from pf.iter_batches(batch_size=batch_rows, columns=list(columns) if columns else None)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(Path(path) / REQUESTS_FILE, exc) from None


def read_chunks(path: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """The whole chunk table (one row per chunk, sorted by chunk_id)."""
    pf, _ = _open(path, CHUNKS_FILE, "chunks")
    try:
        return pf.read(columns=list(columns) if columns else None)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(Path(path) / CHUNKS_FILE, exc) from None


def read_requests(path: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """All requests at once: for small traces and tests only (large traces: iter_request_batches)."""
    pf, _ = _open(path, REQUESTS_FILE, "requests")
    try:
        return pf.read(columns=list(columns) if columns else None)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(Path(path) / REQUESTS_FILE, exc) from None


def _unreadable(file: Path, exc: Exception) -> ConfigurationError:
    return ConfigurationError(f"corrupt Parquet data: {' '.join(str(exc).split())[:200]}", file=file)
