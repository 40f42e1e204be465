"""Start-up of the commands a user waits on: `simroute --help`, `simroute predict`, `simroute run --help`.

Each command runs in a fresh interpreter (`python -m simroute ...` from the repository root, so the checkout's
code is timed), `--repeat` times; the figures are the least and the median wall and CPU seconds (the CPU time of
the child, from getrusage, which a loaded box inflates less than wall time). A bare `python -c pass` is timed the
same way: the interpreter's own start-up, which no change to simroute can remove.
Run: python bench/bench_cli.py [--repeat R] [--no-record]
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import record

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {"python": ["-c", "pass"], "help": ["-m", "simroute", "--help"], "predict": ["-m", "simroute", "predict"],
            "run_help": ["-m", "simroute", "run", "--help"]}


def timed(args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh interpreter running `args`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 7
    figures: dict[str, float | int | str] = {"repeat": repeat}
    for name, args in COMMANDS.items():
        timed(args)                                   # warm the page cache and .pyc files
        runs = [timed(args) for _ in range(repeat)]
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        figures |= {f"{name}_wall_min_s": min(walls), f"{name}_wall_median_s": statistics.median(walls),
                    f"{name}_cpu_min_s": min(cpus), f"{name}_cpu_median_s": statistics.median(cpus)}
    record("cli start-up", figures, target="--help and predict <= 0.4 s")


if __name__ == "__main__":
    main()
