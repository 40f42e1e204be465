"""Step-model table lookups: what the measured operator tables cost the simulator's hot loop.

The issue's requirement: table lookups cost at most 10% more wall time on the Mooncake conversation, agent and
Zipf benches (bench_sim's `conversation`, `agent-real` and `zipf` configurations, same traces). The simulation
itself may differ between a roofline step model and a measured one (other step times, other batches), so beside
total wall and CPU seconds this compares the CPU per engine iteration and per step-model call, and replays one
run's step-model calls (their exact arguments, in order, on a fresh model: the caches start cold as in a run)
on each version's step model alone (`step_model_us_per_call`; `step_model_extra_share`: that cost over the
first version's, times the run's calls, over the run's CPU). `same_results_as_<previous>`: whether each run's
summary (paths normalised) equals the previous version's. `profile` runs each version under cProfile (the
Zipf corpus on its first 15,000 requests) and records the share of the run the step model's `iteration_s`
takes, and how many of its calls missed the step model's caches.

Every run is its own process (`one`), each version's `simroute` first on PYTHONPATH; the versions' runs are
interleaved per repetition (the box is shared: a drift in load hits every version alike), and each figure is
the median over repetitions (`cpu_min_s`: the least), summed over the scenario's policies. The step-model replay
takes the recorded calls of the last version's `paper` run.

Run: python bench/bench_steptables.py --versions before=/tmp/wt_f44,after=. [--repeat R]
         [--scenarios conversation,agent-real,zipf] [--policy P] [--replay-calls N] [--no-record]
     (`before` is a worktree of the roofline commit, f44bfd7; the row compares each later version to the first)
     python bench/bench_steptables.py profile --versions before=/tmp/wt_f44,after=. [--no-record]
     python bench/bench_steptables.py one SCENARIO POLICY TRACE_DIR [--count] [--dump PATH] [--limit N]
     python bench/bench_steptables.py replay SCENARIO TRACE_DIR ARGS.npy
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from simroute.defaults import PAPER_DEPLOYMENT
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SCENARIO_POLICIES = {"conversation": ("paper", "always-route", "always-fetch", "always-local", "adaptive"),
                     "agent-real": ("paper", "always-route", "always-fetch", "always-local", "adaptive"),
                     "zipf": ("paper",)}
ARG_COLS = 5     # iteration_s(new_tokens, sequences, kv_read_tokens, attention_pairs, prefill_pairs)


def _option(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def prepare(trace_dir: Path) -> None:
    """bench_sim's traces, built once and shared by every version (simroute.workload is the same in both)."""
    import bench_sim
    from simroute.workload import generate
    bench_sim.conversation_trace(trace_dir)
    bench_sim.agent_trace(trace_dir)
    generate("corpus", trace_dir / "zipf.parquet", seed=1, params={
        "requests": 100_000, "chunks": 50_000, "instances": 1024, "qps": 2000.0})


def config(scenario: str, policy: str, trace_dir: Path):
    """bench_sim's RunConfig of the scenario (same topology, router and decode steps per event)."""
    from simroute.calib import default_profile_path
    from simroute.network import shipped_topology
    from simroute.sim import RunConfig
    calib = str(default_profile_path())
    if scenario == "zipf":
        return RunConfig(**PAPER_DEPLOYMENT,
                         topology=str(shipped_topology("fattree-1024")), trace=str(trace_dir / "zipf.parquet"),
                         calib=calib, policy=policy, decode_steps_per_event=32, router="least-loaded")
    trace = trace_dir / ("conversation.parquet" if scenario == "conversation" else "agents-real.parquet")
    return RunConfig(**PAPER_DEPLOYMENT,
                     topology=str(shipped_topology("fattree")), trace=str(trace), calib=calib, policy=policy,
                     router="least-loaded", over_window="drop")     # as bench_sim: past the window, dropped


