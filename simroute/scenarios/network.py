"""Reusable network scenarios: ARK vs ECMP under Poisson elephant transfers, and closed-loop messages.

Network words only: "prefill -> decode KV transfers" here are elephant flows from a source GPU pool to
a sink GPU pool; the simulation layer maps requests onto them.

Flow sizes (documented choice): the all-layer KV of a prompt, from the model geometry (default DeepSeek-V2-Lite,
absorbed MLA: 1152 B per token-layer x 27 layers, "Move the Query, Not the Cache" §2), with tokens lognormal
(median 4096, sigma 0.5) clipped to [1024, 8192]: 31-255 MB, mean ~140 MB, i.e. 1.3-10 ms alone on a 25 GB/s
NIC. The QPS sweep is relative to the fabric (ark-leafspine: 800 GB/s from the source leaves, so ~2800 QPS is 50% load); `load` is printed beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import simpy

from simroute.model import get_model
from simroute.network.engine import FlowEngine
from simroute.network.topology import Topology, load_topology

FLOW_MODEL = "deepseek-v2-lite"    # whose all-layer KV the elephant flows carry


def kv_flow_sizes(rng: np.random.Generator, n: int, *, median_tokens: float = 4096, sigma: float = 0.5,
                  lo: int = 1024, hi: int = 8192, model: str = FLOW_MODEL) -> np.ndarray:
    """Bytes of `n` prompts' all-layer KV, prompt lengths lognormal and clipped to [lo, hi] tokens."""
    tokens = np.clip(rng.lognormal(np.log(median_tokens), sigma, n), lo, hi)
    return np.round(tokens) * get_model(model).chunk_bytes(1)


@dataclass(frozen=True)
class SweepPoint:
    routing: str
    qps: float
    load: float
    flows: int
    mean_fct_s: float
    p95_fct_s: float
    spine_peak: int
    spine_mean_max: float          # time-averaged concurrency of the busiest spine
    spine_mean: float              # time-averaged concurrency per spine


def spine_concurrency(engine: FlowEngine, t0: float, t1: float) -> tuple[int, float, float]:
    """(peak, time-averaged max over spines, time-averaged mean per spine) of concurrent flows."""
    counts: dict[str, int] = {}
    n_sp = max(1, engine.topology.n_spines)
    last, acc_max, acc_mean, peak = t0, 0.0, 0.0, 0
    for t, s, c in engine.telemetry.spine_series:
        if t > t1:
            break
        if t > last and counts:
            dt = t - max(last, t0)
            if dt > 0:
                acc_max += max(counts.values()) * dt
                acc_mean += sum(counts.values()) / n_sp * dt
            last = t
        counts[s] = c
        if t >= t0:
            peak = max(peak, c)
    if t1 > last and counts:
        acc_max += max(counts.values()) * (t1 - last)
        acc_mean += sum(counts.values()) / n_sp * (t1 - last)
    span = max(t1 - t0, 1e-300)
    return peak, acc_max / span, acc_mean / span


