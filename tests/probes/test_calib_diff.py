"""`simroute calib diff --gpu`: a GPU entry's constants and the rates they imply, measured vs datasheet-derived."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simroute.calib.profile import load_profile, shipped_dir
from simroute.cli.calib_cmd import DIFF_TOKENS, derived_rates

from tests.probes.test_measured_profile_step import GEMM_8192, HBM_EFF, _measured_profile



def test_derived_rates_are_peak_times_fraction(tmp_path: Path) -> None:
    prof = load_profile(_measured_profile(tmp_path))
    spec = prof.gpu_spec("h200-sxm")
    rows = derived_rates(prof, "h200-sxm")
    assert float(rows["gpus.h200-sxm.achievable_hbm_GBps"][0]) == pytest.approx(4800 * HBM_EFF, rel=1e-3)
    assert "measured" in rows["gpus.h200-sxm.achievable_hbm_GBps"][1]
    assert float(rows["gpus.h200-sxm.gemm_TFLOPs_at_8192_tokens"][0]) == pytest.approx(989 * GEMM_8192, rel=1e-3)
    assert len([k for k in rows if "gemm_TFLOPs" in k]) == len(DIFF_TOKENS)
    assert float(rows["gpus.h200-sxm.attention_TFLOPs"][0]) == pytest.approx(spec.peak_flops / 1e12 * 0.3, rel=1e-3)
    assert derived_rates(prof, "no-such-gpu") == {}


def test_calib_diff_shows_measured_against_datasheet(tmp_path: Path, cli) -> None:
    measured = _measured_profile(tmp_path)
    code, out, err = cli("calib", "diff", shipped_dir() / "gpus" / "h200-sxm.yaml", measured, "--gpu", "h200-sxm",
                         "--json")
    assert code == 0, err
    rows = {row["key"]: row for row in json.loads(out)}
    base = load_profile(shipped_dir() / "gpus" / "h200-sxm.yaml").gpu_spec("h200-sxm").hbm_efficiency
    hbm = rows["gpus.h200-sxm.achievable_hbm_GBps"]
    assert float(hbm["B/A"]) == pytest.approx(HBM_EFF / base, rel=1e-2)
    eff = rows["gpus.h200-sxm.hbm_efficiency"]
    shipped = load_profile(shipped_dir() / "gpus" / "h200-sxm.yaml")
    shipped_kind = shipped.gpu_entry("h200-sxm").hbm_efficiency.provenance.kind
    assert eff["A provenance"].startswith(shipped_kind) and eff["B provenance"].startswith("measured")
    assert "gpus.h200-sxm.peak_bf16_TFLOPs" not in rows          # datasheet peaks are the same on both sides
    assert all(k.startswith("gpus.h200-sxm.") for k in rows)     # --gpu: that entry only
