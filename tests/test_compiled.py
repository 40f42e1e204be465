"""The modules mypyc compiles (simroute.compiled): named once, run as Python on request, and, where this
environment's installed simroute is the compiled build (`SIMROUTE_COMPILE=1 pip install .`, as .ci/run installs
it), computing what their sources compute: the same run's outputs to the byte, and the components' own tests
passing. With `SIMROUTE_COMPILE=1` in the tests' environment (.ci/run exports it), an installed build that is not
the compiled one fails these tests instead of skipping them: a compiled build that broke never passes for one
that was not asked for."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from simroute import compiled

ROOT = Path(__file__).resolve().parent.parent


def test_each_compiled_module_is_its_named_source():
    for name, source in compiled.COMPILED_MODULES.items():
        assert (ROOT / source).is_file()
        assert source == name.replace(".", "/") + ".py"


def test_sources_first_imports_the_source_beside_an_extension(tmp_path, monkeypatch):
    """A module with an extension file beside its source imports as the source under SourcesFirst (the
    extension here is not loadable: imported, it would fail), and through the normal import otherwise."""
    package = tmp_path / "twinpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "hot.py").write_text("WHERE = 'source'\n")
    (package / f"hot{EXTENSION_SUFFIXES[0]}").write_bytes(b"not a shared object")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(compiled, "COMPILED_MODULES", {"twinpkg.hot": "twinpkg/hot.py"})
    with pytest.raises(ImportError):
        importlib.import_module("twinpkg.hot")          # the normal import takes the extension first
    sys.modules.pop("twinpkg.hot", None)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    compiled.prefer_sources()
    compiled.prefer_sources()                           # once only
    assert sys.meta_path.count(compiled.SourcesFirst) == 1
    module = importlib.import_module("twinpkg.hot")
    assert module.WHERE == "source" and module.__file__ == str(package / "hot.py")
    monkeypatch.setitem(sys.modules, "twinpkg.hot", module)
    assert compiled.compiled_modules() == []            # the module is not one of simroute's


@pytest.mark.parametrize("value, wanted", [("", False), ("0", False), ("1", True), ("yes", True)])
def test_pure_python_is_requested_by_a_non_empty_non_zero_value(monkeypatch, value, wanted):
    monkeypatch.setenv(compiled.PURE_PYTHON_ENV, value)
    assert compiled.pure_python_requested() is wanted
    monkeypatch.setenv(compiled.COMPILE_ENV, value)
    assert compiled.compile_requested() is wanted


def _installed(tmp_path: Path, code: str, *, pure: bool = False) -> str:
    """Run `code` with the simroute this environment installed (not this checkout: the working directory is
    elsewhere and PYTHONPATH as the caller set it), pure Python on request."""
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_PYTHON_ENV}
    if pure:
        env[compiled.PURE_PYTHON_ENV] = "1"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def installed_compiled(tmp_path_factory) -> Path:
    """A working directory from which `import simroute` finds the installed compiled build (skip otherwise)."""
    where = tmp_path_factory.mktemp("installed")
    code = "import importlib, json, simroute.compiled as c; " \
           "[importlib.import_module(m) for m in c.COMPILED_MODULES]; print(json.dumps(c.compiled_modules()))"
    found = json.loads(_installed(where, code).strip().splitlines()[-1])
    if found != list(compiled.COMPILED_MODULES):
        why = f"the installed simroute runs {found or 'no'} compiled modules"
        if compiled.compile_requested():
            pytest.fail(f"{compiled.COMPILE_ENV}=1 asks for the compiled build, but {why}: install it with "
                        f"`{compiled.COMPILE_ENV}=1 pip install .` (the install fails where mypyc or the C compiler "
                        "does)")
        pytest.skip(f"{why} (`{compiled.COMPILE_ENV}=1 pip install .` builds them)")
    return where


RUN = """
import hashlib, json, sys
from pathlib import Path
from simroute.cli.main import main
import simroute.compiled as c
out = Path(sys.argv[1])
try:
    code = main(["run", "--policy", sys.argv[2], "--out", str(out), "--no-progress"])
except SystemExit as stop:
    code = stop.code
assert not code, code
summary = json.loads((out / "summary.json").read_text())
versions = summary.pop("versions")
prints = {"summary": hashlib.sha256(json.dumps(summary, sort_keys=True).encode()).hexdigest()}
prints.update({f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(out.glob("*.parquet"))})
print(json.dumps({"compiled": versions.get("compiled"), "prints": prints}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["always-route", "paper", "always-fetch"])
def test_the_compiled_build_runs_what_its_sources_run(installed_compiled, tmp_path, policy):
    """The embedded default run, compiled and as Python: every table and the summary equal to the byte (a
    compiled float operation is the interpreter's: no contraction, the same order). always-fetch moves every
    remote chunk as a bulk flow: the compiled flow solver's rates and the link telemetry's tables."""
    sides = {}
    for pure in (False, True):
        out = tmp_path / ("pure" if pure else "compiled")
        code = RUN.replace("sys.argv[1]", repr(str(out))).replace("sys.argv[2]", repr(policy))
        sides[pure] = json.loads(_installed(installed_compiled, code, pure=pure).strip().splitlines()[-1])
    assert sides[False]["compiled"] == list(compiled.COMPILED_MODULES) and sides[True]["compiled"] == []
    assert sides[False]["prints"] == sides[True]["prints"]
    assert len(sides[False]["prints"]) > 3


NETWORK_TESTS = ["test_maxmin.py", "test_planted_maxmin.py", "test_solvers.py", "test_telemetry.py", "test_engine.py",
                 "test_message_charge.py", "test_api.py"]
ENGINE_TESTS = ["test_partials.py", "test_holder_counters.py", "test_exchange_legs.py", "test_engine_runs.py",
                "test_hbm.py", "test_instance_engine.py", "test_engine_progress.py", "test_planted_admission.py"]


@pytest.mark.slow
@pytest.mark.parametrize("tests", [
    ["network/test_messages.py"],
    [f"network/{name}" for name in NETWORK_TESTS],
    [*(f"sim/engine/{name}" for name in ENGINE_TESTS), "sim/test_load_board.py"],
    # a Python subclass of the compiled MessageModel (`allow_interpreted_subclasses`)
    ["sim/test_sparse_engine.py::test_fanout_over_four_cross_host_holders_is_flat_at_the_nic_capacity"],
], ids=["messages", "flow-solver", "engine", "message-model-subclass"])
def test_the_compiled_components_pass_their_own_tests(installed_compiled, tests):
    """The compiled modules' own tests, importing the installed compiled build. The planted-bug tests
    (test_planted_engine.py) patch an engine's methods, which a compiled class does not allow: they run on the
    sources only."""
    paths = [str(ROOT / "tests" / test) for test in tests]
    code = ("import importlib, sys, pytest, simroute.compiled as c; "
            "[importlib.import_module(m) for m in c.COMPILED_MODULES]; "
            "assert len(c.compiled_modules()) == len(c.COMPILED_MODULES); "
            f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-p', 'no:xdist', *{paths!r}]))")
    out = _installed(installed_compiled, code)
    assert " passed" in out           # and none failed: pytest exited 0 (`_installed`)
