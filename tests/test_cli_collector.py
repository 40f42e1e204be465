"""The process's own command spares the cyclic collector (simroute/cli/common.py); a caller's `main([...])`
leaves the collector as it found it."""

from __future__ import annotations

import gc
import subprocess
import sys


def test_a_callers_main_keeps_its_collector() -> None:
    from simroute.cli.main import main
    frozen = gc.get_freeze_count()
    assert main(["run", "--help"]) == 0          # builds `run`'s options: loads the simulator's modules
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen


def test_the_process_command_leaves_its_heap_frozen_and_its_collector_on() -> None:
    code = ("import gc, sys\nsys.argv = ['simroute', 'run', '--help']\nfrom simroute.cli.main import main\n"
            "before = gc.get_freeze_count()\nrc = main()\n"
            "print(rc, before, gc.get_freeze_count() > before, gc.isenabled())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1].split() == ["0", "0", "True", "True"]
