"""The default `simroute run`'s CPU time, split into start-up, events and the outputs (issue 39 item 7).

Each run is a fresh interpreter running the README's first command's run (`simroute run`, every option at its
default, in an empty directory) from the checkout under test, with a private bytecode cache warmed by one
untimed run (what an installed user has; see bench_cli.py for why). A small wrapper (written to a temporary
file, run as the interpreter's script) notes the process's CPU seconds (`time.process_time`, which counts the
interpreter's own start-up) when the simulation's event loop starts (`simpy.Environment.run`: the first
simulated event) and when it returns; the child's whole CPU time comes from getrusage. Reported, least of
`--repeat` runs per figure:
  startup_cpu_s   interpreter start to the first simulated event (imports, reading the inputs, building)
  events_cpu_s    the event loop
  outputs_cpu_s   after the loop: tables, summary, Parquet files, the terminal summary
  total_cpu_s     the child's user + system CPU
and which of pandas / networkx / pyarrow.compute were loaded at the first event. The floor under start-up, in the
same window: `interpreter_cpu_s` (a bare `python -c pass`) and `libraries_cpu_s` (a fresh interpreter importing
only the third-party modules the head's run had loaded at its first event: numpy, pyarrow, pydantic, typer, ...),
least of `--repeat` each, with OpenBLAS on one thread as the run asks for it (`simroute.cli.common.one_blas_thread`);
no change to simroute's own code goes below it while those libraries load before the first event.
`libraries_split_s` shares it out (median of `--repeat`): pydantic (with pydantic_core, annotated_types and
importlib.metadata, which its plugin loader and simpy's version both read), typer (with its click), simpy, numpy,
pyarrow (with pyarrow.parquet), yaml, other; each is what importing its group adds to those before it.

`--against DIR` runs a second checkout (e.g. `git archive BASE | tar -x -C DIR`) alternately with this one, run
by run, in the same window, and records both sides (`base->head`); the box's load average is recorded too.
Run: python bench/bench_run_startup.py [--repeat R] [--against DIR] [--no-record]
Target (issue 39): total <= 1 s CPU, start-up <= 0.3 s.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import record

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from simroute.cli.common import BLAS_THREADS_ENV  # noqa: E402 - the checkout's own, not an installed copy's

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("pandas", "networkx", "pyarrow.compute")

WRAPPER = '''
import atexit, sys, time
import simpy.core
marks = {}
_run = simpy.core.Environment.run
def run(self, until=None):
    if "first_event" not in marks:
        marks["first_event"] = time.process_time()
        marks["heavy"] = [name for name in %(heavy)r if name in sys.modules]
        marks["libraries"] = sorted(name for name, module in list(sys.modules.items())
                                    if "site-packages" in (getattr(module, "__file__", None) or "")
                                    and name.split(".")[0] != "simroute")
    out = _run(self, until)
    marks["events_done"] = time.process_time()
    return out
simpy.core.Environment.run = run
atexit.register(lambda: open(%(marks)r, "w").write(repr(marks)))
sys.argv = ["simroute", "run"]
from simroute.cli.main import main
sys.exit(main())
'''


def one_run(checkout: Path, cache: Path, work: Path) -> dict[str, float | str]:
    """One fresh `simroute run` of `checkout` in `work`: its CPU split (seconds)."""
    marks_file = work / "marks.txt"
    script = work / "wrapper.py"
    script.write_text(WRAPPER % {"heavy": HEAVY, "marks": str(marks_file)})
    env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONPYCACHEPREFIX": str(cache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = work / "results"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, str(script)], cwd=work, env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    marks = eval(marks_file.read_text())    # our own wrapper's repr of a dict of floats and a list of names
    return {"startup_cpu_s": marks["first_event"], "events_cpu_s": marks["events_done"] - marks["first_event"],
            "outputs_cpu_s": total - marks["events_done"], "total_cpu_s": total,
            "heavy_at_first_event": "+".join(marks["heavy"]) or "none", "libraries": marks["libraries"]}


FLOOR = '''
import importlib, sys
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:   # a module that only loads as its package's side effect: the package brought it
        pass
'''


def floor_cpu(modules: list[str], cache: Path) -> float:
    """CPU s of a fresh interpreter importing `modules` (none: the bare interpreter), numpy's BLAS as the head's
    run sets it (`one_blas_thread`), so that the floor stays under what the run itself pays."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(cache)}
    env.setdefault(BLAS_THREADS_ENV, "1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", FLOOR, *modules], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


