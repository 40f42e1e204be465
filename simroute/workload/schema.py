"""The trace schema `simroute.trace/1`: column names, Arrow types, metadata keys, validation.

One place defines the columns so writers, readers, generators and importers cannot disagree;
docs/TRACE_FORMAT.md is the prose version of this file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from simroute.errors import ConfigurationError

SCHEMA_VERSION = "simroute.trace/1"
META_SCHEMA_KEY = b"simroute.schema"
META_INFO_KEY = b"simroute.meta"
META_TABLE_KEY = b"simroute.table"
# key of `simroute.meta`: the benchmark clients' concurrency limit a run honours (int >= 1; absent or null: none)
MAX_CONCURRENCY_KEY = "max_concurrency"
REQUESTS_FILE = "requests.parquet"
CHUNKS_FILE = "chunks.parquet"
ROW_GROUP_ROWS = 65_536  # fixed so that the same rows always give the same bytes

_DICT_STR = pa.dictionary(pa.int32(), pa.string())

REQUEST_FIELDS: list[pa.Field] = [
    pa.field("request_id", pa.int64(), nullable=False),
    pa.field("arrival_s", pa.float64(), nullable=False),
    pa.field("tenant", _DICT_STR, nullable=False),
    pa.field("session", pa.int64(), nullable=False),
    pa.field("parent_id", pa.int64(), nullable=False),
    pa.field("after_id", pa.int64(), nullable=False),
    pa.field("think_s", pa.float32(), nullable=False),
    pa.field("requester_hint", pa.int32(), nullable=False),
    pa.field("prefill_hint", pa.int32(), nullable=False),
    pa.field("prompt_tokens", pa.int32(), nullable=False),
    pa.field("output_tokens", pa.int32(), nullable=False),
    pa.field("chunk_ids", pa.list_(pa.field("item", pa.int64(), nullable=False)), nullable=False),
    pa.field("chunk_at_cached_offset", pa.list_(pa.field("item", pa.bool_(), nullable=False)),
             nullable=False),
    pa.field("topk", pa.int32(), nullable=False),
    pa.field("holders_spanned", pa.int16(), nullable=False),
]
CHUNK_FIELDS: list[pa.Field] = [
    pa.field("chunk_id", pa.int64(), nullable=False),
    pa.field("tokens", pa.int32(), nullable=False),
    pa.field("corpus", _DICT_STR, nullable=False),
    pa.field("cached_offset", pa.int64(), nullable=False),
    pa.field("canonical", pa.bool_(), nullable=False),
    pa.field("holder_hint", pa.int32(), nullable=False),
]
REQUEST_SCHEMA = pa.schema(REQUEST_FIELDS)
CHUNK_SCHEMA = pa.schema(CHUNK_FIELDS)
REQUEST_COLUMNS = [f.name for f in REQUEST_FIELDS]
CHUNK_COLUMNS = [f.name for f in CHUNK_FIELDS]

# Defaults a producer may omit (everything but the identity/size columns).
REQUEST_DEFAULTS: dict[str, Any] = {
    "tenant": "default", "session": -1, "parent_id": -1, "after_id": -1, "think_s": 0.0,
    "requester_hint": -1, "prefill_hint": -1, "topk": 0, "holders_spanned": 0,
}
CHUNK_DEFAULTS: dict[str, Any] = {"corpus": "default", "cached_offset": 0, "canonical": True,
                                  "holder_hint": -1}


def schema_metadata(meta: dict[str, Any], table: str) -> dict[bytes, bytes]:
    """Key-value metadata for both files: version, table name and the producer's JSON (sorted keys)."""
    return {META_SCHEMA_KEY: SCHEMA_VERSION.encode(), META_TABLE_KEY: table.encode(),
            META_INFO_KEY: json.dumps(meta, sort_keys=True, default=_json_default).encode()}


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, (tuple, set)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _same_type(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Dictionary string columns may also be stored as plain strings by foreign writers."""
    if actual.equals(expected):
        return True
    if pa.types.is_dictionary(expected):
        value = actual.value_type if pa.types.is_dictionary(actual) else actual
        return pa.types.is_string(value) or pa.types.is_large_string(value)
    if pa.types.is_list(expected) and (pa.types.is_list(actual) or pa.types.is_large_list(actual)):
        return actual.value_type.equals(expected.value_type)
    return False


def validate_schema(schema: pa.Schema, file: Path, table: str) -> dict[str, Any]:
    """Check version and every column of one file; return the producer metadata.

    Raises ConfigurationError naming the file and the offending field.
    """
    md = schema.metadata or {}
    version = md.get(META_SCHEMA_KEY)
    if version is None:
        raise ConfigurationError("not a simroute trace (no simroute.schema metadata)", file=file,
                                 field="simroute.schema")
    if version.decode() != SCHEMA_VERSION:
        raise ConfigurationError(f"unsupported schema version {version.decode()!r}; this simroute reads "
                                 f"{SCHEMA_VERSION!r}", file=file, field="simroute.schema")
    expected = REQUEST_FIELDS if table == "requests" else CHUNK_FIELDS
    for f in expected:
        idx = schema.get_field_index(f.name)
        if idx < 0:
            raise ConfigurationError("missing column", file=file, field=f.name)
        if not _same_type(schema.field(idx).type, f.type):
            raise ConfigurationError(f"wrong type {schema.field(idx).type}, expected {f.type}",
                                     file=file, field=f.name)
    try:
        return json.loads(md.get(META_INFO_KEY, b"{}").decode())
    except ValueError as exc:
        raise ConfigurationError(f"metadata is not JSON: {exc}", file=file, field="simroute.meta") from None


def trace_concurrency(meta: dict[str, Any], file: Path) -> int | None:
    """The trace's concurrency limit (`simroute.meta` `max_concurrency`): None where it sets none; anything but a
    whole number >= 1 is refused naming the file and the key."""
    value = meta.get(MAX_CONCURRENCY_KEY) if isinstance(meta, dict) else None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"must be a whole number >= 1 (at most that many requests in flight) or null, got "
                                 f"{str(value)[:40]!r}", file=file, field=f"simroute.meta.{MAX_CONCURRENCY_KEY}")
    return value
