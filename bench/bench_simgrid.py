"""simroute's flow engine against SimGrid's C++ kernel (S4U, pure max-min) on identical flow sets with pinned paths.

For each scale (mean concurrent flows on the 1024-GPU fat-tree, link latencies zeroed so both models mean
the same thing): a closed loop in simroute produces the flow set (N in flight; a finish starts a new flow
between random GPUs, 1-100 MB, integer bytes); then both simulators replay it open-loop with every flow
pinned to the path simroute chose (`transfer(..., path=...)` here, one route per flow in a SimGrid star
zone there). Reported: wall time and start+finish events/s of each, and FCT agreement (median and max
relative difference). SimGrid is configured as pure max-min: CM02, latency and bandwidth factors 1,
weight-S 0, no cross-traffic, no TCP window. Needs `libsimgrid-dev` and g++ (Debian: apt-get install
libsimgrid-dev); skips with the reason otherwise. Appends a row to bench/RESULTS.md.
Run: python bench/bench_simgrid.py [--quick] [--no-record]
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import simpy

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import record  # noqa: E402

from simroute.network import FlowEngine, load_topology, shipped_topology  # noqa: E402

SOURCE = Path(__file__).with_name("simgrid") / "flows.cpp"
SIMGRID_CFG = ["--cfg=network/model:CM02", "--cfg=network/latency-factor:1", "--cfg=network/bandwidth-factor:1",
               "--cfg=network/weight-S:0", "--cfg=network/crosstraffic:0", "--cfg=network/TCP-gamma:0",
               "--log=root.thres:critical"]
# (mean concurrent flows, finishes replayed)
SCALES = [(100, 4000), (1000, 3000), (3000, 1500), (10_000, 300)]
QUICK = [(100, 1000), (1000, 600), (3000, 300)]


def zero_latency_topology():
    topo = load_topology(shipped_topology("fattree-1024"))
    topo.links = [dataclasses.replace(link, latency_s=0.0) for link in topo.links]
    return topo


def closed_loop_flow_set(topo, n_concurrent: int, n_finish: int, seed: int = 1) -> list[tuple[float, float, tuple]]:
    """(start, bytes, links) of every flow a closed loop of n_concurrent flows starts before n_finish finishes."""
    env = simpy.Environment()
    eng = FlowEngine(env, topo, keep_records=True)
    rng = np.random.default_rng(seed)
    gpus, done = topo.gpus, [0]
    pairs = rng.integers(0, len(gpus), size=(n_concurrent + n_finish + 10, 2)).tolist()
    sizes = np.round(rng.uniform(1e6, 1e8, n_concurrent + n_finish + 10)).tolist()
    started: list[tuple[float, float, int]] = []

    def start() -> None:
        i = len(started)
        a, b = pairs[i]
        started.append((env.now, sizes[i], i))
        event = eng.transfer(gpus[a], gpus[b], sizes[i], tag=i)
        event.callbacks.append(finish)

    def finish(_ev) -> None:
        done[0] += 1
        if done[0] + n_concurrent <= n_concurrent + n_finish:
            start()

    for _ in range(n_concurrent):
        start()
    env.run()
    links = {r.tag: r.links for r in eng.telemetry.records}
    return [(t, size, links[i]) for t, size, i in started if links[i]]


def replay_simroute(topo, flows) -> tuple[float, np.ndarray]:
    """Open-loop replay with pinned paths: (wall seconds, FCT per flow)."""
    env = simpy.Environment()
    eng = FlowEngine(env, topo, keep_records=True)
    src, dst = topo.gpus[0], topo.gpus[1]        # names only label the records: the path is pinned

    def driver():
        for i, (t, size, links) in enumerate(flows):
            if t > env.now:
                yield env.timeout(t - env.now)
            eng.transfer(src, dst, size, path=links, tag=i)

    env.process(driver())
    t0 = time.perf_counter()
    env.run()
    wall = time.perf_counter() - t0
    fct = np.zeros(len(flows))
    for r in eng.telemetry.records:
        fct[r.tag] = r.end - r.start
    return wall, fct


def build_simgrid(workdir: Path) -> tuple[Path | None, str]:
    if shutil.which("g++") is None:
        return None, "g++ not found"
    binary = workdir / "flows"
    proc = subprocess.run(["g++", "-O2", "-std=c++17", str(SOURCE), "-o", str(binary), "-lsimgrid"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return None, "SimGrid C++ headers/library not usable (apt-get install libsimgrid-dev): " + \
            proc.stderr.strip().splitlines()[-1][:200] if proc.stderr.strip() else "g++ failed"
    return binary, ""


def replay_simgrid(binary: Path, topo, flows, workdir: Path) -> tuple[float, np.ndarray]:
    path = workdir / "flows.txt"
    with path.open("w") as f:
        f.write(f"{len(topo.links)}\n")
        f.write("\n".join(repr(link.capacity_Bps) for link in topo.links) + "\n")
        f.write(f"{len(flows)}\n")
        for t, size, links in flows:
            f.write(f"{t!r} {size!r} {len(links)} {' '.join(map(str, links))}\n")
    proc = subprocess.run([str(binary), str(path), *SIMGRID_CFG], capture_output=True, text=True, check=True)
    lines = proc.stdout.split()
    wall = float(lines[1])
    finish = np.array([float(x) for x in lines[2:]])
    return wall, finish - np.array([t for t, _s, _l in flows])


def main() -> None:
    scales = QUICK if "--quick" in sys.argv else SCALES
    topo = zero_latency_topology()
    with tempfile.TemporaryDirectory(prefix="simroute-simgrid-") as tmp:
        workdir = Path(tmp)
        binary, why = build_simgrid(workdir)
        if binary is None:
            print(f"[simgrid comparison] skipped: {why}")
            return
        figures: dict[str, float | int | str] = {}
        for n_concurrent, n_finish in scales:
            flows = closed_loop_flow_set(topo, n_concurrent, n_finish)
            events = 2 * len(flows)
            ours_wall, ours_fct = replay_simroute(topo, flows)
            sg_wall, sg_fct = replay_simgrid(binary, topo, flows, workdir)
            rel = np.abs(ours_fct - sg_fct) / sg_fct
            tag = f"{n_concurrent // 1000}k" if n_concurrent >= 1000 else str(n_concurrent)
            figures.update({
                f"{tag}_flows": len(flows),
                f"{tag}_simroute_s": round(ours_wall, 3), f"{tag}_simgrid_s": round(sg_wall, 3),
                f"{tag}_simroute_ev_per_s": round(events / ours_wall), f"{tag}_simgrid_ev_per_s": round(events / sg_wall),
                f"{tag}_speedup": round(sg_wall / ours_wall, 2),
                f"{tag}_fct_rel_median": float(f"{np.median(rel):.2e}"), f"{tag}_fct_rel_max": float(f"{rel.max():.2e}"),
            })
            print(f"  {n_concurrent} concurrent: {len(flows)} flows, simroute {ours_wall:.3f} s, SimGrid {sg_wall:.3f} s, "
                  f"FCT rel diff median {np.median(rel):.1e} max {rel.max():.1e}", flush=True)
        record("simgrid comparison (fattree-1024, pinned paths)", figures,
               target=">= 1x SimGrid C++ at every scale")


if __name__ == "__main__":
    main()
