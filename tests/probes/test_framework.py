"""The probe framework: a probe that hangs, lacks a library or crashes gives one clear line, the rest run."""

from __future__ import annotations

import pytest

from simroute.probes.calibrate import run_probes, select
from simroute.probes.capability import Capability
from simroute.probes.framework import Probe, requirement_gap, run_probe
from simroute.probes.registry import PROBES
from simroute.errors import UnknownNameError

CPU_BOX = Capability(hostname="test", cpu_model="cpu", cpus=2, python="3")


def test_timeout_missing_dependency_and_crash_do_not_stop_the_others() -> None:
    probes = [PROBES["selftest-hang"], PROBES["selftest-missing"], PROBES["selftest-crash"],
              Probe("tiny", "simroute.probes.selftest:tiny", "cpu", "returns at once"),
              PROBES["splice"]]
    out = {o.probe.name: o for o in run_probes(probes, CPU_BOX)}
    assert out["selftest-hang"].status == "timeout"              # killed at its 2 s: the others still ran
    assert "no result within 2 s" in out["selftest-hang"].message
    assert out["selftest-missing"].status == "missing-dep"
    assert "simroute_no_such_library" in out["selftest-missing"].message
    assert out["selftest-crash"].status == "failed"
    assert "RuntimeError: deliberate failure" in out["selftest-crash"].message
    assert out["tiny"].ok and out["tiny"].results == {"answer": 42}
    assert out["tiny"].samples[0]["probe"] == "tiny"
    assert out["splice"].status in ("skipped", "missing-dep")      # no GPU here
    assert all(o.line().startswith(o.probe.name) for o in out.values())


def test_missing_dependency_is_found_before_spawning() -> None:
    p = Probe("needs-x", "simroute.probes.selftest:tiny", "cpu", "x", deps=("simroute_no_such_library",))
    o = run_probe(p, {})
    assert o.status == "missing-dep" and o.seconds == 0.0
    assert "pip install" in o.message


def test_requirement_gaps_name_what_is_missing() -> None:
    assert requirement_gap("cpu", 0, 1) is None
    assert requirement_gap("gpu1", 0, 1) == "needs 1 GPU, found none"
    assert "found 1" in requirement_gap("gpus-host", 1, 2)
    assert "--pes" in requirement_gap("gpus-host", 4, 1)
    assert requirement_gap("gpus-host", 2, 2) is None
    assert "hosts" in requirement_gap("hosts-nic", 8, 8)


def test_select_hides_selftests_and_rejects_unknown_names() -> None:
    names = [p.name for p in select(None)]
    assert "host-shm" in names and "selftest-hang" not in names
    with pytest.raises(UnknownNameError):
        select(["no-such-probe"])
