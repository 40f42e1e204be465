"""Helpers shared by the study tests: a tiny grid study and result comparison."""

from __future__ import annotations

from pathlib import Path

GRID = """
name: tiny
description: a tiny grid for tests
base:
  topology: fattree
  calib: h100-ibgda
  model: deepseek-v2-lite
  tp: 1
  trace: {generate: corpus, params: {requests: 40, chunks: 32, instances: 64, output_tokens: 16}}
axes:
  policy: [paper, always-fetch]
  trace.params.qps: [10, 40]
seeds: 2
slo: "p99 ttft_ms <= 60"
"""


def write_study(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def metrics(df):
    """The deterministic columns of a study's points, keyed and sorted (wall time and paths excluded)."""
    from simroute.study.store import METRICS
    return df.set_index("key").sort_index()[["status", "seed", *METRICS]]
