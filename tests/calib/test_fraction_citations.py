"""The shipped GPU entries' achievable fractions agree with the figures their provenance cites.

A `paper` fraction's ref quotes the measured figure and the datasheet peak it is divided by ("3534 / 4800"),
and a cited GEMM curve quotes the TFLOP/s at each token count; these tests recompute every fraction from the
quoted numbers, so a value edited without its citation (or the other way round) fails here.
"""

from __future__ import annotations

import re

import pytest

from simroute.calib import load_profile, shipped_dir

GPU_FILES = sorted((shipped_dir() / "gpus").glob("*.yaml"))
RATIO = re.compile(r"([\d,]+(?:\.\d+)?) / ([\d,]+(?:\.\d+)?)'?\s*$")
SOURCE = re.compile(r"\(([\w.-]+/[\w.-]+)[),]|github\.com/[\w.-]+/[\w.-]+|README|paper|abstract", re.I)


def _entry(path):
    return load_profile(path).gpu_entry(path.stem)


def _num(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.mark.parametrize("path", GPU_FILES, ids=lambda p: p.stem)
def test_cited_scalar_fractions_equal_the_quoted_ratio(path):
    entry = _entry(path)
    checked = 0
    for key in ("hbm_efficiency", "attention_efficiency"):
        const = getattr(entry, key)
        if const.provenance.kind != "paper":
            continue
        assert SOURCE.search(const.provenance.ref), (key, const.provenance.ref)     # names where it comes from
        m = RATIO.search(const.provenance.ref)
        if m is None:          # a range read off a paper (FlashAttention-2's 50-73%): the value must lie in it
            lo, hi = (int(x) / 100 for x in re.search(r"(\d+)-(\d+)%", const.provenance.ref).groups())
            assert lo <= const.value <= hi, key
            continue
        assert const.value == pytest.approx(_num(m.group(1)) / _num(m.group(2)), abs=2e-3), key
        checked += 1
    if path.stem in ("h100-sxm", "h200-sxm", "a100-80gb", "a40"):
        assert checked >= 1, "a published HBM figure was found for this GPU"


@pytest.mark.parametrize("path", GPU_FILES, ids=lambda p: p.stem)
def test_cited_gemm_curve_points_equal_the_quoted_rates(path):
    entry = _entry(path)
    const = entry.gemm_efficiency
    if const.provenance.kind != "paper":
        assert "stands in" in const.provenance.ref and "found" in const.provenance.ref   # says it searched
        return
    ref = const.provenance.ref
    rates = re.search(r"((?:[\d.]+ / )+[\d.]+) TFLOP/s at m = ((?:\d+ / )+\d+) tokens, over (\d+) dense peak", ref)
    assert rates, ref
    tflops = [float(x) for x in rates.group(1).split(" / ")]
    tokens = [float(x) for x in rates.group(2).split(" / ")]
    peak = float(rates.group(3))
    assert peak == entry.peak_bf16_TFLOPs.value
    assert [p[0] for p in const.points] == tokens
    for (_, frac), rate in zip(const.points, tflops):
        assert frac == pytest.approx(rate / peak, abs=1e-3)
