"""Seed inputs of the importer fuzzers: small valid examples of each format, plus the real traces' first lines.

Shared by the atheris harness (fuzz/fuzz_importers.py) and the hypothesis tests (tests/badinput/test_fuzz.py).
"""

from __future__ import annotations

import json
from pathlib import Path

REAL_TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
SUFFIX = {"mooncake": ".jsonl", "azure": ".csv", "burstgpt": ".csv", "agent": ".json", "optables": ".parquet"}
REAL = {"mooncake": "mooncake_synthetic_trace.jsonl", "azure": "azure_llm_2023_code.csv",
        "agent": "agent_trace_0277.json"}

EXAMPLES: dict[str, list[bytes]] = {
    "mooncake": [b'{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}\n'
                 b'{"timestamp": 7, "input_length": 600, "output_length": 2, "hash_ids": [0, 2]}\n'],
    "azure": [b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n"
              b"2023-11-16 18:17:04.0319600,3180,8\n"],
    "burstgpt": [b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 b"5,ChatGPT,472,18,490,Conversation log\n7,GPT-4,1200,300,1500,API log\n",
                 b"Timestamp,Session ID,Request tokens,Response tokens\n1,abc,10,2\n2,17,12,3\n"],
    "agent": [json.dumps({"id": "a", "block_size": 64, "requests": [
        {"t": 0.0, "in": 130, "out": 5, "hash_ids": [1, 2], "api_time": 1.0},
        {"t": 3.0, "in": 200, "out": 5, "hash_ids": [1, 2, 3], "api_time": 1.0, "think_time": 2.0},
        {"t": 4.0, "type": "subagent", "requests": [{"t": 0.5, "in": 64, "out": 1, "hash_ids": [9]}]}]}).encode()],
}


def real_seed(fmt: str, max_bytes: int = 6000) -> bytes | None:
    """The first lines of the shipped real trace of `fmt` (whole lines, about `max_bytes`), or None."""
    name = REAL.get(fmt)
    path = REAL_TRACES / name if name else None
    if path is None or not path.exists():
        return None
    data = path.read_bytes()
    if fmt == "agent":          # one JSON document: keep it whole but with the first few requests only
        doc = json.loads(data)
        doc["requests"] = doc["requests"][:3]
        return json.dumps(doc).encode()
    cut = data[:max_bytes]
    return cut[: cut.rfind(b"\n") + 1]


def table_seeds() -> list[bytes]:
    """Operator tables (a GEMM table's Parquet bytes): a hand-made one and the first rows of a shipped one."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    shipped = (Path(__file__).resolve().parent.parent / "simroute" / "data" / "calib" / "ops" / "h200-sxm"
               / "sglang-0.5.14" / "gemm.parquet")
    tables = [pa.table({"dtype": ["bf16"] * 4, "m": [1, 16, 256, 4096], "n": [4096] * 4, "k": [4096] * 4,
                        "latency_us": [5.0, 9.0, 40.0, 400.0]})]
    if shipped.exists():
        tables.append(pq.read_table(shipped).slice(0, 64))
    out = []
    for table in tables:
        sink = io.BytesIO()
        pq.write_table(table, sink)
        out.append(sink.getvalue())
    return out


def seeds(fmt: str) -> list[bytes]:
    if fmt == "optables":
        return table_seeds()
    real = real_seed(fmt)
    return EXAMPLES[fmt] + ([real] if real else [])


def write_seeds(fmt: str, corpus: Path) -> None:
    for i, data in enumerate(seeds(fmt)):
        (corpus / f"seed-{i}{SUFFIX[fmt]}").write_bytes(data)
