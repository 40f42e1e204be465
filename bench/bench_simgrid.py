"""simroute's two flow paths against SimGrid's C++ kernel (S4U, pure max-min) on identical flow sets with pinned paths.

For each scale (mean concurrent flows on the 1024-GPU fat-tree, link latencies zeroed so both models mean
the same thing): a closed loop in simroute produces the flow set (N in flight; a finish starts a new flow
between random GPUs, 1-100 MB, integer bytes); then each simulator replays it open-loop with every flow
pinned to the path simroute chose:
- `online`: simroute's FlowEngine on SimPy, one `transfer(..., path=...)` per arrival (what a simulation runs);
- `replay`: `simroute.network.replay` (the whole event loop compiled; compile time excluded, warmed up first);
- SimGrid C++ (bench/simgrid/flows.cpp: one route per flow in a star zone) and, up to `--python-max` flows in
  flight, SimGrid's Python bindings (bench/simgrid/flows.py, run by the interpreter they are built for).
Reported: wall and CPU time and start+finish events/s of each (best of `--repeat` interleaved runs at
scales <= 1k: the box is shared), and FCT agreement against SimGrid C++ (median and max relative
difference). SimGrid is configured as pure max-min: CM02, latency and bandwidth factors 1, weight-S 0, no
cross-traffic, no TCP window. Needs `libsimgrid-dev` and g++ (Debian: apt-get install libsimgrid-dev
python3-simgrid); skips with the reason otherwise. Appends a row to bench/RESULTS.md.
`--reuse-simgrid 10000` takes SimGrid C++'s wall and CPU at those scales from the latest RESULTS.md row that has
them instead of rerunning it (~440 s at 10k in flight: the flow set is the same, seeded); FCT agreement is then
against the compiled replay, which that row checked against SimGrid.
`--floor` measures, on the 100-in-flight flow set, what bounds the online engine at small scale: CPU us per
event of the same SimPy driver with a flow that does nothing but fire at a fixed time (the caller's own two
events per flow), plus the engine's two (flush, wake-up), and numba's dispatch of a kernel shaped like the
online core's; beside the online engine's and SimGrid C++'s CPU us per event, and the part of the online
engine's spent inside its compiled step (`online_kernel`: the max-min solve and commit, dispatch included).
`--profile` splits the online engine's CPU per event on the same flow set by where it is spent: the compiled
step timed directly (as `--floor`'s `online_kernel`), the rest by cProfile's own time per function grouped by
module (the online core's Python adaptor, the flow engine, path and topology lookups, telemetry, SimPy, the
bench's caller), as shares scaled to the unprofiled CPU per event (cProfile inflates many small calls more than
a few large ones: a guide to where the Python time goes, not a measurement of each part); needs no SimGrid.
Run: python bench/bench_simgrid.py [--quick] [--repeat N] [--python-max N] [--scales 100,1000]
     [--reuse-simgrid 10000] [--floor] [--profile] [--no-record]
"""

from __future__ import annotations

import dataclasses
import math
import re
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
from simroute.network.replay import FlowSet, replay  # noqa: E402

SOURCE = Path(__file__).with_name("simgrid") / "flows.cpp"
PY_SOURCE = Path(__file__).with_name("simgrid") / "flows.py"
PY_BINDINGS = "/usr/bin/python3"        # Debian's python3-simgrid is built for the system interpreter
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


def replay_simroute(topo, flows) -> tuple[float, float, np.ndarray]:
    """The online engine, open loop with pinned paths: (wall s, CPU s, FCT per flow)."""
    env = simpy.Environment()
    eng = FlowEngine(env, topo, keep_records=True)
    src, dst = topo.gpus[0], topo.gpus[1]        # names only label the records: the path is pinned

    def driver():
        for i, (t, size, links) in enumerate(flows):
            if t > env.now:
                yield env.timeout(t - env.now)
            eng.transfer(src, dst, size, path=links, tag=i)

    env.process(driver())
    t0, c0 = time.perf_counter(), time.process_time()
    env.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    fct = np.zeros(len(flows))
    for r in eng.telemetry.records:
        fct[r.tag] = r.end - r.start
    return wall, cpu, fct


def replay_compiled(topo, flows) -> tuple[float, float, np.ndarray]:
    """The compiled whole-flow-set replay: (wall s, CPU s, FCT per flow), validation and grouping included."""
    flow_set = FlowSet.from_paths([t for t, _s, _l in flows], [s for _t, s, _l in flows], [l for _t, _s, l in flows])
    capacity = [link.capacity_Bps for link in topo.links]
    t0, c0 = time.perf_counter(), time.process_time()
    result = replay(flow_set, capacity, backend="numba")
    return time.perf_counter() - t0, time.process_time() - c0, result.fct_s


