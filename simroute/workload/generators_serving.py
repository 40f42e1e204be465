"""`serving`: the workload of the serving benchmark clients (SGLang's `bench_serving`, `vllm bench serve`).

`requests` prompts of random tokens (no two share a prefix unless `prefix_tokens` asks for one), input and output
lengths drawn uniformly as the clients draw them, sent either all at t = 0 (`--request-rate inf`) or as a Poisson
stream of `qps` (gamma gaps of shape `burstiness`, vLLM's option; 1 is Poisson). `concurrency` (the clients'
`--max-concurrency`) is written to the trace's metadata as `max_concurrency`: the run lets at most that many
requests be in flight and sends the next prompt of the list, in order, the instant a request completes
(simroute/sim/arrivals.py `ConcurrencyLimit`, the clients' asyncio semaphore). docs/TRACE_FORMAT.md says which
of the clients' rules are followed and where they differ.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import numpy as np
import pyarrow as pa

from simroute.workload.generators import GEN_BATCH, check, check_horizon, check_sizes, register
from simroute.workload.writer import TraceWriter, list_array

MAX_TOKENS = 1 << 24            # a prompt or an output longer than this is a typo, not a benchmark


def length_bounds(length: int, ratio: float, mode: str) -> tuple[int, int]:
    """The inclusive [low, high] a client draws a length from, uniformly over the integers.

    sglang (SGLang `compute_random_lens`; vLLM's benchmark_serving.py before vLLM PR #16126, April 2025, and
    the forks of it that public benchmarks run): [max(int(L ratio), 1), L]. vllm (`vllm bench serve` since that
    PR): [floor(L (1 - ratio)), ceil(L (1 + ratio))], the low end floored at 1 here (vLLM refuses a prompt of
    0 tokens instead)."""
    if mode == "vllm":
        return max(math.floor(length * (1.0 - ratio)), 1), math.ceil(length * (1.0 + ratio))
    return max(int(length * ratio), 1), length


CLIENT_DRAWS_MAX = 10_000_000   # client_seed draws all lengths up front (two int64 arrays)


def client_lengths(p: "ServingParams") -> tuple[np.ndarray, np.ndarray]:
    """The (input, output) lengths SGLang's `bench_serving` draws for its random dataset with `--seed` s: numpy's
    global generator seeded with s (`np.random.seed(args.seed)`), then every input length, then every output
    length (`sample_random_requests`: `randint(max(int(L_in r), 1), L_in + 1, n)`, `randint(int(L_out r), L_out + 1,
    n)`; sglang 0.5.6.post1 `bench_serving.py`, seed default 1). A published run's lengths are then the ones its
    requests had, not another draw of the same rule: it matters when a run has few requests. An output the client
    draws as 0 tokens (its low end is int(L r), 0 at r = 0) is served as 1."""
    rs = np.random.RandomState(p.client_seed)
    in_lo, in_hi = length_bounds(p.input_tokens, p.range_ratio, "sglang")
    prompt = rs.randint(in_lo, in_hi + 1, size=p.requests)
    output = rs.randint(int(p.output_tokens * p.range_ratio), p.output_tokens + 1, size=p.requests)
    return prompt.astype(np.int32), np.maximum(output, 1).astype(np.int32)


@dataclasses.dataclass(frozen=True)
class ServingParams:
    requests: int = 1_000               # --num-prompts (both clients' default)
    input_tokens: int = 1_024           # --random-input-len (both clients' default)
    output_tokens: int = 1_024          # --random-output-len (SGLang's default; vLLM's is 128)
    range_ratio: float = 0.0            # --random-range-ratio (both clients' default 0: see range_mode)
    range_mode: Literal["sglang", "vllm"] = "sglang"    # which client's reading of range_ratio (length_bounds)
    concurrency: int | None = None      # --max-concurrency: at most this many requests in flight (unset: no limit)
    qps: float | None = None            # --request-rate (requests/s); unset: inf, every request at t = 0
    burstiness: float = 1.0             # vLLM's --burstiness: gamma shape of the gaps (1: Poisson)
    prefix_tokens: int = 0              # vLLM's --random-prefix-len: one shared prefix before every prompt
    client_seed: int | None = None      # SGLang bench_serving's --seed: its own length draws (client_lengths)

    def __post_init__(self) -> None:
        for name in ("requests", "input_tokens", "output_tokens"):
            check(1 <= getattr(self, name) <= MAX_TOKENS, f"{name} must be within [1, {MAX_TOKENS:,}]")
        check(0 <= self.prefix_tokens <= MAX_TOKENS, f"prefix_tokens must be within [0, {MAX_TOKENS:,}]")
        if self.range_mode == "vllm":
            check(0 <= self.range_ratio < 1, "range_ratio must be within [0, 1) under range_mode vllm (vLLM's rule)")
        else:
            check(0 <= self.range_ratio <= 1, "range_ratio must be within [0, 1] under range_mode sglang")
        check(self.concurrency is None or self.concurrency >= 1, "concurrency must be >= 1 or unset (no limit)")
        if self.client_seed is not None:
            check(0 <= self.client_seed < 2**32, "client_seed must be within [0, 2^32) (numpy's seed)")
            check(self.range_mode == "sglang", "client_seed draws as SGLang's bench_serving does: range_mode sglang only")
            check(self.requests <= CLIENT_DRAWS_MAX, f"client_seed draws every length at once: at most "
                                                     f"{CLIENT_DRAWS_MAX:,} requests")
        check(self.qps is None or 0 < self.qps < 1e9, "qps must be a rate > 0 (requests/s) or unset (inf)")
        check(0 < self.burstiness < 1e6, "burstiness must be > 0 (1: Poisson)")
        if self.qps is not None:      # gamma gaps of shape b: the sum's spread grows as 1 / b (a burst, then long gaps)
            check_horizon(self.requests / self.qps * max(1.0, 1.0 / self.burstiness),
                          f"qps {self.qps:g} for {self.requests:,} requests")
        check_sizes(self.requests)

    @property
    def max_concurrency(self) -> int | None:
        """What the trace's metadata carries for the run (`max_concurrency`)."""
        return self.concurrency


