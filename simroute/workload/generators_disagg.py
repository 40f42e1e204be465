"""`disagg`: prefill -> decode disaggregation (the ARK scenario).

Each request is prefilled on `prefill_hint`, then its whole KV cache moves to the decode instance
`requester_hint` as one bulk flow. The trace stores tokens only; the simulator converts them to bytes
with the model geometry (b_KV x L per token), so the trace stays model independent.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np

from simroute.workload.generators import (GEN_BATCH, check, check_horizon, check_sizes, dict_strings, lengths,
                                          poisson_arrivals, register, tenant_names)
from simroute.workload.writer import TraceWriter


@dataclasses.dataclass(frozen=True)
class DisaggParams:
    requests: int = 10_000
    qps: float = 25.0                 # the ARK paper's Poisson load
    prompt_dist: Literal["lognormal", "uniform", "fixed"] = "lognormal"
    prompt_tokens: int = 8_192        # median (lognormal), centre (uniform) or value (fixed)
    prompt_sigma: float = 0.8         # lognormal sigma; uniform spans [min, 2 x prompt_tokens - min]
    prompt_min: int = 128
    prompt_max: int = 131_072
    output_tokens: int = 256
    output_sigma: float = 0.5
    prefill_instances: int = 4        # instances 0..P-1 prefill
    decode_instances: int = 4         # instances P..P+D-1 decode
    tenants: int = 1

    def __post_init__(self) -> None:
        for name in ("requests", "prompt_tokens", "prompt_min", "output_tokens", "prefill_instances",
                     "decode_instances", "tenants"):
            check(getattr(self, name) >= 1, f"{name} must be >= 1")
        check(self.prompt_min <= self.prompt_tokens <= self.prompt_max,
              "need prompt_min <= prompt_tokens <= prompt_max")
        check(self.qps > 0, "qps must be > 0")
        check_horizon(self.requests / self.qps, f"qps {self.qps:g} for {self.requests:,} requests")
        check_sizes(self.requests, 0, self.prefill_instances + self.decode_instances, self.tenants)


def _prompts(rng: np.random.Generator, n: int, p: DisaggParams) -> np.ndarray:
    if p.prompt_dist == "fixed":
        return np.full(n, p.prompt_tokens, dtype=np.int32)
    if p.prompt_dist == "uniform":
        hi = min(2 * p.prompt_tokens - p.prompt_min, p.prompt_max)
        return rng.integers(p.prompt_min, hi + 1, size=n).astype(np.int32)
    return lengths(rng, n, p.prompt_tokens, p.prompt_sigma, p.prompt_min, p.prompt_max)


@register("disagg", DisaggParams, "prefill -> decode KV transfers, Poisson QPS (ARK)")
def gen_disagg(writer: TraceWriter, p: DisaggParams, rng: np.random.Generator) -> None:
    t = 0.0
    tenants = tenant_names(p.tenants)
    for start in range(0, p.requests, GEN_BATCH):
        n = min(GEN_BATCH, p.requests - start)
        arrival = poisson_arrivals(rng, n, p.qps, t)
        t = float(arrival[-1])
        writer.add_requests({
            "arrival_s": arrival, "tenant": dict_strings(rng.integers(0, p.tenants, size=n), tenants),
            "prefill_hint": rng.integers(0, p.prefill_instances, size=n).astype(np.int32),
            "requester_hint": (p.prefill_instances
                               + rng.integers(0, p.decode_instances, size=n)).astype(np.int32),
            "prompt_tokens": _prompts(rng, n, p),
            "output_tokens": lengths(rng, n, p.output_tokens, p.output_sigma, 1, 1 << 30),
        })
    writer.finish({})
