"""The per-fabric kernel turnaround (the fixed residual the affine fit omits, paper §4.3) from Table 2's MAPE
column: the rule by hand, IBGDA's stated 9 us recovered from its 7%, and every shipped fabric carrying what the
rule gives for its own constants (one formula, one datum)."""

from __future__ import annotations

import pytest

from simroute.calib import load_profile, shipped_dir
from simroute.model.fit import AMORTISED_SWEEP_MQ, turnaround_from_mape

QP_BYTES = 2184.0      # DeepSeek-V2-Lite q + p per row (paper §3.2)


def test_the_rule_by_hand():
    """A 10 us residual over fits of 90 and 190 us is 10/100 and 10/200 off: MAPE 7.5%; the rule inverts it."""
    residual = turnaround_from_mape(90e-6, 1e15, 1.0, 0.075, rows=(1,))       # one point, fit 90 us
    assert residual / (90e-6 + residual) == pytest.approx(0.075, abs=1e-7)
    two = turnaround_from_mape(0.0, 1e9, 1.0, 0.075, rows=(90_000, 190_000))       # fits 90 us and 190 us
    assert two == pytest.approx(10e-6, rel=1e-6)
    assert turnaround_from_mape(16e-6, 25e9, QP_BYTES, 0.0) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError):
        turnaround_from_mape(16e-6, 25e9, QP_BYTES, 1.2)


def test_ibgdas_stated_turnaround_follows_from_its_mape():
    """Table 2's IBGDA fit (16 us, 25 GB/s) off by 7% over Mq = 512..4096 means a ~9.2 us residual: §4.3's
    'fixed ~9 us kernel turnaround', and ~3% over Mq >= 2048 as §4.3 states."""
    residual = turnaround_from_mape(16e-6, 25e9, QP_BYTES, 0.07)
    assert residual == pytest.approx(9e-6, abs=0.5e-6)
    fits = [16e-6 + mq * QP_BYTES / 25e9 for mq in AMORTISED_SWEEP_MQ[2:]]
    assert sum(residual / (fit + residual) for fit in fits) / 2 == pytest.approx(0.03, abs=0.006)


@pytest.mark.parametrize("fabric, rows", [("h100-nvlink4", AMORTISED_SWEEP_MQ), ("a100-nvlink3", AMORTISED_SWEEP_MQ),
                                          ("rtxpro6000-pcie5", AMORTISED_SWEEP_MQ), ("a40-pcie4", (512, 1024, 2048))])
def test_each_fabric_carries_the_turnaround_of_its_own_mape(fabric, rows):
    profile = load_profile(shipped_dir() / "paper-all.yaml")
    params = profile.fabric_params(fabric)
    mape = 0.03 if fabric == "a40-pcie4" else profile.fabrics[fabric].mape_amortised.value
    expected = turnaround_from_mape(params.t_probe_s, params.single_block_Bps, QP_BYTES, mape, rows=rows)
    assert params.turnaround_s == pytest.approx(expected, abs=0.006e-6)