def simpy_floor(flows, engine_events: bool) -> float:
    """CPU s of the online driver over `flows` where a transfer is one event firing at a fixed time (no engine);
    with `engine_events`, also the two events per flow the engine schedules (its flush and a wake-up)."""
    from simpy.events import NORMAL
    env = simpy.Environment()

    def transfer(size: float) -> simpy.Event:
        event = env.event()
        event._ok, event._value = True, None
        env.schedule(event, NORMAL, 1e-3 + size * 1e-12)
        if engine_events:
            env.timeout(0)
            env.timeout(1e-3)
        return event

    def driver():
        for t, size, _links in flows:
            if t > env.now:
                yield env.timeout(t - env.now)
            transfer(size)

    env.process(driver())
    c0 = time.process_time()
    env.run()
    return time.process_time() - c0


def dispatch_floor(calls: int = 20000) -> float:
    """CPU s of one call to a compiled kernel that does nothing, with the online core's arguments (a float,
    an int, three arrays) and result (five scalars)."""
    import numba

    @numba.njit
    def nothing(now, n_pend, fbuf, ibuf, bbuf):
        return 0, 0, now, n_pend, fbuf.shape[0] + ibuf.shape[0] + bbuf.shape[0]

    fbuf, ibuf, bbuf = np.zeros(60_000), np.zeros(100_000, dtype=np.int64), np.zeros(25_000, dtype=np.int8)
    nothing(0.0, 0, fbuf, ibuf, bbuf)
    c0 = time.process_time()
    for _ in range(calls):
        nothing(0.0, 0, fbuf, ibuf, bbuf)
    return (time.process_time() - c0) / calls


def kernel_cpu(topo, flows) -> float:
    """CPU s spent inside the online core's compiled step (`_online.core_step`, dispatch included) during one
    online replay of `flows`: the share of the online engine's cost that is max-min solving, not Python."""
    import simroute.network._online as online
    kernel, spent = online.core_step, [0]

    def timed(*args):
        start = time.thread_time_ns()
        out = kernel(*args)
        spent[0] += time.thread_time_ns() - start
        return out

    online.core_step = timed
    try:
        replay_simroute(topo, flows)
    finally:
        online.core_step = kernel
    return spent[0] / 1e9


def measure_floor(topo, binary: Path, workdir: Path, repeat: int) -> dict[str, float]:
    """CPU us per event of what bounds the online engine at 100 flows in flight (see the module docstring)."""
    flows = closed_loop_flow_set(topo, *SCALES[0])
    events = 2 * len(flows)
    flows_file = write_flows(topo, flows, workdir)
    best: dict[str, float] = {}
    for _ in range(max(repeat, 5)):
        for name, run in (("simpy_caller", lambda: simpy_floor(flows, False)),
                          ("simpy_with_engine_events", lambda: simpy_floor(flows, True)),
                          ("online", lambda: replay_simroute(topo, flows)[1]),
                          ("online_kernel", lambda: kernel_cpu(topo, flows)),
                          ("simgrid", lambda: replay_simgrid([str(binary)], flows, flows_file)[1])):
            best[name] = min(best.get(name, math.inf), run())
    figures = {f"floor_{name}_cpu_us_per_event": round(cpu / events * 1e6, 3) for name, cpu in best.items()}
    figures["floor_dispatch_us_per_call"] = round(dispatch_floor() * 1e6, 3)
    return figures


PROFILE_GROUPS = (("online_core_python", "_online.py"), ("flow_engine", "network/engine.py"),
                  ("paths_topology", "network/topology.py"), ("paths_topology", "network/paths.py"),
                  ("telemetry", "network/telemetry.py"), ("simpy", "/simpy/"), ("caller", "bench_simgrid.py"))


