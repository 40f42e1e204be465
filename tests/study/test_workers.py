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
        driver.wait(timeout=10)
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in pids), "workers outlived their driver"
    finally:
        if driver.poll() is None:
            driver.kill()
