"""Start-up of the commands a user waits on: `simroute --help`, `simroute predict`, `simroute run --help`.

Each command runs in a fresh interpreter (`python -m simroute ...` from the repository root, so the checkout's
code is timed), `--repeat` times; the figures are the least and the median wall and CPU seconds (the CPU time of
the child, from getrusage, which a loaded box inflates less than wall time). A bare `python -c pass` is timed the
same way: the interpreter's own start-up (site-packages' .pth files included), which no change to simroute can
remove; `*_own_cpu_min_s` is a command's least CPU less that of the bare interpreter.

Bytecode: an installed package runs from its .pyc files, but a box with PYTHONDONTWRITEBYTECODE=1 (or a
read-only checkout) compiles simroute from source on every start. The default mode gives every child a
private bytecode cache (PYTHONPYCACHEPREFIX, a temporary folder, warmed by one untimed run of each command),
so the figures are an installed user's; `--source` also times the children as the environment has them
(the checkout's modules compiled on every start where PYTHONDONTWRITEBYTECODE is set) and records both rows.
Run: python bench/bench_cli.py [--repeat R] [--source] [--no-record]
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import record

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {"python": ["-c", "pass"], "help": ["-m", "simroute", "--help"], "predict": ["-m", "simroute", "predict"],
            "predict_json": ["-m", "simroute", "predict", "--json"], "run_help": ["-m", "simroute", "run", "--help"]}


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh interpreter running `args`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(env: dict[str, str], repeat: int) -> dict[str, float | int | str]:
    """Every command: one untimed run (page cache, bytecode where it is kept), then `repeat` timed ones."""
    figures: dict[str, float | int | str] = {"repeat": repeat}
    for name, args in COMMANDS.items():
        timed(args, env)
        runs = [timed(args, env) for _ in range(repeat)]
        walls, cpus = [wall for wall, _ in runs], [cpu for _, cpu in runs]
        figures |= {f"{name}_wall_min_s": min(walls), f"{name}_wall_median_s": statistics.median(walls),
                    f"{name}_cpu_min_s": min(cpus), f"{name}_cpu_median_s": statistics.median(cpus)}
    for name in COMMANDS:
        if name != "python":
            figures[f"{name}_own_cpu_min_s"] = figures[f"{name}_cpu_min_s"] - figures["python_cpu_min_s"]
    return figures


def main() -> None:
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 7
    base = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory(prefix="simroute-pyc-") as cache:
        env = {**base, "PYTHONPYCACHEPREFIX": cache}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        record("cli start-up", measure(env, repeat) | {"bytecode": "private cache, warmed"},
               target="--help and predict <= 0.4 s")
    if "--source" in sys.argv:
        writes = "from source" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "the checkout's own .pyc"
        record("cli start-up, bytecode as the environment has it", measure(base, repeat) | {"bytecode": writes},
               target="--help and predict <= 0.4 s")


if __name__ == "__main__":
    main()
