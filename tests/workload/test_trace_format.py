"""The trace format: round trips, deterministic bytes, streaming reads, validation, atomic writes."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from simroute.errors import ConfigurationError
from simroute.workload import (REQUEST_COLUMNS, CHUNK_COLUMNS, SCHEMA_VERSION, generate, iter_request_batches,
                               read_chunks, read_requests, read_trace_meta)
from simroute.workload.writer import open_trace_writer

KINDS = {"agents": {"documents": 2, "subagents": 4, "requests_per_agent": 3},
         "corpus": {"requests": 3000}, "sparse": {"requests": 2000}, "disagg": {"requests": 2000}}


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for name in ("requests.parquet", "chunks.parquet"):
        h.update((path / name).read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_round_trip_and_same_seed_same_bytes(tmp_path, kind):
    a = generate(kind, tmp_path / "a.parquet", seed=7, params=KINDS[kind])
    b = generate(kind, tmp_path / "b.parquet", seed=7, params=KINDS[kind])
    c = generate(kind, tmp_path / "c.parquet", seed=8, params=KINDS[kind])
    assert _digest(a) == _digest(b)
    assert _digest(a) != _digest(c)
    req, chunks = read_requests(a), read_chunks(a)
    assert req.column_names == REQUEST_COLUMNS and chunks.column_names == CHUNK_COLUMNS
    n = req.num_rows
    assert np.array_equal(req["request_id"].to_numpy(), np.arange(n))
    assert np.all(np.diff(req["arrival_s"].to_numpy()) >= 0)
    flat = pa.compute.list_flatten(req["chunk_ids"]).to_numpy()
    assert np.isin(flat, chunks["chunk_id"].to_numpy()).all()
    meta = read_trace_meta(a)
    assert meta["name"] == kind and meta["seed"] == 7 and meta["requests"] == n
    assert meta["params"] == {**meta["params"], **KINDS[kind]}
    md = pq.ParquetFile(a / "requests.parquet").schema_arrow.metadata
    assert md[b"simroute.schema"].decode() == SCHEMA_VERSION
    # references point backwards (closed loops and sub-agents follow earlier requests)
    for ref in ("after_id", "parent_id"):
        r = req[ref].to_numpy()
        assert np.all((r == -1) | ((r >= 0) & (r < np.arange(n))))


def test_row_groups_fixed_and_batches_stream(tmp_path):
    path = generate("corpus", tmp_path / "t.parquet", seed=1, params={"requests": 2500}, row_group_rows=1000)
    pf = pq.ParquetFile(path / "requests.parquet")
    assert [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)] == [1000, 1000, 500]
    sizes = [b.num_rows for b in iter_request_batches(path, batch_rows=300)]
    assert sum(sizes) == 2500 and max(sizes) <= 300
    cols = next(iter_request_batches(path, columns=["arrival_s"])).schema.names
    assert cols == ["arrival_s"]


def test_bytes_do_not_depend_on_producer_batching(tmp_path):
    def write(path, splits):
        with open_trace_writer(path, {"producer": "test"}, row_group_rows=4) as w:
            arr = np.arange(10, dtype=float)
            for part in np.split(arr, splits):
                w.add_requests({"arrival_s": part, "prompt_tokens": np.ones(len(part), int),
                                "output_tokens": np.ones(len(part), int)})
            w.finish({})
        return path
    assert _digest(write(tmp_path / "a.parquet", [3, 5])) == _digest(write(tmp_path / "b.parquet", [9]))


def _rewrite(src: Path, dst: Path, fn) -> Path:
    shutil.copytree(src, dst)
    table = pq.read_table(src / "requests.parquet")
    pq.write_table(fn(table), dst / "requests.parquet")
    return dst


def test_validation_names_file_and_field(tmp_path):
    good = generate("disagg", tmp_path / "g.parquet", seed=0, params={"requests": 10})
    missing = _rewrite(good, tmp_path / "m.parquet", lambda t: t.drop_columns(["output_tokens"]))
    with pytest.raises(ConfigurationError) as e:
        list(iter_request_batches(missing))
    assert e.value.field == "output_tokens" and e.value.file.endswith("requests.parquet")
    wrong = _rewrite(good, tmp_path / "w.parquet",
                     lambda t: t.set_column(t.schema.get_field_index("prompt_tokens"), "prompt_tokens",
                                            t["prompt_tokens"].cast(pa.string())))
    with pytest.raises(ConfigurationError, match="wrong type") as e:
        read_trace_meta(wrong)
    assert e.value.field == "prompt_tokens"

    def bump(t):
        md = dict(t.schema.metadata)
        md[b"simroute.schema"] = b"simroute.trace/99"
        return t.replace_schema_metadata(md)
    with pytest.raises(ConfigurationError, match="unsupported schema version"):
        read_trace_meta(_rewrite(good, tmp_path / "v.parquet", bump))
    with pytest.raises(ConfigurationError, match="not a simroute trace"):
        read_trace_meta(_rewrite(good, tmp_path / "n.parquet", lambda t: t.replace_schema_metadata({})))
    with pytest.raises(ConfigurationError, match="not found"):
        read_chunks(tmp_path / "absent.parquet")
    (tmp_path / "c.parquet").mkdir()
    with pytest.raises(ConfigurationError, match="requests.parquet: missing"):
        read_trace_meta(tmp_path / "c.parquet")


def test_failed_write_leaves_nothing(tmp_path, no_leftovers):
    target = tmp_path / "x.parquet"
    with pytest.raises(RuntimeError):
        with open_trace_writer(target, {}) as w:
            w.add_requests({"arrival_s": np.arange(3.0), "prompt_tokens": [1, 2, 3], "output_tokens": [1, 1, 1]})
            raise RuntimeError("boom")
    assert not target.exists() and no_leftovers(tmp_path) == []
    with pytest.raises(ConfigurationError, match=r"\*.parquet"):
        with open_trace_writer(tmp_path / "x.trace", {}):
            pass


def test_unsorted_is_sorted_with_warning_or_rejected(tmp_path):
    warnings: list[str] = []
    with open_trace_writer(tmp_path / "s.parquet", {}, warn=warnings.append) as w:
        w.add_requests({"arrival_s": np.array([0.0, 3.0, 1.0, 2.0]), "prompt_tokens": [10, 20, 30, 40],
                        "output_tokens": [1, 1, 1, 1], "after_id": [-1, -1, 0, 2]})
        w.finish({})
    req = read_requests(tmp_path / "s.parquet")
    assert req["prompt_tokens"].to_pylist() == [10, 30, 40, 20]
    assert req["after_id"].to_pylist() == [-1, 0, 1, -1]   # remapped to the new positions
    assert len(warnings) == 1 and "not sorted" in warnings[0]
    # a closed loop whose re-sorted order would follow a later request: refused, not written for `run` to reject
    with pytest.raises(ConfigurationError, match="after_id"):
        with open_trace_writer(tmp_path / "bad.parquet", {}, warn=warnings.append) as w:
            w.add_requests({"arrival_s": np.array([0.0, 2.0, 1.0]), "prompt_tokens": [10, 20, 30],
                            "output_tokens": [1, 1, 1], "after_id": [-1, 0, 1]})
            w.finish({})
    assert not (tmp_path / "bad.parquet").exists()
    with pytest.raises(ConfigurationError, match="not sorted"):
        with open_trace_writer(tmp_path / "r.parquet", {}, strict=True) as w:
            w.add_requests({"arrival_s": np.array([0.0, 2.0, 1.0]), "prompt_tokens": [1, 1, 1],
                            "output_tokens": [1, 1, 1]})
    assert not (tmp_path / "r.parquet").exists()


def test_shipped_default_trace_is_the_documented_command(tmp_path):
    import simroute
    from simroute.ioutil import load_yaml
    shipped = Path(simroute.__file__).parent / "data" / "traces" / "agents-default.parquet"
    preset = load_yaml(Path(__file__).resolve().parents[2] / "workloads" / "agents-default.yaml")
    again = generate("agents", tmp_path / "d.parquet", seed=preset["seed"], params=preset["params"])
    meta = read_trace_meta(shipped)
    p = preset["params"]
    assert meta["requests"] == p["documents"] * (1 + p["subagents"] * p["requests_per_agent"])
    assert _digest(shipped) == _digest(again)