def one(scenario: str, policy: str, trace_dir: Path, count: bool, dump: str | None, limit: int) -> dict:
    """One run: wall and CPU seconds of `Simulation.run` (construction excluded, as bench_sim), engine
    iterations and events. `count`: wrap the step model's `iteration_s` to count its calls (and `dump` the
    first `limit` calls' arguments): not a timing run."""
    import simroute
    from simroute.sim import Simulation
    sim = Simulation(config(scenario, policy, trace_dir))
    step = sim.ctx.engines.step
    calls = [0]
    buf = None
    if count:
        import numpy as np
        buf = np.empty((limit, ARG_COLS))
        inner = step.iteration_s

        def counted(new, seqs, kv, pairs, prefill_pairs=0.0, decode_sequences=None):
            n = calls[0]
            if n < limit and decode_sequences is None:
                buf[n] = (new, seqs, kv, pairs, prefill_pairs)
            calls[0] = n + 1
            if decode_sequences is None:          # the roofline commit's iteration_s has no such parameter
                return inner(new, seqs, kv, pairs, prefill_pairs)
            return inner(new, seqs, kv, pairs, prefill_pairs, decode_sequences)
        step.iteration_s = counted
    t, c = time.perf_counter(), time.process_time()
    res = sim.run()
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    s = res.summary
    eng = s.get("engine", {})
    import hashlib
    root = str(Path(simroute.__file__).resolve().parent.parent)      # paths name the version's own tree
    text = json.dumps({k: v for k, v in s.items() if k != "versions"}, sort_keys=True, default=str)
    digest = hashlib.sha256(text.replace(root, "<root>").encode()).hexdigest()[:16]    # the run's results
    out = {"scenario": scenario, "policy": policy, "simroute": simroute.__file__, "wall_s": wall, "cpu_s": cpu,
           "results": digest,
           "requests": s["completed"], "sim_s": s["sim_time_s"], "iterations": int(eng.get("iterations", 0)),
           "engine_events": int(eng.get("events", 0)), "tables": getattr(step, "_measured", None) is not None}
    if count:
        out["step_calls"] = calls[0]
        if dump:
            import numpy as np
            np.save(dump, buf[:min(calls[0], limit)])
    return out


def replay(scenario: str, trace_dir: Path, args_path: str) -> dict:
    """The recorded `iteration_s` calls, in order, on a fresh step model of this version (built as the run
    builds it): CPU seconds per call, best of three passes, each on a fresh model (cold caches)."""
    import numpy as np
    import simroute
    from simroute.sim import Simulation
    rows = [tuple(r) for r in np.load(args_path).tolist()]
    sim = Simulation(config(scenario, "paper", trace_dir))
    proto = sim.ctx.engines.step
    from simroute.calib import load_profile
    profile = load_profile(sim.ctx.config.calib)
    best = float("inf")
    total = 0.0
    for _ in range(3):
        step = _fresh(profile, proto)
        f = step.iteration_s
        c = time.process_time()
        for new, seqs, kv, pairs, pp in rows:
            f(new, seqs, kv, pairs, pp)
        best = min(best, time.process_time() - c)
        total = sum(f(*r) for r in rows[:1000])
    return {"simroute": simroute.__file__, "calls": len(rows), "cpu_s": best, "us_per_call": best / len(rows) * 1e6,
            "checksum": total}


def _fresh(profile, proto):
    """A new step model equal to the run's (same geometry, GPU entry, TP, fabric): cold caches."""
    from simroute.model.steptime import StepTimeModel
    kw = dict(allreduce_Bps=proto.allreduce_Bps, allreduce_latency_s=proto.allreduce_latency_s,
              holder_curve=proto.holder_curve, holder_ref=proto.holder_ref)
    if hasattr(proto, "kv_layout"):
        kw["kv_layout"] = proto.kv_layout
    graphs = proto._overhead_s != proto.gpu.iteration_overhead_s
    return StepTimeModel(proto.geometry, proto.gpu, proto.tp, cuda_graphs=graphs, **kw)


PROFILED = (("conversation", "paper", None), ("agent-real", "paper", None), ("zipf", "paper", 15_000))


