"""Wall and CPU time of the default `simroute validate` scorecard (what the test suite's scorecard fixture pays).

    python bench/bench_validate.py [--jobs J] [--repeat R] [--against /path/to/base/checkout] [--no-record]

Runs `python -m simroute validate --json` from each checkout's root (so that checkout's sources run), in a fresh
process each time; CPU is the child's user + system time (every worker process of `-j` included). `--jobs` is
passed to the head only (a base from before `-j` runs in one process, as `--jobs 1` does). With
`--against`, base and head alternate run by run and the least CPU of R per side is kept (this box's wall clock
swings with the other jobs on it; CPU less so). Appends one row to RESULTS.md unless --no-record.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import record  # noqa: E402


def run(checkout: Path, jobs: int | None) -> dict[str, float]:
    """One `simroute validate --json` in `checkout`: wall s, CPU s (children), rows, findings."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    command = [sys.executable, "-m", "simroute", "validate", "--json"]
    if jobs is not None:
        command += ["-j", str(jobs)]
    done = subprocess.run(command, cwd=checkout, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(checkout)})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"validate failed in {checkout}: {done.stderr[-2000:]}")
    doc = json.loads(done.stdout)
    return {"wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "rows": len(doc["rows"]), "failed": int(doc["failed"])}


def main() -> None:
    jobs = int(sys.argv[sys.argv.index("--jobs") + 1]) if "--jobs" in sys.argv else None
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 1
    base = Path(sys.argv[sys.argv.index("--against") + 1]).resolve() if "--against" in sys.argv else None
    here = Path(__file__).resolve().parent.parent
    sides = {"base": base, "head": here} if base is not None else {"head": here}
    best: dict[str, dict[str, float]] = {}
    for _ in range(repeat):
        for side, checkout in sides.items():
            row = run(checkout, jobs if side == "head" else None)
            print(side, {key: round(value, 2) for key, value in row.items()}, flush=True)
            if side not in best or row["cpu_s"] < best[side]["cpu_s"]:
                best[side] = row
    figures: dict[str, float | int | str] = {}
    for key in ("wall_s", "cpu_s", "rows"):
        figures[key] = (f"{best['base'][key]:.4g}->{best['head'][key]:.4g}" if base is not None
                        else best["head"][key])
    with open("/proc/loadavg") as load:
        figures["load"] = load.read().split()[0]
    title = f"validate default scorecard, -j {jobs if jobs is not None else 'default'}"
    if base is not None:
        title += f" (base {base.name} -> head, least CPU of {repeat} alternating runs)"
    record(title, figures, target="< 60 s wall on 2 cores; CPU not above the base's")


if __name__ == "__main__":
    main()
