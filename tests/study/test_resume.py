"""Resumability and determinism: rerun does nothing, a killed study completes, results equal a fresh run."""

from __future__ import annotations

import pandas as pd
import pytest

from simroute.errors import ConfigurationError
from simroute.study import Store, load_study, run_study
from studyutil import GRID, metrics, write_study


def test_second_run_does_no_work_and_pool_equals_inline(grid_file, tmp_path):
    s = load_study(grid_file)
    first = run_study(s, tmp_path / "a", jobs=2, progress=False)
    assert (first.executed, first.skipped, first.failed) == (8, 0, 0)
    again = run_study(s, tmp_path / "a", jobs=2, progress=False)
    assert (again.executed, again.skipped) == (0, 8)
    inline = run_study(s, tmp_path / "b", jobs=1, progress=False)
    assert inline.executed == 8
    pd.testing.assert_frame_equal(metrics(Store(tmp_path / "a").read()), metrics(Store(tmp_path / "b").read()))
    assert len(list((tmp_path / "a" / "points").glob("*.parquet"))) == 8
    assert (tmp_path / "a" / "runs").is_dir() and len(list((tmp_path / "a" / "inputs").iterdir())) == 4


def test_stopped_midway_then_rerun_completes_and_equals_fresh(grid_file, tmp_path):
    s = load_study(grid_file)
    part = run_study(s, tmp_path / "r", jobs=1, max_points=3, progress=False)
    assert part.stopped and part.executed == 3
    rest = run_study(s, tmp_path / "r", jobs=1, progress=False)
    assert (rest.executed, rest.skipped) == (5, 3) and not rest.stopped
    fresh = run_study(s, tmp_path / "f", jobs=1, progress=False)
    assert fresh.executed == 8 and fresh.failed == 0
    pd.testing.assert_frame_equal(metrics(Store(tmp_path / "r").read()), metrics(Store(tmp_path / "f").read()))
    assert fresh.executed == 8


def test_point_raising_is_recorded_and_rerun_retries(grid_file, tmp_path, monkeypatch):
    import simroute.sim.runner as runner
    real = runner.simulate
    calls = {"n": 0}

    def flaky(cfg, *a, **k):        # the 3rd point dies mid-study (a crash, a kill, a bug)
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected failure")
        return real(cfg, *a, **k)

    monkeypatch.setattr(runner, "simulate", flaky)
    s = load_study(grid_file)
    run = run_study(s, tmp_path / "k", jobs=1, progress=False)
    assert (run.executed, run.failed) == (8, 1)
    df = Store(tmp_path / "k").read()
    bad = df[df.status == "failed"]
    assert len(bad) == 1 and "RuntimeError: injected failure" in bad.error.iloc[0]
    monkeypatch.setattr(runner, "simulate", real)
    again = run_study(s, tmp_path / "k", jobs=1, progress=False)
    assert (again.executed, again.skipped, again.failed) == (1, 7, 0)
    fresh = run_study(s, tmp_path / "f", jobs=1, progress=False)
    assert (fresh.executed, fresh.failed) == (8, 0)
    pd.testing.assert_frame_equal(metrics(Store(tmp_path / "k").read()), metrics(Store(tmp_path / "f").read()))


def test_a_point_that_cannot_exist_is_refused_at_load(tmp_path):
    """tp = 3 cannot split an 8-GPU host: the study is refused when loaded, naming the axis value, before any
    point runs (a point that fails at run time for a reason no check foresees fails alone:
    tests/badinput/test_round3_outputs.py)."""
    p = write_study(tmp_path, GRID.replace("  policy: [paper, always-fetch]\n", "  tp: [1, 3]\n")
                    .replace("seeds: 2", "seeds: 1"))
    with pytest.raises(ConfigurationError) as caught:
        load_study(p)
    assert caught.value.file == str(p) and caught.value.field.startswith("axes.tp=3")
    assert caught.value.field.endswith(": tp") and "tp 3 does not divide the 8 GPUs of a host" in str(caught.value)
    assert not (tmp_path / "o").exists()


def test_key_changes_with_config_only(grid_file, tmp_path):
    from simroute.study.runner import make_point
    s = load_study(grid_file)
    a = make_point(s, tmp_path / "x", {"policy": "paper", "trace.params.qps": 10}, 0)
    b = make_point(s, tmp_path / "y", {"policy": "paper", "trace.params.qps": 10}, 0)
    c = make_point(s, tmp_path / "x", {"policy": "paper", "trace.params.qps": 10}, 1)
    assert a.key == b.key != c.key           # independent of where the study lives; depends on the seed


def test_key_changes_with_simulator_source(grid_file, tmp_path, monkeypatch):
    """Stored results of an older simulator are not reused: the key covers the simulator's source."""
    import simroute.study.resolve as resolve
    from simroute.study.runner import make_point
    s = load_study(grid_file)
    before = make_point(s, tmp_path, {"policy": "paper", "trace.params.qps": 10}, 0).key
    monkeypatch.setattr(resolve, "_CODE", ["another-simulator"])
    assert make_point(s, tmp_path, {"policy": "paper", "trace.params.qps": 10}, 0).key != before
