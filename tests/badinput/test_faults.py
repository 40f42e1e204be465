"""Faults of the machine (a full disk, a read-only file system, a closed or ASCII-only stdout) are user-facing
errors: one line saying what could not be written, exit 2 (1 for a stdout whose reader went away), never the
70 of an internal error, and no output replaced or left half-written."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def listing(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def test_a_full_disk_while_a_run_writes_is_one_line_and_keeps_the_previous_run(cli, tmp_path, monkeypatch):
    out = tmp_path / "run"
    code, _, err = cli("run", "--max-requests", "5", "-o", out)
    assert code == 0, err
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    from simroute.ioutil import manifests

    def full(directory, *_kind):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory / manifests.MANIFEST))
    monkeypatch.setattr(manifests, "_write_manifest", full)
    code, _, err = cli("run", "--max-requests", "5", "--seed", "4", "-o", out)
    line = one_line(err)
    assert code == 2 and "no space left" in line and str(tmp_path) in line, line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert listing(tmp_path) == sorted(["run", *(f"run/{n}" for n in before)])     # no .tmp, no .lock


def test_a_full_disk_reported_by_pyarrow_without_an_errno_is_recognised(cli, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    def full(where, *_args, **_kwargs):
        raise OSError(f"Failed to open local file '{where}'. Detail: [errno 28] No space left on device")
    monkeypatch.setattr(pq, "ParquetWriter", full)
    code, _, err = cli("trace", "gen", "corpus", "-p", "requests=5", "-o", tmp_path / "t.parquet")
    line = one_line(err)
    assert code == 2 and "no space left" in line, line
    assert listing(tmp_path) == []


def test_a_full_disk_while_writing_figures_leaves_the_folder_as_it_was(cli, tmp_path, monkeypatch):
    import pandas as pd
    figs = tmp_path / "figs"
    figs.mkdir()
    (figs / "mine.txt").write_text("keep")

    def full(self, path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    code, _, err = cli("model", "crossover", "-o", figs)
    assert code == 2 and "no space left" in one_line(err)
    assert listing(tmp_path) == ["figs", "figs/mine.txt"]


def test_a_read_only_file_system_is_one_line(cli, tmp_path, monkeypatch):
    from simroute.ioutil import temps

    def read_only(*_args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), kwargs.get("dir"))
    monkeypatch.setattr(temps.tempfile, "mkdtemp", read_only)
    code, _, err = cli("run", "--max-requests", "5", "-o", tmp_path / "run")
    line = one_line(err)
    assert code == 2 and "read-only" in line.lower() and "run" in line, line
    assert listing(tmp_path) == []


def test_a_read_only_file_system_at_the_rename_keeps_the_old_output(cli, tmp_path, monkeypatch):
    from simroute.ioutil import atomic
    (tmp_path / "figs").mkdir()
    code, _, err = cli("model", "bandwidth", "-o", tmp_path / "figs")
    assert code == 0, err
    before = {p.name: p.read_bytes() for p in (tmp_path / "figs").iterdir()}

    def read_only(src, dst):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dst))
    monkeypatch.setattr(atomic.os, "replace", read_only)
    code, _, err = cli("model", "bandwidth", "--mq", "64", "-o", tmp_path / "figs")
    assert code == 2 and "read-only" in one_line(err)
    assert {p.name: p.read_bytes() for p in (tmp_path / "figs").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figs"]


def _simroute(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simroute", *args], cwd=ROOT, text=True, timeout=120, **kwargs)


@pytest.mark.parametrize("argv", [("model", "list"), ("calib", "list"), ("predict",), ("topo", "show", "fattree")])
def test_a_closed_stdout_is_one_line_exit_1(argv):
    res = _simroute(*argv, stdout=None, stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1))
    assert res.returncode == 1 and "standard output" in one_line(res.stderr), res.stderr


@pytest.mark.parametrize("argv", [("model", "list", "--json"), ("calib", "show", "h100-ibgda")])
def test_a_reader_that_leaves_early_is_not_an_internal_error(argv):
    import fcntl
    read_end, write_end = os.pipe()
    with contextlib.suppress(OSError):        # a one-page pipe: the 16-25 kB output must block, then break
        fcntl.fcntl(write_end, 1031, 4096)    # F_SETPIPE_SZ
    proc = subprocess.Popen([sys.executable, "-m", "simroute", *argv], cwd=ROOT, stdout=write_end,
                            stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    os.read(read_end, 10)
    os.close(read_end)                        # like `| head -c 10`
    err = proc.stderr.read()
    assert proc.wait(timeout=120) in (0, 1), err       # 0 where the kernel let the whole output in first
    assert "internal error" not in err and "Traceback" not in err and len(err.strip().splitlines()) <= 1, err


@pytest.mark.parametrize("argv", [("calib", "list"), ("model", "list"), ("predict",)])
def test_an_ascii_only_stdout_writes_escapes_not_an_internal_error(argv):
    res = _simroute(*argv, capture_output=True, env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert res.returncode == 0, res.stderr
    assert res.stdout and res.stderr == ""


# -- real file systems, where this machine lets the tests mount them (root in a container that allows it) ------
def _mount(where: Path, *options: str) -> bool:
    if os.geteuid() != 0 or not Path("/bin/mount").exists() and not Path("/usr/bin/mount").exists():
        return False
    where.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(where)],
                         capture_output=True, text=True)
    return res.returncode == 0


@pytest.fixture
def tmpfs(tmp_path):
    mounted: list[Path] = []

    def make(name: str, *options: str) -> Path:
        where = tmp_path / name
        if not _mount(where, *options):
            pytest.skip("cannot mount a tmpfs here (needs root and a container that allows mounts)")
        mounted.append(where)
        return where
    yield make
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.mark.parametrize("argv", [
    ("run", "--max-requests", "200", "-o", "{disk}/run"),
    ("trace", "gen", "corpus", "-p", "requests=20000", "-o", "{disk}/t.parquet"),
    ("topo", "show", "fattree-1024", "--png", "{disk}/topo.png"),
    ("model", "bandwidth", "-o", "{disk}/figs"),
])
def test_a_really_full_disk_is_one_line_naming_the_output_and_leaves_nothing(cli, tmpfs, argv):
    disk = tmpfs("small", "size=32k")
    (disk / "keep.txt").write_text("the user's")
    code, _, err = cli(*[a.replace("{disk}", str(disk)) for a in argv])
    line = one_line(err)
    assert code == 2 and "no space left" in line and str(disk) in line, line
    assert sorted(p.name for p in disk.iterdir()) == ["keep.txt"]


def test_a_really_read_only_file_system_is_one_line_and_keeps_the_previous_output(cli, tmpfs):
    disk = tmpfs("ro", "size=64m")
    code, _, err = cli("model", "crossover", "-o", disk / "figs")
    assert code == 0, err
    before = {p.name: p.read_bytes() for p in (disk / "figs").iterdir()}
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True, capture_output=True)
    for argv in (("model", "crossover", "-o", disk / "figs"), ("run", "--max-requests", "5", "-o", disk / "run"),
                 ("trace", "gen", "corpus", "-p", "requests=5", "-o", disk / "t.parquet")):
        code, _, err = cli(*argv)
        line = one_line(err)
        assert code == 2 and str(disk) in line, line
    assert {p.name: p.read_bytes() for p in (disk / "figs").iterdir()} == before
    assert sorted(p.name for p in disk.iterdir()) == ["figs"]


def test_a_closed_stderr_still_exits_2_for_bad_input():
    res = _simroute("run", "--seed", "-1", stdout=subprocess.PIPE, stderr=None, preexec_fn=lambda: os.close(2))
    assert res.returncode == 2


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize("argv", [("model", "list"), ("predict",), ("trace", "gen", "--help")])
def test_stdout_on_a_full_device_is_one_line_naming_stdout(argv):
    with open("/dev/full", "w") as full:
        res = _simroute(*argv, stdout=full, stderr=subprocess.PIPE)
    assert res.returncode == 2 and "standard output" in one_line(res.stderr) and "no space" in res.stderr


def test_running_out_of_memory_is_one_line_not_an_internal_error(cli, tmp_path, monkeypatch):
    """What the size checks do not foresee still ends in one line, exit 2, nothing written."""
    import simroute.workload.writer as writer

    def exhausted(*_args, **_kwargs):
        raise MemoryError
    monkeypatch.setattr(writer.TraceWriter, "add_requests", exhausted)
    code, _, err = cli("trace", "gen", "corpus", "-p", "requests=5", "-o", tmp_path / "t.parquet")
    assert code == 2 and "not enough memory" in one_line(err)
    assert listing(tmp_path) == []


def test_a_broken_pipe_on_stdout_exits_1_without_a_traceback(monkeypatch, capsys):
    """EPIPE injected at stdout's write (what `| head` does once the reader has left)."""
    import io

    from simroute.cli.main import main

    class Broken(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
    monkeypatch.setattr(sys, "stdout", Broken())
    code = main(["model", "list", "--json"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and "internal error" not in err and len(err.splitlines()) <= 1
