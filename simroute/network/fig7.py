"""Fig. 7 of "Move the Query, Not the Cache" (section 8, congestion) as a function of the message model.

K background requesters and one measured requester on one GPU (one NIC), each a closed loop of routed
exchanges to its own holder on another host: query out, holder compute, partial back. The paper measures the
round trip flat through K = 2 and +119% at K = 3 for Mq = 1024 (114 -> 250 us; Mq = 256: 45.6 -> 95 us; the
probe 14.5 -> 39.5 us). The background loops' batch is a parameter (`background_rows`): the paper does not
state it, and the validate scorecard's choice (decode-size loops, Mq = 256) is argued in docs/NETWORK.md.
`fig7_scorecard` gives simulated onset and magnitude against the paper's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import simpy

from simroute.network.engine import FlowEngine
from simroute.network.messages import MessageModel, MessageModelParams
from simroute.network.topology import Topology

# paper: "Move the Query, Not the Cache", section 8 and Fig. 7 (round trips in seconds at K = 0 and K = 3)
FIG7_PAPER_ROUND_TRIP_S = {256: (45.6e-6, 95e-6), 1024: (114e-6, 250e-6)}
FIG7_FLAT_THROUGH_K = 2


def fig7_round_trips(topology: Topology, ks: Sequence[int] = (0, 1, 2, 3, 4), *, rows: int = 1024,
                     q_bytes: float, p_bytes: float, t_probe_s: float, single_block_Bps: float,
                     compute_s: float = 0.0, rounds: int = 200, requester: str | None = None,
                     background_rows: int | None = None, message_params: MessageModelParams | None = None,
                     pairs: Sequence[tuple[str, str]] | None = None) -> list[float]:
    """Mean round trip of the measured requester for each K (the first quarter of its rounds is warm-up).

    `t_probe_s` is the whole exchange's probe (a signal round trip), charged half on each message. `rows = 0`
    measures the probe itself (a payload-free put + signal). The K background loops carry `background_rows`
    rows each (default: the measured loop's `rows`). `message_params` replaces the message model's defaults
    (e.g. a NIC's measured context capacity and miss cost). `pairs` gives each loop's (requester, holder),
    the measured loop first (default: all from `requester`, to the GPUs of another host in turn).
    """
    if pairs is None:
        requester = requester or topology.gpus[0]
        per_host = topology.spec.gpus_per_host
        requester_host = topology.host_of(requester)
        holders = [gpu for gpu in topology.gpus if topology.host_of(gpu) != requester_host][:per_host]
        pairs = [(requester, holders[loop % len(holders)]) for loop in range(max(ks, default=0) + 1)]
    out = []
    for k in ks:
        env = simpy.Environment()
        engine = FlowEngine(env, topology, message_model=MessageModel(message_params) if message_params else None)
        samples: list[float] = []
        for loop in range(k + 1):
            loop_rows = rows if loop == 0 or background_rows is None else background_rows
            loop_requester, holder = pairs[loop % len(pairs)]
            env.process(_exchange_loop(env, engine, loop_requester, holder, loop, rounds,
                                       loop_rows * q_bytes, loop_rows * p_bytes, t_probe_s / 2, single_block_Bps,
                                       compute_s, samples if loop == 0 else None))
        env.run()
        kept = samples[rounds // 4:]
        out.append(sum(kept) / len(kept))
    return out


def _exchange_loop(env: simpy.Environment, engine: FlowEngine, requester: str, holder: str, loop: int, rounds: int,
                   query_bytes: float, partial_bytes: float, half_probe_s: float, single_block_Bps: float,
                   compute_s: float, samples: list[float] | None):
    outbound, inbound = engine.message_route(requester, holder), engine.message_route(holder, requester)
    yield env.timeout(loop * 1e-6)                       # staggered starts, as separate processes would be
    for _ in range(rounds):
        began = env.now
        yield env.timeout(engine.send_message(outbound, query_bytes, t_probe_s=half_probe_s,
                                              single_block_Bps=single_block_Bps))
        if compute_s > 0:
            yield env.timeout(compute_s)
        yield env.timeout(engine.send_message(inbound, partial_bytes, t_probe_s=half_probe_s,
                                              single_block_Bps=single_block_Bps))
        if samples is not None:
            samples.append(env.now - began)


def fig7_fluid_round_trips(topology: Topology, ks: Sequence[int] = (0, 1, 2, 3, 4), *, rows: int = 1024,
                           q_bytes: float, p_bytes: float, t_probe_s: float, single_block_Bps: float,
                           background_rows: int | None = None, rounds: int = 120,
                           seeds: Sequence[int] = (0, 1)) -> list[float]:
    """`fig7_round_trips` with every message a bulk flow of the flow engine, capped at the single-block rate:
    exact processor sharing of each link among the messages on it at every instant (max-min, re-rated as
    messages come and go), the faithful queueing model of a shared link that the message model approximates
    by committing each message's delay when it is sent. Each loop starts at a seeded random phase within its
    own idle round trip (deterministic loops started together would stay in lock step under processor
    sharing); the result is the mean over `seeds` of the measured loop's mean round trip. A payload-free
    loop (`rows = 0`) moves no bytes, so no sharing of bytes can delay it. Costs an engine event per message:
    for checks, not for runs."""
    import numpy as np

    per_host = topology.spec.gpus_per_host
    requester = topology.gpus[0]
    holders = [gpu for gpu in topology.gpus if topology.host_of(gpu) != topology.host_of(requester)][:per_host]
    out = []
    for k in ks:
        trips = []
        for seed in seeds:
            rng = np.random.default_rng([seed, k])
            env = simpy.Environment()
            engine = FlowEngine(env, topology)
            samples: list[float] = []
            for loop in range(k + 1):
                loop_rows = rows if loop == 0 or background_rows is None else background_rows
                idle = t_probe_s + loop_rows * (q_bytes + p_bytes) / single_block_Bps
                holder, start_s = holders[loop % len(holders)], float(rng.random()) * idle
                env.process(_fluid_loop(env, engine, requester, holder, start_s, rounds, loop_rows * q_bytes,
                                        loop_rows * p_bytes, t_probe_s / 2, single_block_Bps,
                                        samples if loop == 0 else None))
            env.run()
            kept = samples[rounds // 4:]
            trips.append(sum(kept) / len(kept))
        out.append(sum(trips) / len(trips))
    return out


def _fluid_loop(env: simpy.Environment, engine: FlowEngine, requester: str, holder: str, start_s: float, rounds: int,
                query_bytes: float, partial_bytes: float, half_probe_s: float, single_block_Bps: float,
                samples: list[float] | None):
    yield env.timeout(start_s)
    for _ in range(rounds):
        began = env.now
        yield env.timeout(half_probe_s)
        if query_bytes > 0:
            yield engine.transfer(requester, holder, query_bytes, rate_cap_Bps=single_block_Bps)
        yield env.timeout(half_probe_s)
        if partial_bytes > 0:
            yield engine.transfer(holder, requester, partial_bytes, rate_cap_Bps=single_block_Bps)
        if samples is not None:
            samples.append(env.now - began)


def fig7_scorecard(topology: Topology, *, q_bytes: float, p_bytes: float, t_probe_s: float,
                   single_block_Bps: float, rows: Sequence[int] = (256, 1024), tolerance: float = 0.25,
                   rounds: int = 200, background_rows: int | None = None) -> dict[str, Any]:
    """Onset and magnitude of the congestion rise, simulated vs paper, JSON-ready, with a verdict.

    Passes when K = 1..2 stay within 5% of K = 0 (onset after K = 2, as measured) and the K = 3 rise is
    within `tolerance` (relative) of the paper's for every batch size given.
    """
    result: dict[str, Any] = {"paper": "Move the Query, Not the Cache, section 8, Fig. 7", "batches": {}}
    ok = True
    for batch in rows:
        trips = fig7_round_trips(topology, (0, 1, 2, 3, 4), rows=batch, q_bytes=q_bytes, p_bytes=p_bytes,
                                 t_probe_s=t_probe_s, single_block_Bps=single_block_Bps, rounds=rounds,
                                 background_rows=background_rows)
        flat = max(trips[1:3]) / trips[0]
        rise = trips[3] / trips[0] - 1
        entry: dict[str, Any] = {"round_trip_us": [t * 1e6 for t in trips], "flat_k1_k2_ratio": flat,
                                 "rise_at_k3": rise}
        if batch in FIG7_PAPER_ROUND_TRIP_S:
            base, congested = FIG7_PAPER_ROUND_TRIP_S[batch]
            paper_rise = congested / base - 1
            entry["paper_rise_at_k3"] = paper_rise
            entry["ok"] = flat < 1.05 and abs(rise - paper_rise) <= tolerance * paper_rise
            ok = ok and entry["ok"]
        result["batches"][str(batch)] = entry
    result["flat_through_k"] = FIG7_FLAT_THROUGH_K
    result["background_rows"] = background_rows
    result["ok"] = ok
    return result
