"""`trace gen serving`: with `-p client_seed=S`, an output SGLang's bench_serving draws as 0 tokens (its output rule
randint(int(L r), L + 1) reaches 0 at range ratio 0) is served as 1 token, the draws around it the client's own; at a
request rate, the arrivals of a trace longer than one generation batch (65,536 requests) go on from the batch before."""

from __future__ import annotations

import numpy as np

from simroute.workload import generate, read_requests


def test_an_output_the_client_draws_as_0_is_served_as_1_and_the_draws_stay_in_step(tmp_path):
    """Output 1 at range ratio 0: the client draws randint(0, 2), 0 or 1 tokens; 40 requests of seed 3."""
    req = read_requests(generate("serving", tmp_path / "t.parquet", params={
        "requests": 40, "input_tokens": 64, "output_tokens": 1, "range_ratio": 0.0, "client_seed": 3}))
    state = np.random.RandomState(3)
    prompts = state.randint(1, 65, size=40)
    outputs = state.randint(0, 2, size=40)
    assert 0 < int((outputs == 0).sum()) < 40             # the case is met: some drawn as 0, some as 1
    assert np.array_equal(req["prompt_tokens"].to_numpy(), prompts)
    assert np.array_equal(req["output_tokens"].to_numpy(), np.where(outputs == 0, 1, outputs))


def test_a_rate_s_arrivals_go_on_across_generation_batches(tmp_path):
    """70,000 requests at 1,000 requests/s (Poisson: exponential gaps of mean 1 ms): sent in order, each a gap after
    the one before, so the arrivals never go back, not at the 65,536th either, and the last one comes near (n - 1) /
    rate = 69.999 s (the sum of 69,999 gaps has a standard deviation of sqrt(69,999) ms = 0.26 s; 5 of them allowed)."""
    req = read_requests(generate("serving", tmp_path / "t.parquet", seed=5, params={
        "requests": 70_000, "input_tokens": 16, "output_tokens": 4, "qps": 1000.0}))
    arrival = req["arrival_s"].to_numpy()
    assert arrival[0] == 0.0 and (np.diff(arrival) > 0).all()
    assert abs(arrival[-1] - 69.999) < 5 * 0.265
