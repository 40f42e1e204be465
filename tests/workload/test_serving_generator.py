"""`trace gen serving`: the serving benchmark clients' random dataset. Lengths uniform over the integers of the
clients' ranges (SGLang's [max(int(L r), 1), L], vLLM's [floor(L (1 - r)), ceil(L (1 + r))]), deterministic for a
seed, all at t = 0 or a gamma / Poisson stream from t = 0, no shared prefix unless asked, and the concurrency
limit in the trace's metadata (refused there when it is not a whole number >= 1)."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pytest

from simroute.errors import ConfigurationError
from simroute.workload import generate, read_chunks, read_requests, read_trace_meta
from simroute.workload.generators_serving import length_bounds
from simroute.workload.writer import open_trace_writer


def _digest(path) -> str:
    return hashlib.sha256(b"".join((path / name).read_bytes()
                                   for name in ("requests.parquet", "chunks.parquet"))).hexdigest()


@pytest.mark.parametrize("mode, length, ratio, bounds", [
    ("sglang", 1024, 0.8, (819, 1024)),      # int(819.2) = 819
    ("sglang", 1024, 0.0, (1, 1024)),        # the clients' default ratio: the low end is floored at 1
    ("sglang", 1024, 1.0, (1024, 1024)),     # fixed lengths
    ("vllm", 1024, 0.5, (512, 1536)),
    ("vllm", 100, 0.25, (75, 125)),
    ("vllm", 3, 0.9, (1, 6)),                # floor(0.3) = 0 -> 1; ceil(5.7) = 6
])
def test_length_bounds_are_the_clients(mode, length, ratio, bounds):
    assert length_bounds(length, ratio, mode) == bounds


@pytest.mark.parametrize("mode, ratio", [("sglang", 0.8), ("vllm", 0.5)])
def test_lengths_are_uniform_over_the_range(tmp_path, mode, ratio):
    """20,000 draws fill [low, high] and only it, every integer of it about equally often (Pearson's chi-square
    against the uniform counts within 6 sd of its mean, the degrees of freedom), input and output independent."""
    n = 20_000
    req = read_requests(generate("serving", tmp_path / "t.parquet", seed=3, params={
        "requests": n, "input_tokens": 1000, "output_tokens": 200, "range_ratio": ratio, "range_mode": mode}))
    for column, length in (("prompt_tokens", 1000), ("output_tokens", 200)):
        x = req[column].to_numpy()
        low, high = length_bounds(length, ratio, mode)
        assert x.min() == low and x.max() == high
        values = high - low + 1
        counts = np.bincount(x - low, minlength=values)
        chi_square = ((counts - n / values) ** 2 / (n / values)).sum()
        assert abs(chi_square - (values - 1)) < 6 * np.sqrt(2 * (values - 1)), (chi_square, values)
    correlation = np.corrcoef(req["prompt_tokens"].to_numpy(), req["output_tokens"].to_numpy())[0, 1]
    assert abs(correlation) < 0.03


def test_same_seed_same_bytes_no_shared_prefix_and_no_limit_by_default(tmp_path):
    params = {"requests": 300, "range_ratio": 0.5}
    a = generate("serving", tmp_path / "a.parquet", seed=5, params=params)
    b = generate("serving", tmp_path / "b.parquet", seed=5, params=params)
    c = generate("serving", tmp_path / "c.parquet", seed=6, params=params)
    assert _digest(a) == _digest(b) != _digest(c)
    req = read_requests(a)
    assert req.num_rows == 300 and read_chunks(a).num_rows == 0
    assert pa.compute.list_value_length(req["chunk_ids"]).to_numpy().max() == 0     # random prompts: no chunk shared
    assert np.all(req["arrival_s"].to_numpy() == 0.0)                               # --request-rate inf
    assert np.all(req["after_id"].to_numpy() == -1) and np.all(req["requester_hint"].to_numpy() == -1)
    assert "max_concurrency" not in read_trace_meta(a)


def test_concurrency_goes_to_the_metadata(tmp_path):
    meta = read_trace_meta(generate("serving", tmp_path / "t.parquet", params={"requests": 10, "concurrency": 4}))
    assert meta["max_concurrency"] == 4 and meta["params"]["concurrency"] == 4


@pytest.mark.parametrize("burstiness", [1.0, 4.0])
def test_rate_mode_starts_at_zero_with_gamma_gaps(tmp_path, burstiness):
    """SGLang's get_request: the first request at t = 0, then gaps of mean 1 / qps; vLLM's burstiness b makes them
    gamma of shape b (squared coefficient of variation 1 / b; 1: Poisson)."""
    n, qps = 20_000, 8.0
    arrival = read_requests(generate("serving", tmp_path / "t.parquet", seed=2, params={
        "requests": n, "qps": qps, "burstiness": burstiness}))["arrival_s"].to_numpy()
    gaps = np.diff(arrival)
    assert arrival[0] == 0.0 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / qps, rel=0.03)
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(1 / burstiness, rel=0.06)


def test_a_shared_prefix_is_one_chunk_every_request_attends(tmp_path):
    path = generate("serving", tmp_path / "t.parquet", params={"requests": 20, "prefix_tokens": 512})
    chunks, req = read_chunks(path), read_requests(path)
    assert chunks.num_rows == 1 and chunks["tokens"][0].as_py() == 512 and not chunks["canonical"][0].as_py()
    assert req["chunk_ids"].to_pylist() == [[0]] * 20 and req["chunk_at_cached_offset"].to_pylist() == [[True]] * 20


@pytest.mark.parametrize("params, words", [
    ({"range_ratio": 1.5}, "range_ratio"),
    ({"range_ratio": 1.0, "range_mode": "vllm"}, "range_mode vllm"),
    ({"concurrency": 0}, "concurrency"),
    ({"qps": 0.0}, "qps"),
    ({"input_tokens": 0}, "input_tokens"),
    ({"burstiness": -1.0}, "burstiness"),
    ({"range_mode": "trtllm"}, "must be one of sglang, vllm"),
    ({"client_seed": 1, "range_mode": "vllm", "range_ratio": 0.5}, "range_mode sglang only"),
    ({"client_seed": -1}, "client_seed"),
])
def test_bad_parameters_are_refused(tmp_path, params, words):
    with pytest.raises(ConfigurationError, match=words):
        generate("serving", tmp_path / "t.parquet", params=params)
    assert not (tmp_path / "t.parquet").exists()


@pytest.mark.parametrize("value", ["8", 0, 2.5, True])
def test_a_bad_concurrency_in_the_metadata_names_the_key(tmp_path, value):
    with open_trace_writer(tmp_path / "t.parquet", {"producer": "test", "max_concurrency": value}) as writer:
        writer.add_requests({"arrival_s": np.zeros(2), "prompt_tokens": np.ones(2, np.int32),
                             "output_tokens": np.ones(2, np.int32)})
        writer.finish({})
    with pytest.raises(ConfigurationError, match="max_concurrency") as err:
        read_trace_meta(tmp_path / "t.parquet")
    assert "requests.parquet" in str(err.value)


@pytest.mark.parametrize("seed, length_in, length_out, ratio, n", [
    (1, 8000, 1000, 0.0, 10), (1, 1000, 8000, 0.0, 320), (7, 1024, 1024, 0.8, 40), (0, 300, 50, 0.5, 70_000)])
def test_client_seed_draws_what_sglang_bench_serving_draws(tmp_path, seed, length_in, length_out, ratio, n):
    """`client_seed` s: the lengths of SGLang's `sample_random_requests` after `np.random.seed(s)` (every input
    length, then every output length, numpy's global generator), an output drawn as 0 served as 1; in order, so
    request i of the trace is the client's i-th prompt (a GEN_BATCH boundary does not reset it)."""
    req = read_requests(generate("serving", tmp_path / "t.parquet", seed=99, params={
        "requests": n, "input_tokens": length_in, "output_tokens": length_out, "range_ratio": ratio,
        "client_seed": seed}))
    np.random.seed(seed)
    prompts = np.random.randint(max(int(length_in * ratio), 1), length_in + 1, size=n)
    outputs = np.random.randint(int(length_out * ratio), length_out + 1, size=n)
    assert np.array_equal(req["prompt_tokens"].to_numpy(), prompts)
    assert np.array_equal(req["output_tokens"].to_numpy(), np.maximum(outputs, 1))


@pytest.mark.parametrize("n, input_total, output_total", [(10, 41_941, 4_210), (80, 300_020, 41_589),
                                                          (320, 1_273_893, 169_680)])
def test_client_seed_1_gives_the_totals_sglang_s_cookbook_printed(tmp_path, n, input_total, output_total):
    """The SGLang cookbook's B200 DeepSeek-R1 runs (random 8000 / 1000, range ratio 0, --seed 1 by default; its
    8k/1k blocks print 'Total input tokens' and 'Total generated tokens' of these sizes): the same lengths."""
    req = read_requests(generate("serving", tmp_path / "t.parquet", params={
        "requests": n, "input_tokens": 8000, "output_tokens": 1000, "client_seed": 1}))
    assert int(req["prompt_tokens"].to_numpy().sum()) == input_total
    assert int(req["output_tokens"].to_numpy().sum()) == output_total
