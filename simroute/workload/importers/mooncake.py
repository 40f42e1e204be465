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
from simroute.ioutil import bounded_lines
from simroute.workload.importers.common import (register_importer, BATCH_LINES, BlockRegistry, ImportOptions,
                                                check_int_range, check_nonneg, open_input, row_positions)
from simroute.workload.writer import TraceWriter, list_array

BLOCK = 512
_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def _bad(file: Path, line: int, reason: str, field: str | None = None) -> ConfigurationError:
    return ConfigurationError(reason, file=file, line=line, field=field)


def _flush(writer: TraceWriter, reg: BlockRegistry, file: Path, block: int, opts: ImportOptions,
           cols: dict[str, list[Any]]) -> None:
    lines = np.asarray(cols["line"], dtype=np.int64)
    ts = np.asarray(cols["timestamp"], dtype=np.float64)      # every value was type-checked when read
    inp = np.asarray(cols["input_length"], dtype=np.float64)
    out = np.asarray(cols["output_length"], dtype=np.float64)
    ids = np.asarray(cols["hash_flat"], dtype=np.int64)
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
    covered = np.bincount(rows, weights=reg.tokens_of(ids), minlength=len(inp))
    offsets = np.concatenate(([0], np.cumsum(counts)))
    writer.add_requests({
        "arrival_s": opts.arrivals(ts / 1000.0), "tenant": "mooncake",
        "prompt_tokens": np.maximum(inp - covered, 0).astype(np.int32), "output_tokens": out.astype(np.int32),
        "chunk_ids": list_array(offsets, ids, pa.int64()),
        "chunk_at_cached_offset": list_array(offsets, at, pa.bool_()),
    }, lines=lines)
    for v in cols.values():
        v.clear()


def _check_line(obj: Any, file: Path, lineno: int) -> list[Any]:
    """Types of one line, exactly: numbers that are not bools or strings, hash ids that are int64 integers
    (a float id such as 3.7 would otherwise be truncated to 3 by numpy)."""
    if not isinstance(obj, dict):
        raise _bad(file, lineno, "a line must be a JSON object with " + ", ".join(_FIELDS))
    for name in _FIELDS:
        if name not in obj:
            raise _bad(file, lineno, "missing field", name)
    for name in ("timestamp", "input_length", "output_length"):
        v = obj[name]
        if type(v) not in (int, float):
            raise _bad(file, lineno, f"{name} is not a number: {v!r}"[:200], name)
        if type(v) is int and not -2**63 <= v < 2**63:
            raise _bad(file, lineno, f"{name} {v} is out of range", name)
    hids = obj["hash_ids"]
    if not isinstance(hids, list):
        raise _bad(file, lineno, "hash_ids must be a list", "hash_ids")
    for h in hids:
        if type(h) is not int:
            raise _bad(file, lineno, f"hash id is not an integer: {h!r}"[:200], "hash_ids")
        if not 0 <= h < 2**63:
            raise _bad(file, lineno, f"hash id {h} outside [0, 2^63)", "hash_ids")
    return hids


@register_importer("mooncake")
def import_mooncake(writer: TraceWriter, files: list[Path], opts: ImportOptions) -> None:
    file = files[0]
    block = opts.block_tokens or BLOCK
    reg = BlockRegistry()
    cols: dict[str, list[Any]] = {k: [] for k in ("line", "timestamp", "input_length", "output_length",
                                                   "hash_flat", "hash_len")}
    loads = json.loads
    with open_input(file) as f:
        for lineno, raw in bounded_lines(f, file):
            if not raw.strip():
                continue
            try:
                obj = loads(raw)
            except UnicodeDecodeError as exc:
                raise _bad(file, lineno, f"not UTF-8 text (byte {exc.start} of the line)") from None
            except ValueError as exc:
                raise _bad(file, lineno, f"not valid JSON: {exc}"[:300]) from None
            except RecursionError:
                raise _bad(file, lineno, "not valid JSON: nested too deeply") from None
            hids = _check_line(obj, file, lineno)
            for name in ("timestamp", "input_length", "output_length"):
                cols[name].append(obj[name])
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