def profiled(scenario: str, policy: str, trace_dir: Path, requests: int) -> dict:
    """One run under cProfile: the cumulative seconds of the step model's `iteration_s` (every caller: the
    engines and the policies' re-prefill prices) over the profiled total, and its calls and cache misses."""
    import cProfile
    import pstats
    from dataclasses import replace as _replace
    import simroute
    from simroute.sim import Simulation
    cfg = config(scenario, policy, trace_dir)
    if requests:
        cfg = _replace(cfg, max_requests=requests)
    sim = Simulation(cfg)
    prof = cProfile.Profile()
    prof.runcall(sim.run)
    stats = pstats.Stats(prof)
    out = {"simroute": simroute.__file__, "total_s": stats.total_tt, "iteration_s_cum_s": 0.0, "calls": 0}
    counts = {"_attention": 0, "_split": 0}
    for (path, _line, fn), (_cc, nc, _tt, ct, _callers) in stats.stats.items():
        if path.endswith("model/steptime.py") and fn == "iteration_s":
            out["iteration_s_cum_s"] += ct
            out["calls"] += nc
        elif path.endswith("model/steptime.py") and fn in counts:
            counts[fn] += nc
    # calls computed in full: the tables' path past its cache splits the batch; the roofline computes every call
    out["misses"] = counts["_split"] or counts["_attention"]
    return out


def profile() -> None:
    versions = [tuple(v.split("=", 1)) for v in _option("--versions", "after=.").split(",")]
    figures: dict[str, float | int | str] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        prepare(tmp)
        for scenario, policy, requests in PROFILED:
            for name, path in versions:
                r = _sub(path, "profiled", scenario, policy, str(tmp), str(requests or 0))
                tag = f"{scenario}{'_' + str(requests // 1000) + 'k' if requests else ''}_{name}"
                figures[f"{tag}_step_share"] = round(r["iteration_s_cum_s"] / r["total_s"], 4)
                figures[f"{tag}_step_calls"] = r["calls"]
                figures[f"{tag}_step_computed"] = r["misses"]
                print(f"  {tag}: {r['iteration_s_cum_s']:.2f} of {r['total_s']:.2f} s profiled, {r['calls']:,} "
                      f"calls, {r['misses']:,} computed", flush=True)
    figures["versions"] = _label(versions)
    from _common import record
    record("step-model tables overhead (cProfile share)", figures,
           target="tables cost <= 10% more wall than the roofline step model")


def _label(versions: list[tuple[str, str]]) -> str:
    """name=commit:path per version (the commit its tree is at, +dirty with uncommitted changes)."""
    out = []
    for name, path in versions:
        git = ["git", "-C", path]
        try:
            commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    check=True).stdout.strip()
            dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no", "--", "simroute"],
                                   capture_output=True, text=True).stdout.strip()
            commit += "+dirty" if dirty else ""
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown"
        out.append(f"{name}={commit}:{path}")
    return " / ".join(out)


