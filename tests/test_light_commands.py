"""The commands a user runs to look around (`--help`, every command's `--help`, `predict`) stay light: they
import neither numba nor the flow engine (nor pandas, which pyarrow's conveniences pull in), so they answer in
a fraction of a second. Checked by what a fresh interpreter has imported, not by timing (bench/bench_cli.py
times them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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


# `simroute --help` and `predict` are what a user waits on: beyond the heavy layers above they import neither
# numpy (predict evaluates one shape on floats; a shipped profile's constants come from calib/validated.py's
# record) nor pydantic (typer's converter, bypassed for plain values by cli/common.plain_values), nor anything of
# the network layer.
LIGHTEST = ("numpy", "numba", "pydantic", "yaml", "simroute.network")
FIRST_LOOK = """
import contextlib, io, json, sys
from simroute.cli.main import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(sys.argv[2:])
loaded = [m for m in json.loads(sys.argv[1]) if m in sys.modules or any(k.startswith(m + ".") for k in sys.modules)]
print(json.dumps([code, loaded, out.getvalue()]))
"""


@pytest.mark.parametrize("argv", [["--help"], ["predict"], ["predict", "--json", "--model", "deepseek-v3", "--topk",
                                                              "512", "--holders", "2", "--calib", "paper-all"]])
def test_help_and_predict_import_neither_numpy_pydantic_nor_the_network_layer(argv):
    done = subprocess.run([sys.executable, "-c", FIRST_LOOK, json.dumps(LIGHTEST), *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    code, loaded, out = json.loads(done.stdout)
    assert code == 0 and not loaded, loaded
    assert ("choice:" in out or '"choice"' in out) if argv[0] == "predict" else "Commands" in out


def test_help_lists_the_default_command_first_then_the_others_alphabetically(cli):
    code, out, _ = cli("--help")
    listed = [line.split()[1] for line in out.splitlines() if line.startswith("│ ") and len(line.split()) > 2
              and line.split()[1].isalpha() and not line.split()[1].startswith("-")]
    from simroute.cli.main import DEFAULT_COMMAND, app
    import typer.main
    commands = sorted(typer.main.get_command(app).commands)
    assert code == 0 and listed[0] == DEFAULT_COMMAND == "run"
    assert [name for name in listed if name in commands] == ["run"] + sorted(set(commands) - {"run"})


@pytest.mark.parametrize("argv, message", [
    (["predict", "--mq", "0"], "Invalid value for '--mq': Input should be greater than or equal to 1"),
    (["predict", "--ct", "1e3"], "Invalid value for '--ct': Input should be a valid integer"),
    (["predict", "--offset", "Cached"], "Invalid value for '--offset': Value error, 'Cached' is not one of"),
    (["predict", "--prefill-us", "nan"], "field '--prefill-us': must be finite, got nan")])
def test_a_value_that_is_not_plain_gets_typers_own_check_and_message(cli, argv, message):
    code, _, err = cli(*argv)
    assert code == 2 and message in err


def test_plain_values_convert_as_typer_does(cli):
    """The same answer whether a value takes the plain path (`256`) or typer's converter (`+256`, `2.5e-1`)."""
    plain = cli("predict", "--json", "--mq", "256", "--prefill-us", "0.25", "--offset", "cached")
    typer_own = cli("predict", "--json", "--mq", "+256", "--prefill-us", "2.5e-1", "--offset", "cached")
    assert plain[0] == 0 and plain == typer_own


def test_run_help_imports_no_pydantic():
    """`simroute run --help` lists the shipped engine presets from their file names (calib/engine_files.py) and
    converts its values plainly: no preset schema, no typer converter, so no pydantic."""
    done = subprocess.run([sys.executable, "-c", FIRST_LOOK, json.dumps(["pydantic"]), "run", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    code, loaded, out = json.loads(done.stdout)
    assert code == 0 and "--engine" in out and "sglang@" in out and loaded == []


def test_the_run_commands_defaults_convert_as_typer_converts_them():
    """Every `simroute run` option's default (ints, floats, names, None, an unset repeatable option, the output
    path) comes out of the plain conversion exactly as out of typer's own converter, type included."""
    from typer._coercion import build_runtime_param
    from simroute.cli.common import _PlainValue
    from simroute.cli.run_cmd import run_command
    import typer.main
    single = typer.Typer()
    single.command("run")(run_command())
    command = typer.main.get_command(single)
    ctx = command.make_context("run", [], resilient_parsing=True)
    kinds = set()
    for param in command.params:
        if not hasattr(param, "type_descriptor"):
            continue
        default = param.get_default(ctx)
        plain = _PlainValue(param.type_descriptor).coerce(default, param=param, ctx=ctx)
        own = build_runtime_param(param.type_descriptor).coerce(default, param=param, ctx=ctx)
        assert (type(plain), plain) == (type(own), own), param.name
        kinds.add(type(own).__name__)
    assert {"int", "float", "str", "NoneType", "tuple", "PosixPath"} <= kinds    # each path was taken


def test_an_option_with_its_own_parser_keeps_it():
    """A plain-typed option that names a parser is converted by typer (the parser runs), not the plain path."""
    import typer
    from typer.testing import CliRunner
    from simroute.cli.common import PlainValues
    app = typer.Typer()

    @app.command("shout", cls=PlainValues)
    def shout(word: str = typer.Option("hi", parser=str.upper)) -> None:
        print(word)

    @app.command("other")
    def other() -> None:
        pass
    assert CliRunner().invoke(app, ["shout", "--word", "abc"]).output.strip() == "ABC"
