"""Every planted bug of bench/planted_bugs.py still names text that is in its file exactly once.

A refactor that moves a bug's text makes the script refuse to run (exit 2) rather than count the bug as
caught, but nothing ran the script on every change, so seven bugs went stale unnoticed. This check reads
the files only (no copy, no test subset): a fraction of a second.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _planted_bugs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("planted_bugs", ROOT / "bench" / "planted_bugs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PLANTED = _planted_bugs()


@pytest.mark.parametrize("set_name", sorted(PLANTED.SETS))
def test_every_planted_bug_of_the_set_names_text_found_once_in_its_file(set_name: str) -> None:
    assert PLANTED.stale(list(PLANTED.SETS[set_name]), ROOT) == []


def test_the_staleness_check_names_a_bug_whose_file_or_text_is_gone(tmp_path: Path) -> None:
    name = "merge-time-dropped"
    rel, old, _new = PLANTED.ALL_BUGS[name]
    assert PLANTED.stale([name], tmp_path) == [f"{name}: {rel}: no such file"]
    moved = tmp_path / rel
    moved.parent.mkdir(parents=True)
    moved.write_text(old + "\n" + old)
    assert PLANTED.stale([name], tmp_path) == [f"{name}: {rel}: the text occurs 2 times, not once"]
