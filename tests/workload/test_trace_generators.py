"""Each scenario generator expresses its scenario: offsets, hints, popularity, holders, closed loops."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pytest

from simroute.errors import ConfigurationError, UnknownNameError
from simroute.workload import generate, make_params, read_chunks, read_requests


def _lists(req, col):
    return req[col].to_pylist()


def test_agents_closed_loop_forks_pinned_documents(tmp_path):
    p = {"documents": 3, "subagents": 5, "requests_per_agent": 4, "doc_tokens": 5000, "chunk_tokens": 2048,
         "tenants": 2}
    req = read_requests(generate("agents", tmp_path / "a.parquet", seed=3, params=p))
    chunks = read_chunks(tmp_path / "a.parquet")
    assert req.num_rows == 3 * (1 + 5 * 4)
    assert chunks["tokens"].to_pylist()[:3] == [2048, 2048, 904]            # last chunk partial
    assert chunks["cached_offset"].to_pylist()[:3] == [0, 2048, 4096]
    assert all(chunks["canonical"].to_pylist())
    assert all(all(x) for x in _lists(req, "chunk_at_cached_offset"))     # true prefixes
    after = req["after_id"].to_numpy()
    parent = req["parent_id"].to_numpy()
    arrival = req["arrival_s"].to_numpy()
    roots = np.flatnonzero(after < 0)
    assert len(roots) == 3 and np.all(parent[roots] == -1)
    sub = after >= 0
    assert np.all(arrival[sub] >= arrival[after[sub]])
    assert np.all(req["think_s"].to_numpy()[sub] >= 0)
    ids = _lists(req, "chunk_ids")
    for i in np.flatnonzero(sub):   # a sub-agent attends its root's document
        assert ids[i] == ids[parent[i]]
    assert set(req["tenant"].to_pylist()) == {"t0", "t1"}
    assert len(set(req["session"].to_pylist())) == 3 * 6


def test_agents_poisson_is_open_loop(tmp_path):
    req = read_requests(generate("agents", tmp_path / "p.parquet", seed=1,
                                 params={"arrival": "poisson", "documents": 1, "subagents": 4}))
    assert np.all(req["after_id"].to_numpy() == -1)
    assert np.sum(req["parent_id"].to_numpy() == 0) == 4 * 4


def test_corpus_zipf_rehomed_and_tenant_homes(tmp_path):
    p = {"requests": 20000, "chunks": 64, "zipf_s": 1.2, "tenants": 6, "instances": 4, "place_chunks": True}
    path = generate("corpus", tmp_path / "c.parquet", seed=2, params=p)
    req, chunks = read_requests(path), read_chunks(path)
    flat = pc.list_flatten(req["chunk_ids"]).to_numpy()
    counts = np.bincount(flat, minlength=64)
    assert counts[0] > counts[1] > counts[10] > counts[63]               # popularity follows rank
    assert not any(any(x) for x in _lists(req, "chunk_at_cached_offset"))  # re-homed
    for ids in _lists(req, "chunk_ids")[:500]:
        assert len(ids) == len(set(ids)) >= 1
    tenant = np.array([int(t[1:]) for t in req["tenant"].to_pylist()])
    assert np.array_equal(req["requester_hint"].to_numpy(), tenant % 4)
    assert np.array_equal(chunks["holder_hint"].to_numpy(), np.arange(64) % 4)
    assert np.all(req["prompt_tokens"].to_numpy() >= 1)
    rate = req.num_rows / req["arrival_s"].to_numpy()[-1]
    assert rate == pytest.approx(20.0, rel=0.05)


def test_sparse_selection_spans_m_holders(tmp_path):
    p = {"requests": 500, "holders": 6, "spanned": 3, "chunks_per_holder": 10, "chunks_per_holder_request": 2,
         "topk": 512}
    path = generate("sparse", tmp_path / "s.parquet", seed=4, params=p)
    req, chunks = read_requests(path), read_chunks(path)
    holder = chunks["holder_hint"].to_numpy()
    assert set(req["topk"].to_pylist()) == {512} and set(req["holders_spanned"].to_pylist()) == {3}
    for ids in _lists(req, "chunk_ids"):
        assert len(ids) == 6 and len(set(holder[ids])) == 3


def test_disagg_hints_and_prompt_distribution(tmp_path):
    p = {"requests": 5000, "prefill_instances": 2, "decode_instances": 3, "prompt_dist": "uniform",
         "prompt_tokens": 1000, "prompt_min": 100}
    req = read_requests(generate("disagg", tmp_path / "d.parquet", seed=5, params=p))
    pre, dec = req["prefill_hint"].to_numpy(), req["requester_hint"].to_numpy()
    assert set(pre) == {0, 1} and set(dec) == {2, 3, 4}
    prompt = req["prompt_tokens"].to_numpy()
    assert prompt.min() >= 100 and prompt.max() <= 1900
    assert all(len(x) == 0 for x in _lists(req, "chunk_ids"))


def test_bad_params_are_configuration_errors():
    with pytest.raises(UnknownNameError):
        make_params("corpus", {"nope": 1})
    with pytest.raises(UnknownNameError):
        make_params("bogus", {})
    with pytest.raises(ConfigurationError, match="spanned"):
        make_params("sparse", {"holders": 2, "spanned": 3})
    with pytest.raises(ConfigurationError, match="must be one of"):
        make_params("agents", {"arrival": "sometimes"})
    from simroute.workload.generators import parse_cli_value
    assert make_params("agents", {"root": parse_cli_value("false"), "think_s": parse_cli_value("0.5")}).root is False
    for bad in ({"think_s": "0.5"}, {"documents": True}, {"think_s": float("nan")}, {"documents": 2.5},
                {"documents": 2**40}, {"root": "false"}):
        with pytest.raises(ConfigurationError):             # strict: no numeric strings, bools, NaN, fractions
            make_params("agents", bad)
