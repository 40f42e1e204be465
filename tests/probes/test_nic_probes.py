"""The nic-qp-sweep probe's host side (no GPU): reading the NIC's context capacity and miss cost from a
queue-pair sweep by hand, the probe's skips, its constants in a measured profile, and a measured profile's NIC
constants reaching the simulator's message model."""

from __future__ import annotations

import pytest

from simroute.probes.framework import ProbeSkipped
from simroute.probes.nic_probes import probe_nic_qp_sweep, qp_sweep_constants


def test_a_step_past_the_cache_gives_capacity_and_miss_cost_by_hand():
    """Exchanges of 15 us through Q = 3 and 55 us from Q = 4: the NIC holds 3 contexts; each of an exchange's two
    messages misses, (55 - 15) / 2 = 20 us each."""
    sweep = {1: 15e-6, 2: 15.2e-6, 3: 15.5e-6, 4: 55e-6, 5: 55e-6, 6: 55.6e-6}
    out = qp_sweep_constants(sweep)
    assert out["capacity"] == 3
    assert out["miss_us"] == pytest.approx(((55 + 55 + 55.6) / 3 - (15 + 15.2 + 15.5) / 3) / 2, rel=1e-9)


def test_no_step_bounds_the_capacity_from_below_only():
    out = qp_sweep_constants({1: 15e-6, 2: 15.5e-6, 7: 16e-6})
    assert out == {"capacity_at_least": 7, "exchange_us": pytest.approx({1: 15.0, 2: 15.5, 7: 16.0})}


@pytest.mark.parametrize("sweep", [{}, {2: 1e-6}, {1: 0.0, 2: 1e-6}, {1: float("nan")}])
def test_a_sweep_without_its_baseline_or_with_bad_times_is_refused(sweep):
    with pytest.raises(ValueError):
        qp_sweep_constants(sweep)


def test_the_probe_skips_without_enough_pes_or_with_p2p_on(monkeypatch):
    with pytest.raises(ProbeSkipped, match="--pes"):
        probe_nic_qp_sweep({"pes": 2})
    monkeypatch.delenv("NVSHMEM_DISABLE_P2P", raising=False)
    with pytest.raises(ProbeSkipped, match="NVSHMEM_DISABLE_P2P"):
        probe_nic_qp_sweep({"pes": 4})


def test_measured_nic_constants_reach_the_message_model(tmp_path):
    """The probe's outcome becomes measured constants of the profile, and a run with that profile builds its
    message model from them (a run without them keeps the defaults)."""
    from simroute.calib import default_profile_path, load_profile
    from simroute.network.messages import MessageModelParams
    from simroute.probes.assemble import gpu_constants
    from simroute.probes.framework import ProbeOutcome
    from simroute.probes.registry import PROBES
    from simroute.sim.calibration import nic_message_model

    class Prov:
        def measured(self, ref):
            return {"kind": "measured", "ref": ref, "box": "testbox"}
    outcome = ProbeOutcome(PROBES["nic-qp-sweep"], "ok", "", 1.0,
                           {"capacity": 3, "miss_us": 20.0, "method": "rotation"}, [])
    constants = gpu_constants(outcome, Prov())
    assert constants["nic_qp_contexts"]["value"] == 3 and constants["nic_context_miss_us"]["value"] == 20.0
    assert nic_message_model(load_profile(default_profile_path())) is None
    import yaml
    path = tmp_path / "measured.yaml"
    path.write_text(yaml.safe_dump({"schema": "simroute.calib/1", "name": "measured-nic",
                                    "include": ["shipped:h100-ibgda.yaml"], "constants": constants}))
    params = nic_message_model(load_profile(path)).params
    assert (params.nic_context_slots, params.nic_miss_s) == (3, pytest.approx(20e-6))
    assert params.wire_occupancy == MessageModelParams().wire_occupancy
