"""CSV traces without prefix ids: Azure LLM inference (2023 and 2024) and BurstGPT.

Both are read in chunks of BATCH_LINES rows (pandas C parser); every request's prompt is its own
(no chunks). Line numbers count the header as line 1.
"""

from __future__ import annotations

import re
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from simroute.errors import ConfigurationError
from simroute.ioutil import check_line_lengths
from simroute.workload.importers.common import (register_importer, BATCH_LINES, ImportOptions, check_int_range, check_nonneg,
                                                open_input)
from simroute.workload.writer import TraceWriter


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _header(file: Path, required: dict[str, str], optional: dict[str, str]) -> dict[str, str]:
    """Map canonical names to the file's column names; a missing required column is an error."""
    with open_input(file) as f:
        head = f.read(1 << 16)
    if b"\x00" in head:
        raise ConfigurationError("is a binary file, not CSV text", file=file)
    check_line_lengths(file)
    try:
        cols = pd.read_csv(file, nrows=0, encoding="utf-8").columns
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigurationError(f"not a CSV file: {_one_line(exc)}", file=file, line=1) from None
    seen: dict[str, str] = {}
    wanted = {*required.values(), *optional.values()}
    for column in _raw_header(file):
        norm = _norm(column)
        if norm in wanted and norm in seen:
            raise ConfigurationError(f"columns {seen[norm]!r} and {column!r} both name the same field: which "
                                     "one to read is ambiguous", file=file, line=1, field=column)
        seen[norm] = column
    by_norm = {_norm(c): c for c in cols}
    found = {}
    for key, norm in {**required, **optional}.items():
        if norm in by_norm:
            found[key] = by_norm[norm]
        elif key in required:
            raise ConfigurationError(f"missing column (header has: {', '.join(map(str, cols))})",
                                     file=file, line=1, field=key)
    return found


def _raw_header(file: Path) -> list[str]:
    """The header's names as written (pandas renames a repeated name to 'name.1', hiding the repeat)."""
    import csv
    with file.open(newline="", encoding="utf-8", errors="replace") as f:
        return [name.strip() for name in next(csv.reader(f), [])]


def _chunks(file: Path, usecols: list[str]) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
    """CSV chunks with the file line of every row; tokenizer errors become ConfigurationErrors."""
    start = 2
    try:
        # no usecols: with it pandas silently drops extra fields instead of reporting the line; a row longer
        # than the header is only a ParserWarning (data dropped), so it is made an error here
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            reader = pd.read_csv(file, dtype=str, chunksize=BATCH_LINES, index_col=False,
                                 skip_blank_lines=False, keep_default_na=False, encoding="utf-8")
            for df in reader:
                if len(df):
                    yield df[usecols], np.arange(start, start + len(df))
                start += len(df)
    except pd.errors.ParserWarning:
        raise ConfigurationError("a row has more fields than the header", file=file,
                                 line=_first_ragged_line(file)) from None
    except (pd.errors.ParserError, ValueError) as exc:   # UnicodeDecodeError is a ValueError
        m = re.search(r"line (\d+)", str(exc))
        what = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else "unparsable CSV line"
        raise ConfigurationError(f"{what}: {_one_line(exc)}", file=file,
                                 line=int(m.group(1)) if m else None) from None


