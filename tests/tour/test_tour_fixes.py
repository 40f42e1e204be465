"""The tour's small fixes: model chunk states its accounting, model bandwidth its crossovers, calibrate warns on
fits worse than the paper's."""

from __future__ import annotations

import math

import numpy as np


def test_model_chunk_says_which_exchange_accounting(cli, tmp_path):
    code, out, err = cli("model", "chunk", "-o", tmp_path)
    assert code == 0, err
    assert "route exchanges: once" in out and "per-layer" in out
    code, out, _ = cli("model", "chunk", "-o", tmp_path, "--route-exchanges", "per-layer")
    assert code == 0 and "route exchanges: per-layer" in out


def test_model_bandwidth_marks_what_it_prints(cli, tmp_path):
    code, out, err = cli("model", "bandwidth", "-o", tmp_path)
    assert code == 0, err
    assert "dotted line" in out and (tmp_path / "bandwidth.png").stat().st_size > 10_000


def test_curve_crossing():
    from simroute.cli.model_cmd import curve_crossing
    x = np.array([1.0, 10.0, 100.0])
    assert math.isclose(curve_crossing(x, [1.0, 2.0, 3.0], [3.0, 2.0, 1.0]), 10.0)
    assert curve_crossing(x, [1.0, 1.0, 1.0], [2.0, 2.0, 2.0]) is None
    cross = curve_crossing(x, [0.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert 1.0 < cross < 10.0


def test_calibrate_warns_past_the_papers_mape():
    from simroute.cli.calibrate_cmd import PAPER_MAPE_AMORTISED, PAPER_MAPE_FULL, mape_warnings
    assert (PAPER_MAPE_AMORTISED, PAPER_MAPE_FULL) == (0.07, 0.16)
    lines = mape_warnings({"tcp": {"mape_amortised": 0.55, "mape_full": 0.10},
                           "nvlink": {"mape_amortised": 0.03, "mape_full": 0.20},
                           "ok": {"mape_amortised": 0.07, "mape_full": 0.16}})
    assert len(lines) == 2 and "tcp" in lines[0] and "55%" in lines[0] and "7%" in lines[0]
    assert "nvlink" in lines[1] and "16%" in lines[1]