def _sub(version_path: str, *args: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(version_path).resolve())] + [p for p in [env.get("PYTHONPATH")] if p])
    out = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True, cwd=BENCH)
    if out.returncode != 0:
        raise RuntimeError(f"{args} under {version_path}: {out.stderr[-2000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    want = str(Path(version_path).resolve() / "simroute" / "__init__.py")
    if res["simroute"] != want:
        raise RuntimeError(f"ran {res['simroute']}, wanted {want}")
    return res


def compare() -> None:
    versions = [tuple(v.split("=", 1)) for v in _option("--versions", "after=.").split(",")]
    repeat = int(_option("--repeat", "3"))
    scenarios = _option("--scenarios", "conversation,agent-real,zipf").split(",")
    only = _option("--policy", "")
    replay_calls = int(_option("--replay-calls", "2000000"))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        prepare(tmp)
        configs = [(s, p) for s in scenarios for p in SCENARIO_POLICIES[s] if not only or p == only]
        # counts (one wrapped run per config and version) and the recorded calls of the last version
        counts: dict[tuple, dict] = {}
        for s, p in configs:
            for name, path in versions:
                dump = str(tmp / f"args_{s}.npy") if (name == versions[-1][0] and p == "paper") else ""
                counts[(name, s, p)] = _sub(path, "one", s, p, str(tmp), "--count", "--limit", str(replay_calls),
                                            *(["--dump", dump] if dump else []))
        runs: dict[tuple, list] = {}
        for rep in range(repeat):
            for s, p in configs:
                for name, path in (versions if rep % 2 == 0 else versions[::-1]):
                    r = _sub(path, "one", s, p, str(tmp))
                    runs.setdefault((name, s, p), []).append(r)
                    print(f"  rep {rep} {name:>7} {s}/{p}: wall {r['wall_s']:.2f} s, cpu {r['cpu_s']:.2f} s, "
                          f"{r['iterations']:,} iterations, {r['engine_events']:,} events", flush=True)
        replays = {}
        for s in scenarios:
            if (tmp / f"args_{s}.npy").exists():
                for name, path in versions:
                    replays[(name, s)] = _sub(path, "replay", s, str(tmp), str(tmp / f"args_{s}.npy"))
    figures: dict[str, float | int | str] = {}
    per = {}
    for s in scenarios:
        for name, _ in versions:
            cfgs = [(s2, p) for s2, p in configs if s2 == s]
            wall = sum(statistics.median(r["wall_s"] for r in runs[(name, s2, p)]) for s2, p in cfgs)
            cpu = sum(statistics.median(r["cpu_s"] for r in runs[(name, s2, p)]) for s2, p in cfgs)
            its = sum(runs[(name, s2, p)][0]["iterations"] for s2, p in cfgs)
            evs = sum(runs[(name, s2, p)][0]["engine_events"] for s2, p in cfgs)
            calls = sum(counts[(name, s2, p)]["step_calls"] for s2, p in cfgs)
            per[(name, s)] = dict(wall=wall, cpu=cpu, its=its, evs=evs, calls=calls)
            tag = f"{s}_{name}"
            figures[f"{tag}_wall_s"] = wall
            figures[f"{tag}_cpu_s"] = cpu
            figures[f"{tag}_cpu_min_s"] = sum(min(r["cpu_s"] for r in runs[(name, s2, p)]) for s2, p in cfgs)
            figures[f"{tag}_iterations"] = its
            figures[f"{tag}_step_calls"] = calls
            figures[f"{tag}_us_per_iteration"] = cpu / its * 1e6
            figures[f"{tag}_us_per_step_call"] = cpu / calls * 1e6
            if (name, s) in replays:
                figures[f"{tag}_step_model_us_per_call"] = replays[(name, s)]["us_per_call"]
        first = versions[0][0]
        a = per[(first, s)]
        for i, (last, _) in enumerate(versions[1:], 1):
            b = per[(last, s)]
            figures[f"{s}_{last}_vs_{first}_wall"] = b["wall"] / a["wall"]
            figures[f"{s}_{last}_vs_{first}_cpu"] = b["cpu"] / a["cpu"]
            figures[f"{s}_{last}_vs_{first}_cpu_per_iteration"] = (b["cpu"] / b["its"]) / (a["cpu"] / a["its"])
            figures[f"{s}_{last}_vs_{first}_cpu_per_step_call"] = (b["cpu"] / b["calls"]) / (a["cpu"] / a["calls"])
            if (first, s) in replays and (last, s) in replays:
                ra, rb = replays[(first, s)], replays[(last, s)]
                # the step model's own extra CPU per call over the first version's, times the run's calls,
                # over the run's CPU
                figures[f"{s}_{last}_step_model_extra_share"] = ((rb["us_per_call"] - ra["us_per_call"]) * 1e-6
                                                                 * b["calls"] / b["cpu"])
            prev = versions[i - 1][0]
            same = all(runs[(last, s2, p)][0]["results"] == runs[(prev, s2, p)][0]["results"]
                       for s2, p in configs if s2 == s)
            figures[f"{s}_{last}_same_results_as_{prev}"] = "yes" if same else "no"
    figures["repeat"] = repeat
    figures["versions"] = _label(versions)
    from _common import record
    record("step-model tables overhead", figures,
           target="tables cost <= 10% more wall than the roofline step model (per iteration)")


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH))
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        print(json.dumps(one(sys.argv[2], sys.argv[3], Path(sys.argv[4]), "--count" in sys.argv,
                             _option("--dump", "") or None, int(_option("--limit", "0")))))
    elif len(sys.argv) > 1 and sys.argv[1] == "replay":
        print(json.dumps(replay(sys.argv[2], Path(sys.argv[3]), sys.argv[4])))
    elif len(sys.argv) > 1 and sys.argv[1] == "prepare":
        prepare(Path(sys.argv[2]))
    elif len(sys.argv) > 1 and sys.argv[1] == "profiled":
        print(json.dumps(profiled(sys.argv[2], sys.argv[3], Path(sys.argv[4]), int(sys.argv[5]))))
    elif len(sys.argv) > 1 and sys.argv[1] == "profile":
        profile()
    else:
        compare()