def _first_ragged_line(file: Path) -> int | None:
    """Slow path, only on error: the first line whose field count differs from the header's."""
    import csv
    with file.open(newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.reader(f)
        width = len(next(rows, []))
        for row in rows:
            if len(row) > width:
                return rows.line_num
    return None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def _numbers(s: pd.Series, name: str, file: Path, lines: np.ndarray, *, integer: bool) -> np.ndarray:
    v = pd.to_numeric(s.str.strip(), errors="coerce").to_numpy(dtype=np.float64)
    if np.any(np.isnan(v)):
        i = int(np.flatnonzero(np.isnan(v))[0])
        raise ConfigurationError(f"{name} is not a number: {s.iloc[i]!r}", file=file, line=int(lines[i]),
                                 field=name)
    if integer:
        check_int_range(v, name, file, lines)
        if np.any(v != np.floor(v)):
            i = int(np.flatnonzero(v != np.floor(v))[0])
            raise ConfigurationError(f"{name} is not an integer: {s.iloc[i]!r}", file=file,
                                     line=int(lines[i]), field=name)
    return v


@register_importer("azure")
def import_azure(writer: TraceWriter, files: list[Path], opts: ImportOptions) -> None:
    """Azure 2023/2024: TIMESTAMP (datetime, naive = UTC), ContextTokens, GeneratedTokens."""
    file = files[0]
    names = _header(file, {"TIMESTAMP": "timestamp", "ContextTokens": "contexttokens",
                           "GeneratedTokens": "generatedtokens"}, {})
    origin: int | None = None
    for df, lines in _chunks(file, list(names.values())):
        raw = df[names["TIMESTAMP"]].str.strip()
        ts = pd.to_datetime(raw, format="ISO8601", utc=True, errors="coerce")
        if ts.isna().any():
            i = int(np.flatnonzero(ts.isna().to_numpy())[0])
            raise ConfigurationError(f"unparsable TIMESTAMP {raw.iloc[i]!r}", file=file, line=int(lines[i]),
                                     field="TIMESTAMP")
        try:
            ns = ts.dt.as_unit("ns").astype("int64").to_numpy()  # pandas picks us or ns by input
        except (pd.errors.OutOfBoundsDatetime, OverflowError):
            lo, hi = pd.Timestamp.min.tz_localize("UTC"), pd.Timestamp.max.tz_localize("UTC")
            i = int(np.flatnonzero(((ts < lo) | (ts > hi)).to_numpy())[0])
            raise ConfigurationError(f"TIMESTAMP {raw.iloc[i]!r} is outside the years 1677-2262", file=file,
                                     line=int(lines[i]), field="TIMESTAMP") from None
        if origin is None:
            origin = int(ns[0])
        ctx = _numbers(df[names["ContextTokens"]], "ContextTokens", file, lines, integer=True)
        gen = _numbers(df[names["GeneratedTokens"]], "GeneratedTokens", file, lines, integer=True)
        writer.add_requests({"arrival_s": opts.arrivals((ns - origin) / 1e9), "tenant": "azure",
                             "prompt_tokens": ctx.astype(np.int32), "output_tokens": gen.astype(np.int32)},
                            lines=lines)
    writer.finish({})


@register_importer("burstgpt")
def import_burstgpt(writer: TraceWriter, files: list[Path], opts: ImportOptions) -> None:
    """BurstGPT: Timestamp (s), Request tokens, Response tokens; optional Session ID, Model."""
    file = files[0]
    names = _header(file, {"Timestamp": "timestamp", "Request tokens": "requesttokens",
                           "Response tokens": "responsetokens"},
                    {"Session ID": "sessionid", "Model": "model"})
    for df, lines in _chunks(file, list(names.values())):
        ts = _numbers(df[names["Timestamp"]], "Timestamp", file, lines, integer=False)
        check_nonneg(ts, "Timestamp", file, lines)
        req = _numbers(df[names["Request tokens"]], "Request tokens", file, lines, integer=True)
        resp = _numbers(df[names["Response tokens"]], "Response tokens", file, lines, integer=True)
        cols = {"arrival_s": opts.arrivals(ts), "prompt_tokens": req.astype(np.int32),
                "output_tokens": resp.astype(np.int32), "tenant": "burstgpt"}
        if "Model" in names:
            cols["tenant"] = pa.array(df[names["Model"]].str.strip().to_numpy(dtype=object), pa.string())
        if "Session ID" in names:
            sid = df[names["Session ID"]].str.strip()
            num = pd.to_numeric(sid, errors="coerce").to_numpy(dtype=np.float64)
            # ids that are not small non-negative integers (text, 1e30, inf, 3.5): a stable hash of the text
            integral = np.isfinite(num) & (num >= 0) & (num < 2**53) & (num == np.floor(num))
            hashed = sid.map(lambda x: zlib.crc32(x.encode()) & 0x7FFFFFFF).to_numpy(dtype=np.int64)
            cols["session"] = np.where(integral, np.where(integral, num, 0).astype(np.int64), hashed)
        writer.add_requests(cols, lines=lines)
    writer.finish({})
