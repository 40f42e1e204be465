"""Pool workers die with their driver: a killed sweep leaves no worker simulating for nobody."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DRIVER = """
import os, sys, time
from simroute.study.backends import ProcessBackend
be = ProcessBackend(2)
busy = [be.pool.submit(time.sleep, 120) for _ in range(2)]     # both workers mid-task, as in a sweep
time.sleep(1.0)
pids = sorted(be.pool._processes)
print(" ".join(map(str, pids)), flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
def test_workers_exit_when_the_driver_is_killed():
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in driver.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        os.kill(driver.pid, signal.SIGKILL)                 # no cleanup code runs in the driver
        driver.wait(timeout=600)
        # the workers notice within their 0.5 s watch period once they run; a loaded box delays that, so the
        # limit is a hang guard (minutes), not a time budget
        deadline = time.monotonic() + 600
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in pids), "workers outlived their driver"
    finally:
        if driver.poll() is None:
            driver.kill()


def test_a_sweep_killed_mid_run_resumes_to_the_same_results(tmp_path):
    """SIGKILL the sweep driver after a few points are stored: no half point is left, and a rerun completes
    the study with exactly the points and metrics a fresh, uninterrupted run gives."""
    import pandas as pd
    import pyarrow.parquet as pq

    from simroute.study import Store, load_study, run_study
    from studyutil import GRID, metrics, write_study

    study_file = write_study(tmp_path, GRID)
    out = tmp_path / "killed"
    sweep = subprocess.Popen([sys.executable, "-m", "simroute", "sweep", str(study_file), "-o", str(out), "-j", "1"],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600                  # a hang guard: the loop ends when 2 points are stored
    while len(list((out / "points").glob("*.parquet"))) < 2 and time.monotonic() < deadline and sweep.poll() is None:
        time.sleep(0.05)
    sweep.kill()
    sweep.wait(timeout=600)
    stored = list((out / "points").glob("*.parquet"))
    assert 2 <= len(stored) < 8, "the kill should land mid-study"
    for p in stored:                                   # every stored point is whole
        assert pq.read_table(p).num_rows == 1
    s = load_study(study_file)
    rest = run_study(s, out, jobs=1, progress=False)
    assert rest.skipped == len(stored) and rest.executed == 8 - len(stored) and rest.failed == 0
    fresh = run_study(s, tmp_path / "fresh", jobs=1, progress=False)
    pd.testing.assert_frame_equal(metrics(Store(out).read()), metrics(Store(tmp_path / "fresh").read()))


def test_an_unreachable_ray_cluster_is_a_one_line_error_naming_the_flag(monkeypatch, cli, tmp_path):
    """`--ray-address auto` with no cluster: ray.init raises ConnectionError; the user sees one line, exit 2.
    (ray.init is replaced: whether a real cluster is reachable depends on the machine.)"""
    ray = pytest.importorskip("ray")

    def no_cluster(*_a, **_k):
        raise ConnectionError("Could not find any running Ray instance.")
    monkeypatch.setattr(ray, "init", no_cluster)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    from studyutil import GRID, write_study
    study = write_study(tmp_path, GRID)
    code, _, err = cli("sweep", study, "-o", tmp_path / "out", "--ray-address", "auto")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--ray-address" in err and "auto" in err
    assert not (tmp_path / "out").exists()
