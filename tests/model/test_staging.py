"""The staging pool's mechanisms against hand counts (simroute.model.staging): host dispatch per copy and join per
stream, hardware work queues, copy engines sharing the GPU's copy rate; their constants in the shipped profile
with provenance; a probe's measurements replacing them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from simroute.calib import load_profile, shipped_dir
from simroute.errors import ConfigurationError
from simroute.model.staging import (StagingParams, copy_ends_s, issue_plan, paper_chunk_bytes, paper_chunk_layers,
                                    stage_s, stage_times)

CHUNK = 2048 * 576 * 2 * 27          # the paper's chunk: 2048 tokens x (512 + 64) x bf16 x 27 layers
MS = 1e-3


def _params(**changes) -> StagingParams:
    """1 MB copies take 1 ms on one engine; HBM large; no host cost: every term off unless a test sets it."""
    base = StagingParams(dispatch_s=0.0, join_s=0.0, copy_Bps=1e9, hbm_copy_Bps=1e12, copy_engines=3, hw_queues=8)
    return replace(base, **changes)


def test_paper_chunk_is_27_copies_of_its_layers():
    assert paper_chunk_bytes() == CHUNK and paper_chunk_layers() == 27


def test_round_robin_over_streams_then_streams_over_queues():
    assert issue_plan(6, 4, 8) == [0, 1, 2, 3, 0, 1]
    assert issue_plan(6, 4, 2) == [0, 1, 0, 1, 0, 1]        # streams 2, 3 share queues 0, 1
    assert issue_plan(3, 1, 8) == [0, 0, 0]


def test_host_bound_staging_is_dispatches_plus_one_join_per_stream_used():
    """10 us to issue a copy, 5 us to join a stream, copies of 1 kB (1 us): the host thread sets the time."""
    params = _params(dispatch_s=10e-6, join_s=5e-6)
    for streams, joined in ((1, 1), (8, 8), (16, 16), (32, 27)):          # at most one stream per copy is used
        times = stage_times(27, 1e3, streams, params)
        assert times.streams_used == joined
        assert times.host_s == pytest.approx(27 * 10e-6 + joined * 5e-6)
        assert times.device_s == pytest.approx(27 * 10e-6 + 1e-6)        # the last copy, issued at 270 us
        assert times.total_s == times.host_s


@pytest.mark.parametrize("streams, expected_ms", [(1, 6.0), (2, 3.0), (3, 2.0), (4, 2.0), (8, 2.0), (16, 2.0)])
def test_device_bound_copies_run_on_at_most_the_copy_engines(streams, expected_ms):
    """Six 1 ms copies: one stream runs them one after another; three engines run three at a time."""
    assert stage_s(6, 1e6, streams, _params()) == pytest.approx(expected_ms * MS)


def test_running_copies_share_the_gpus_copy_rate():
    """Three engines, but HBM carries 1.5 GB/s for all: three 1 MB copies at 0.5 GB/s each end at 2 ms."""
    params = _params(hbm_copy_Bps=1.5e9)
    assert stage_s(3, 1e6, 3, params) == pytest.approx(2 * MS)
    assert stage_s(3, 1e6, 1, params) == pytest.approx(3 * MS)            # one at a time: 1 GB/s each


def test_streams_beyond_the_hardware_queues_share_them():
    """Two queues, eight engines: four streams run two copies at a time (streams 2, 3 wait behind 0, 1)."""
    assert stage_s(4, 1e6, 4, _params(hw_queues=2, copy_engines=8)) == pytest.approx(2 * MS)
    assert stage_s(4, 1e6, 4, _params(hw_queues=8, copy_engines=8)) == pytest.approx(1 * MS)


def test_copies_start_when_issued_and_share_the_rate_while_they_overlap():
    """Issued at 0.5 and 1.0 ms on two engines sharing 1 GB/s: copy 0 alone moves 0.5 MB, then both share
    (0.5 GB/s each) until copy 0 ends at 2.0 ms with 0.5 MB of copy 1 left, alone again: 2.5 ms."""
    ends = copy_ends_s([0.5 * MS, 1.0 * MS], [0, 1], 1e6, _params(hbm_copy_Bps=1e9, copy_engines=2))
    assert ends == [pytest.approx(2.0 * MS), pytest.approx(2.5 * MS)]
    # a queue runs its copies in order: the second copy of queue 0 waits for the first though an engine is free
    assert copy_ends_s([0.0, 0.0], [0, 0], 1e6, _params()) == [pytest.approx(1 * MS), pytest.approx(2 * MS)]


def test_staging_is_both_the_host_and_the_device():
    """1 ms to issue a copy, 2 ms copies: the last copy (issued at 3 ms) ends at 5 ms, after the host's 3 ms
    of dispatches and 3 x 0.1 ms of joins."""
    times = stage_times(3, 2e6, 8, _params(dispatch_s=1 * MS, join_s=0.1 * MS))
    assert times.host_s == pytest.approx(3.3 * MS) and times.device_s == pytest.approx(5 * MS)
    assert times.total_s == pytest.approx(5 * MS)
    assert stage_times(0, 1e6, 8, _params()).total_s == 0.0


def test_params_reject_what_no_pool_can_have():
    for change in ({"copy_engines": 0}, {"hw_queues": 0}, {"copy_Bps": 0.0}, {"dispatch_s": -1.0}):
        with pytest.raises(ValueError):
            _params(**change)
    with pytest.raises(ValueError, match="stream"):
        stage_s(27, 1e6, 0, _params())


def test_shipped_constants_and_where_they_come_from():
    """The paper's per-call host cost (§7's gather, 320 us over 27 layers), H100's 3 copy engines, CUDA's 8
    queues, one copy at the H100's achievable HBM / 2; nothing fitted to Fig 5b."""
    profile = load_profile("h100-ibgda")
    staging = profile.staging_params()
    shared = load_profile(shipped_dir() / "shared.yaml").constants
    assert staging.dispatch_s == pytest.approx(shared["splice_gather_us"].value / 27 * 1e-6, rel=1e-3)
    assert staging.join_s == staging.dispatch_s
    assert (staging.copy_engines, staging.hw_queues) == (3, 8)
    assert staging.copy_Bps == staging.hbm_copy_Bps == pytest.approx(profile.gpu_spec().achievable_hbm_Bps / 2)
    kinds = {name: shared[name].provenance.kind for name in ("staging_dispatch_us", "staging_join_us",
                                                             "staging_copy_engines", "staging_hw_queues")}
    assert kinds == {"staging_dispatch_us": "paper", "staging_join_us": "paper", "staging_copy_engines": "datasheet",
                     "staging_hw_queues": "datasheet"}
    assert not any(constant.provenance.kind == "fitted" for name, constant in shared.items()
                   if name.startswith("staging_"))
    assert "h100-sxm" in dict(staging.sources)["copy_Bps"]


