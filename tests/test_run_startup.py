"""What a default `simroute run`, as the process's own command line, has loaded when its first simulated event
starts, and with which BLAS setting numpy loaded (bench/bench_run_startup.py times the start-up). Checked in a
fresh interpreter by what `sys.modules` and the environment hold, not by timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from simroute.cli.common import BLAS_THREADS_ENV
from simroute.cli.main import main

ROOT = Path(__file__).resolve().parent.parent

# Loaded by other commands or after the event loop (rich: the terminal summary), never before the first event of
# a default run: each would be start-up the run does not need.
NOT_BEFORE_FIRST_EVENT = ("pandas", "networkx", "pyarrow.compute", "pyarrow.dataset", "matplotlib", "scipy", "numba",
                          "rich", "tqdm", "simroute.study", "simroute.scenarios", "simroute.probes")

# The run as the console script runs it (`main()` reading sys.argv), stopped at its first event; an audit hook
# notes the BLAS setting in the environment at the moment numpy starts loading.
SCRIPT = """
import json, os, sys
seen, watched, out = {}, json.loads(sys.argv[2]), sys.argv[1]
def audit(event, args):
    if event == "import" and args[0] == "numpy" and "blas" not in seen:
        seen["blas"] = os.environ.get(%(env)r)
sys.addaudithook(audit)
import simpy.core
def first(self, until=None):
    seen["loaded"] = sorted(m for m in watched if m in sys.modules)
    seen["numpy"] = "numpy" in sys.modules
    print(json.dumps(seen), flush=True)
    os._exit(0)             # the first event is all this looks at
simpy.core.Environment.run = first
sys.argv = ["simroute", "run", "--max-requests", "20", "-o", out]
from simroute.cli.main import main
sys.exit(main())
"""


def _first_event(tmp_path: Path, env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT % {"env": BLAS_THREADS_ENV}, str(tmp_path / "out"),
                           json.dumps(NOT_BEFORE_FIRST_EVENT)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _environment(**values: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != BLAS_THREADS_ENV}
    return env | values


def test_the_default_run_reaches_its_first_event_without_the_modules_it_does_not_need(tmp_path):
    seen = _first_event(tmp_path, _environment())
    assert seen["numpy"] is True            # the check below looked at a run that did load numpy
    assert seen["loaded"] == []


def test_the_command_line_asks_openblas_for_one_thread_before_numpy_loads(tmp_path):
    assert _first_event(tmp_path, _environment())["blas"] == "1"


def test_a_blas_thread_count_the_user_set_is_kept(tmp_path):
    assert _first_event(tmp_path, _environment(**{BLAS_THREADS_ENV: "3"}))["blas"] == "3"


def test_main_called_by_a_program_leaves_its_environment_alone(monkeypatch, capsys):
    monkeypatch.delenv(BLAS_THREADS_ENV, raising=False)
    assert main(["--version"]) == 0
    assert "simroute" in capsys.readouterr().out
    assert BLAS_THREADS_ENV not in os.environ


# The run's options as typer would convert them: which options got typer's own (pydantic TypeAdapter) converter
# before the first event. A default run's values are all plain (cli/common.plain_values).
CONVERTERS = """
import json, os, sys
import typer.core
built = []
own = typer.core._TyperParameter.get_runtime_param
def noted(self):
    if self._runtime_param is None:
        built.append(self.name)
    return own(self)
typer.core._TyperParameter.get_runtime_param = noted
import simpy.core
def first(self, until=None):
    print(json.dumps(built), flush=True)
    os._exit(0)
simpy.core.Environment.run = first
sys.argv = ["simroute", "run", "--max-requests", "20", "-o", sys.argv[1]]
from simroute.cli.main import main
sys.exit(main())
"""


def test_a_default_runs_options_need_no_typer_converter(tmp_path):
    done = subprocess.run([sys.executable, "-c", CONVERTERS, str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []     # `-o` given as text made a path plainly


# The whole default run, to its outputs: the shipped profile, engine preset and topology it reads hash as recorded
# (simroute/records.py), so it reads them by the field table and never imports pydantic.
WHOLE_RUN = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic",
                                                                                           "pydantic_core"))),
                              flush=True))
sys.argv = ["simroute", "run", "--max-requests", "20", *json.loads(sys.argv[1])]
from simroute.cli.main import main
sys.exit(main())
"""


def _pydantic_loaded(tmp_path: Path, *options: str) -> list[str]:
    """The pydantic modules loaded by a run with `options`, in an empty directory, its outputs in results/run/."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", WHOLE_RUN, json.dumps(list(options))], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "results" / "run" / "summary.json").is_file()        # it did run to its outputs
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_default_run_imports_no_pydantic(tmp_path):
    assert _pydantic_loaded(tmp_path) == []


def test_an_output_folder_given_as_text_imports_no_pydantic(tmp_path):
    """`-o results/run` as a user types it: typer's own converter of a text to a path is pydantic's (~0.1 CPU s)."""
    assert _pydantic_loaded(tmp_path, "-o", "results/run") == []


def test_a_users_topology_file_is_validated_by_pydantic(tmp_path):
    """The check above can fail: a file of the user's (a copy of the shipped one, elsewhere) goes through the
    models, which import pydantic."""
    copy = tmp_path / "mine" / "fattree.yaml"
    copy.parent.mkdir()
    copy.write_text((ROOT / "topologies" / "fattree.yaml").read_text())
    assert "pydantic" in _pydantic_loaded(tmp_path, "--topology", str(copy))
