"""Must show: the step-time model consumes a measured profile. Synthetic step-probe results go through the
real pipeline (build_profile -> checked write) and `simroute model step` on that profile changes exactly as
the measured constants say, against the shipped H200 entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simroute.calib.profile import load_profile, shipped_dir
from simroute.calib.writer import write_profile_checked
from simroute.probes.assemble import build_profile
from simroute.probes.capability import Capability
from simroute.probes.framework import ProbeOutcome
from simroute.probes.registry import PROBES

PEAK_TF, HBM = 989.0, 4800.0                                  # the shipped h200-sxm datasheet figures
HBM_EFF, GEMM_8192, OVERHEAD_US = 0.5, 0.4, 1234.0


def _outcome(name: str, results: dict) -> ProbeOutcome:
    return ProbeOutcome(PROBES[name], "ok", "done", 1.0, {"backend": "torch bf16 (synthetic)", **results},
                        [{"series": "x", "x": 1.0, "value": 1.0, "unit": "s"}])


def _measured_profile(tmp_path: Path) -> Path:
    cap = Capability(hostname="h200box", cpu_model="Xeon", cpus=16, python="3.12", gpus=1, gpu_names=["NVIDIA H200"])
    outcomes = [
        _outcome("hbm", {"best_GBps": HBM_EFF * HBM}),
        _outcome("gemm", {"TFLOPs_by_tokens": {"1": 0.05 * PEAK_TF, "8192": GEMM_8192 * PEAK_TF}, "shapes": {"a": {}}}),
        _outcome("prefill-attention", {"best_TFLOPs": 0.3 * PEAK_TF}),
        _outcome("launch-overhead", {"iteration_us": OVERHEAD_US, "iteration_graph_us": 80.0, "launches": 432,
                                     "graphs": "CUDA graph replay"}),
    ]
    out = tmp_path / "h200box" / "profile.yaml"
    out.parent.mkdir()
    write_profile_checked(build_profile(outcomes, cap, out), out)
    return out


def _step(cli, *args: str) -> dict:
    """`simroute model step --roofline`: the roofline fractions alone (the shipped entry's operator tables, which
    the measured entry inherits when no probe wrote tables of its own, would answer the terms instead)."""
    code, out, err = cli("model", "step", "--gpu", "h200-sxm", "--json", "--roofline", *args)
    assert code == 0, err[-2000:]
    return json.loads(out)


def test_the_measured_gpu_entry_is_what_the_profile_hands_the_model(tmp_path: Path) -> None:
    prof = load_profile(_measured_profile(tmp_path))
    assert prof.gpu == "h200-sxm"
    spec = prof.gpu_spec("h200-sxm")
    assert spec.hbm_efficiency == pytest.approx(HBM_EFF)
    assert spec.gemm_fraction(8192) == pytest.approx(GEMM_8192) and spec.gemm_fraction(1) == pytest.approx(0.05)
    assert spec.attention_efficiency == pytest.approx(0.3)
    assert spec.iteration_overhead_s == pytest.approx(OVERHEAD_US * 1e-6)
    assert spec.peak_flops == pytest.approx(PEAK_TF * 1e12)          # datasheet peaks kept from the shipped entry
    assert prof.gpus["h200-sxm"].iteration_overhead_graph_us.value == 80.0


def test_model_step_output_follows_the_measured_profile(tmp_path: Path, cli) -> None:
    path = str(_measured_profile(tmp_path))
    shipped = load_profile(shipped_dir() / "gpus" / "h200-sxm.yaml").gpu_spec("h200-sxm")
    decode = ("--tokens", "1", "--decode-seqs", "1", "--context", "32768")   # attention above the kernel floor
    base, meas = _step(cli, *decode), _step(cli, *decode, "--calib", path)
    assert meas["overhead_ms"] == pytest.approx(OVERHEAD_US / 1e3)
    assert base["overhead_ms"] == pytest.approx(shipped.iteration_overhead_s * 1e3)
    assert base["bounds"]["linear"] == meas["bounds"]["linear"] == "memory"
    # memory-bound terms scale with 1 / hbm_efficiency
    assert meas["linear_ms_per_layer"] / base["linear_ms_per_layer"] == pytest.approx(shipped.hbm_efficiency / HBM_EFF)
    assert meas["attention_ms_per_layer"] / base["attention_ms_per_layer"] == pytest.approx(
        shipped.hbm_efficiency / HBM_EFF)
    assert any(src.startswith("measured") for src in meas["gpu_sources"].values())
    assert not any(src.startswith("measured") for src in base["gpu_sources"].values())
    prefill = ("--tokens", "8192", "--model", "llama-3.1-8b")    # dense: every GEMM sees the 8192 tokens
    base, meas = _step(cli, *prefill), _step(cli, *prefill, "--calib", path)
    assert base["bounds"]["linear"] == meas["bounds"]["linear"] == "compute"
    # compute-bound linear ops scale with 1 / gemm_efficiency at the iteration's token count (a MoE model's
    # routed experts run at their own, smaller count: tests/model/test_steptime.py)
    assert meas["linear_ms_per_layer"] / base["linear_ms_per_layer"] == pytest.approx(
        shipped.gemm_fraction(8192) / GEMM_8192)
