"""Host probes -> fit with MAPE -> profile with provenance, end to end, and the CLI over it."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from simroute.calib import load_profile
from simroute.cli.main import main
from simroute.probes.calibrate import calibrate
from simroute.probes.capability import Capability

BOX = Capability(hostname="testbox", cpu_model="Test CPU", cpus=2, python="3.11")


@pytest.fixture(scope="module")
def quick_cal(tmp_path_factory):
    out = tmp_path_factory.mktemp("cal") / "profile.yaml"
    return calibrate(out, only=["host-shm", "host-tcp"], quick=True, cap=BOX)


def test_host_probes_give_fabrics_with_fit_mape(quick_cal) -> None:
    prof = quick_cal.profile
    for fab in ("host-shm", "host-tcp"):
        f = prof.fabric(fab)
        assert f.t_probe_us.value > 0 and f.single_block_GBps.value > 0
        assert f.t_probe_us.provenance.kind == "measured" and "testbox" in f.t_probe_us.provenance.box
        assert f.single_block_GBps.provenance.kind == "fitted"
        assert math.isfinite(f.mape_full.value) and f.mape_amortised is not None
    params = prof.cost_params()
    assert {"host-shm", "host-tcp", "h100-ibgda"} <= {fp.name for fp in params.fabrics}


def test_every_constant_has_provenance_and_unmeasured_ones_say_default(quick_cal) -> None:
    raw = yaml.safe_load(quick_cal.profile_path.read_text())
    assert raw["include"][0].endswith("shared.yaml")
    for name, c in raw["constants"].items():
        assert c["provenance"]["kind"] == "default", name
        assert "not measured on testbox" in c["provenance"]["ref"]
        assert "stands in" in c["provenance"]["ref"]
    splice = raw["constants"]["splice_ms"]["provenance"]["ref"]
    assert "probe splice not run" in splice


def test_samples_parquet_beside_the_profile(quick_cal) -> None:
    t = pq.read_table(quick_cal.samples_path).to_pandas()
    assert set(t["probe"]) == {"host-shm", "host-tcp"}
    assert {"sig_rt", "full_rt", "bulk_one_way"} <= set(t["series"])
    assert sorted(t[t.series == "full_rt"]["x"].unique()) == [1, 4, 16, 64, 256, 1024, 4096]
    assert quick_cal.samples_path.parent == quick_cal.profile_path.parent


def test_profile_simulates_predict(quick_cal, capsys) -> None:
    rc = main(["predict", "--calib", str(quick_cal.profile_path), "--fabric", "host-shm", "--mq", "64"])
    assert rc == 0
    assert "route" in capsys.readouterr().out


def test_calibrate_cli_only_host_tcp(tmp_path: Path, capsys) -> None:
    out = tmp_path / "p" / "profile.yaml"
    rc = main(["calibrate", "--quick", "--only", "host-tcp", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "capability" in text and "host-tcp" in text and "MAPE" in text
    assert "measured: host-tcp" in text
    prof = load_profile(out)
    assert "host-tcp" in prof.fabrics and "host-shm" not in prof.fabrics
    assert (out.parent / "samples.parquet").exists()


def test_calibrate_cli_list_and_dry_run(tmp_path: Path, capsys) -> None:
    assert main(["calibrate", "--list"]) == 0
    assert "splice" in capsys.readouterr().out
    assert main(["calibrate", "--dry-run", "--out", str(tmp_path / "x.yaml")]) == 0
    text = capsys.readouterr().out
    assert "dry run" in text and not (tmp_path / "x.yaml").exists()


def test_bad_profile_is_never_half_written(tmp_path: Path, quick_cal) -> None:
    from simroute.calib.writer import write_profile_checked
    from simroute.errors import ConfigurationError
    target = tmp_path / "profile.yaml"
    good = yaml.safe_load(quick_cal.profile_path.read_text())
    assert all(i.startswith("shipped:") for i in good["include"])   # portable: no paths into the install
    write_profile_checked(good, target)
    before = target.read_bytes()
    bad = dict(good, fabrics={"host-shm": {**good["fabrics"]["host-shm"],
                                           "single_block_GBps": {"value": -1.0, "provenance": {"kind": "default"}}}})
    with pytest.raises(ConfigurationError):
        write_profile_checked(bad, target)
    incomplete = {k: v for k, v in good.items() if k != "include"}
    incomplete["constants"] = {}
    with pytest.raises(Exception):
        write_profile_checked(incomplete, target)        # loads, but cannot simulate: refused
    def fail() -> None:
        raise OSError("disk full while writing samples")
    with pytest.raises(OSError):
        write_profile_checked(good, target, before_commit=fail)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["profile.yaml"]      # no temp files left


def test_simroute_run_on_the_measured_profile(quick_cal, tmp_path: Path, capsys) -> None:
    """calibrate -> profile -> simulate: a topology whose paths are the measured host fabrics."""
    topo_src = Path(__file__).resolve().parents[2] / "topologies" / "paper-testbed.yaml"
    if not topo_src.exists():
        pytest.skip("paper-testbed topology not present")
    text = topo_src.read_text().replace("fabric: h100-nvlink4", "fabric: host-shm").replace(
        "fabric: h100-ibgda", "fabric: host-tcp")
    topo = tmp_path / "host-fabrics.yaml"
    topo.write_text(text)
    out = tmp_path / "run"
    rc = main(["run", "--topology", str(topo), "--calib", str(quick_cal.profile_path), "--model", "deepseek-v2-lite",
               "--tp", "1", "-o", str(out)])          # the testbed's 80 GB H100s: not the default's DeepSeek-V3
    assert rc == 0, capsys.readouterr().err
    assert (out / "summary.json").exists()
