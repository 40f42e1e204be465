"""Issue 22's output guarantees beyond the corpus: a report is simroute's own inside the run it describes, a
killed writer's debris goes at the next write, a study's results carry no wall clock, and a study whose every
point fails at run time says so and keeps nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from simroute.ioutil import MANIFEST, atomic_path, clean_stale_temps, foreign_files

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_round3 import STUDY3  # noqa: E402


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_run_holding_its_report_is_replaced_by_the_next_run(cli, tmp_path):
    out = tmp_path / "run"
    assert cli("run", "--max-requests", "5", "-o", out)[0] == 0
    code, _, err = cli("report", out)
    assert code == 0, err
    assert (out / "report" / "report.html").is_file() and (out / "report" / MANIFEST).is_file()
    assert foreign_files(out) == []                      # the report counts as simroute's
    code, _, err = cli("run", "--max-requests", "5", "--seed", "2", "-o", out)      # the README tour's order
    assert code == 0, err
    assert not (out / "report").exists()


def test_a_report_is_replaced_by_the_next_report_but_not_over_the_users_notes(cli, tmp_path):
    out = tmp_path / "run"
    assert cli("run", "--max-requests", "5", "-o", out)[0] == 0
    assert cli("report", out)[0] == 0
    assert cli("report", out)[0] == 0                   # its own previous report: replaced
    (out / "report" / "notes.txt").write_text("mine")
    code, _, err = cli("report", out)
    assert code == 2 and "notes.txt" in err
    assert (out / "report" / "notes.txt").read_text() == "mine"
    code, _, err = cli("run", "--max-requests", "5", "-o", out)
    assert code == 2 and "notes.txt" in err              # the run holding the notes is not replaced either


def test_a_failed_report_leaves_nothing(cli, tmp_path):
    out = tmp_path / "run"
    assert cli("run", "--max-requests", "5", "-o", out)[0] == 0
    links = out / "net_links.parquet"
    links.write_bytes(links.read_bytes()[:100])
    before = sorted(p.name for p in out.iterdir())
    code, _, err = cli("report", out)
    assert code == 2 and "net_links.parquet" in err
    assert sorted(p.name for p in out.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_model_figures_go_beside_a_users_files_and_replace_only_their_own(cli, tmp_path):
    figs = tmp_path / "figs"
    figs.mkdir()
    (figs / "notes.txt").write_text("mine")
    assert cli("model", "crossover", "-o", figs)[0] == 0
    assert cli("model", "chunk", "-o", figs)[0] == 0
    first = (figs / "crossover.csv").read_bytes()
    assert cli("model", "crossover", "-o", figs)[0] == 0              # simroute's own: replaced
    assert (figs / "crossover.csv").read_bytes() == first
    listed = json.loads((figs / MANIFEST).read_text())["files"]
    assert sorted(listed) == ["chunk.csv", "chunk.png", "crossover.csv", "crossover.png"]
    assert foreign_files(figs) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figs"]


def test_a_killed_writers_temporaries_go_at_the_next_write_and_a_live_ones_stay(tmp_path):
    target = tmp_path / "o.parquet"
    dead, live = dead_pid(), os.getppid()
    stale_dir = tmp_path / f".o.parquet.simroute-{dead}-abc123.tmp"
    stale_dir.mkdir()
    (stale_dir / "requests.parquet").write_bytes(b"half")
    stale_old = tmp_path / f".o.parquet.old-{dead}"
    stale_old.mkdir()
    running = tmp_path / f".o.parquet.simroute-{live}-def456.tmp"
    running.mkdir()
    other = tmp_path / f".other.simroute-{dead}-abc.tmp"          # another target's: not this write's to clean
    other.write_text("x")
    legacy = tmp_path / ".o.parquet.k2j4_x9a.tmp"                 # an older simroute's name, without a pid
    legacy.mkdir()
    with atomic_path(target, directory=True) as tmp:
        (tmp / "x").write_text("1")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["o.parquet", running.name, other.name])
    assert clean_stale_temps(tmp_path / "other") == [other]


def test_a_killed_import_leaves_nothing_the_next_import_keeps(cli, tmp_path, shared_traces):
    """SIGKILL in the middle of an import: its temporary directory and lock go with the next import."""
    out = tmp_path / "o.parquet"
    src = shared_traces / "mooncake_synthetic_trace.jsonl"
    probe = ("import os, signal, sys\nimport simroute.workload.writer as w\n"
             "real = w.TraceWriter.finish\n"
             "def die(self, *a, **k):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
             "w.TraceWriter.finish = die\n"
             "from simroute.cli.main import main\nsys.exit(main(sys.argv[1:]))\n")
    killed = subprocess.run([sys.executable, "-c", probe, "trace", "import", "mooncake", str(src), "-o", str(out)],
                            capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert killed.returncode == -9, killed.stderr
    debris = sorted(p.name for p in tmp_path.iterdir())
    assert any(name.endswith(".tmp") for name in debris), debris
    code, _, err = cli("trace", "import", "mooncake", src, "-o", out)
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.parquet"]


def sweep(cli, tmp_path: Path, study: dict, out: Path) -> tuple[int, str, str]:
    spec = tmp_path / f"{study['name']}.yaml"
    spec.write_text(yaml.safe_dump(study))
    return cli("sweep", spec, "-o", out, "-j", "1")


def test_a_studys_points_are_a_pure_function_of_its_inputs(cli, tmp_path):
    code, _, err = sweep(cli, tmp_path, STUDY3, tmp_path / "a")
    assert code == 0, err
    code, _, err = sweep(cli, tmp_path, STUDY3, tmp_path / "b")
    assert code == 0, err
    points = {d: sorted((tmp_path / d / "points").glob("*.parquet")) for d in ("a", "b")}
    assert [p.name for p in points["a"]] == [p.name for p in points["b"]] and points["a"]
    for pa_, pb_ in zip(points["a"], points["b"]):
        ta, tb = pq.read_table(pa_).to_pylist()[0], pq.read_table(pb_).to_pylist()[0]
        assert not any("wall" in name for name in ta), list(ta)
        # generated inputs live in each study's own directory: the only difference is that path
        ta["config_json"] = ta["config_json"].replace(str(tmp_path / "a"), "<study>")
        tb["config_json"] = tb["config_json"].replace(str(tmp_path / "b"), "<study>")
        assert json.dumps(ta, sort_keys=True) == json.dumps(tb, sort_keys=True)        # NaN == NaN here
        assert json.loads((tmp_path / "a" / "perf" / f"{pa_.stem}.json").read_text())["wall_s"] > 0


def test_a_study_whose_every_point_fails_at_run_time_says_so_and_keeps_nothing(cli, tmp_path, monkeypatch):
    import simroute.study.backends as backends

    def broken(task):
        return {"key": task["key"], "summary": None, "perf": None, "tables": None,
                "error": "RuntimeError: the engine ran out of patience\n  traceback ..."}
    monkeypatch.setattr(backends, "run_point", broken)
    out = tmp_path / "new" / "study"
    code, _, err = sweep(cli, tmp_path, STUDY3, out)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "1 of 1 points failed" in lines[0] and "out of patience" in lines[0], err
    assert not (tmp_path / "new").exists()


def test_a_study_that_fails_in_part_keeps_its_points(cli, tmp_path, monkeypatch):
    import simroute.study.backends as backends
    real = backends.run_point

    def half(task):
        if task["payload"]["policy"] == "always-fetch":
            return {"key": task["key"], "summary": None, "perf": None, "tables": None, "error": "RuntimeError: no"}
        return real(task)
    monkeypatch.setattr(backends, "run_point", half)
    study = {**STUDY3, "axes": {"policy": ["paper", "always-fetch"]}}
    code, _, err = sweep(cli, tmp_path, study, tmp_path / "s")
    assert code == 1 and "1 of 2 points failed" in err and "stored in" in err
    assert len(list((tmp_path / "s" / "points").glob("*.parquet"))) == 2


def test_another_study_of_the_same_name_never_resumes_into_it(cli, tmp_path):
    code, _, err = sweep(cli, tmp_path, STUDY3, tmp_path / "s")
    assert code == 0, err
    before = {p.relative_to(tmp_path).as_posix(): p.read_bytes() for p in (tmp_path / "s").rglob("*") if p.is_file()}
    other = {**STUDY3, "base": {**STUDY3["base"], "trace": {"generate": "corpus",
                                                            "params": {"requests": 13, "instances": 64}}}}
    code, _, err = sweep(cli, tmp_path, other, tmp_path / "s")
    assert code == 2 and "another study named" in err
    after = {p.relative_to(tmp_path).as_posix(): p.read_bytes() for p in (tmp_path / "s").rglob("*") if p.is_file()}
    assert after == before
    grown = {**STUDY3, "axes": {"policy": ["paper", "always-fetch"]}}     # the same study, one more axis value
    code, _, err = sweep(cli, tmp_path, grown, tmp_path / "s")
    assert code == 0, err
