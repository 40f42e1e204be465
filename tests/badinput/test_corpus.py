"""Every case of the bad-input corpus: exit 2, one line naming the file or flag, no traceback, nothing changed."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import Case, all_cases  # noqa: E402

CASES = all_cases()


def test_the_corpus_is_big_and_covers_every_area():
    assert len(CASES) >= 150
    prefixes = {c.id.split("-")[0] for c in CASES}
    assert {"topo", "calib", "study", "sweep", "mooncake", "azure", "burstgpt", "agent", "trace", "run",
            "gen"} <= prefixes


@pytest.fixture(scope="session")
def valid_trace(tmp_path_factory) -> Path:
    from simroute.workload import generate
    path = tmp_path_factory.mktemp("valid") / "trace.parquet"
    return generate("corpus", path, seed=1, params={"requests": 40, "chunks": 16, "instances": 8,
                                                    "place_chunks": True})


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its bytes (None for a directory), hidden files included."""
    return {p.relative_to(root).as_posix(): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


def materialise(case: Case, root: Path, trace: Path) -> None:
    for name, content in case.files.items():
        path = root / name
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    if case.needs_trace:
        shutil.copytree(trace, root / "trace.parquet")
        if case.damage is not None:
            case.damage(root / "trace.parquet")


PARAMS = [pytest.param(c, id=c.id, marks=[pytest.mark.xfail(reason=c.pending, strict=False)] if c.pending else [])
          for c in CASES]


def test_pending_cases_are_few_and_name_their_owner():
    pending = [c for c in CASES if c.pending]
    assert len(pending) <= 5 and all(":" in c.pending for c in pending)


@pytest.mark.parametrize("case", PARAMS)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(case: Case, cli, tmp_path, valid_trace, monkeypatch):
    root = tmp_path / "d"
    root.mkdir()
    materialise(case, root, valid_trace)
    monkeypatch.chdir(root)                 # anything written to a relative default path lands under root too
    before = snapshot(root)
    fill = lambda s: s.replace("{d}", str(root)).replace("{trace}", str(root / "trace.parquet"))
    code, out, err = cli(*[fill(a) for a in case.argv])
    lines = err.strip().splitlines()
    assert code == 2, (case.id, code, out[-500:], err[-2000:])
    assert "Traceback" not in out + err and "internal error" not in err, err
    assert len(lines) == 1, lines
    assert fill(case.names) in lines[0], (case.names, lines[0])
    assert snapshot(root) == before, f"{case.id} changed files under its directory"
