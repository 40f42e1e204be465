"""`simroute validate`: the paper's effects reproduced by the simulation, paper value next to simulated value.

Each check runs the simulator (or, for Fig 7, the network engine the simulator uses) on a small scenario
built in code, and states a pass criterion that follows the paper's claim.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simroute.calib import default_profile_path
from simroute.network import shipped_topology
from simroute.sim.config import RunConfig
from simroute.sim.runner import Simulation
from simroute.scenarios.traces import fanin_trace, selection_trace, single_chunk_trace


@dataclass(frozen=True)
class Check:
    effect: str
    paper: str
    simulated: str
    ok: bool


def _run(cfg: RunConfig) -> Simulation:
    sim = Simulation(cfg)
    sim.run()
    return sim


def _base(trace: Path, topology: str, **kw) -> RunConfig:
    return RunConfig(topology=str(shipped_topology(topology)), trace=str(trace), calib=str(default_profile_path()),
                     decode_steps_per_event=1, telemetry=True, **kw)


def check_decode_route_wins(tmp: Path) -> Check:
    """Fig 1b / §5.1: at decode (Mq = 256, ct = 2048, cross-node) route < fetch < local."""
    trace = single_chunk_trace(tmp / "fig1b.parquet", requester=0, holder=4, prompt_tokens=16)
    cost = {}
    for prim in ("route", "fetch", "local"):
        sim = _run(_base(trace, "paper-testbed", policy=f"always-{prim}", route_exchanges="once"))
        cost[prim] = float(sim.rec.ttft[0] - 16 * sim.prefill_s_per_token)
    ok = cost["route"] < cost["fetch"] < cost["local"]
    return Check("decode: route < fetch < local (ct 2048, Mq 256)",
                 "route ~47 us + compute + merge; fetch ~2.5 ms pull + 2.9 ms splice; local tens of ms",
                 f"route {cost['route'] * 1e6:.0f} us, fetch {cost['fetch'] * 1e3:.2f} ms, "
                 f"local {cost['local'] * 1e3:.1f} ms", ok)


def check_gather_vs_fanout(tmp: Path) -> Check:
    """Fig 4a: a scattered gather grows with the holders M it spans, route fan-out stays flat."""
    out = {"fetch": [], "route": []}
    for m in (1, 7):
        trace = selection_trace(tmp / f"sel{m}.parquet", requester=0, holders=list(range(1, m + 1)))
        for prim in out:
            sim = _run(_base(trace, "paper-testbed", policy=f"always-{prim}"))
            out[prim].append(float(sim.rec.ttft[0] - 16 * sim.prefill_s_per_token))
    g, r = out["fetch"][1] / out["fetch"][0], out["route"][1] / out["route"][0]
    return Check("selection: gather grows with M, route flat (M 1 -> 7)",
                 "gather 1.3 -> 3.9 ms per layer (x3.0); route fan-out flat",
                 f"gather x{g:.2f} ({out['fetch'][0] * 1e3:.0f} -> {out['fetch'][1] * 1e3:.0f} ms all layers); "
                 f"route x{r:.2f}", 2.5 <= g <= 3.5 and r < 1.2)


def _fanin(tmp: Path, n: int, **kw) -> Simulation:
    trace = fanin_trace(tmp / f"fanin{n}-{kw.get('replicas', 1)}.parquet", n, first_requester=8,
                        holder=-1 if kw.get("placement") == "popularity" else 0)
    return _run(_base(trace, "fattree", policy="always-route", **kw))


def check_holder_compute_elbow(tmp: Path) -> Check:
    """Fig 4b / §6.3: holder partial attention is flat to N ~ 8 requesters, then linear."""
    t = {}
    for n in (1, 8, 16, 32):
        sim = _fanin(tmp, n)   # the N requesters routing to holder 0 at once share its kernel calls
        bc = np.frombuffer(sim.ctx.engines[0].partials.kernel_s, dtype=np.float64)
        t[n] = float(np.median(bc))
    ok = t[8] / t[1] < 1.1 and t[32] / t[16] > 1.4
    return Check("holder compute: flat to N ~ 8, then linear", "15 us flat to N ~ 8, 37 us at 16, linear past",
                 ", ".join(f"N={n}: {v * 1e6:.0f} us" for n, v in t.items()), ok)


def check_agents_per_holder(tmp: Path) -> Check:
    """§6.3: ~8 sub-agents per holder come nearly free; beyond that a replica pays."""
    tp = {n: float(np.mean(_fanin(tmp, n).rec.tpot)) for n in (1, 8, 32)}
    rep = _fanin(tmp, 32, placement="popularity", replicas=4, hot_fraction=1.0)
    t_rep = float(np.mean(rep.rec.tpot))
    ok = tp[8] / tp[1] < 1.35 and t_rep < tp[32]
    return Check("agents: ~8 per holder nearly free; replicas pay beyond",
                 "flat to N ~ 8 sub-agents, then linear; a second replica warranted",
                 f"TPOT N=1 {tp[1] * 1e3:.2f} ms, N=8 {tp[8] * 1e3:.2f} ms, N=32 {tp[32] * 1e3:.2f} ms, "
                 f"N=32 with 4 replicas {t_rep * 1e3:.2f} ms", ok)


def route_rt_under_load(k: int, mq: int, *, topology: str = "paper-testbed") -> float:
    """Mean routed round trip of one requester while k other closed-loop route flows share its NIC uplink."""
    from simroute.calib import load_profile
    from simroute.model import get_model
    from simroute.network import load_topology
    from simroute.scenarios.network import closed_loop_rtt
    fab = load_profile(default_profile_path()).fabric_params("h100-ibgda")
    g = get_model("deepseek-v2-lite")
    return closed_loop_rtt(load_topology(shipped_topology(topology)), k, rows=mq, q_bytes=g.q_bytes,
                           p_bytes=g.p_bytes, t_probe_s=fab.t_probe_s + fab.turnaround_s,
                           single_block_Bps=fab.single_block_Bps, compute_s=0.0)


def check_congestion(_tmp: Path) -> Check:
    """Fig 7 / §8: route latency flat while the uplink is under-subscribed, rising once it saturates."""
    rt = [route_rt_under_load(k, 1024) for k in range(5)]
    # K counts the other closed-loop flows on the requester's uplink. Each uses ~40% of it at Mq 1024, so the
    # FIFO saturates from K = 2 here (the paper's link from K = 3); the rise is smaller than measured (+60%
    # vs +119% at K = 3): a serialisation queue, not a NIC's.
    flat = rt[1] / rt[0] < 1.05
    rising = rt[3] / rt[0] > 1.5 and all(b >= a for a, b in zip(rt, rt[1:]))
    return Check("congestion: route RT flat, then rising at saturation (Mq 1024)",
                 "114 us flat for K = 0-2, 250 us at K = 3 (+119%)",
                 " ".join(f"K={k}: {v * 1e6:.0f}" for k, v in enumerate(rt)) + " us", flat and rising)


CHECKS = (check_decode_route_wins, check_gather_vs_fanout, check_holder_compute_elbow, check_agents_per_holder,
          check_congestion)


def run_checks() -> list[Check]:
    with tempfile.TemporaryDirectory(prefix="simroute-validate-") as d:
        return [c(Path(d)) for c in CHECKS]
