"""The instance engine's cost per iteration on the real-trace benches, with an output fingerprint per run.

For each policy (or those named) on the Mooncake conversation trace (`conversation`) or the Claude-Code agent
trace (`agent-real`), built as bench_sim.py builds them: CPU seconds of `Simulation.run` (the box is shared:
CPU, not wall), engine iterations and events (an event of k > 1 iterations stands for k identical decode
iterations), CPU microseconds per iteration and per event, and a fingerprint of the run's outputs (the summary
without `versions` and the engine's progress counters added by issue 24, and every table's column bytes), so
that a before/after comparison shows both the cost and that the outputs did not change.

    python bench/bench_engine_iteration.py conversation [POLICY ...] [--json OUT] [--repeat R] [--no-record]
    PYTHONPATH=/path/to/other/checkout python bench/bench_engine_iteration.py ...   # the same on other code
    python bench/bench_engine_iteration.py agent-real --against /path/to/base/checkout [--repeat R]

Appends one row per trace to RESULTS.md (least CPU of R runs per policy) unless --no-record. `--against` runs
each policy in a fresh process per side, the base checkout and this one alternating (a shared box's load falls
on both alike), and records base -> this per policy, with whether the fingerprints agree. `--compiled-vs-pure`
does the same with the installed simroute (`SIMROUTE_COMPILE=1 pip install .`: its mypyc-compiled modules,
`simroute.compiled`) run as Python (`SIMROUTE_PURE_PYTHON=1`) and as installed. Every row names the modules that
ran compiled.

    python bench/bench_engine_iteration.py agent-real always-route --compiled-vs-pure --repeat 3
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_sim  # noqa: E402  (the traces, built as the simulator benchmarks build them)
from _common import record  # noqa: E402

from simroute.calib import default_profile_path  # noqa: E402
from simroute.compiled import PURE_PYTHON_ENV  # noqa: E402
from simroute.network import shipped_topology  # noqa: E402
from simroute.sim import RunConfig, Simulation  # noqa: E402

ADDED_ENGINE_KEYS = ("max_preemptions_of_a_sequence", "thrashed", "left_over")   # absent before issue 24


def table_hash(table) -> str:
    digest = hashlib.sha256()
    for name in table.column_names:
        digest.update(name.encode())
        column = table.column(name).combine_chunks()
        for buffer in column.buffers():
            if buffer is not None:
                digest.update(buffer.to_pybytes())
    return digest.hexdigest()[:16]


def fingerprint(result) -> dict[str, str]:
    summary = dict(result.summary)
    summary.pop("versions", None)
    summary["engine"] = {k: v for k, v in summary["engine"].items() if k not in ADDED_ENGINE_KEYS}
    # where the files lie differs between checkouts; their contents are hashed in `inputs`
    summary["config"] = {k: v for k, v in summary["config"].items() if k not in ("topology", "trace", "calib")}
    summary["inputs"] = {k: v for k, v in summary["inputs"].items() if k != "calib_files"}
    prints = {"summary": hashlib.sha256(json.dumps(summary, sort_keys=True, default=str).encode()).hexdigest()[:16]}
    for name, table in sorted(result.tables.items()):
        if table is not None and hasattr(table, "column_names"):
            prints[name] = table_hash(table)
    return prints


def run(trace: Path, policy: str) -> dict:
    cfg = RunConfig(topology=str(shipped_topology("fattree")), trace=str(trace), calib=str(default_profile_path()),
                    policy=policy, router="least-loaded", over_window="drop")   # the Mooncake sample's 27 > 163,840
    sim = Simulation(cfg)
    cpu = time.process_time()
    result = sim.run()
    cpu = time.process_time() - cpu
    engine = result.summary["engine"]
    return {"cpu_s": cpu, "iterations": engine["iterations"], "events": engine["events"],
            "us_per_iteration": cpu / engine["iterations"] * 1e6, "us_per_event": cpu / engine["events"] * 1e6,
            "compiled": result.summary["versions"].get("compiled", []), "fingerprint": fingerprint(result)}


def _compiled_label(row: dict) -> str:
    """The modules a run's row says ran compiled, by their last name ("none" for plain Python)."""
    return ",".join(module.rsplit(".", 1)[1] for module in row.get("compiled", [])) or "none"