def measure_profile(topo, repeat: int) -> dict[str, float | int]:
    """The online engine's CPU us per event at 100 flows in flight, split by where it is spent: the compiled
    step timed directly (`kernel_cpu`), the rest by cProfile's own time per module group, scaled to the least
    unprofiled CPU of `repeat` runs (see the module docstring)."""
    import cProfile
    import pstats
    flows = closed_loop_flow_set(topo, *SCALES[0])
    events = 2 * len(flows)
    runs = max(repeat, 3)
    cpu = min(replay_simroute(topo, flows)[1] for _ in range(runs))
    kernel = min(kernel_cpu(topo, flows) for _ in range(runs))
    profile = cProfile.Profile()
    profile.runcall(replay_simroute, topo, flows)
    spent: dict[str, float] = {}
    steps = calls_of_step = 0
    for (filename, _line, function), (calls, _primitive, own_s, _cumulative, _callers) in \
            pstats.Stats(profile).stats.items():        # type: ignore[attr-defined]
        if function == "core_step" and "_online.py" in filename:
            calls_of_step = calls
            continue                                    # timed directly above
        if function == "step" and "/simpy/" in filename:
            steps = calls
        group = next((name for name, where in PROFILE_GROUPS if where in filename), "other")
        spent[group] = spent.get(group, 0.0) + own_s
    python_s, per_event = sum(spent.values()), 1e6 / events
    figures: dict[str, float | int] = {
        "flows": len(flows), "online_cpu_us_per_event": round(cpu * per_event, 3),
        "simpy_steps_per_event": round(steps / events, 3), "compiled_steps_per_event": round(calls_of_step / events, 3),
        "compiled_step_us_per_event": round(kernel * per_event, 3)}
    for group in dict.fromkeys([name for name, _where in PROFILE_GROUPS] + ["other"]):
        figures[f"{group}_us_per_event"] = round(spent.get(group, 0.0) / python_s * (cpu - kernel) * per_event, 3)
    return figures


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


def python_bindings() -> str:
    """Why SimGrid's Python bindings cannot run here ('' when they can)."""
    if not Path(PY_BINDINGS).exists():
        return f"{PY_BINDINGS} not found"
    proc = subprocess.run([PY_BINDINGS, "-c", "import simgrid"], capture_output=True, text=True)
    return "" if proc.returncode == 0 else "python3-simgrid not importable by " + PY_BINDINGS


def write_flows(topo, flows, workdir: Path) -> Path:
    path = workdir / "flows.txt"
    with path.open("w") as f:
        f.write(f"{len(topo.links)}\n")
        f.write("\n".join(repr(link.capacity_Bps) for link in topo.links) + "\n")
        f.write(f"{len(flows)}\n")
        for t, size, links in flows:
            f.write(f"{t!r} {size!r} {len(links)} {' '.join(map(str, links))}\n")
    return path


def replay_simgrid(command: list[str], flows, flows_file: Path) -> tuple[float, float, np.ndarray]:
    """Run a SimGrid replay (C++ binary or Python script): (wall s, CPU s of engine.run(), FCT per flow)."""
    proc = subprocess.run([*command, str(flows_file), *SIMGRID_CFG], capture_output=True, text=True, check=True)
    lines = proc.stdout.split()
    wall, cpu = float(lines[1]), float(lines[3])
    finish = np.array([float(x) for x in lines[4:]])
    return wall, cpu, finish - np.array([t for t, _s, _l in flows])


def recorded_simgrid(tag: str) -> tuple[float, float, str] | None:
    """SimGrid C++'s (wall s, CPU s, date) at one scale from the latest RESULTS.md row that ran it."""
    from _common import RESULTS
    found = None
    for line in RESULTS.read_text().splitlines():
        wall = re.search(rf"\b{tag}_simgrid_s=([0-9.,]+)", line)
        cpu = re.search(rf"\b{tag}_simgrid_cpu_s=([0-9.,]+)", line)
        if wall and cpu and f"{tag}_simgrid_reused" not in line:
            found = (float(wall.group(1).replace(",", "")), float(cpu.group(1).replace(",", "")),
                     line.split("|")[1].strip())
    return found


