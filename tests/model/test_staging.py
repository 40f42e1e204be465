"""The staging pool in the paper's terms: §6.2's 7% is a fetch round-trip gain, spent on the staging copies
(simroute.model.staging); the copy rate is fitted to it unless a profile (the staging probe) measures it."""

from __future__ import annotations

from pathlib import Path

import pytest
import simpy
import yaml

from simroute.calib import load_profile, shipped_dir
from simroute.errors import ConfigurationError
from simroute.model.staging import (copy_saving_at_elbow, elbow_fetch_saving_s, fitted_copy_Bps,
                                    paper_chunk_bytes)
from simroute.sim.staging import StagingPool

CHUNK = 2048 * 576 * 2 * 27          # the paper's chunk: 2048 tokens x (512 + 64) x bf16 x 27 layers
SAVED = 0.07 * 6.0e-3 / 0.93         # 7% of the K = 1 round trip, which is 6.0 ms at K = 8 / 0.93


def test_the_papers_gain_is_a_fetch_time_saving():
    assert paper_chunk_bytes() == CHUNK
    assert elbow_fetch_saving_s(0.07, 6.0e-3) == pytest.approx(SAVED)          # 0.4516 ms
    with pytest.raises(ValueError):
        elbow_fetch_saving_s(1.0, 6.0e-3)


def test_fitted_rate_is_where_eight_parallel_streams_save_it():
    rate = fitted_copy_Bps(0.07, 6.0e-3, 8)
    assert rate == pytest.approx(CHUNK * (7 / 8) / SAVED)                        # 123.4 GB/s
    shipped = load_profile(shipped_dir() / "shared.yaml").constants["staging_copy_GBps"]
    assert shipped.value == pytest.approx(rate / 1e9, abs=0.05) and shipped.provenance.kind == "fitted"


def test_copy_saving_is_the_fetch_saving_over_the_serial_staging_time():
    saving, clamped = copy_saving_at_elbow(0.07, 6.0e-3, 20e9, 8)                # S_1 = 3.19 ms at 20 GB/s
    assert saving == pytest.approx(SAVED / (CHUNK / 20e9)) and not clamped       # 0.142
    saving, clamped = copy_saving_at_elbow(0.07, 6.0e-3, 200e9, 8)               # S_1 = 0.32 ms < 0.45 ms
    assert saving == pytest.approx(7 / 8) and clamped                            # 8 streams, at most 8x


def _stage_s(streams: int, copy_Bps: float, saving: float) -> float:
    env = simpy.Environment()
    pool = StagingPool(env, streams, copy_Bps, layers=27, elbow=8, gain_at_elbow=saving, record=False)
    env.process(pool.stage(CHUNK))
    env.run()
    return env.now


def test_pool_at_the_fitted_rate_takes_the_papers_saving_off_one_chunk():
    staging = load_profile("h100-ibgda").staging_params()
    assert staging.copy_Bps == pytest.approx(123.4e9) and not staging.clamped
    one = _stage_s(1, staging.copy_Bps, staging.copy_saving)
    eight = _stage_s(8, staging.copy_Bps, staging.copy_saving)
    assert one == pytest.approx(CHUNK / 123.4e9)                                  # 0.516 ms serialised
    assert one - eight == pytest.approx(SAVED, rel=1e-3)                          # 0.45 ms, the paper's 7%
    assert _stage_s(16, staging.copy_Bps, staging.copy_saving) > eight            # oversubscription


def test_the_runs_rate_overrides_and_the_saving_follows_it():
    staging = load_profile("h100-ibgda").staging_params(50.0)
    assert staging.copy_Bps == 50e9
    assert staging.copy_saving == pytest.approx(SAVED / (CHUNK / 50e9))
    assert "the run's" in dict(staging.sources)["copy_Bps"]


def _profile(tmp_path: Path, constants: dict) -> Path:
    prov = {"kind": "measured", "box": "lab-h100", "ref": "probe staging"}
    doc = {"schema": "simroute.calib/1", "name": "box", "include": [str(shipped_dir() / "h100-ibgda.yaml")],
           "constants": {k: {"value": v, "provenance": prov} for k, v in constants.items()}}
    path = tmp_path / "box.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_measured_profile_replaces_the_fit(tmp_path):
    prof = load_profile(_profile(tmp_path, {"staging_copy_GBps": 400.0, "staging_copy_gain_at_elbow": 0.3}))
    staging = prof.staging_params()
    assert staging.copy_Bps == 400e9 and staging.copy_saving == 0.3
    assert "measured" in dict(staging.sources)["copy_Bps"] and "lab-h100" in dict(staging.sources)["copy_saving"]
    # a measured rate alone: the saving is still the paper's fetch saving, spent at that rate (clamped here)
    alone = load_profile(_profile(tmp_path, {"staging_copy_GBps": 400.0})).staging_params()
    assert alone.copy_saving == pytest.approx(7 / 8) and alone.clamped
    with pytest.raises(ConfigurationError, match="staging_copy_GBps"):
        load_profile(_profile(tmp_path, {"staging_copy_GBps": 0.0})).staging_params()


def test_probe_results_become_the_copy_rate_and_copy_saving(tmp_path):
    """The staging probe times the copies alone: its gain is a copy-time saving, its K = 1 time the rate; the
    paper's fetch-time gain stays the paper's."""
    from simroute.probes.assemble import build_profile
    from simroute.probes.capability import Capability
    from simroute.probes.framework import ProbeOutcome
    from simroute.probes.registry import PROBES
    cap = Capability(hostname="h100box", cpu_model="Xeon", cpus=16, python="3.11", gpus=1, gpu_names=["NVIDIA H100"])
    outcome = ProbeOutcome(PROBES["staging"], "ok", "done", 1.0,
                           {"elbow_streams": 8, "gain_at_elbow": 0.4, "staging_us": {"1": 500.0, "8": 300.0}},
                           [{"series": "x", "value": 1.0}])
    c = build_profile([outcome], cap, tmp_path / "p.yaml")["constants"]
    assert c["staging_copy_GBps"]["value"] == pytest.approx(CHUNK / 500e-6 / 1e9)     # 127.4 GB/s
    assert c["staging_copy_GBps"]["provenance"]["kind"] == "measured"
    assert c["staging_copy_gain_at_elbow"]["value"] == 0.4
    assert c["staging_gain_at_elbow"]["value"] == 0.07
    assert c["staging_gain_at_elbow"]["provenance"]["kind"] == "default"
