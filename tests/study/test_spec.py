"""Study files are validated at load: every error names the file and the field."""

from __future__ import annotations

import pytest

from simroute.errors import ConfigurationError
from simroute.study import load_study
from studyutil import GRID, write_study


def test_grid_expands_axes_times_seeds(grid_file):
    s = load_study(grid_file)
    assert len(s.groups()) == 4 and s.seeds == (0, 1)
    cfg = s.config({"policy": "always-fetch", "trace.params.qps": 40}, seed=1)
    assert cfg["policy"] == "always-fetch" and cfg["trace"]["params"]["qps"] == 40 and cfg["seed"] == 1


@pytest.mark.parametrize("bad, field", [
    ("base:\n  polcy: paper\n", "base.polcy"),
    ("axes:\n  policy: [paper, nonsense]\n", "policy"),
    ("axes:\n  replicas: []\n", "axes.replicas"),
    ("seeds: -1\n", "seeds"),
    ("slo: 'p99 ttft <= 5'\n", "slo"),
    ("base:\n  trace: {generate: corpus, params: {qpz: 3}}\n", "trace"),
    ("base:\n  topology: no-such-topology\n", "topology"),
    ("search: {field: replicas, lo: 4, hi: 2, slo: 'p99 ttft_ms <= 5'}\n", "search.lo"),
    ("search: {field: replicas, goal: most, lo: 1, hi: 2, slo: 'p99 ttft_ms <= 5'}\n", "search.goal"),
    ("frobnicate: 1\n", "frobnicate"),
])
def test_errors_name_file_and_field(tmp_path, bad, field):
    p = write_study(tmp_path, "name: bad\n" + bad)
    with pytest.raises(ConfigurationError) as exc:
        load_study(p)
    assert exc.value.file and exc.value.file.endswith("s.yaml")
    assert field in (exc.value.field or ""), exc.value


def test_quick_overrides_merge(tmp_path):
    p = write_study(tmp_path, GRID + "quick:\n  axes: {trace.params.qps: [5]}\n  seeds: 1\n")
    full, quick = load_study(p), load_study(p, quick=True)
    assert len(full.groups()) * len(full.seeds) == 8
    assert len(quick.groups()) * len(quick.seeds) == 2
    assert quick.base["trace"]["params"]["requests"] == 40


def test_case_axis_sets_several_fields(tmp_path):
    p = write_study(tmp_path, GRID.replace("  policy: [paper, always-fetch]\n",
                                           "  size:\n    small: {tp: 8, trace.params.instances: 8}\n"
                                           "    big: {tp: 1, trace.params.instances: 64}\n"))
    s = load_study(p)
    cfg = s.config({"size": "small", "trace.params.qps": 10}, 0)
    assert cfg["tp"] == 8 and cfg["trace"]["params"]["instances"] == 8


def test_shipped_studies_load(tmp_path):
    from pathlib import Path
    files = sorted((Path(__file__).resolve().parents[2] / "studies").glob("*.yaml"))
    assert len(files) >= 4
    for f in files:
        full, quick = load_study(f), load_study(f, quick=True)
        n = lambda s: len(s.groups()) * len(s.seeds)
        assert n(quick) <= n(full) and n(quick) <= 8, f
