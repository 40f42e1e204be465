"""Mooncake JSONL (FAST'25 release): `timestamp` ms, `input_length`, `output_length`, `hash_ids`.

One hash id per 512-token block, the last block partial; an id stands for its block and everything
before it (prefix semantics), so a block id maps 1:1 to a chunk attended at the offset it was first
cached at. Chunks are canonical=false: the first request to attend a block prefills it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from simroute.errors import ConfigurationError
from simroute.workload.importers.common import (BATCH_LINES, BlockRegistry, ImportOptions,
                                                check_int_range, check_nonneg, row_positions)
from simroute.workload.writer import TraceWriter, list_array

BLOCK = 512
_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def _bad(file: Path, line: int, reason: str, field: str | None = None) -> ConfigurationError:
    return ConfigurationError(reason, file=file, line=line, field=field)


def _flush(writer: TraceWriter, reg: BlockRegistry, file: Path, block: int, opts: ImportOptions,
           cols: dict[str, list[Any]]) -> None:
    lines = np.asarray(cols["line"], dtype=np.int64)
    try:
        ts = np.asarray(cols["timestamp"], dtype=np.float64)
        inp = np.asarray(cols["input_length"], dtype=np.float64)
        out = np.asarray(cols["output_length"], dtype=np.float64)
        ids = np.asarray(cols["hash_flat"], dtype=np.int64)
    except (TypeError, ValueError):
        _diagnose(cols, file)
        raise
    for name, arr in (("input_length", inp), ("output_length", out)):
        check_int_range(arr, name, file, lines)
        if np.any(arr != np.floor(arr)):
            i = int(np.flatnonzero(arr != np.floor(arr))[0])
            raise _bad(file, int(lines[i]), f"{name} is not an integer ({arr[i]})", name)
    check_nonneg(ts, "timestamp", file, lines)
    counts = np.asarray(cols["hash_len"], dtype=np.int64)
    need = -(-inp.astype(np.int64) // block)
    if np.any(counts != need):
        i = int(np.flatnonzero(counts != need)[0])
        raise _bad(file, int(lines[i]), f"hash_ids has {counts[i]} ids but input_length {int(inp[i])} needs "
                   f"ceil({int(inp[i])}/{block}) = {need[i]}", "hash_ids")
    rows, pos = row_positions(counts)
    last = pos == counts[rows] - 1
    tok = np.where(last, inp[rows].astype(np.int64) - block * (counts[rows] - 1), block).astype(np.int32)
    at = reg.register(ids, tok, pos * block, lines[rows], file)
    if opts.strict and reg.conflicts:
        raise _bad(file, reg.first_conflict_line or 0, "a hash id reappears with a different block length",
                   "hash_ids")
    covered = np.bincount(rows, weights=reg.tokens[ids], minlength=len(inp))
    offsets = np.concatenate(([0], np.cumsum(counts)))
    writer.add_requests({
        "arrival_s": opts.arrivals(ts / 1000.0), "tenant": "mooncake",
        "prompt_tokens": np.maximum(inp - covered, 0).astype(np.int32), "output_tokens": out.astype(np.int32),
        "chunk_ids": list_array(offsets, ids, pa.int64()),
        "chunk_at_cached_offset": list_array(offsets, at, pa.bool_()),
    }, lines=lines)
    for v in cols.values():
        v.clear()


def _diagnose(cols: dict[str, list[Any]], file: Path) -> None:
    """Slow path, only on error: find the line whose value is not a number."""
    k = 0
    for i, line in enumerate(cols["line"]):
        for name in ("timestamp", "input_length", "output_length"):
            if isinstance(cols[name][i], bool) or not isinstance(cols[name][i], (int, float)):
                raise _bad(file, line, f"{name} is not a number: {cols[name][i]!r}", name)
        for h in cols["hash_flat"][k:k + cols["hash_len"][i]]:
            if isinstance(h, bool) or not isinstance(h, int):
                raise _bad(file, line, f"hash id is not an integer: {h!r}", "hash_ids")
        k += cols["hash_len"][i]


def import_mooncake(writer: TraceWriter, files: list[Path], opts: ImportOptions) -> None:
    file = files[0]
    block = opts.block_tokens or BLOCK
    reg = BlockRegistry()
    cols: dict[str, list[Any]] = {k: [] for k in ("line", "timestamp", "input_length", "output_length",
                                                   "hash_flat", "hash_len")}
    loads = json.loads
    with file.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                obj = loads(raw)
                hids = obj["hash_ids"]
                cols["timestamp"].append(obj["timestamp"])
                cols["input_length"].append(obj["input_length"])
                cols["output_length"].append(obj["output_length"])
            except ValueError as exc:
                raise _bad(file, lineno, f"not valid JSON: {exc}") from None
            except KeyError as exc:
                raise _bad(file, lineno, "missing field", str(exc.args[0])) from None
            except TypeError:
                raise _bad(file, lineno, "a line must be a JSON object with " + ", ".join(_FIELDS)) from None
            if not isinstance(hids, list):
                raise _bad(file, lineno, "hash_ids must be a list", "hash_ids")
            cols["line"].append(lineno)
            cols["hash_flat"].extend(hids)
            cols["hash_len"].append(len(hids))
            if len(cols["line"]) >= BATCH_LINES:
                _flush(writer, reg, file, block, opts, cols)
    if cols["line"]:
        _flush(writer, reg, file, block, opts, cols)
    if reg.conflicts:
        writer.warn(f"{file}:{reg.first_conflict_line}: {reg.conflicts} block occurrences reuse a hash id "
                    f"with a different length; kept the first length")
    writer.finish({**reg.chunk_columns(), "corpus": "mooncake", "canonical": False})
