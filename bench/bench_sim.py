"""Simulator benchmarks: simulated seconds per wall second, routed messages per second, peak memory.

Scenarios (issue 5 and the targets of DEVELOPERS.md):
  agents  256 sub-agents on one document, 64-GPU fat-tree, always-route (routed-message heavy)
  ark     the ARK scenario: prefill -> decode KV transfers, QPS 25 for 600 simulated s  (target >= 100x real time)
  zipf    a Zipf corpus on the 1024-GPU fat-tree, 100k requests                       (target <= 60 s, < 4 GB)
  azure   `simroute run` on the imported Azure code trace, network on, decode modelled    (target >= 2,000 req/s)
  conversation  a Mooncake-format trace of ~12k requests (the shipped sample tiled 3x), every policy
                                                                                    (target <= 30 s wall each)
  agent-real    ~700 requests of Claude-Code agent conversations with ~1,300 64-token blocks each (the
                shipped agent trace tiled 14x), every policy                        (target <= 30 s wall each)
Every scenario prints engine iterations and routed messages simulated per wall second.
Run: python bench/bench_sim.py [agents|ark|zipf|azure|conversation|agent-real ...] [--no-record]
     [--policy P]   (conversation / agent-real: one policy instead of all)
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


POLICIES = ("paper", "always-route", "always-fetch", "always-local", "adaptive")
SHARED = ROOT.parent / "shared" / "traces"


def _run(cfg: RunConfig, profile: bool = False) -> tuple[dict, dict]:
    t, cpu = time.perf_counter(), time.process_time()
    sim = Simulation(cfg)
    if profile or "--profile" in sys.argv:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        res = prof.runcall(sim.run)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    else:
        res = sim.run()
    wall = time.perf_counter() - t
    cpu = time.process_time() - cpu    # the box is shared: CPU seconds say what this process needed
    s = res.summary
    eng = s.get("engine", {})
    fig = {"requests": s["completed"], "sim_s": s["sim_time_s"], "wall_s": wall, "cpu_s": cpu,
           "sim_s_per_wall_s": s["sim_time_s"] / wall, "requests_per_wall_s": s["completed"] / wall,
           "iterations_per_wall_s": eng.get("iterations", 0) / wall,
           "routed_msgs_per_wall_s": eng.get("routed_messages", 0) / wall,
           "sim_events_per_wall_s": next(sim.env._eid) / wall,
           "tpot_p50_ms": (s["tpot_ms"]["p50"] or 0.0), "ttft_p50_ms": (s["ttft_ms"]["p50"] or 0.0)}
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
                    calib=str(default_profile_path()), policy="paper", decode_steps_per_event=32,
                    router="least-loaded")   # the corpus's hints name 8 requesters: spread them
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


def conversation_trace(tmp: Path, tiles: int = 3) -> Path:
    """The shipped Mooncake sample (3,993 requests) tiled `tiles` times one after another: each tile keeps the
    sample's arrival times, lengths and prefix-sharing structure, with its own hash ids (its own content)."""
    import json
    rows = [json.loads(line) for line in (SHARED / "mooncake_synthetic_trace.jsonl").open()]
    top = 1 + max(max(r["hash_ids"]) for r in rows)
    span = rows[-1]["timestamp"] + 1
    src = tmp / "conversation.jsonl"
    with src.open("w") as f:
        for tile in range(tiles):
            for r in rows:
                f.write(json.dumps({"timestamp": r["timestamp"] + tile * span, "input_length": r["input_length"],
                                    "output_length": r["output_length"],
                                    "hash_ids": [h + tile * top for h in r["hash_ids"]]}) + "\n")
    return import_trace("mooncake", [src], tmp / "conversation.parquet")


def agent_trace(tmp: Path, copies: int = 14) -> Path:
    """The shipped Claude-Code agent conversation (53 requests, up to ~1,450 64-token blocks) as `copies`
    conversations (one file each: hash ids are namespaced per file)."""
    import shutil
    files = []
    for i in range(copies):
        dst = tmp / f"agent_{i:02d}.json"
        shutil.copyfile(SHARED / "agent_trace_0277.json", dst)
        files.append(dst)
    return import_trace("agent", files, tmp / "agents-real.parquet")


def _policies() -> list[str]:
    if "--policy" in sys.argv:
        return [sys.argv[sys.argv.index("--policy") + 1]]
    return list(POLICIES)


def _every_policy(name: str, trace: Path) -> None:
    """One run per policy (or the one --policy names) on the fat-tree, least-loaded requesters."""
    for policy in _policies():
        cfg = RunConfig(topology=str(shipped_topology("fattree")), trace=str(trace),
                        calib=str(default_profile_path()), policy=policy, router="least-loaded")
        _, fig = _run(cfg)
        record(f"sim_{name}_{policy}", {**fig, "peak_rss_MiB": peak_rss_mb()}, target="<= 30 s wall")


def conversation(tmp: Path) -> None:
    _every_policy("conversation12k", conversation_trace(tmp))


def agent_real(tmp: Path) -> None:
    _every_policy("agent700", agent_trace(tmp))


SCENARIOS = {"agents": agents, "ark": ark, "zipf": zipf, "azure": azure, "conversation": conversation,
             "agent-real": agent_real}

if __name__ == "__main__":
    args = [a for i, a in enumerate(sys.argv[1:], 1) if sys.argv[i - 1] != "--policy"]
    names = [a for a in args if not a.startswith("--")] or list(SCENARIOS)
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    if len(names) > 1:   # one process per scenario, so each peak RSS is its own
        import subprocess
        for name in names:
            extra = ["--policy", sys.argv[sys.argv.index("--policy") + 1]] if "--policy" in sys.argv else []
            subprocess.run([sys.executable, __file__, name, *flags, *extra], check=True)
    else:
        with tempfile.TemporaryDirectory() as d:
            SCENARIOS[names[0]](Path(d))