def poisson_transfers(topology: Topology, routing: str, qps: float, *, n_flows: int = 1500, seed: int = 0,
                      sources: Sequence[str] | None = None, sinks: Sequence[str] | None = None,
                      warmup_frac: float = 0.1) -> SweepPoint:
    """Poisson arrivals of elephant flows from `sources` to `sinks` (default: first / second half of hosts)."""
    rng = np.random.default_rng(seed)
    G, H = topology.spec.gpus_per_host, topology.spec.hosts
    gpus = topology.gpus
    sources = list(sources or gpus[: (H // 2) * G])
    sinks = list(sinks or gpus[(H // 2) * G:])
    gaps = rng.exponential(1.0 / qps, n_flows)
    sizes = kv_flow_sizes(rng, n_flows)
    src = rng.integers(0, len(sources), n_flows)
    dst = rng.integers(0, len(sinks), n_flows)
    env = simpy.Environment()
    # the same arrivals for every routing: only the engine's seed (hash seeds, ports) is shared too
    eng = FlowEngine(env, topology, routing=routing, seed=seed)
    events: list[simpy.Event] = []

    def arrivals():
        for i in range(n_flows):
            yield env.timeout(gaps[i])
            events.append(eng.transfer(sources[src[i]], sinks[dst[i]], float(sizes[i])))

    env.process(arrivals())
    env.run()
    t_end_arrivals = float(gaps.sum())
    recs = [ev.value for ev in events]
    skip = int(warmup_frac * n_flows)
    fct = np.array([r.fct for r in recs[skip:]])
    peak, mean_max, mean = spine_concurrency(eng, float(gaps[:skip].sum()), t_end_arrivals)
    src_cap = sum(topology.links[l].capacity_Bps for g in sources for l in topology.path_ids(
        topology.index(g), topology.index(sinks[0]), 0)[0][:1])
    load = qps * float(sizes.mean()) / min(src_cap, topology.bisection_Bps() or src_cap)
    return SweepPoint(routing, qps, load, len(fct), float(fct.mean()), float(np.percentile(fct, 95)), peak,
                      mean_max, mean)


def ark_vs_ecmp(qps_list: Sequence[float], *, topology: Topology | str | Path | None = None, n_flows: int = 1500,
                seed: int = 0, routings: Sequence[str] = ("ecmp", "ark"), echo: bool = True
                ) -> dict[str, list[SweepPoint]]:
    """QPS sweep of Poisson elephants under each routing; prints both and ARK's reductions vs ECMP."""
    if topology is None:
        from simroute.network import shipped_topology
        topology = shipped_topology("ark-leafspine")
    topo = topology if isinstance(topology, Topology) else load_topology(topology)
    out: dict[str, list[SweepPoint]] = {r: [] for r in routings}
    for q in qps_list:
        for r in routings:
            out[r].append(poisson_transfers(topo, r, q, n_flows=n_flows, seed=seed))
    if echo:
        print(format_sweep(out))
    return out


def format_sweep(out: dict[str, list[SweepPoint]]) -> str:
    lines = [f"{'routing':<13}{'qps':>7}{'load':>6}{'mean ms':>9}{'p95 ms':>9}{'spine pk':>9}"
             f"{'busiest':>8}{'avg':>6}"]
    for r, pts in out.items():
        for p in pts:
            lines.append(f"{r:<13}{p.qps:>7.0f}{p.load:>6.2f}{p.mean_fct_s * 1e3:>9.2f}{p.p95_fct_s * 1e3:>9.2f}"
                         f"{p.spine_peak:>9d}{p.spine_mean_max:>8.2f}{p.spine_mean:>6.2f}")
    if "ecmp" in out and "ark" in out:
        for e, a in zip(out["ecmp"], out["ark"]):
            lines.append(f"ARK vs ECMP at qps {e.qps:.0f}: mean FCT {100 * (a.mean_fct_s / e.mean_fct_s - 1):+.1f}%, "
                         f"P95 {100 * (a.p95_fct_s / e.p95_fct_s - 1):+.1f}%, busiest-spine concurrency "
                         f"{e.spine_mean_max:.2f} -> {a.spine_mean_max:.2f} (balanced {e.spine_mean:.2f})")
    return "\n".join(lines)


def closed_loop_rtt(topology: Topology, k_background: int, *, rows: int = 256, q_bytes: int = 1152,
                    p_bytes: int = 1032, t_probe_s: float = 16e-6, single_block_Bps: float = 25e9,
                    compute_s: float = 3e-6, rounds: int = 200, requester: str | None = None,
                    holders: Sequence[str] | None = None) -> float:
    """Mean round trip of one measured requester with K background closed-loop requesters on its uplink.

    Each loop: query (rows x q_bytes) out, holder compute, partial (rows x p_bytes) back; the probe is a
    round-trip signal, charged half each way, and already holds the path's propagation (as in the simulator's
    dispatcher, links' latency is not added again). All K+1 loops share the requester GPU's NIC uplink (Fig 7).
    """
    requester = requester or topology.gpus[0]
    G = topology.spec.gpus_per_host
    holders = list(holders or topology.gpus[G: 2 * G])
    env = simpy.Environment()
    eng = FlowEngine(env, topology)
    rtts: list[float] = []

    def loop(i: int, measured: bool):
        holder = holders[i % len(holders)]
        yield env.timeout(i * 1e-6)
        for _ in range(rounds):
            t0 = env.now
            yield env.timeout(eng.message_delay(requester, holder, rows * q_bytes, t_probe_s=t_probe_s / 2,
                                                single_block_Bps=single_block_Bps, include_latency=False))
            yield env.timeout(compute_s)
            yield env.timeout(eng.message_delay(holder, requester, rows * p_bytes, t_probe_s=t_probe_s / 2,
                                                single_block_Bps=single_block_Bps, include_latency=False))
            if measured:
                rtts.append(env.now - t0)

    env.process(loop(0, True))
    for i in range(1, k_background + 1):
        env.process(loop(i, False))
    env.run()
    return float(np.mean(rtts[rounds // 4:]))
