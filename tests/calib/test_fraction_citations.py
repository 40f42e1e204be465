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
SOURCE = re.compile(r"\(([\w.-]+/[\w.-]+)[),]|github\.com/[\w.-]+/[\w.-]+|README|paper|abstract|calib/ops/", re.I)


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
        if const.provenance.kind not in ("paper", "fitted"):
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
    if const.provenance.kind not in ("paper", "fitted"):
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


# ---- constants fitted to a GPU's shipped measured tables: recomputed from the rows they cite -------------------
FITTED_FILES = [path for path in GPU_FILES if _entry(path).hbm_efficiency.provenance.kind == "fitted"]


def _tables(path):
    import pandas as pd
    ref = _entry(path).kernel_floor_us.provenance.ref
    folder = re.search(r"calib/ops/([\w.-]+/[\w.-]+)/", ref).group(1)
    return lambda kind: pd.read_parquet(shipped_dir() / "ops" / folder / f"{kind}.parquet")


@pytest.mark.parametrize("path", FITTED_FILES, ids=lambda p: p.stem)
def test_fitted_constants_recompute_from_the_rows_they_cite(path):
    """Each fitted constant of a GPU entry (the Blackwell ones, no published fraction found) is recomputed here
    from the table rows its provenance names, by the rule it states."""
    import numpy as np
    entry, table = _entry(path), _tables(path)
    assert set(FITTED_FILES) >= {p for p in GPU_FILES if p.stem in ("b200-sxm", "gb200", "b300-sxm", "gb300")}
    gemm = table("gemm")
    assert entry.kernel_floor_us.value == pytest.approx(gemm.latency_us.min(), abs=0.006)
    decode = table("attention_decode")
    mha = decode[(decode.kv_dtype == "bf16") & (decode.heads == decode.kv_heads) & (decode.batch >= 32)
                 & (decode.context >= 4096)]
    rate = (mha.batch * mha.context * mha.kv_heads * mha.head_dim * 4 / (mha.latency_us * 1e-6)).median()
    assert entry.hbm_efficiency.value == pytest.approx(rate / (entry.hbm_GBps.value * 1e9), abs=1e-3)
    prefill = table("attention_prefill")
    mha = prefill[(prefill.kv_dtype == "bf16") & (prefill.heads == prefill.kv_heads) & (prefill.head_dim == 128)
                  & (prefill.isl >= 8192)]
    flops = (2 * mha.batch * mha.isl * mha.isl * mha.heads * mha.head_dim / (mha.latency_us * 1e-6)).median()
    assert entry.attention_efficiency.value == pytest.approx(flops / (entry.peak_bf16_TFLOPs.value * 1e12), abs=1e-3)
    ffn = gemm[(gemm.dtype == "bf16") & (gemm.n == 16384) & (gemm.k == 4096)]
    for tokens, fraction in entry.gemm_efficiency.points:
        seconds = float(np.exp(np.log(ffn[ffn.m == tokens].latency_us).mean())) * 1e-6
        assert fraction == pytest.approx(2 * tokens * 16384 * 4096 / seconds / (entry.peak_bf16_TFLOPs.value * 1e12),
                                         abs=1e-3)
    allreduce = table("allreduce")
    gpus = int(re.search(r"of the (\d+)-GPU all-reduce", entry.allreduce_bus_GBps.provenance.ref).group(1))
    graph = allreduce[(allreduce.gpus == gpus) & (allreduce["mode"] == "graph")]
    big = graph[graph.message_elements == 33554432].latency_us.min() * 1e-6
    assert entry.allreduce_bus_GBps.value == pytest.approx(2 * (gpus - 1) / gpus * 33554432 * 2 / big / 1e9, abs=0.6)
    assert entry.allreduce_latency_us.value == pytest.approx(graph.latency_us.min(), abs=0.006)
