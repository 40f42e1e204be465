"""Claude-Code style agent traces (callanjfox/kv-cache-tester): one conversation per JSON file.

A request: `t` (s from its stream's start), `in`, `out`, `hash_ids` (one per full 64-token block,
floor(in / 64) ids), `api_time`, `think_time`. A `type: "subagent"` entry nests its own `requests`,
whose `t` counts from the marker's `t`. Each stream (the main agent, every sub-agent) is a closed
loop: a request arrives `think_time` after the previous one of its stream completes (`after_id`);
a sub-agent's first request follows the parent request that spawned it, and its requests carry
that request as `parent_id`. Local hash ids are namespaced per file (conversation), so two files
never share a chunk unless they declare `hash_id_scope: "global"`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from simroute.checks import check_number
from simroute.errors import ConfigurationError
from simroute.ioutil import load_json
from simroute.workload.importers.common import register_importer, ImportOptions
from simroute.workload.writer import TraceWriter, list_array

BLOCK = 64
MAX_FILE_BYTES = 64 << 20      # one conversation; parsed whole, so bounded (the public ones are ~100 kB)
MAX_NESTING = 64


class _Conv:
    """Flattened requests of all files, in plain lists (agent traces are small: ~50 requests a file)."""

    def __init__(self) -> None:
        self.t: list[float] = []
        self.inp: list[int] = []
        self.out: list[int] = []
        self.think: list[float] = []
        self.after: list[int] = []
        self.parent: list[int] = []
        self.session: list[int] = []
        self.tenant: list[str] = []
        self.blocks: list[list[tuple[Any, int]]] = []   # (namespaced key, local id)
        self.api: list[float] = []
        self.n_sessions = 0


MAX_TOKENS = 2**31 - 1
MAX_BLOCK = 1 << 20


MAX_SECONDS = 1e8          # ~3 years: a time past this is a corrupted record, not a conversation
REQUEST_TYPES = ("n", "subagent")     # a request and a sub-agent marker (kv-cache-tester's two kinds)


def _num(obj: dict[str, Any], key: str, file: Path, where: str, *, integer: bool = False,
         default: Any = None, minimum: float = 0) -> Any:
    v = obj.get(key, default)
    if v is None:
        raise ConfigurationError(f"missing '{key}'", file=file, field=f"{where}.{key}")
    return check_number(v, f"{where}.{key}", file=file, integer=integer, minimum=minimum,
                        maximum=MAX_TOKENS if integer else MAX_SECONDS)


def _stream(conv: _Conv, entries: Any, t0: float, spawner: int, file: Path, ns: Any, block: int,
            where: str, model_tenant: bool) -> None:
    if not isinstance(entries, list):
        raise ConfigurationError("'requests' must be a list", file=file, field=where)
    if where.count("requests") > MAX_NESTING:
        raise ConfigurationError(f"sub-agents nest deeper than {MAX_NESTING} levels", file=file, field=where)
    session = conv.n_sessions
    conv.n_sessions += 1
    prev = spawner
    for i, e in enumerate(entries):
        at = f"{where}[{i}]"
        if not isinstance(e, dict):
            raise ConfigurationError("an entry must be an object", file=file, field=at)
        t = t0 + _num(e, "t", file, at)
        if t > MAX_SECONDS:
            raise ConfigurationError(f"lies {t:g} s after its conversation's start (at most {MAX_SECONDS:g})",
                                     file=file, field=f"{at}.t")
        kind = e.get("type", "n")
        if kind not in REQUEST_TYPES:
            raise ConfigurationError(f"unknown request type {str(kind)[:40]!r}; known: {', '.join(REQUEST_TYPES)}",
                                     file=file, field=f"{at}.type")
        if kind == "subagent" or "requests" in e:
            _stream(conv, e.get("requests"), t, prev, file, ns, block, f"{at}.requests", model_tenant)
            continue
        n_in = int(_num(e, "in", file, at, integer=True, minimum=1))      # a request reads at least a token
        hids = e.get("hash_ids", [])
        if not isinstance(hids, list) or any(type(h) is not int or not -2**63 <= h < 2**63 for h in hids):
            raise ConfigurationError("hash_ids must be a list of 64-bit integers", file=file, field=f"{at}.hash_ids")
        if len(hids) != n_in // block:
            raise ConfigurationError(f"hash_ids has {len(hids)} ids but in={n_in} needs floor({n_in}/{block}) "
                                     f"= {n_in // block}", file=file, field=f"{at}.hash_ids")
        if prev >= 0 and t < conv.t[prev]:
            raise ConfigurationError(f"t = {t - t0:g} is earlier than the previous request of its stream "
                                     f"(t = {conv.t[prev] - t0:g}); a stream's entries must be in time order",
                                     file=file, field=f"{at}.t")
        me = len(conv.t)
        conv.t.append(t)
        conv.inp.append(n_in)
        conv.out.append(int(_num(e, "out", file, at, integer=True)))
        conv.api.append(float(_num(e, "api_time", file, at, default=0.0)))
        if prev >= 0:
            done = conv.t[prev] + conv.api[prev]
            think = e.get("think_time")
            # A sub-agent's first request: its think_time counts from the sub-agent start, so the
            # gap after the spawning request is the closed-loop delay instead.
            first_of_sub = prev == spawner
            conv.think.append(float(_num(e, "think_time", file, at)) if think is not None
                              and not first_of_sub else max(0.0, t - done))
        else:
            conv.think.append(0.0)
        conv.after.append(prev)
        conv.parent.append(spawner)
        conv.session.append(session)
        conv.tenant.append(str(e.get("model", "agent")) if model_tenant else "agent")
        conv.blocks.append([(ns, h) for h in hids])
        prev = me


def _read_file(conv: _Conv, file: Path, k: int, opts: ImportOptions) -> str:
    """Flatten one conversation file into `conv`; returns its corpus name."""
    doc = load_json(file, what="agent trace (JSON)", max_bytes=MAX_FILE_BYTES)
    if not isinstance(doc, dict) or "requests" not in doc:
        raise ConfigurationError("expected an object with 'requests'", file=file, field="requests")
    block = opts.block_tokens or check_number(doc.get("block_size", BLOCK), "block_size", file=file,
                                              integer=True, minimum=1, maximum=MAX_BLOCK)
    if block != (opts.block_tokens or BLOCK) and opts.strict:
        raise ConfigurationError(f"block_size {block} != {BLOCK}", file=file, field="block_size")
    scope = doc.get("hash_id_scope", "local")
    if scope not in ("local", "global"):
        raise ConfigurationError(f"must be 'local' or 'global', got {scope!r}"[:200], file=file,
                                 field="hash_id_scope")
    _stream(conv, doc["requests"], 0.0, -1, file, "global" if scope == "global" else k, block, "requests",
            model_tenant=False)
    return _trace_id(doc, file)


def _trace_id(doc: dict[str, Any], file: Path) -> str:
    """The conversation's id (the file's name without one): a non-empty text without control characters."""
    if "id" not in doc:
        return file.stem
    ident = doc["id"]
    if not isinstance(ident, str) or not ident.strip() or any(ord(ch) < 32 for ch in ident) or len(ident) > 256:
        raise ConfigurationError(f"must be a non-empty name (at most 256 characters, no control characters), got "
                                 f"{str(ident)[:40]!r}", file=file, field="id")
    return ident


@register_importer("agent")
def import_agent(writer: TraceWriter, files: list[Path], opts: ImportOptions) -> None:
    conv = _Conv()
    corpus_of: list[str] = []
    file_of: list[int] = []
    seen_files: dict[Path, Path] = {}
    seen_ids: dict[str, Path] = {}
    for k, file in enumerate(files):
        same = seen_files.setdefault(file.resolve(), file)
        if same is not file:
            raise ConfigurationError(f"given twice (also as {same}): each conversation is imported once", file=file)
        before = len(conv.t)
        ident = _read_file(conv, file, k, opts)
        if ident in seen_ids:
            raise ConfigurationError(f"trace id {ident!r} is also the id of {seen_ids[ident]}: two conversations "
                                     "with one id (a copied file?)", file=file, field="id")
        seen_ids[ident] = file
        corpus_of.append(ident)
        file_of.extend([k] * (len(conv.t) - before))
    n = len(conv.t)
    arrival = np.asarray(conv.t, dtype=np.float64)
    order = np.argsort(arrival, kind="stable")
    inv = np.empty_like(order)
    inv[order] = np.arange(n)

    def remap(ref: list[int]) -> np.ndarray:
        r = np.asarray(ref, dtype=np.int64)[order]
        return np.where(r >= 0, inv[np.maximum(r, 0)], -1)

    # Chunk ids: dense, by first appearance in arrival order; offsets are positions x block.
    ids: dict[tuple[Any, int], int] = {}
    chunk_offset: list[int] = []
    chunk_corpus: list[int] = []
    flat: list[int] = []
    at: list[bool] = []
    counts = np.zeros(n, dtype=np.int64)
    block_tokens = opts.block_tokens or BLOCK
    for row, src in enumerate(order):
        for j, key in enumerate(conv.blocks[src]):
            cid = ids.get(key)
            if cid is None:
                cid = ids[key] = len(chunk_offset)
                chunk_offset.append(j * block_tokens)
                chunk_corpus.append(file_of[src] if key[0] != "global" else 0)
            flat.append(cid)
            at.append(chunk_offset[cid] == j * block_tokens)
        counts[row] = len(conv.blocks[src])
    offsets = np.concatenate(([0], np.cumsum(counts)))
    inp = np.asarray(conv.inp, dtype=np.int64)[order]
    writer.add_requests({
        "arrival_s": opts.arrivals(arrival[order]), "tenant": pa.array([conv.tenant[i] for i in order]),
        "session": np.asarray(conv.session, dtype=np.int64)[order],
        "parent_id": remap(conv.parent), "after_id": remap(conv.after),
        "think_s": np.asarray(conv.think, dtype=np.float64)[order] * opts.time_scale,
        "prompt_tokens": (inp - counts * block_tokens).astype(np.int32),
        "output_tokens": np.asarray(conv.out, dtype=np.int32)[order],
        "chunk_ids": list_array(offsets, np.asarray(flat, dtype=np.int64), pa.int64()),
        "chunk_at_cached_offset": list_array(offsets, np.asarray(at, dtype=bool), pa.bool_()),
    })
    names = corpus_of if corpus_of else ["agent"]
    writer.finish({"chunk_id": np.arange(len(chunk_offset), dtype=np.int64),
                   "tokens": np.full(len(chunk_offset), block_tokens, dtype=np.int32),
                   "corpus": pa.array([names[c] for c in chunk_corpus], pa.string()),
                   "cached_offset": np.asarray(chunk_offset, dtype=np.int64), "canonical": False})
