"""Helpers of the workload tests: small traces written by hand, and leftover checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from simroute.workload.writer import list_array, open_trace_writer


def write_small(path: Path, rows: list[tuple[float, int, list[int]]], chunk_tokens: dict[int, int],
                **extra) -> Path:
    """A trace from (arrival_s, own prompt tokens, chunk ids) rows."""
    counts = [len(r[2]) for r in rows]
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    flat = np.array([c for r in rows for c in r[2]], dtype=np.int64)
    with open_trace_writer(path, {"producer": "test"}, **extra) as w:
        w.add_requests({"arrival_s": np.array([r[0] for r in rows]),
                        "prompt_tokens": np.array([r[1] for r in rows]),
                        "output_tokens": np.ones(len(rows), dtype=np.int32),
                        "chunk_ids": list_array(offsets, flat, pa.int64())})
        ids = np.array(sorted(chunk_tokens), dtype=np.int64)
        w.finish({"chunk_id": ids, "tokens": np.array([chunk_tokens[i] for i in ids], dtype=np.int32)})
    return path


def leftovers(directory: Path) -> list[str]:
    """Temp files or directories an aborted write might have left behind."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="session")
def small_trace():
    return write_small


@pytest.fixture(scope="session")
def no_leftovers():
    return leftovers
