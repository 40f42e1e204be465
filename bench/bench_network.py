"""Network engine benchmark: flow start+finish events/s at 100 / 1k / 3k / 10k concurrent flows on the
1024-GPU fat-tree, latency-bound messages/s, peak memory. Appends a row to bench/RESULTS.md.

Closed loop: N flows stay in flight (a finishing flow starts a new one between random GPUs, 1-100 MB),
so every completion is one finish and one start event. From `FlowEngine.arrays_on` groups on, a re-rating
is the compiled incremental re-solve (the cascade over the groups whose rate can move), or a full solve when
that involves more than `FlowEngine.cascade_limit` of the groups (`full_solve_frac`);
`10k_numpy_events_per_s` is the NumPy reference path (full solves only), `10k_tol1e-2` the opt-in tolerance
mode (full solves). `*_cpu_events_per_s` divides by this process's CPU seconds instead of wall seconds
(the box is shared: CPU seconds say what the engine needed). Messages: `message_delay` by name, over
route handles, and as routed exchanges (query out, partial back on the same queue pair). `events_per_step`: flow events handled per
engine step (all events of one instant are one step).
Run: python bench/bench_network.py [--no-record]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import simpy

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import peak_rss_mb, record  # noqa: E402

from simroute.network import FlowEngine, load_topology, shipped_topology  # noqa: E402


def closed_loop(topo, n_concurrent: int, n_finish: int, *, tolerance: float = 0.0, seed: int = 1,
                backend: str = "auto") -> dict:
    env = simpy.Environment()
    eng = FlowEngine(env, topo, keep_records=False, rate_tolerance=tolerance, backend=backend)
    rng = np.random.default_rng(seed)
    gpus, done, started = topo.gpus, [0], [0]
    pairs = rng.integers(0, len(gpus), size=(n_concurrent + n_finish + 10, 2)).tolist()
    sizes = rng.uniform(1e6, 1e8, n_concurrent + n_finish + 10).tolist()

    def start() -> None:
        i = started[0]
        started[0] += 1
        a, b = pairs[i]
        eng.transfer(gpus[a], gpus[b], sizes[i]).callbacks.append(finish)

    def finish(_ev) -> None:
        done[0] += 1
        start()

    for _ in range(n_concurrent):
        start()
    t0 = time.perf_counter()
    env.run(until=1e-12)                                   # the initial fill of all N flows
    fill_s = time.perf_counter() - t0
    while done[0] < n_finish // 10:                        # warm up to the steady state
        env.step()
    d0, r0, g0, f0, t0 = done[0], eng.rerates, eng.rerated_groups, eng.full_solves, time.perf_counter()
    s0, e0, c0 = eng.steps, eng.flow_events, time.process_time()
    while done[0] < n_finish:
        env.step()
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    n = done[0] - d0
    return {"events_per_s": 2 * n / dt, "cpu_events_per_s": 2 * n / max(cpu, 1e-9), "flows_per_s": n / dt,
            "rerates_per_s": (eng.rerates - r0) / dt,
            "groups_per_event": (eng.rerated_groups - g0) / max(1, 2 * n), "initial_fill_s": fill_s,
            "full_solve_frac": (eng.full_solves - f0) / max(1, eng.rerates - r0),
            "events_per_step": (eng.flow_events - e0) / max(1, eng.steps - s0)}


def engine_with_elephants(topo, n_bulk: int, *, seed: int) -> tuple[FlowEngine, np.random.Generator]:
    """An engine with n_bulk endless flows between random GPUs in flight (messages see their shares)."""
    env = simpy.Environment()
    eng = FlowEngine(env, topo, keep_records=False)
    rng = np.random.default_rng(seed)
    gpus = topo.gpus
    for a, b in rng.integers(0, len(gpus), size=(n_bulk, 2)).tolist():
        eng.transfer(gpus[a], gpus[b], 1e12)
    env.run(until=1e-9)
    return eng, rng


def exchanges(topo, n: int = 500_000, n_bulk: int = 1000) -> float:
    """Messages/s of routed exchanges over route handles: a query requester -> holder and its partial back
    (the same queue pair at both NICs), 64 requester-holder pairs in turn, beside n_bulk elephants."""
    eng, rng = engine_with_elephants(topo, n_bulk, seed=3)
    gpus = topo.gpus
    pairs = [(eng.message_route(gpus[a], gpus[b]), eng.message_route(gpus[b], gpus[a]))
             for a, b in rng.integers(0, len(gpus), size=(64, 2)).tolist()]
    send = eng.send_message
    t0 = time.perf_counter()
    now = 0.0
    for i in range(n // 2):
        query, partial = pairs[i & 63]
        now += send(query, 2184.0, t_probe_s=16e-6, single_block_Bps=25e9, now=now) * 1e-3
        now += send(partial, 2184.0, t_probe_s=16e-6, single_block_Bps=25e9, now=now) * 1e-3
    return 2 * (n // 2) / (time.perf_counter() - t0)


def messages(topo, n: int = 1_000_000, n_bulk: int = 1000, *, handles: bool = False) -> float:
    """Messages/s of `message_delay` (or, with handles, of `send_message` over pre-resolved routes) between
    4096 random GPU pairs beside n_bulk elephants (every NIC sees several queue pairs: context checks run)."""
    eng, rng = engine_with_elephants(topo, n_bulk, seed=2)
    gpus = topo.gpus
    pairs = [(gpus[a], gpus[b]) for a, b in rng.integers(0, len(gpus), size=(4096, 2)).tolist()]
    routes = [eng.message_route(src, dst) for src, dst in pairs]
    md, send = eng.message_delay, eng.send_message
    t0 = time.perf_counter()
    now = 0.0
    if handles:
        for i in range(n):
            now += send(routes[i & 4095], 2184.0, t_probe_s=16e-6, single_block_Bps=25e9, now=now) * 1e-3
    else:
        for i in range(n):
            src, dst = pairs[i & 4095]
            now += md(src, dst, 2184.0, t_probe_s=16e-6, single_block_Bps=25e9, now=now) * 1e-3
    return n / (time.perf_counter() - t0)


def main() -> None:
    topo = load_topology(shipped_topology("fattree-1024"))
    figs: dict[str, float | int | str] = {}
    for n_concurrent, n_finish, label in ((100, 20_000, "100"), (1000, 6000, "1k"), (3000, 2000, "3k"),
                                          (10_000, 600, "10k")):
        r = closed_loop(topo, n_concurrent, n_finish)
        figs[f"{label}_events_per_s"] = round(r["events_per_s"], 1)
        figs[f"{label}_cpu_events_per_s"] = round(r["cpu_events_per_s"], 1)
        figs[f"{label}_groups_per_event"] = round(r["groups_per_event"], 1)
        figs[f"{label}_full_solve_frac"] = round(r["full_solve_frac"], 2)
        figs[f"{label}_events_per_step"] = round(r["events_per_step"], 2)
        print(f"  {label}: {r['events_per_s']:.1f} events/s ({r['cpu_events_per_s']:.1f} per CPU second)", flush=True)
    figs["10k_initial_fill_s"] = round(r["initial_fill_s"], 2)
    figs["10k_tol1e-2_events_per_s"] = round(closed_loop(topo, 10_000, 600, tolerance=1e-2)["events_per_s"], 1)
    figs["10k_numpy_events_per_s"] = round(closed_loop(topo, 10_000, 300, backend="numpy")["events_per_s"], 1)
    figs["messages_per_s"] = round(messages(topo))
    figs["messages_per_s_route_handles"] = round(messages(topo, handles=True))
    figs["messages_per_s_exchanges"] = round(exchanges(topo))
    figs["peak_rss_mb"] = round(peak_rss_mb(), 1)
    record("network (fattree-1024)", figs,
           target=">= 5k events/s at 1k flows; 10k >= 100 and >= 5x before; >= 200k messages/s")


if __name__ == "__main__":
    main()
