"""Workloads: the trace format (`simroute.trace/1`), scenario generators, importers, trace statistics.

Public API (see docs/TRACE_FORMAT.md):
- `iter_request_batches(path, batch_rows=...)`, `read_chunks(path)`, `read_trace_meta(path)`, `read_requests(path)`
- `generate(kind, output, seed=, params=)`, `GENERATORS`, `make_params(kind, overrides)`
- `import_trace(fmt, inputs, output, ...)`, `IMPORTERS`
- `trace_info(path, lru_capacity_tokens=None) -> TraceInfo`
"""

from __future__ import annotations

from simroute.workload.reader import iter_request_batches, read_chunks, read_requests, read_trace_meta
from simroute.workload.schema import (CHUNK_COLUMNS, CHUNK_SCHEMA, REQUEST_COLUMNS, REQUEST_SCHEMA,
                                      SCHEMA_VERSION)

__all__ = [
    "CHUNK_COLUMNS", "CHUNK_SCHEMA", "REQUEST_COLUMNS", "REQUEST_SCHEMA", "SCHEMA_VERSION",
    "TraceWriter", "open_trace_writer", "iter_request_batches", "read_chunks", "read_requests",
    "read_trace_meta", "generate", "make_params", "import_trace", "trace_info",
]


def __getattr__(name: str):  # lazy: keep `import simroute.workload` light (a run reads traces, never writes one)
    if name in ("TraceWriter", "open_trace_writer"):
        from simroute.workload import writer
        return getattr(writer, name)
    if name in ("generate", "make_params", "GENERATORS", "get_generator"):
        from simroute.workload import generators
        generators._load_all()
        return getattr(generators, name)
    if name in ("import_trace", "IMPORTERS"):
        from simroute.workload import importers
        return getattr(importers, name)
    if name in ("trace_info", "TraceInfo"):
        from simroute.workload import stats
        return getattr(stats, name)
    raise AttributeError(name)
