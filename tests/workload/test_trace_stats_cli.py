"""`trace info` statistics (reuse by hand, LRU bounds) and the `simroute trace` CLI return codes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simroute.errors import ConfigurationError
from simroute.workload import read_trace_meta, trace_info


def test_reuse_and_lru_by_hand(tmp_path, small_trace):
    # chunk tokens: 0 -> 100, 1 -> 50, 2 -> 200; own tokens 10 each
    rows = [(0.0, 10, [0, 1]), (1.0, 10, [0]), (2.0, 10, [2]), (3.0, 10, [1, 0])]
    path = small_trace(tmp_path / "h.parquet", rows, {0: 100, 1: 50, 2: 200})
    total = 40 + 150 + 100 + 200 + 150
    info = trace_info(path, lru_capacity_tokens=250)
    assert info.total_prompt_tokens == total
    assert info.reuse_unbounded == pytest.approx((100 + 150) / total)
    # LRU of 250 tokens: t0 0,1 miss (150 used); t1 0 hits; t2 2 misses, 350 > 250 evicts 1 then 0;
    # t3 1 and 0 miss again. Hits: 100 tokens.
    assert info.lru_hit_ratio == pytest.approx(100 / total)
    assert trace_info(path, lru_capacity_tokens=10**9).lru_hit_ratio == pytest.approx(info.reuse_unbounded)
    assert trace_info(path, lru_capacity_tokens=0).lru_hit_ratio == 0.0
    assert info.span_s == 3.0 and info.rate_rps == pytest.approx(4 / 3)
    assert info.unique_chunk_tokens == 350


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(0, 7), max_size=4), min_size=1, max_size=30), st.integers(0, 2000))
def test_lru_never_beats_unbounded(tmp_path_factory, small_trace, requests, capacity):
    tokens = {i: 64 * (i + 1) for i in range(8)}
    path = tmp_path_factory.mktemp("h") / "t.parquet"
    small_trace(path, [(float(i), 1, ids) for i, ids in enumerate(requests)], tokens)
    info = trace_info(path, lru_capacity_tokens=capacity)
    assert 0.0 <= info.lru_hit_ratio <= info.reuse_unbounded + 1e-12 <= 1.0


def test_unknown_chunk_is_reported(tmp_path, small_trace):
    with pytest.raises(ConfigurationError, match="chunk 5"):      # the writer refuses to produce it ...
        small_trace(tmp_path / "u.parquet", [(0.0, 1, [5])], {0: 10})
    assert not (tmp_path / "u.parquet").exists()
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    path = small_trace(tmp_path / "v.parquet", [(0.0, 1, [5])], {5: 10})
    chunks = pq.read_table(path / "chunks.parquet")                # ... and a reader catches a damaged one
    chunks = chunks.set_column(0, "chunk_id", pc.add(chunks["chunk_id"], 1))
    pq.write_table(chunks, path / "chunks.parquet")
    with pytest.raises(ConfigurationError, match="chunk 5"):
        trace_info(path)


def test_cli_gen_info_import(tmp_path, cli, shared_traces):
    out = tmp_path / "a.parquet"
    code, stdout, _ = cli("trace", "gen", "agents", "-p", "documents=2", "-p", "subagents=3", "-o", out,
                          "--seed", "4")
    assert code == 0 and out.exists()
    assert read_trace_meta(out)["seed"] == 4
    code, stdout, _ = cli("trace", "info", out, "--json", "--lru-capacity", "100000")
    data = json.loads(stdout)
    assert code == 0 and data["requests"] == 2 * (1 + 3 * 4)
    assert {"requests", "span_s", "reuse_unbounded", "lru_hit_ratio"} <= set(data)
    code, stdout, _ = cli("trace", "info", out)
    assert code == 0 and "reuse" in stdout
    moon = tmp_path / "m.parquet"
    code, _, _ = cli("trace", "import", "mooncake", shared_traces / "mooncake_synthetic_trace.jsonl",
                     "-o", moon, "--time-scale", "0.5")
    assert code == 0
    assert json.loads(cli("trace", "info", moon, "--json")[1])["span_s"] == pytest.approx(511.0125)


def test_cli_preset_and_list(tmp_path, cli):
    from pathlib import Path
    preset = Path(__file__).resolve().parents[2] / "workloads" / "corpus-zipf.yaml"
    code, _, _ = cli("trace", "gen", "corpus", "--config", preset, "-p", "requests=100", "-o", tmp_path / "c.parquet")
    assert code == 0 and read_trace_meta(tmp_path / "c.parquet")["params"]["chunks"] == 512
    code, stdout, _ = cli("trace", "list")
    assert code == 0 and "sparse" in stdout and "mooncake" in stdout
    code, _, err = cli("trace", "gen", "sparse", "--config", preset, "-o", tmp_path / "x.parquet")
    assert code == 2 and "kind" in err


def test_cli_errors_exit_nonzero_without_output(tmp_path, cli, no_leftovers):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\nnot json\n')
    code, _, err = cli("trace", "import", "mooncake", bad, "-o", tmp_path / "o.parquet")
    assert code == 2 and "bad.jsonl:2" in err and "not valid JSON" in err
    assert not (tmp_path / "o.parquet").exists() and no_leftovers(tmp_path) == []
    unsorted = tmp_path / "u.jsonl"
    unsorted.write_text('{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n'
                        '{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n')
    code, _, err = cli("trace", "import", "mooncake", unsorted, "-o", tmp_path / "u.parquet", "--strict")
    assert code == 2 and "u.jsonl:2" in err
    code, _, err = cli("trace", "import", "mooncake", unsorted, "-o", tmp_path / "u.parquet")
    assert code == 0 and "warning" in err and "not sorted" in err
    assert cli("trace", "import", "nope", bad, "-o", tmp_path / "n.parquet")[0] == 2
    assert cli("trace", "gen", "agents", "-p", "documents=-1", "-o", tmp_path / "n.parquet")[0] == 2
    assert cli("trace", "info", tmp_path / "missing.parquet")[0] == 2
    assert cli("trace", "gen", "agents", "-o", tmp_path / "n.trace")[0] == 2
    assert not (tmp_path / "n.parquet").exists()
