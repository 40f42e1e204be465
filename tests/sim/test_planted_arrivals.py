"""Arrivals by hand: a closed-loop request waits for its parent's end plus its think time, and never runs when its
parent was dropped; the offered rate of a trace is its gaps over its span ((n - 1) / span, the rate a benchmark
client's Poisson stream is drawn at), so --qps rescales by that; the serving block's GPUs are instances x TP."""

from __future__ import annotations

import math

import pytest

from simroute.calib import default_profile_path
from simroute.network import shipped_topology
from simroute.scenarios.traces import write_trace
from simroute.sim import RunConfig, simulate
from simroute.sim.arrivals import arrival_load

CHUNKS = [{"chunk_id": 0, "tokens": 2048, "canonical": True, "holder_hint": 0, "cached_offset": 0}]


def _request(arrival_s: float, requester: int, after: int = -1, think_s: float = 0.0) -> dict:
    return {"arrival_s": arrival_s, "requester_hint": requester, "prompt_tokens": 16, "output_tokens": 4,
            "chunk_ids": [0], "after_id": after, "think_s": think_s}


def _run(trace, **kw):
    return simulate(RunConfig(topology=str(shipped_topology("paper-testbed")), trace=str(trace),
                              calib=str(default_profile_path()), model="deepseek-v2-lite", telemetry=False, **kw))


def test_a_closed_loop_child_waits_its_think_time_and_a_dropped_parents_child_never_runs(tmp_path):
    """At TP 2 the testbed's 8 GPUs are 4 instances. Request 0 names instance 99: dropped; request 1, its child,
    is dropped too and never sent. Request 2 runs on instance 2 (the second host's first); its child, request 3,
    is sent 0.25 s after request 2 ends. The serving block counts 4 instances x 2 GPUs. Request 2 fetches the
    2048-token chunk from instance 0 (its whole latent: 576 values x 2 bytes x 27 layers a token, whatever the
    TP: every rank holds the replicated latent), request 3 finds that copy resident."""
    reqs = [_request(0.0, 99), _request(0.0, 2, after=0), _request(0.0, 2), _request(0.0, 2, after=2, think_s=0.25)]
    trace = write_trace(tmp_path / "t.parquet", reqs, CHUNKS)
    res = _run(trace, tp=2, policy="always-fetch")
    requests = res.tables["requests"].to_pandas()
    assert list(requests["status"]) == ["dropped", "dropped", "completed", "completed"]
    assert list(requests["drop_reason"])[:2] == ["requester out of range", "closed-loop parent dropped"]
    assert math.isnan(requests["arrival_s"][1])
    end_2 = requests["arrival_s"][2] + requests["e2e_s"][2]
    assert requests["arrival_s"][3] == pytest.approx(end_2 + 0.25, rel=1e-12)
    serving = res.summary["serving"]
    assert (res.summary["instances"], serving["gpus"], serving["completed"]) == (4, 8, 2)
    counts = res.summary["primitive_counts"]
    assert (counts["fetch"], counts["resident"], res.summary["bytes"]["fetch"]) == (1, 1, 2048 * 1152 * 27)


def test_the_offered_rate_is_the_gaps_over_the_span(tmp_path):
    """Open-loop requests at 0, 1, 2, 3 and 4 s (a closed-loop child besides, not counted): 4 gaps over 4 s,
    1 request/s; --qps 2 halves every arrival time."""
    reqs = [_request(float(t), 4) for t in range(5)] + [_request(0.0, 4, after=0, think_s=1.0)]
    trace = str(write_trace(tmp_path / "t.parquet", reqs, CHUNKS))
    load = arrival_load(trace, 6, qps=None, time_scale=None)
    assert (load.trace_qps, load.open_loop_requests, load.time_scale, load.offered_qps) == (1.0, 5, 1.0, 1.0)
    faster = arrival_load(trace, 6, qps=2.0, time_scale=None)
    assert (faster.time_scale, faster.offered_qps) == (0.5, 2.0)