def test_the_papers_chunk_on_the_shipped_h100_pool():
    """Hand count: a copy takes 63.7 MB / 27 at 1.5 TB/s (1.6 us), far below the 11.85 us to issue it, so a
    chunk takes (27 + streams used) x 11.85 us: K = 1 332 us, K = 8 415 us, K = 16 510 us."""
    staging = load_profile("h100-ibgda").staging_params()
    copy_s = CHUNK / 27 / staging.copy_Bps
    assert copy_s < staging.dispatch_s
    for streams in (1, 4, 8, 16):
        times = stage_times(27, CHUNK / 27, streams, staging)
        assert times.total_s == pytest.approx((27 + streams) * 11.85e-6)
        assert times.device_s == pytest.approx(27 * 11.85e-6 + copy_s)


def test_the_runs_rate_is_one_copys_and_hbm_still_caps_them_all():
    staging = load_profile("h100-ibgda").staging_params(50.0)
    assert staging.copy_Bps == 50e9 and staging.hbm_copy_Bps > 1e12
    assert "the run's" in dict(staging.sources)["copy_Bps"]
    fast = load_profile("h100-ibgda").staging_params(5000.0)
    assert fast.hbm_copy_Bps == fast.copy_Bps == 5000e9        # a copy faster than HBM / 2 raises the cap with it


def _profile(tmp_path: Path, constants: dict) -> Path:
    prov = {"kind": "measured", "box": "lab-h100", "ref": "probe staging"}
    doc = {"schema": "simroute.calib/1", "name": "box", "include": [str(shipped_dir() / "h100-ibgda.yaml")],
           "constants": {k: {"value": v, "provenance": prov} for k, v in constants.items()}}
    path = tmp_path / "box.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_measured_profile_replaces_the_papers_constants(tmp_path):
    prof = load_profile(_profile(tmp_path, {"staging_copy_GBps": 400.0, "staging_dispatch_us": 4.0,
                                            "staging_join_us": 1.5, "staging_copy_engines": 2,
                                            "staging_parallel_GBps": 700.0}))
    staging = prof.staging_params()
    assert (staging.copy_Bps, staging.dispatch_s, staging.join_s, staging.copy_engines, staging.hbm_copy_Bps) == \
        (400e9, pytest.approx(4e-6), pytest.approx(1.5e-6), 2, 700e9)
    assert "lab-h100" in dict(staging.sources)["dispatch_s"]
    for name, bad in (("staging_copy_GBps", 0.0), ("staging_dispatch_us", -1.0), ("staging_copy_engines", 0)):
        with pytest.raises(ConfigurationError, match=name):
            load_profile(_profile(tmp_path, {name: bad})).staging_params()


def test_probe_results_become_the_staging_constants(tmp_path):
    """The staging probe's per-call host times, copy rate and copy engines are the profile's; the paper's
    fetch-time gain and elbow stay the paper's (what validate judges the mechanisms on)."""
    from simroute.probes.assemble import build_profile
    from simroute.probes.capability import Capability
    from simroute.probes.framework import ProbeOutcome
    from simroute.probes.registry import PROBES
    cap = Capability(hostname="h100box", cpu_model="Xeon", cpus=16, python="3.11", gpus=1, gpu_names=["NVIDIA H100"])
    results = {"dispatch_us": 6.5, "join_us": 3.0, "copy_GBps": 1400.0, "parallel_GBps": 1600.0, "copy_engines": 3,
               "hw_queues": 8,
               "staging_us": {"1": 500.0, "8": 300.0}, "elbow_streams": 8}
    outcome = ProbeOutcome(PROBES["staging"], "ok", "done", 1.0, results, [{"series": "x", "value": 1.0}])
    c = build_profile([outcome], cap, tmp_path / "p.yaml")["constants"]
    assert c["staging_dispatch_us"]["value"] == 6.5 and c["staging_join_us"]["value"] == 3.0
    assert c["staging_copy_GBps"]["value"] == 1400.0 and c["staging_copy_engines"]["value"] == 3
    assert c["staging_parallel_GBps"]["value"] == 1600.0
    assert c["staging_copy_GBps"]["provenance"]["kind"] == "measured"
    assert c["staging_gain_at_elbow"]["value"] == 0.07
    assert c["staging_gain_at_elbow"]["provenance"]["kind"] == "default"