# The floor's libraries in groups, each with what it brings along (a group's share is what importing it adds to
# the groups before it): what start-up cannot go below while it loads them. pydantic comes first, as typer's
# option conversion (typer._adapters) and simroute's file validation both use it.
GROUPS = {"pydantic": ("pydantic", "pydantic_core", "annotated_types", "typing_inspection", "typing_extensions"),
          "typer": ("typer", "shellingham", "annotated_doc"), "simpy": ("simpy",), "numpy": ("numpy",),
          "pyarrow": ("pyarrow",), "yaml": ("yaml",)}


def floor_split(libraries: list[str], cache: Path) -> dict[str, float]:
    """Each group's share of the libraries' floor (CPU s): the floor of the groups up to it less that before it;
    `other` is what no group names."""
    shares, before, loaded = {}, floor_cpu([], cache), []
    for group, tops in [*GROUPS.items(), ("other", None)]:
        loaded += [name for name in libraries
                   if (name.split(".")[0] in tops if tops is not None else name not in loaded)]
        now = floor_cpu(loaded, cache)
        shares[group], before = now - before, now
    return shares


def measure(sides: dict[str, Path], repeat: int) -> dict[str, dict[str, float | str]]:
    """Least of `repeat` per figure and side, the sides alternating run by run (one untimed warm-up each)."""
    runs: dict[str, list[dict[str, float | str]]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory(prefix="simroute-startup-") as tmp:
        dirs = {}
        for name, checkout in sides.items():
            cache, work = Path(tmp) / f"pyc-{name}", Path(tmp) / f"work-{name}"
            work.mkdir()
            dirs[name] = (checkout, cache, work)
            libraries = one_run(checkout, cache, work)["libraries"]   # warms the bytecode and page caches
        floor_cache = Path(tmp) / "pyc-floor"
        floor_cpu(libraries, floor_cache)
        floors: dict[str, list[float]] = {"interpreter_cpu_s": [], "libraries_cpu_s": []}
        splits: list[dict[str, float]] = []
        for _ in range(repeat):
            for name, (checkout, cache, work) in dirs.items():
                runs[name].append(one_run(checkout, cache, work))
            floors["interpreter_cpu_s"].append(floor_cpu([], floor_cache))
            floors["libraries_cpu_s"].append(floor_cpu(libraries, floor_cache))
            splits.append(floor_split(libraries, floor_cache))
    best = {}
    for name, rows in runs.items():
        best[name] = {key: min(float(row[key]) for row in rows) for key in rows[0] if key.endswith("_s")}
        best[name]["heavy_at_first_event"] = rows[-1]["heavy_at_first_event"]
    best["floor"] = {key: min(values) for key, values in floors.items()}
    best["floor"]["libraries"] = len(libraries)
    best["floor"]["split"] = " + ".join(f"{group} {statistics.median(split[group] for split in splits):.3f}"
                                        for group in splits[0])
    return best


def main() -> None:
    if "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__)
        sys.exit(0)
    unknown = [a for i, a in enumerate(sys.argv[1:], 1)
               if a not in ("--repeat", "--against", "--no-record") and sys.argv[i - 1] not in ("--repeat", "--against")]
    if unknown:
        sys.exit(f"bench_run_startup.py: unknown argument {unknown[0]!r} (--repeat R, --against DIR, --no-record)")
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 5
    base = Path(sys.argv[sys.argv.index("--against") + 1]).resolve() if "--against" in sys.argv else None
    sides = {"head": ROOT} if base is None else {"base": base, "head": ROOT}
    best = measure(sides, repeat)
    figures: dict[str, float | int | str] = {"repeat": repeat}
    floor = best.pop("floor")
    for key in best["head"]:
        if base is None:
            figures[key] = best["head"][key]
        elif key.endswith("_s"):
            figures[key] = f"{best['base'][key]:.3f}->{best['head'][key]:.3f}"
        else:
            figures[key] = f"{best['base'][key]}->{best['head'][key]}"
    figures |= {"interpreter_cpu_s": floor["interpreter_cpu_s"], "libraries_cpu_s": floor["libraries_cpu_s"],
                "library_modules": floor["libraries"], "libraries_split_s": floor["split"], "load": os.getloadavg()[0]}
    label = "default run CPU split" + ("" if base is None else f" (base {base.name} -> head, alternating, least of "
                                                              f"{repeat})")
    record(label, figures, target="total <= 1 s CPU, start-up (to the first event) <= 0.3 s")


if __name__ == "__main__":
    main()
