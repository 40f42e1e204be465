"""Output safety (simroute.ioutil): only simroute's own files are replaced, atomically, by one writer at a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simroute.errors import ConfigurationError
from simroute.ioutil import (MANIFEST, atomic_path, check_output_path, check_replaceable, claim_output, dumps_json,
                             foreign_files, load_yaml, lock_output)

ROOT = Path(__file__).resolve().parents[2]


def write_dir(target: Path, files: dict[str, str]) -> None:
    with atomic_path(target, directory=True) as tmp:
        for name, text in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)


def test_a_written_directory_lists_its_files_and_can_be_replaced(tmp_path):
    out = tmp_path / "out"
    write_dir(out, {"a.txt": "1", "sub/b.txt": "2"})
    listed = json.loads((out / MANIFEST).read_text())["files"]
    assert sorted(listed) == ["a.txt", "sub/b.txt"] and foreign_files(out) == []
    write_dir(out, {"c.txt": "3"})
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "c.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]          # no .old, .tmp or .lock left


@pytest.mark.parametrize("damage", ["add-notes", "edit-output", "no-manifest", "bad-manifest"])
def test_a_directory_with_anything_simroute_did_not_write_is_never_replaced(tmp_path, damage):
    out = tmp_path / "out"
    write_dir(out, {"summary.json": "{}"})
    if damage == "add-notes":
        (out / "my-notes.txt").write_text("mine")
    elif damage == "edit-output":
        time.sleep(0.01)
        (out / "summary.json").write_text('{"edited": "by the user"}')
    elif damage == "no-manifest":
        (out / MANIFEST).unlink()
    else:
        (out / MANIFEST).write_text("not json")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ConfigurationError, match="did not write"):
        write_dir(out, {"summary.json": "new"})
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_empty_directory_is_replaceable_and_a_file_is_not(tmp_path):
    (tmp_path / "empty").mkdir()
    check_replaceable(tmp_path / "empty")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigurationError, match="not a directory"):
        check_replaceable(tmp_path / "f")


def test_output_paths_are_checked_before_any_work(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "t.json").write_text("{}")
    bad = [(tmp_path / "file" / "out", True, "is a file"), (tmp_path / "file", True, "not a directory"),
           (tmp_path / "in", False, "is a directory"), (tmp_path / "in" / "o", True, "inside"),
           (tmp_path, True, "holds")]
    for target, directory, message in bad:
        with pytest.raises(ConfigurationError, match=message):
            check_output_path(target, directory=directory, inputs=[tmp_path / "in" / "t.json", tmp_path / "in"])
    os.chmod(tmp_path / "in", 0o500)
    try:
        if os.geteuid() != 0:   # root ignores permissions
            with pytest.raises(ConfigurationError, match="not writable"):
                check_output_path(tmp_path / "in" / "new", directory=True)
    finally:
        os.chmod(tmp_path / "in", 0o700)


def test_a_failed_write_keeps_the_previous_output_and_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    write_dir(out, {"a.txt": "good"})
    with pytest.raises(RuntimeError):
        with atomic_path(out, directory=True) as tmp:
            (tmp / "a.txt").write_text("half")
            raise RuntimeError("the simulation failed")
    assert (out / "a.txt").read_text() == "good"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_second_process_fails_fast_while_the_lock_is_held(tmp_path):
    out = tmp_path / "out"
    probe = ("import sys; from simroute.ioutil import lock_output; from simroute.errors import SimrouteError\n"
             "try:\n    with lock_output(sys.argv[1]): pass\nexcept SimrouteError as e:\n    print(e); sys.exit(2)\n")
    with lock_output(out):
        held = subprocess.run([sys.executable, "-c", probe, str(out)], capture_output=True, text=True, cwd=ROOT)
    assert held.returncode == 2 and "another simroute process is writing" in held.stdout
    free = subprocess.run([sys.executable, "-c", probe, str(out)], capture_output=True, text=True, cwd=ROOT)
    assert free.returncode == 0, free.stdout + free.stderr
    assert list(tmp_path.iterdir()) == []                # the lock file goes with the lock


def test_claims_are_reentrant_in_one_process(tmp_path):
    with claim_output(tmp_path / "o"):
        with claim_output(tmp_path / "o"):
            write_dir(tmp_path / "o", {"x": "1"})
    assert (tmp_path / "o" / "x").exists() and not (tmp_path / ".o.lock").exists()


def test_two_concurrent_runs_into_one_directory_one_completes_one_fails(tmp_path):
    """Both started together: exactly one exits 0 and owns the outputs, the other exits 2 with a clear error."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "simroute", "run", "--max-requests", "200", "-o", str(out)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    codes = sorted(rc for rc, _, _ in results)
    loser = next((err for rc, _, err in results if rc == 2), "")
    if codes == [0, 0]:          # they did not overlap (one finished before the other started): not a race
        pytest.skip("the two runs did not overlap on this machine")
    assert codes == [0, 2], results
    assert "another simroute process is writing" in loser and len(loser.strip().splitlines()) == 1
    assert json.loads((out / "summary.json").read_text())["requests"] > 0 and foreign_files(out) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]          # no .old, .tmp or .lock leftovers


def test_json_for_every_parser_has_no_nan():
    text = dumps_json({"a": float("nan"), "b": [1.0, float("inf")], "c": 2})
    assert json.loads(text) == {"a": None, "b": [1.0, None], "c": 2} and "NaN" not in text


def test_config_files_that_are_not_text_are_one_line_errors(tmp_path):
    for name, data in (("bin.yaml", b"\x00\x01"), ("latin.yaml", "a: \xe9".encode("latin-1")),
                       ("deep.yaml", b"[" * 3000 + b"]" * 3000)):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ConfigurationError) as err:
            load_yaml(tmp_path / name)
        assert name in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigurationError, match="is a directory"):
        load_yaml(tmp_path)


def test_notes_added_to_a_previous_run_stop_the_next_run_from_replacing_it(cli, tmp_path):
    out = tmp_path / "run"
    code, _, err = cli("run", "--max-requests", "5", "-o", out)
    assert code == 0, err
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    code, _, err = cli("run", "--max-requests", "5", "--seed", "3", "-o", out)     # simroute's own files: replaced
    assert code == 0, err
    (out / "my-notes.txt").write_text("what I learned")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, _, err = cli("run", "--max-requests", "5", "-o", out)
    assert code == 2 and "my-notes.txt" in err and len(err.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and set(before) == set(first) | {"my-notes.txt"}


def test_a_run_timeline_is_json_every_parser_reads(cli, tmp_path):
    """A flow that crosses no spine has spine NaN in the telemetry: the timeline writes null, not a bare NaN."""
    trace = tmp_path / "t.parquet"
    code, _, err = cli("trace", "gen", "corpus", "-p", "requests=10", "-p", "output_tokens=1", "-p",
                       "output_sigma=0", "-o", trace)
    assert code == 0, err
    code, _, err = cli("run", "--trace", trace, "-o", tmp_path / "r", "--timeline", tmp_path / "tl.json")
    assert code == 0, err

    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")
    doc = json.loads((tmp_path / "tl.json").read_text(), parse_constant=refuse)
    flows = [e for e in doc["traceEvents"] if e.get("cat") == "flow" and e["ph"] == "b"]
    assert flows and any(e["args"].get("spine") is None for e in flows)    # left out (the timeline drops NaN)
