"""The calibration profile is resolved once per run (sim/calibration.py): loaded once, asked everything the
components need at the run's start, and never consulted again while the run's events run."""

from __future__ import annotations

import dataclasses

import pytest

from simroute.calib import default_profile_path, load_profile
from simroute.defaults import PAPER_DEPLOYMENT
from simroute.network import shipped_topology
from simroute.scenarios.traces import write_trace
from simroute.sim import RunConfig, Simulation
from simroute.sim import calibration as calibration_module
from simroute.sim.calibration import RunCalibration


class _Watched:
    """A profile that counts what is asked of it."""

    def __init__(self, profile) -> None:
        self._profile, self.asked = profile, []

    def __getattr__(self, name: str):
        self.asked.append(name)
        return getattr(self._profile, name)


def _trace(path):
    chunks = [{"chunk_id": 0, "tokens": 512, "canonical": True, "holder_hint": 0, "cached_offset": 0}]
    requests = [{"arrival_s": 0.002 * k, "requester_hint": 4, "prompt_tokens": 64, "output_tokens": 4,
                 "chunk_ids": [0], "chunk_at_cached_offset": [True]} for k in range(6)]
    return write_trace(path, requests, chunks, name="calibration-once")


def test_the_profile_is_loaded_once_and_not_asked_while_the_run_runs(tmp_path, monkeypatch):
    loaded: list[_Watched] = []

    def load(path):
        loaded.append(_Watched(load_profile(path)))
        return loaded[-1]
    monkeypatch.setattr(calibration_module, "load_profile", load)
    cfg = RunConfig(topology=str(shipped_topology("paper-testbed")), trace=str(_trace(tmp_path / "t.parquet")),
                    calib=str(default_profile_path()), **PAPER_DEPLOYMENT)
    sim = Simulation(cfg)
    assert len(loaded) == 1 and loaded[0].asked            # resolved from it, once
    loaded[0].asked.clear()
    result = sim.run()
    assert loaded[0].asked == [] and result.summary["completed"] == 6
    calibration = sim.ctx.calibration
    assert isinstance(calibration, RunCalibration) and sim.ctx.params is calibration.params
    assert sim.ctx.engines.step is calibration.step and calibration.profile == load_profile(cfg.calib).name
    assert [str(f) for f in calibration.files] == result.summary["inputs"]["calib_files"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        calibration.gpu = "h200"       # type: ignore[misc]
