"""The one-shot single-GPU script: argument parsing, its budget plan, and the dry run (host probes only)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simroute.calib import load_profile

SCRIPT = Path(__file__).resolve().parents[2] / "probes" / "run_single_gpu.py"


def _module():
    spec = importlib.util.spec_from_file_location("run_single_gpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_arguments_and_budget() -> None:
    m = _module()
    a = m.parse_args(["out", "--budget-s", "300", "--quick"])
    assert a.out_dir == Path("out") and a.budget_s == 300 and a.quick and not a.dry_run
    assert a.wheels.name == ".whl"
    with pytest.raises(SystemExit):
        m.parse_args(["out", "--budget-s", "10"])
    with pytest.raises(SystemExit):
        m.parse_args([])
    t = m.timeouts(480)
    assert set(t) == {"host-shm", "host-tcp", "splice", "holder", "staging", "nvshmem-loopback"}
    assert sum(t.values()) <= 480 * 0.9                 # leaves room for start-up and writing


def test_install_plan_without_wheel_folder_says_so(tmp_path: Path) -> None:
    m = _module()
    reqs, line = m.install_plan(tmp_path / "nowheels")
    assert reqs == []
    assert ("no wheel folder" in line) or line == "all libraries present"


def test_dry_run_runs_host_probes_and_writes_a_profile(tmp_path: Path) -> None:
    out = tmp_path / "box"
    r = subprocess.run([sys.executable, str(SCRIPT), str(out), "--dry-run"], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "plan        splice" in r.stdout and "(dry run: not run)" in r.stdout
    assert {"profile.yaml", "samples.parquet", "capability.json", "calibrate.log"} <= {p.name for p in out.iterdir()}
    prof = load_profile(out / "profile.yaml")
    assert {"host-shm", "host-tcp"} <= set(prof.fabrics)
    assert yaml.safe_load((out / "profile.yaml").read_text())["description"].startswith("DRY RUN")
    prof.cost_params()
