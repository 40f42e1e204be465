"""The Ray backend (a private local Ray with 2 CPUs) gives the same results as the process pool."""

from __future__ import annotations

import pandas as pd
import pytest

from simroute.study import Store, load_study, run_study
from studyutil import metrics

pytestmark = pytest.mark.ray


@pytest.mark.slow
def test_ray_equals_process_pool(grid_file, tmp_path):
    pytest.importorskip("ray", reason="ray is not installed (pip install 'simroute[dist]')")
    s = load_study(grid_file)
    pool = run_study(s, tmp_path / "pool", jobs=2, progress=False)
    ray_run = run_study(s, tmp_path / "ray", ray_address="local", progress=False)
    assert pool.executed == ray_run.executed == 8 and ray_run.failed == 0
    pd.testing.assert_frame_equal(metrics(Store(tmp_path / "pool").read()), metrics(Store(tmp_path / "ray").read()))
