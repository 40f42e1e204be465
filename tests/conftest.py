"""Shared fixtures: the repository root, the real public traces beside it, CLI invocation.

Suite order and parallel runs (CI runs `pytest -n 2`, pytest-xdist):
- Files holding a test marked `slow` (over ~5 s on a quiet box) run first, so under `-n 2` the long ones start
  at once instead of finishing last on one worker. Serial runs are reordered the same way (harmless).
- With `-n N` and no explicit `--dist`, each test file goes to one worker whole (a module-scoped fixture, such
  as the validate scorecard, is computed once, not once per worker), and tests/network/ is one unit: its files
  compile the same numba kernels, which on a clean clone's cold cache take ~50 s of CPU; two workers compiling
  them at once would pay that twice. An explicit `--dist` other than `load` keeps xdist's own scheduler.
- Hypothesis tests run SIMROUTE_HYPOTHESIS_SCALE (default 0.5) of the max_examples their @settings ask for, at
  least 10; SIMROUTE_HYPOTHESIS_SCALE=1 runs the full counts (do so after changing what such a test covers).
  The importer fuzz tests keep their own knob, SIMROUTE_FUZZ_EXAMPLES (80 by default; fuzz/README.md).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACES = ROOT.parent / "shared" / "traces"
# nodeid prefixes scheduled as one unit under -n (see the module docstring)
SHARED_UNITS = ("tests/network/",)
HYPOTHESIS_SCALE = float(os.environ.get("SIMROUTE_HYPOTHESIS_SCALE", "0.5"))
MIN_EXAMPLES = 10
OWN_EXAMPLE_COUNTS = ("tests/badinput/test_fuzz.py",)     # nodeid prefixes with their own example-count knob


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
    _scale_examples(items)


def _scale_examples(items: list[pytest.Item]) -> None:
    """Each hypothesis test's max_examples times HYPOTHESIS_SCALE. Hypothesis keeps a test's settings on
    `_hypothesis_internal_use_settings`; were that attribute gone, tests would simply run their full counts."""
    if HYPOTHESIS_SCALE >= 1:
        return
    from hypothesis import settings

    done: set[int] = set()
    for item in items:
        test = getattr(item, "obj", None)
        current = getattr(test, "_hypothesis_internal_use_settings", None)
        if current is None or id(test) in done or item.nodeid.startswith(OWN_EXAMPLE_COUNTS):
            continue
        done.add(id(test))                             # parametrized: one function object for every case
        count = max(MIN_EXAMPLES, round(current.max_examples * HYPOTHESIS_SCALE))
        test._hypothesis_internal_use_settings = settings(current, max_examples=min(count, current.max_examples))


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
