"""The commands a user runs to look around (`--help`, every command's `--help`, `predict`) stay light: they
import neither numba nor the flow engine (nor pandas, which pyarrow's conveniences pull in), so they answer in
a fraction of a second. Checked by what a fresh interpreter has imported, not by timing (bench/bench_cli.py
times them)."""

from __future__ import annotations

import json
import subprocess
import sys

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HEAVY = ("numba", "simroute.network.engine", "pandas")

# A fresh interpreter runs each command in turn and reports, per command, the heavy modules loaded so far: the
# first command whose list is not empty is the one that pulled them in.
SCRIPT = """
import contextlib, io, json, sys
import typer.main
from simroute.cli.main import app, main

def paths(cmd, path):
    yield path
    for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
        yield from paths(sub, path + [name])

commands = [["--help"], ["predict"], ["predict", "--json"]]
commands += [path + ["--help"] for path in paths(typer.main.get_command(app), []) if path]
heavy = json.loads(sys.argv[1])
report = []
for argv in commands:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    report.append((argv, code, [m for m in heavy if m in sys.modules]))
print(json.dumps(report))
"""


def test_light_commands_import_neither_numba_nor_the_flow_engine():
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(HEAVY)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert len(report) > 20                          # every command's --help was reached
    failed = [(argv, code) for argv, code, _ in report if code != 0]
    assert not failed, failed
    heavy = [(argv, loaded) for argv, _, loaded in report if loaded]
    assert not heavy, f"first command to import a heavy module: {heavy[0]}"


def test_the_replay_backends_help_names_every_registered_backend():
    from simroute.cli.flows_cmd import BACKENDS_HELP
    from simroute.network.replay import REPLAY_BACKENDS
    assert BACKENDS_HELP == "auto (numba where available), " + ", ".join(sorted(REPLAY_BACKENDS))


def test_the_run_command_builds_its_options_when_asked(cli):
    """`simroute run`'s options come from RunConfig on first use; they are all there and checked."""
    code, out, _ = cli("run", "--help")
    assert code == 0 and "--policy" in out and "--seed" in out and "--routing" in out
    code, _, err = cli("run", "--policy", "magic")
    assert code == 2 and "unknown policy 'magic'" in err
