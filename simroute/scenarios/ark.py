"""The ARK scenario end to end (the ARK routing paper, §2-§4): prefill -> decode KV transfers over a
4-spine leaf-spine under Poisson load, ECMP against ARK path reservation, TTFT and transfer FCT.

The fabric is `ark-paper.yaml`: spine uplinks at the NIC rate, so two elephants hashed onto one uplink halve
each other. On `ark-leafspine.yaml` (uplinks at twice the NIC rate) a two-way collision costs nothing and
ARK's gain shrinks to a few percent; the ARK paper's reductions (-27% / -34% FCT) need the former regime.

Prefill GPUs sit on the first hosts and decode GPUs on the last, so every KV transfer crosses a spine.
KV bytes come from the model geometry. MLA makes a prompt's KV small (DeepSeek-V2-Lite: 31 KB per token),
so the scenario uses a dense GQA model (Llama-3.1-8B: 128 KB per token, one H100 per instance; 70B's weights
need TP >= 2) with lognormal prompts of median 16k tokens: transfers of ~2 GB that last ~100-400 ms on a
25 GB/s NIC, the low end of the ARK abstract's "hundreds of milliseconds to seconds". The ARK paper states no
model, prompt sizes or link rates, so these are a choice; `simroute validate` says what they cost (its
ark-spine-ecmp and ark-ttft-mean notes).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from simroute.calib import default_profile_path
from simroute.network import shipped_topology
from simroute.sim.config import RunConfig
from simroute.sim.runner import simulate
from simroute.workload import generate


MODEL = "llama-3.1-8b"   # GQA elephants (128 KB per token) on one H100 per instance; 70B needs TP >= 2
TOPOLOGY = "ark-paper"   # spine uplinks at the NIC rate: a collision halves both elephants


@dataclass(frozen=True)
class ArkPoint:
    qps: float
    routing: str
    requests: int
    fct_mean_ms: float
    fct_p95_ms: float
    ttft_mean_ms: float
    ttft_p95_ms: float
    peak_spine_flows: int
    wall_s: float
    sim_s: float


def disagg_trace(path: Path, *, qps: float, duration_s: float, seed: int, prompt_tokens: int = 16_384) -> Path:
    n = max(1, int(qps * duration_s))
    return generate("disagg", path, seed=seed, params={
        "requests": n, "qps": qps, "prompt_tokens": prompt_tokens, "prompt_sigma": 0.6, "prompt_min": 1024, "prompt_max": 131_072,
        "output_tokens": 128, "prefill_instances": 40, "decode_instances": 24})


def ark_point(trace: Path, qps: float, routing: str, seed: int) -> ArkPoint:
    cfg = RunConfig(topology=str(shipped_topology(TOPOLOGY)), trace=str(trace),
                    calib=str(default_profile_path()), routing=routing, seed=seed, model=MODEL, tp=1,
                    decode_steps_per_event=64, slo_ttft_ms=10_000)
    res = simulate(cfg)
    s, net = res.summary, res.summary["network"]
    pd = net.get("fct_ms_pd", {"mean": float("nan"), "p95": float("nan")})
    return ArkPoint(qps, routing, s["completed"], pd["mean"], pd["p95"], s["ttft_ms"]["mean"] or 0.0,
                    s["ttft_ms"]["p95"] or 0.0, max(net["peak_spine_concurrency"].values(), default=0),
                    res.perf["wall_s"], s["sim_time_s"])


def ark_sweep(qps_list: list[float], *, duration_s: float = 60.0, seed: int = 0) -> list[ArkPoint]:
    """ECMP and ARK on the same trace at each load."""
    out = []
    with tempfile.TemporaryDirectory(prefix="simroute-ark-") as d:
        for qps in qps_list:
            trace = disagg_trace(Path(d) / f"q{qps}.parquet", qps=qps, duration_s=duration_s, seed=seed)
            for routing in ("ecmp", "ark"):
                out.append(ark_point(trace, qps, routing, seed))
    return out