def _side(checkout: Path, trace: Path, policy: str, *, installed: bool = False, pure: bool = False) -> dict:
    """One run of `policy` in a fresh process (its own imports): on `checkout`'s sources, or (`installed`) on
    the simroute this environment installed (or the caller's PYTHONPATH names), as Python when `pure`."""
    import os
    import subprocess
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_ENV}
    if not installed:                   # the checkout's sources, whatever the caller's path says
        env["PYTHONPATH"] = str(checkout)
    if pure:
        env[PURE_PYTHON_ENV] = "1"
    path = "[sys.argv[1] + '/bench']" if installed else "[sys.argv[1] + '/bench', sys.argv[1]]"
    code = (f"import json, sys; sys.path[:0] = {path}; import bench_engine_iteration as b; "
            "print(json.dumps(b.run(__import__('pathlib').Path(sys.argv[2]), sys.argv[3])))")
    done = subprocess.run([sys.executable, "-c", code, str(checkout), str(trace), policy], check=True, text=True,
                          capture_output=True, env=env, cwd=tempfile.gettempdir())
    return json.loads(done.stdout.strip().splitlines()[-1])


def against(which: str, policies: list[str], base: Path | None, repeat: int) -> None:
    """Base checkout -> this one (or, `base` None, the installed simroute as Python -> as installed), alternating
    per run; least CPU of `repeat` per side and policy."""
    here = Path(__file__).resolve().parent.parent
    sides = {"base": {"checkout": base}, "head": {"checkout": here}} if base is not None else \
        {"base": {"checkout": here, "installed": True, "pure": True}, "head": {"checkout": here, "installed": True}}
    with tempfile.TemporaryDirectory(prefix="simroute-engine-") as tmp:
        trace = (bench_sim.conversation_trace if which == "conversation" else bench_sim.agent_trace)(Path(tmp))
        figures: dict[str, float | str] = {}
        for policy in policies:
            best: dict[str, dict] = {}
            for _ in range(repeat):
                for side, how in sides.items():
                    row = _side(how["checkout"], trace, policy, installed=how.get("installed", False),
                                pure=how.get("pure", False))
                    if side not in best or row["cpu_s"] < best[side]["cpu_s"]:
                        best[side] = row
            before, after = best["base"], best["head"]
            figures[f"{policy}_us_per_iteration"] = f"{before['us_per_iteration']:.2f}->{after['us_per_iteration']:.2f}"
            figures[f"{policy}_cpu_s"] = f"{before['cpu_s']:.3f}->{after['cpu_s']:.3f}"
            figures[f"{policy}_same"] = "yes" if before["fingerprint"] == after["fingerprint"] else "NO"
            figures[f"{policy}_compiled"] = f"{_compiled_label(before)}/{_compiled_label(after)}"
            print(which, policy, figures[f"{policy}_us_per_iteration"], figures[f"{policy}_same"],
                  figures[f"{policy}_compiled"], flush=True)
    title = f"base {base.name} -> head" if base is not None else "installed simroute, pure Python -> compiled"
    record(f"engine_iteration_{which} ({title}, least CPU of {repeat} alternating runs)", figures,
           target="<= 10 us per iteration (CPU)")


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 1
    base = sys.argv[sys.argv.index("--against") + 1] if "--against" in sys.argv else None
    args = [a for a in args if a not in (out, str(repeat), base)]
    which, policies = args[0], args[1:] or list(bench_sim.POLICIES)
    if base is not None or "--compiled-vs-pure" in sys.argv:
        against(which, policies, Path(base).resolve() if base is not None else None, repeat)
        return
    with tempfile.TemporaryDirectory(prefix="simroute-engine-") as tmp:
        trace = (bench_sim.conversation_trace if which == "conversation" else bench_sim.agent_trace)(Path(tmp))
        rows = {}
        for policy in policies:
            runs = [run(trace, policy) for _ in range(repeat)]
            best = min(runs, key=lambda r: r["cpu_s"])
            assert all(r["fingerprint"] == best["fingerprint"] for r in runs), "a run is not deterministic"
            rows[policy] = best
            print(which, policy, json.dumps({k: round(v, 3) if isinstance(v, float) else v
                                             for k, v in best.items() if k != "fingerprint"}), flush=True)
    if out:
        Path(out).write_text(json.dumps(rows, indent=1) + "\n")
    figures = {}
    for policy, row in rows.items():
        figures[f"{policy}_us_per_iteration"] = row["us_per_iteration"]
        figures[f"{policy}_us_per_event"] = row["us_per_event"]
    figures["compiled"] = _compiled_label(next(iter(rows.values())))
    record(f"engine_iteration_{which}", figures, target="<= 10 us per iteration (CPU)")


if __name__ == "__main__":
    main()
