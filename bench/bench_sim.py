"""Simulator benchmarks: simulated seconds per wall second, routed messages per second, peak memory.

Scenarios (issue 5 and the targets of DEVELOPERS.md):
  agents  256 sub-agents on one document, 64-GPU fat-tree, always-route (routed-message heavy)
  ark     the ARK scenario: prefill -> decode KV transfers, QPS 25 for 600 simulated s  (target >= 100x real time)
  zipf    a Zipf corpus on the 1024-GPU fat-tree, 100k requests                       (target <= 60 s, < 4 GB)
  azure   `simroute run` on the imported Azure code trace, network on                   (target >= 2,000 req/s)
Run: python bench/bench_sim.py [agents|ark|zipf|azure ...] [--no-record]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from _common import peak_rss_mb, record
from simroute.calib import default_profile_path
from simroute.network import shipped_topology
from simroute.sim import RunConfig, Simulation
from simroute.workload import generate, import_trace

ROOT = Path(__file__).resolve().parent.parent


def _run(cfg: RunConfig) -> tuple[dict, dict]:
    t = time.perf_counter()
    sim = Simulation(cfg)
    res = sim.run()
    wall = time.perf_counter() - t
    s = res.summary
    fig = {"requests": s["completed"], "sim_s": s["sim_time_s"], "wall_s": wall,
           "sim_s_per_wall_s": s["sim_time_s"] / wall, "requests_per_wall_s": s["completed"] / wall,
           "routed_msgs_per_wall_s": 2 * s["holders"]["routed_queries"] / wall,
           "sim_events_per_wall_s": next(sim.env._eid) / wall}
    return s, fig


def agents(tmp: Path) -> None:
    trace = generate("agents", tmp / "agents256.parquet", seed=1, params={
        "documents": 1, "doc_tokens": 32768, "subagents": 256, "requests_per_agent": 2, "output_tokens": 128,
        "arrival": "poisson", "rate_per_agent": 0.5})
    cfg = RunConfig(topology=str(shipped_topology("fattree")), trace=str(trace), calib=str(default_profile_path()),
                    policy="always-route", router="least-loaded", decode_steps_per_event=16)
    _, fig = _run(cfg)
    record("sim_agents256_64gpu", {**fig, "peak_rss_MiB": peak_rss_mb()})


def ark(tmp: Path) -> None:
    from simroute.scenarios.ark import MODEL, TOPOLOGY, disagg_trace
    trace = disagg_trace(tmp / "ark.parquet", qps=25, duration_s=600, seed=1)
    cfg = RunConfig(topology=str(shipped_topology(TOPOLOGY)), trace=str(trace),
                    calib=str(default_profile_path()), routing="ark", model=MODEL, prefill_us=0.02,
                    decode_steps_per_event=64)
    _, fig = _run(cfg)
    record("sim_ark_qps25_600s", {**fig, "peak_rss_MiB": peak_rss_mb()}, target=">= 100x real time")


def zipf(tmp: Path) -> None:
    t = time.perf_counter()
    trace = generate("corpus", tmp / "zipf.parquet", seed=1, params={
        "requests": 100_000, "chunks": 50_000, "instances": 1024, "qps": 2000.0})
    gen_s = time.perf_counter() - t
    cfg = RunConfig(topology=str(shipped_topology("fattree-1024")), trace=str(trace),
                    calib=str(default_profile_path()), policy="paper", decode_steps_per_event=32)
    _, fig = _run(cfg)
    record("sim_zipf_1024gpu_100k", {**fig, "generate_s": gen_s, "peak_rss_MiB": peak_rss_mb()},
           target="<= 60 s wall, < 4 GB")


def azure(tmp: Path) -> None:
    src = ROOT.parent / "shared" / "traces" / "azure_llm_2023_code.csv"
    trace = import_trace("azure", [src], tmp / "azure.parquet")
    cfg = RunConfig(topology=str(shipped_topology("fattree")), trace=str(trace), calib=str(default_profile_path()),
                    router="least-loaded")
    _, fig = _run(cfg)
    record("sim_azure_code", {**fig, "peak_rss_MiB": peak_rss_mb()}, target=">= 2,000 requests/s")


SCENARIOS = {"agents": agents, "ark": ark, "zipf": zipf, "azure": azure}

if __name__ == "__main__":
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or list(SCENARIOS)
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    if len(names) > 1:   # one process per scenario, so each peak RSS is its own
        import subprocess
        for name in names:
            subprocess.run([sys.executable, __file__, name, *flags], check=True)
    else:
        with tempfile.TemporaryDirectory() as d:
            SCENARIOS[names[0]](Path(d))
