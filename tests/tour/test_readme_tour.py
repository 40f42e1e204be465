"""The README's "A short tour", run verbatim from an empty temporary directory: every command exits 0.

`simroute` resolves to this checkout (a shim on PATH runs `python -m simroute` with the repository on
PYTHONPATH), so the test checks the code under test, not an installed copy.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def tour_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## A short tour", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_tour_block_is_found_and_uses_no_repository_paths():
    cmds = tour_commands()
    assert len(cmds) >= 15 and all(c.startswith("simroute ") for c in cmds)
    for c in cmds:
        assert "../" not in c and "topologies/" not in c and "studies/" not in c and "calib/" not in c, c


@pytest.mark.slow
def test_readme_tour_runs_from_an_empty_directory(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "simroute"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m simroute \"$@\"\n")
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    for cmd in tour_commands():
        # a hang guard, not a time budget: `simroute validate` alone ran past 300 s at load 20 on 2 cores
        res = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True, timeout=3600)
        assert res.returncode == 0, f"{cmd}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    assert (work / "results" / "agents" / "report" / "report.html").exists()
    assert (work / "results" / "ark" / "report" / "report.html").exists()
    assert (work / "topo.png").stat().st_size > 10_000 and (work / "run.json").exists()
    import json
    card = json.loads((work / "scorecard.json").read_text())
    assert card["rows"] and all(r["verdict"] in ("pass", "fail") for r in card["rows"])