def _option(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def measure_scale(topo, n_concurrent: int, n_finish: int, binary: Path, py_ok: bool, repeat: int,
                  workdir: Path, reuse: bool = False) -> dict[str, float | int]:
    """Every path on one flow set; best-of-`repeat` walls at <= 1k flows in flight. With `reuse`, SimGrid C++
    is not run: its figures come from RESULTS.md (`recorded_simgrid`)."""
    flows = closed_loop_flow_set(topo, n_concurrent, n_finish)
    events = 2 * len(flows)
    flows_file = write_flows(topo, flows, workdir)
    runs = repeat if n_concurrent <= 1000 else 1
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    fcts: dict[str, np.ndarray] = {}
    paths = {"online": lambda: replay_simroute(topo, flows), "replay": lambda: replay_compiled(topo, flows),
             "simgrid": lambda: replay_simgrid([str(binary)], flows, flows_file)}
    if py_ok:
        paths["simgrid_py"] = lambda: replay_simgrid([PY_BINDINGS, str(PY_SOURCE)], flows, flows_file)
    tag = f"{n_concurrent // 1000}k" if n_concurrent >= 1000 else str(n_concurrent)
    recorded = recorded_simgrid(tag) if reuse else None
    if recorded is not None:
        del paths["simgrid"]
    for _ in range(runs):                       # interleaved, so a burst of load hits every path alike
        for name, run in paths.items():
            if name == "simgrid_py" and name in walls:
                continue                        # slow: once
            wall, cpu, fct = run()
            walls.setdefault(name, []).append(wall)
            cpus.setdefault(name, []).append(cpu)
            fcts[name] = fct
    figures: dict[str, float | int | str] = {f"{tag}_flows": len(flows)}
    reference = "simgrid"
    if recorded is not None:
        walls["simgrid"], cpus["simgrid"] = [recorded[0]], [recorded[1]]
        fcts["simgrid"] = fcts["replay"]            # agreement below is then against the compiled replay
        figures[f"{tag}_simgrid_reused"] = recorded[2]
        reference = "replay"
    for name in walls:
        figures[f"{tag}_{name}_s"] = round(min(walls[name]), 4)
        figures[f"{tag}_{name}_cpu_s"] = round(min(cpus[name]), 4)
        figures[f"{tag}_{name}_ev_per_s"] = round(events / min(walls[name]))
    for name in ("online", "replay"):
        figures[f"{tag}_{name}_vs_simgrid"] = round(min(walls["simgrid"]) / min(walls[name]), 2)
        figures[f"{tag}_{name}_vs_simgrid_cpu"] = round(min(cpus["simgrid"]) / min(cpus[name]), 2)
        if name == reference:
            continue
        rel = np.abs(fcts[name] - fcts["simgrid"]) / fcts["simgrid"]
        figures[f"{tag}_{name}_fct_rel_median"] = float(f"{np.median(rel):.2e}")
        figures[f"{tag}_{name}_fct_rel_max"] = float(f"{rel.max():.2e}")
    rel = np.abs(fcts["replay"] - fcts["online"]) / fcts["online"]
    figures[f"{tag}_replay_vs_online_fct_rel_max"] = float(f"{rel.max():.2e}")
    shown = ", ".join(f"{name} {' / '.join(f'{w:.3f}' for w in walls[name])} s (cpu best {min(cpus[name]):.3f})"
                      for name in walls)
    agreement = f"online vs {'SimGrid' if reference == 'simgrid' else 'replay (SimGrid reused)'} FCT rel diff " \
        f"median {figures[f'{tag}_online_fct_rel_median']:.1e} max {figures[f'{tag}_online_fct_rel_max']:.1e}"
    print(f"  {n_concurrent} in flight, {len(flows)} flows, {events} events: {shown}; {agreement}", flush=True)
    return figures


def main() -> None:
    scales = QUICK if "--quick" in sys.argv else SCALES
    if "--scales" in sys.argv:
        wanted = {int(x) for x in _option("--scales", "").split(",")}
        scales = [scale for scale in SCALES if scale[0] in wanted]
    repeat = int(_option("--repeat", "3"))
    reuse = {int(x) for x in _option("--reuse-simgrid", "").split(",") if x}
    python_max = int(_option("--python-max", "1000"))
    topo = zero_latency_topology()
    replay_compiled(topo, [(0.0, 1e6, topo.path_ids(0, 1)[0])])          # compile (or load the cache) first
    if "--profile" in sys.argv:
        record("online engine at 100 flows in flight, where its CPU goes (fattree-1024; the compiled step timed, the "
               "rest by cProfile shares; CPU us per start or finish event)", measure_profile(topo, repeat),
               target="online <= SimGrid C++")
        return
    with tempfile.TemporaryDirectory(prefix="simroute-simgrid-") as tmp:
        workdir = Path(tmp)
        binary, why = build_simgrid(workdir)
        if binary is None:
            print(f"[simgrid comparison] skipped: {why}")
            return
        py_why = python_bindings()
        if py_why:
            print(f"[simgrid comparison] SimGrid Python bindings skipped: {py_why}")
        figures: dict[str, float | int | str] = {}
        if "--floor" in sys.argv:
            figures = measure_floor(topo, binary, workdir, repeat)
            record("online engine floor at 100 flows in flight (fattree-1024, CPU us per start or finish event)",
                   figures, target="online <= SimGrid C++")
            return
        for n_concurrent, n_finish in scales:
            figures.update(measure_scale(topo, n_concurrent, n_finish, binary,
                                         not py_why and n_concurrent <= python_max, repeat, workdir,
                                         reuse=n_concurrent in reuse))
        record("simgrid comparison (fattree-1024, pinned paths; online engine and compiled replay)", figures,
               target=">= 1x SimGrid C++ at every scale")


if __name__ == "__main__":
    main()