@register("serving", ServingParams, "serving-benchmark clients: random prompts, N concurrent clients or a rate")
def gen_serving(writer: TraceWriter, p: ServingParams, rng: np.random.Generator) -> None:
    in_lo, in_hi = length_bounds(p.input_tokens, p.range_ratio, p.range_mode)
    out_lo, out_hi = length_bounds(p.output_tokens, p.range_ratio, p.range_mode)
    drawn = client_lengths(p) if p.client_seed is not None else None
    t = 0.0
    for start in range(0, p.requests, GEN_BATCH):
        n = min(GEN_BATCH, p.requests - start)
        if drawn is None:
            prompt = rng.integers(in_lo, in_hi + 1, size=n).astype(np.int32)
            output = rng.integers(out_lo, out_hi + 1, size=n).astype(np.int32)
        else:
            prompt, output = drawn[0][start:start + n], drawn[1][start:start + n]
        if p.qps is None:
            arrival = np.zeros(n)
        else:           # the first request at t = 0, each next one a gap later (SGLang's get_request)
            gaps = rng.gamma(p.burstiness, 1.0 / (p.qps * p.burstiness), size=n)
            arrival = t + np.concatenate(([0.0], np.cumsum(gaps[:-1]))) if start == 0 else t + np.cumsum(gaps)
            t = float(arrival[-1])
        cols = {"arrival_s": arrival, "prompt_tokens": prompt, "output_tokens": output}
        if p.prefix_tokens:
            offsets = np.arange(n + 1, dtype=np.int64)
            cols["chunk_ids"] = list_array(offsets, np.zeros(n, dtype=np.int64), pa.int64())
            cols["chunk_at_cached_offset"] = list_array(offsets, np.ones(n, dtype=bool), pa.bool_())
        writer.add_requests(cols)
    # the shared prefix: one chunk, prefilled by the first request that needs it on an instance (a prefix cache)
    writer.finish({"chunk_id": [0], "tokens": np.array([p.prefix_tokens], dtype=np.int32), "corpus": "prefix",
                   "cached_offset": [0], "canonical": False} if p.prefix_tokens else {})
