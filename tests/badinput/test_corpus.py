"""Every case of the bad-input corpus: exit 2, one line naming the file or flag, no traceback, nothing changed."""

from __future__ import annotations

import os
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


def test_round_4_covers_every_class_of_issue_38():
    """Plan refusals before the header, imported tables, names that are paths, damaged operator tables, shapes
    that cannot exist, overflowing loads, meaningless SLOs, errors naming their file, damaged plans resumed,
    studies whose hosts cannot be built."""
    from corpus_round4 import round4_cases
    cases = round4_cases()
    assert len(cases) >= 200
    assert {c.id.split("-")[0] for c in cases} == {"tables", "aic", "name", "feas", "load", "slo", "where", "plan",
                                                   "resume", "hosts"}


def test_round_3_covers_every_class_of_issue_22():
    """Output safety, damaged reports, the newer commands, bounds, studies at run time, silent semantics."""
    from corpus_round3 import round3_cases
    cases = round3_cases()
    assert len(cases) >= 120
    assert {c.id.split("-")[0] for c in cases} >= {"out", "report", "step", "calib", "flows", "validate", "predict",
                                                   "bound", "sweep3", "sem"}


@pytest.fixture(scope="session")
def valid_trace(tmp_path_factory) -> Path:
    from simroute.workload import generate
    path = tmp_path_factory.mktemp("valid") / "trace.parquet"
    return generate("corpus", path, seed=1, params={"requests": 40, "chunks": 16, "instances": 8,
                                                    "place_chunks": True})


@pytest.fixture(scope="session")
def valid_run(tmp_path_factory) -> Path:
    """A small run directory (every table a report reads), for the report and flows cases."""
    from simroute.cli.main import main
    out = tmp_path_factory.mktemp("valid") / "run"
    assert main(["run", "--max-requests", "20", "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def valid_plan(tmp_path_factory) -> Path:
    """A small finished plan directory (corpus_round4.PLAN4), for the cases that resume a damaged one."""
    from corpus_round4 import plan_fixture
    from simroute.cli.main import main
    return plan_fixture(tmp_path_factory.mktemp("valid"), main)


@pytest.fixture(scope="session")
def valid_study(tmp_path_factory) -> Path:
    """A one-point study directory of corpus_round3.STUDY3."""
    import yaml
    from corpus_round3 import STUDY3
    from simroute.cli.main import main
    root = tmp_path_factory.mktemp("valid")
    (root / "s.yaml").write_text(yaml.safe_dump(STUDY3))
    assert main(["sweep", str(root / "s.yaml"), "-o", str(root / "study"), "-j", "1"]) == 0
    return root / "study"


BIG = 8 << 20       # a file past this (a huge sparse table) is compared by size, mtime and inode, not read


def snapshot(root: Path) -> dict[str, bytes | str | tuple | None]:
    """Every path under root with its bytes (None for a directory, the target for a link), hidden files
    included."""
    def state(p: Path):
        if p.is_symlink():
            return os.readlink(p)
        if p.is_dir():
            return None
        st = p.stat()
        if not p.is_file():                 # a pipe (reading it would block): its type and inode
            return ("special", st.st_mode, st.st_ino)
        return (st.st_size, st.st_mtime_ns, st.st_ino) if st.st_size > BIG else p.read_bytes()
    return {p.relative_to(root).as_posix(): state(p) for p in sorted(root.rglob("*"))}


def materialise(case: Case, root: Path, trace: Path, request: pytest.FixtureRequest) -> None:
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
    for flag, fixture, name in ((case.needs_run, "valid_run", "run"), (case.needs_study, "valid_study", "study"),
                                (case.needs_plan, "valid_plan", "plan")):
        if flag:       # copied with their timestamps, so their manifests still hold
            shutil.copytree(request.getfixturevalue(fixture), root / name, symlinks=True, dirs_exist_ok=True)
    if case.setup is not None:
        case.setup(root)


PARAMS = [pytest.param(c, id=c.id, marks=[pytest.mark.xfail(reason=c.pending, strict=False)] if c.pending else [])
          for c in CASES]


def test_pending_cases_are_few_and_name_their_owner():
    pending = [c for c in CASES if c.pending]
    assert len(pending) <= 5 and all(":" in c.pending for c in pending)


@pytest.mark.parametrize("case", PARAMS)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(case: Case, cli, tmp_path, valid_trace, monkeypatch,
                                                         request, capsys):
    root = tmp_path / "d"
    root.mkdir()
    materialise(case, root, valid_trace, request)
    capsys.readouterr()                     # what a fixture printed while making a valid run, study or plan
    monkeypatch.chdir(root)                 # anything written to a relative default path lands under root too
    before = snapshot(root)
    fill = lambda s: s.replace("{d}", str(root)).replace("{trace}", str(root / "trace.parquet"))
    code, out, err = cli(*[fill(a) for a in case.argv])
    lines = err.strip().splitlines()
    assert code == 2, (case.id, code, out[-500:], err[-2000:])
    assert out == "", (case.id, "printed before refusing", out[:300])
    assert "Traceback" not in out + err and "internal error" not in err, err
    assert len(lines) == 1, lines
    assert fill(case.names) in lines[0], (case.names, lines[0])
    assert snapshot(root) == before, f"{case.id} changed files under its directory"
