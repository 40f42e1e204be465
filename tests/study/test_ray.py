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


def test_a_local_ray_that_times_out_at_start_up_is_started_again(monkeypatch):
    """Ray gives its raylet 30 s of wall time and raises a bare Exception past it (met at load 25): the backend
    starts it again; a different failure, or the last try's, is not hidden."""
    import sys
    import types

    from simroute.errors import ConfigurationError
    from simroute.study.backends import RayBackend

    calls = {"init": 0, "shutdown": 0}

    def fake_ray(failures: int, message: str = "The current node timed out during startup. This could happen"):
        def init(**_kw):
            calls["init"] += 1
            if calls["init"] <= failures:
                raise Exception(message)
        module = types.SimpleNamespace(is_initialized=lambda: False, init=init,
                                       shutdown=lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1),
                                       remote=lambda **_kw: (lambda fn: fn))
        monkeypatch.setitem(sys.modules, "ray", module)

    fake_ray(failures=2)
    RayBackend("local")
    assert calls == {"init": 3, "shutdown": 2}
    calls.update(init=0, shutdown=0)
    fake_ray(failures=RayBackend.LOCAL_START_TRIES)
    with pytest.raises(ConfigurationError, match="timed out during startup"):
        RayBackend("local")
    assert calls["init"] == RayBackend.LOCAL_START_TRIES
    calls.update(init=0, shutdown=0)
    fake_ray(failures=1, message="something else")
    with pytest.raises(Exception, match="something else"):
        RayBackend("local")
    assert calls == {"init": 1, "shutdown": 0}
