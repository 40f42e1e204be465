"""Compile the flow engine's numba kernels into the checkout's on-disk cache (numba `cache=True`), for .ci/run.

.ci/run runs this beside the compiled build's `pip install` (mypyc: one core busy, the other idle), so the suite's
first tests that reach a kernel load it from the cache instead of compiling it (a cold cache costs ~60 CPU s in
tests/network/test_replay.py alone). Nothing here is a test: the kernels are tested by the suite, which compiles
whatever this leaves out (a signature missed costs time, never coverage). Small runs through the public paths
that the suite takes: the engine pinned to array mode and to the online core, the whole-flow-set replay with and
without the cascade."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))      # the checkout's sources, as the suite's

import numpy as np  # noqa: E402
import simpy  # noqa: E402

from simroute.network import FlowEngine, SolverMode, load_topology, shipped_topology  # noqa: E402
from simroute.network.kernels import compiled_available, compiled_backend  # noqa: E402
from simroute.network.replay import CompiledReplay, FlowSet, replay  # noqa: E402


def engine_runs() -> None:
    topo = load_topology(shipped_topology("fattree"))
    gpus = list(topo.gpus)
    for mode in (SolverMode.ARRAYS, SolverMode.ONLINE, None):
        env = simpy.Environment()
        engine = FlowEngine(env, topo, backend="numba", mode=mode)
        rng = np.random.default_rng(1)
        for index in range(96):
            a, b = rng.choice(len(gpus), size=2, replace=False)
            env.process(_later(env, engine, gpus[a], gpus[b], float(rng.uniform(1e6, 1e7)), index * 1e-6))
        env.run()


def _later(env, engine, src, dst, nbytes, at):
    yield env.timeout(at)
    yield engine.transfer(src, dst, nbytes)


def full_solve() -> None:
    """The backend's from-scratch solve on C-ordered group columns (the tests of the kernels call it so)."""
    links = np.array([[0, 1], [1, 2], [2, 2]], dtype=np.int64)      # 2 groups; link 2 is the no-link pad
    compiled_backend().fill_groups(links, np.array([1.0, 2.0]), np.array([np.inf, 1e9]), np.array([1e9, 2e9, np.inf]))


def replays() -> None:
    rng = np.random.default_rng(2)
    n, n_links = 300, 12
    paths = [tuple(rng.choice(n_links, size=int(rng.integers(1, 4)), replace=False)) for _ in range(n)]
    flows = FlowSet.from_paths(np.sort(rng.uniform(0, 1e-2, n)), rng.uniform(1e6, 1e7, n), paths,
                               np.where(rng.random(n) < 0.2, 3e8, np.inf))
    capacity = rng.uniform(1e9, 1e10, n_links)
    replay(flows, capacity, latency_s=np.full(n_links, 1e-6), backend="numba")
    saved = CompiledReplay.cascade_from, CompiledReplay.cascade_floor
    CompiledReplay.cascade_from, CompiledReplay.cascade_floor = 1, 10 ** 9
    try:
        replay(flows, capacity, backend="numba")
    finally:
        CompiledReplay.cascade_from, CompiledReplay.cascade_floor = saved


if __name__ == "__main__":
    if not compiled_available():
        sys.exit(0)
    engine_runs()
    full_solve()
    replays()
