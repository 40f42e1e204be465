"""Shared fixtures: the repository root, the real public traces beside it, CLI invocation.

Suite order and parallel runs (CI runs `pytest -n 2`, pytest-xdist):
- Files holding a test marked `slow` (over ~5 s on a quiet box) run first, so under `-n 2` the long ones start
  at once instead of finishing last on one worker. Serial runs are reordered the same way (harmless).
- No test depends on the box's speed (CI and shared boxes run at any load): hypothesis's per-example deadline
  (200 ms by default) and its too-slow health check are wall-clock limits, off for the whole suite (the
  `simroute` profile below); a subprocess's `timeout` is a hang guard, minutes above its quiet-box time.
- Test modules never import `conftest` (pytest keeps one module of that name at a time: tests/network and
  tests/sim/engine collected in one run would see each other's); shared helpers live in uniquely named modules
  (tests/test_suite_layout.py checks both).
- In-process CLI calls (the `cli` fixture, `main([...])`: thousands across the suite, 811 in the bad-input corpus
  alone) reuse the click command that typer builds from an app (`_memoised_typer_commands`): building it is ~15 ms
  of CPU, more than half of what a refused command costs; a process of `simroute` builds it once too.
- With `-n N` and no explicit `--dist`, each test file goes to one worker whole (a module-scoped fixture, such
  as the validate scorecard, is computed once, not once per worker), and tests/network/ is one unit: its files
  compile the same numba kernels, which on a clean clone's cold cache take ~50 s of CPU; two workers compiling
  them at once would pay that twice. An explicit `--dist` other than `load` keeps xdist's own scheduler.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("simroute", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("simroute")


def _memoised_typer_commands() -> None:
    """`typer.Typer.__call__` builds the whole click command tree from the app on every call (~15 ms of CPU for
    simroute's); in-process calls reuse it while the app's registered commands, groups and callback are the
    same objects (what a test registers on an app gives a fresh build). Click keeps no state of one
    invocation on the command objects (each call parses into its own Context), as a `simroute` process calling
    it once has none to keep."""
    import typer.main

    build = typer.main.get_command
    if getattr(build, "memoised", False):
        return
    built: dict[int, tuple[tuple, object]] = {}

    def get_command(typer_instance: typer.Typer):
        # the objects themselves (held, so no id is reused), compared by identity (typer's infos define no __eq__)
        shape = (typer_instance, typer_instance.registered_callback, *typer_instance.registered_commands, None,
                 *typer_instance.registered_groups)
        hit = built.get(id(typer_instance))
        if hit is None or len(hit[0]) != len(shape) or any(a is not b for a, b in zip(hit[0], shape)):
            hit = built[id(typer_instance)] = (shape, build(typer_instance))
        return hit[1]

    get_command.memoised = True
    typer.main.get_command = get_command


_memoised_typer_commands()

ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACES = ROOT.parent / "shared" / "traces"
# nodeid prefixes scheduled as one unit under -n (see the module docstring)
SHARED_UNITS = ("tests/network/",)


@pytest.fixture
def shared_traces() -> Path:
    if not SHARED_TRACES.exists():
        pytest.skip(f"real traces not found at {SHARED_TRACES} (the project expects ../shared/traces)")
    return SHARED_TRACES


@pytest.fixture
def cli(capsys):
    """Run the simroute CLI in-process; returns (exit code, stdout, stderr)."""
    from simroute.cli.main import main

    def run(*args: str) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with a `slow` test first, whole (a module fixture is set up once); otherwise collection order."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.hookimpl(optionalhook=True)          # a pytest-xdist hook: without xdist it is never called
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Whole files per worker, tests/network/ as one unit, in the (slow-first) collection order."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SuiteScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return next((unit for unit in SHARED_UNITS if nodeid.startswith(unit)), super()._split_scope(nodeid))

    config.option.loadscopereorder = False        # keep the collection order, not "most tests first"
    return SuiteScheduling(config, log)
