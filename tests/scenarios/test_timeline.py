"""The Perfetto / Chrome trace-event export: strict JSON, a valid event stream, the expected tracks; loaded in
Perfetto's trace processor where its binary is available (the `perfetto` package downloads it on first use)."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pytest

from simroute.scenarios.timeline import build_events, validate_events, write_timeline
from simroute.defaults import PAPER_DEPLOYMENT


def _strict(text: str) -> dict:
    def no_constants(name):
        raise AssertionError(f"non-JSON constant {name}")
    return json.loads(text, parse_constant=no_constants)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from simroute.calib import default_profile_path
    from simroute.network import default_topology_path
    from simroute.sim import RunConfig, simulate
    from simroute.sim.config import default_trace_path
    out = {}
    for policy in ("paper", "always-route"):
        cfg = RunConfig(**PAPER_DEPLOYMENT, topology=str(default_topology_path()), trace=str(default_trace_path()),
                        calib=str(default_profile_path()), policy=policy, telemetry=True)
        path = tmp_path_factory.mktemp(policy) / "t.json"
        tables = simulate(cfg).tables
        out[policy] = (write_timeline(path, tables), tables)
    return out


def test_timeline_is_valid_and_has_every_track(runs):
    kinds = set()
    for path, tables in runs.values():
        doc = _strict(path.read_text())
        assert validate_events(doc) == []
        kinds |= {(e["ph"], e.get("cat")) for e in doc["traceEvents"]}
        names = {e["name"] for e in doc["traceEvents"]}
        assert {"to first token", "decode"} <= names
        n_done = sum(s == "completed" for s in tables["requests"].column("status").to_pylist())
        assert sum(e["ph"] == "b" and e["name"].startswith("request ") for e in doc["traceEvents"]) == n_done
    assert {("b", "request"), ("b", "flow"), ("b", "holder"), ("C", None), ("M", None)} <= kinds


def test_nan_fields_are_left_out():
    req = pa.table({"request_id": [0, 1], "requester": [3, 4], "arrival_s": [0.0, float("nan")],
                    "ttft_s": [0.01, 0.02], "tpot_s": [float("nan"), 0.001], "e2e_s": [0.02, 0.03],
                    "status": ["completed"] * 2, "n_route": [1, 0], "n_fetch": [0, 1], "n_local": [0, 0],
                    "output_tokens": [1, 4]})
    ev = build_events({"requests": req})
    text = json.dumps({"traceEvents": ev}, allow_nan=False)
    doc = _strict(text)
    assert validate_events(doc) == []
    first = next(e for e in doc["traceEvents"] if e["name"] == "request 0")
    assert "tpot_ms" not in first["args"] and math.isclose(first["args"]["ttft_ms"], 10.0)
    assert not any(e["name"] == "request 1" for e in doc["traceEvents"])      # no finite arrival: dropped


def test_validator_finds_format_errors():
    bad = {"traceEvents": [{"name": "a", "ph": "b", "ts": 0.0, "pid": 1, "tid": 1, "cat": "c", "id": "x"},
                           {"name": "b", "ph": "X", "ts": 1.0, "pid": 1, "tid": 1, "dur": -1},
                           {"name": "c", "ph": "Q", "ts": "soon", "pid": 1, "tid": 1}]}
    problems = " | ".join(validate_events(bad))
    assert "unmatched" in problems and "dur -1" in problems and "phase 'Q'" in problems and "'soon'" in problems


def test_perfetto_trace_processor_loads_it(runs):
    tp_mod = pytest.importorskip("perfetto.trace_processor", reason="perfetto package not installed")
    path, tables = runs["paper"]
    try:
        tp = tp_mod.TraceProcessor(trace=str(path))
    except Exception as exc:   # the package fetches its trace_processor binary on first use
        pytest.skip(f"Perfetto trace processor unavailable here (offline?): {type(exc).__name__}")
    try:
        n = tp.query("select count(*) as n from slice where name like 'request %'").as_pandas_dataframe()["n"][0]
        phases = tp.query("select count(*) as n from slice where name = 'decode'").as_pandas_dataframe()["n"][0]
    finally:
        tp.close()
    done = sum(s == "completed" for s in tables["requests"].column("status").to_pylist())
    assert n == done and phases == done
