"""Importers: the real traces' facts, every bad-input case (file, line, reason; no output), rescaling."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simroute.errors import ConfigurationError
from simroute.workload import import_trace, read_chunks, read_requests, read_trace_meta, trace_info

MOON = [{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 500, "input_length": 1100, "output_length": 7, "hash_ids": [0, 2, 3]},
        {"timestamp": 1500, "input_length": 300, "output_length": 1, "hash_ids": [4]}]


def _jsonl(path: Path, rows: list, raw: dict[int, str] | None = None) -> Path:
    lines = [json.dumps(r) for r in rows]
    for i, text in (raw or {}).items():
        lines[i] = text
    path.write_text("\n".join(lines) + "\n")
    return path


def test_mooncake_real_trace(tmp_path, shared_traces):
    out = import_trace("mooncake", shared_traces / "mooncake_synthetic_trace.jsonl", tmp_path / "m.parquet")
    info = trace_info(out)
    assert info.requests == 3993
    assert info.span_s == pytest.approx(1022.025)
    assert info.reuse_unbounded == pytest.approx(0.6512, abs=5e-4)   # paper: 66% (see docs/TRACE_FORMAT.md)
    assert info.own_prompt_tokens["max"] == 0                        # every token is in a hash block
    chunks = read_chunks(out)
    assert chunks.num_rows == 43924 and not any(chunks["canonical"].to_pylist())
    meta = read_trace_meta(out)
    assert len(meta["source_sha256"]) == 64 and meta["source_files"] == ["mooncake_synthetic_trace.jsonl"]


def test_mooncake_blocks_prefix_semantics(tmp_path):
    out = import_trace("mooncake", _jsonl(tmp_path / "m.jsonl", MOON), tmp_path / "m.parquet")
    req, chunks = read_requests(out), read_chunks(out)
    assert req["chunk_ids"].to_pylist() == [[0, 1], [0, 2, 3], [4]]
    assert dict(zip(chunks["chunk_id"].to_pylist(), chunks["tokens"].to_pylist())) == \
        {0: 512, 1: 488, 2: 512, 3: 76, 4: 300}
    assert req["arrival_s"].to_pylist() == [0.0, 0.5, 1.5]
    assert req["prompt_tokens"].to_pylist() == [0, 0, 0]
    assert trace_info(out).reuse_unbounded == pytest.approx(512 / 2400)


@pytest.mark.parametrize("raw, line, reason", [
    ({1: "{not json"}, 2, "not valid JSON"),
    ({1: json.dumps({"timestamp": 1, "input_length": 10, "output_length": 1})}, 2, "missing field"),
    ({2: json.dumps({"timestamp": 2000, "input_length": -5, "output_length": 1, "hash_ids": []})}, 3, "negative"),
    ({0: json.dumps({"timestamp": 0, "input_length": 1000, "output_length": -1, "hash_ids": [0, 1]})}, 1,
     "negative"),
    ({1: json.dumps({"timestamp": 500, "input_length": 1100, "output_length": 7, "hash_ids": [0, 2]})}, 2,
     "needs ceil"),
    ({1: json.dumps({"timestamp": 500, "input_length": "x", "output_length": 7, "hash_ids": [0, 2, 3]})}, 2,
     "not a number"),
])
def test_mooncake_bad_input(tmp_path, no_leftovers, raw, line, reason):
    src = _jsonl(tmp_path / "bad.jsonl", MOON, raw)
    with pytest.raises(ConfigurationError, match=reason) as e:
        import_trace("mooncake", src, tmp_path / "out.parquet")
    assert e.value.file == str(src) and e.value.line == line
    assert not (tmp_path / "out.parquet").exists() and no_leftovers(tmp_path) == []


def test_empty_input_is_an_error(tmp_path):
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(ConfigurationError, match="no requests"):
        import_trace("mooncake", tmp_path / "e.jsonl", tmp_path / "e.parquet")
    assert not (tmp_path / "e.parquet").exists()


def test_unsorted_sorted_with_warning_or_rejected_strict(tmp_path):
    rows = [MOON[1], MOON[0], MOON[2]]
    src = _jsonl(tmp_path / "u.jsonl", rows)
    warned: list[str] = []
    out = import_trace("mooncake", src, tmp_path / "u.parquet", warn=warned.append)
    assert read_requests(out)["arrival_s"].to_pylist() == [0.0, 0.5, 1.5]
    assert len(warned) == 1 and "u.jsonl:2" in warned[0]
    with pytest.raises(ConfigurationError, match="not sorted") as e:
        import_trace("mooncake", src, tmp_path / "s.parquet", strict=True)
    assert e.value.line == 2 and not (tmp_path / "s.parquet").exists()


def test_azure_real_trace(tmp_path, shared_traces):
    out = import_trace("azure", shared_traces / "azure_llm_2023_code.csv", tmp_path / "a.parquet")
    info = trace_info(out)
    assert info.requests == 8819
    # 2023-11-16 18:17:03.9799600 -> 19:14:19.9280160
    assert info.span_s == pytest.approx(3435.948056, abs=1e-5)
    assert info.reuse_unbounded == 0.0 and info.chunks == 0


def test_azure_2024_columns_and_scales(tmp_path):
    src = tmp_path / "a24.csv"
    src.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                   "2024-05-10 00:00:00.009930+00:00,100,10\n2024-05-10 00:00:02.009930+00:00,200,20\n")
    req = read_requests(import_trace("azure", src, tmp_path / "a.parquet"))
    assert req["arrival_s"].to_pylist() == pytest.approx([0.0, 2.0])
    req = read_requests(import_trace("azure", src, tmp_path / "t.parquet", time_scale=3.0, load_scale=2.0))
    assert req["arrival_s"].to_pylist() == pytest.approx([0.0, 3.0])


@pytest.mark.parametrize("text, line, reason", [
    ("TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.98,5\n", 1, "missing column"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.98,5,1\nyesterday,5,1\n", 3, "TIMESTAMP"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.98,-5,1\n", 2, "negative"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.98,5,1\n2023-11-16 18:17:04,5,1,9\n", 3,
     "unparsable"),
])
def test_azure_bad_input(tmp_path, no_leftovers, text, line, reason):
    src = tmp_path / "bad.csv"
    src.write_text(text)
    with pytest.raises(ConfigurationError, match=reason) as e:
        import_trace("azure", src, tmp_path / "o.parquet")
    assert e.value.line == line and e.value.file == str(src)
    assert not (tmp_path / "o.parquet").exists() and no_leftovers(tmp_path) == []


def test_burstgpt(tmp_path):
    src = tmp_path / "b.csv"
    src.write_text("Timestamp,Session ID,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                   "5,17,ChatGPT,472,18,490,Conversation log\n45,abc,GPT-4,1087,0,1087,API log\n")
    req = read_requests(import_trace("burstgpt", src, tmp_path / "b.parquet"))
    assert req["arrival_s"].to_pylist() == [5.0, 45.0]
    assert req["prompt_tokens"].to_pylist() == [472, 1087] and req["output_tokens"].to_pylist() == [18, 0]
    assert req["tenant"].to_pylist() == ["ChatGPT", "GPT-4"]
    assert req["session"].to_pylist()[0] == 17
    src.write_text("Timestamp,Request tokens\n5,472\n")
    with pytest.raises(ConfigurationError, match="missing column") as e:
        import_trace("burstgpt", src, tmp_path / "c.parquet")
    assert e.value.field == "Response tokens"


def test_agent_real_trace(tmp_path, shared_traces):
    out = import_trace("agent", shared_traces / "agent_trace_0277.json", tmp_path / "g.parquet")
    req = read_requests(out)
    info = trace_info(out)
    assert info.requests == 53 and info.total_prompt_tokens == 2_576_410   # the file's totals.combined input
    session = req["session"].to_numpy()
    parent = req["parent_id"].to_numpy()
    assert len(set(session)) == 5                                            # main + 4 sub-agents
    assert np.sum(parent >= 0) == 4 + 12 + 17 + 11                          # every sub-agent request
    assert info.closed_loop_requests == 52
    first_sub = int(np.flatnonzero(session == 1)[0])
    assert req["arrival_s"].to_numpy()[first_sub] == pytest.approx(79.224)  # marker t + request t


def test_agent_ids_namespaced_per_file(tmp_path, shared_traces):
    src = shared_traces / "agent_trace_0277.json"
    doc = json.loads(src.read_text())
    for name in ("c1.json", "c2.json"):         # two conversations (distinct ids) with the same local hash ids
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / name).write_text(json.dumps({**doc, "id": name}))
    out = import_trace("agent", tmp_path / "in", tmp_path / "two.parquet")
    single = read_chunks(import_trace("agent", src, tmp_path / "one.parquet")).num_rows
    assert read_chunks(out).num_rows == 2 * single                           # never collide
    assert trace_info(out).requests == 106


def test_agent_bad_input(tmp_path, no_leftovers):
    bad = tmp_path / "bad.json"
    bad.write_text('{"id": "x",\n "requests": [\n {"t": 0, "in": 130, "out": 1, "hash_ids": [1]}]}')
    with pytest.raises(ConfigurationError, match="floor") as e:
        import_trace("agent", bad, tmp_path / "o.parquet")
    assert e.value.field == "requests[0].hash_ids"
    bad.write_text('{"id": "x",\n "requests": [\n {"t": 0, "in": 130, "out": 1,, }]}')
    with pytest.raises(ConfigurationError, match="not valid JSON") as e:
        import_trace("agent", bad, tmp_path / "o.parquet")
    assert e.value.line == 3
    bad.write_text('{"requests": [{"t": 0, "in": -3, "out": 1, "hash_ids": []}]}')
    with pytest.raises(ConfigurationError, match="must be >= 1"):      # a request reads at least one token
        import_trace("agent", bad, tmp_path / "o.parquet")
    assert not (tmp_path / "o.parquet").exists() and no_leftovers(tmp_path) == []


def test_importers_are_registered_by_decorator_and_listed_names_match():
    """The CLI's format list (importable without the importers) is exactly what the modules register; a new
    format is one decorated function, and a name registered twice is refused."""
    from simroute.workload.importers import IMPORTERS, _registry
    from simroute.workload.importers.common import IMPORTER_REGISTRY, register_importer
    assert tuple(sorted(_registry())) == IMPORTERS
    try:
        @register_importer("example-format")
        def import_example(writer, files, opts):  # pragma: no cover - registration only
            return None
        assert _registry()["example-format"] is import_example
        with pytest.raises(ValueError, match="registered twice"):
            register_importer("example-format")(import_example)
    finally:
        IMPORTER_REGISTRY.pop("example-format", None)
