"""What a run reports, worked by hand: summary.json's latency percentiles, SLO attainment, goodput and throughput,
the `serving` block the benchmark clients print, inter-token statistics, the overload flag and the holders'
figures, each over the requests they are defined over (completed ones; of those, more than one output token for
TPOT) and never over a dropped request's numbers.

One six-request record serves the summary and the serving tests (times in s, tokens; SLO 500 ms TTFT, 50 ms TPOT):

| request | sent | TTFT | TPOT | E2E | output | input | status |
|---|---|---|---|---|---|---|---|
| 0 | 0.25 | 0.1 | 0.08 | 4.1 | 51 | 1000 | completed (misses the TPOT target) |
| 1 | 0.5 | 0.5 | 0.05 | 3.0 | 51 | 2000 | completed (exactly at both targets: meets) |
| 2 | 1.0 | 0.7 | 0.0 | 0.7 | 1 | 3000 | completed (one token; misses the TTFT target) |
| 3 | 0.0 | 0.05 | 0.01 | 0.6 | 20 | 500 | dropped after its first token (preempted too often) |
| 4 | 2.0 | - | - | - | 30 | 400 | dropped before its first token (unfinished at --until) |
| 5 | - | - | - | - | 10 | 100 | never sent |
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from simroute.sim.engine.log import IterationLog, itl_stats, weighted_percentile, weighted_percentiles
from simroute.sim.metrics import (Recorder, _client_stats, holder_summary, incomplete_account, overload, percentiles,
                                  serving_summary, summarise)
from simroute.sim.vocab import DropReason

NAN = math.nan
SIM_TIME_S = 5.0
CONFIG = {"slo": "p99 ttft_ms <= 500 and p99 tpot_ms <= 50", "seed": 3}


def _record() -> Recorder:
    rec = Recorder(6)
    rec.arrival[:] = [0.25, 0.5, 1.0, 0.0, 2.0, NAN]
    rec.ttft[:] = [0.1, 0.5, 0.7, 0.05, NAN, NAN]
    rec.tpot[:] = [0.08, 0.05, 0.0, 0.01, NAN, NAN]
    rec.e2e[:] = [4.1, 3.0, 0.7, 0.6, NAN, NAN]
    rec.output_tokens[:] = [51, 51, 1, 20, 30, 10]
    rec.input_tokens[:] = [1000, 2000, 3000, 500, 400, 100]
    rec.ttft_queueing[:] = [0.01, 0.02, 0.03, 0.5, 0.0, 0.0]
    rec.bytes_fetch[:] = [1e6, 0.0, 0.0, 2e6, 0.0, 0.0]
    rec.bytes_fanout[:] = [3e6, 0.0, 0.0, 0.0, 0.0, 0.0]
    for request in (0, 1, 2):
        rec.complete(request)
    rec.complete(3)                                  # it ran to its end, then was dropped (as a refused one is)
    rec.drop(3, DropReason.THRASHED)
    rec.drop(4, DropReason.UNFINISHED)
    return rec


@pytest.fixture(scope="module")
def summary() -> dict:
    return summarise(_record(), config=CONFIG, inputs={}, sim_time_s=SIM_TIME_S, extra={})


def test_latency_percentiles_are_over_the_completed_requests_only(summary):
    """TTFT of requests 0-2: 100, 500, 700 ms. Mean 433.3; numpy's linear percentiles at positions 0.95 x 2 and
    0.99 x 2: 500 + 0.9 x 200 = 680 and 500 + 0.98 x 200 = 696. Request 3's 50 ms (dropped) is not among them."""
    assert summary["ttft_ms"] == pytest.approx({"mean": 1300 / 3, "p50": 500.0, "p95": 680.0, "p99": 696.0,
                                                "max": 700.0})
    # TPOT of the completed requests with more than one output token: 80 and 50 ms (request 2's 0 is not a TPOT)
    assert summary["tpot_ms"] == pytest.approx({"mean": 65.0, "p50": 65.0, "p95": 78.5, "p99": 79.7, "max": 80.0})
    # E2E of requests 0-2: 4100, 3000, 700 ms; request 3's 600 ms is a dropped request's
    assert summary["e2e_ms"]["mean"] == pytest.approx(7800 / 3) and summary["e2e_ms"]["max"] == pytest.approx(4100)
    # where TTFT went, mean over the completed requests: queueing 10, 20, 30 ms
    assert summary["ttft_breakdown_ms"]["queueing"] == pytest.approx(20.0)


def test_attainment_needs_both_targets_and_a_value_at_the_target_meets_it(summary):
    """Request 0 misses TPOT (80 > 50 ms), request 2 misses TTFT (700 > 500 ms), request 1 sits exactly at both
    targets and meets them (<=): 1 of the 3 completed requests. Goodput: that one over the 5 s run."""
    assert (summary["requests"], summary["completed"], summary["dropped"]) == (6, 3, 2)
    assert summary["slo"]["attainment"] == pytest.approx(1 / 3)
    assert summary["throughput"]["goodput_requests_per_s"] == pytest.approx(1 / SIM_TIME_S)
    assert summary["slo"]["per_request"] == {"ttft_ms": ["ttft_ms_p99 <= 500"], "tpot_ms": ["tpot_ms_p99 <= 50"]}


def test_throughput_counts_the_completed_requests_tokens_and_fetch_bytes_exclude_the_fan_out(summary):
    assert summary["throughput"]["output_tokens_per_s"] == pytest.approx((51 + 51 + 1) / SIM_TIME_S)
    assert summary["bytes"]["fetch"] == pytest.approx(3e6)              # requests 0 and 3: 1 MB + 2 MB pulled
    assert summary["bytes"]["fetch_fanout_nvlink"] == pytest.approx(3e6)
    assert summary["dropped_by_reason"] == {"preempted too often": 1, "unfinished at --until": 1}


def test_the_incomplete_account_counts_each_request_once(summary):
    """6 requests: 3 completed, 2 dropped (each under its reason), 1 that never arrived."""
    line = incomplete_account(summary)
    assert line.startswith("completed 3 of 6 requests: 1 unfinished at --until") and "; 1 preempted too often" in line
    assert line.endswith("; 1 never arrived or never finished")
    assert incomplete_account({"requests": 3, "completed": 3, "dropped": 0}) is None


def test_a_latency_a_request_lacks_is_left_out_not_counted_as_zero():
    """100, (none), 300 ms: the two that exist. Mean 200, median 200, numpy's linear p95 and p99 at positions 0.95
    and 0.99 between them: 290 and 298, max 300 (a missing value read as 0 would give mean 133.3, p50 100)."""
    assert percentiles(np.array([0.1, NAN, 0.3])) == pytest.approx({"mean": 200.0, "p50": 200.0, "p95": 290.0,
                                                                     "p99": 298.0, "max": 300.0})
    assert percentiles(np.array([NAN])) == {"mean": None, "p50": None, "p95": None, "p99": None, "max": None}
    # the serving clients' statistics likewise: std of 100 and 300 ms (ddof 0) is 100
    assert _client_stats(np.array([0.1, NAN, 0.3])) == pytest.approx({"mean": 200.0, "median": 200.0, "std": 100.0,
                                                                       "p99": 298.0})


def test_a_run_that_completed_nothing_has_no_attainment_and_no_goodput():
    """Two requests, both dropped before their first token: no latency, attainment unknown (None, not met, not
    100%), goodput unknown with it (None: simroute.sim.slo.attainment gives none without completed requests), no
    output tokens over the 2 s run."""
    rec = Recorder(2)
    rec.arrival[:] = [0.0, 0.5]
    rec.output_tokens[:] = [10, 10]
    rec.drop(0, DropReason.UNFINISHED)
    rec.drop(1, DropReason.UNFINISHED)
    out = summarise(rec, config=CONFIG, inputs={}, sim_time_s=2.0, extra={})
    assert (out["completed"], out["dropped"], out["slo"]["attainment"]) == (0, 2, None)
    assert out["throughput"] == {"output_tokens_per_s": 0.0, "goodput_requests_per_s": None}
    assert out["ttft_ms"]["p99"] is None


# ---- the serving benchmark clients' figures (summary.json `serving`) --------------------------------------------
GAPS_S = np.array([0.01, 0.03, 0.02, 0.05])     # inter-token gaps and how many tokens saw each
GAP_TOKENS = np.array([30.0, 10.0, 60.0, 1.0])


@pytest.fixture(scope="module")
def serving() -> dict:
    return serving_summary(_record(), GAPS_S, GAP_TOKENS, gpus=16, concurrency=4, offered_qps=2.0)


def test_serving_duration_runs_from_the_first_send_to_the_last_completion(serving):
    """The first send is request 3's at 0 s (dropped, but it was sent); the last completion request 0's at
    0.25 + 4.1 = 4.35 s."""
    assert serving["duration_s"] == pytest.approx(4.35)
    assert serving["completed"] == 3 and serving["gpus"] == 16
    assert (serving["concurrency_limit"], serving["request_rate"]) == (4, 2.0)


def test_serving_throughput_counts_the_completed_requests_over_the_duration_and_the_gpus(serving):
    """Completed: 3 requests, 1000 + 2000 + 3000 input and 51 + 51 + 1 output tokens, over 4.35 s; per GPU / 16."""
    rate = serving["throughput"]
    assert rate["requests_per_s"] == pytest.approx(3 / 4.35)
    assert rate["input_tokens_per_s"] == pytest.approx(6000 / 4.35)
    assert rate["output_tokens_per_s"] == pytest.approx(103 / 4.35)
    assert rate["total_tokens_per_s"] == pytest.approx(6103 / 4.35)
    assert serving["throughput_per_gpu"] == pytest.approx({key: value / 16 for key, value in rate.items()})
    assert (serving["total_input_tokens"], serving["total_output_tokens"]) == (6000, 103)
    # the mean number in flight: the completed requests' summed E2E (4.1 + 3.0 + 0.7 s) over the duration
    assert serving["mean_in_flight"] == pytest.approx(7.8 / 4.35)


def test_serving_latencies_are_the_clients_mean_median_population_std_and_p99(serving):
    """TTFT 100, 500, 700 ms: mean 433.3, median 500, std (numpy's, ddof 0) sqrt(186666.7 / 3) = 249.4, p99 696.
    TPOT over more than one output token: 80 and 50 ms. E2E 4100, 3000, 700 ms."""
    ttft = serving["ttft_ms"]
    assert ttft == pytest.approx({"mean": 1300 / 3, "median": 500.0, "std": math.sqrt(560000 / 9), "p99": 696.0})
    assert serving["tpot_ms"] == pytest.approx({"mean": 65.0, "median": 65.0, "std": 15.0, "p99": 79.7})
    assert serving["e2e_ms"]["median"] == pytest.approx(3000.0) and serving["e2e_ms"]["mean"] == pytest.approx(2600)


def test_inter_token_statistics_weigh_each_gap_by_its_tokens(serving):
    """101 tokens: 30 saw 10 ms, 60 saw 20 ms, 10 saw 30 ms, 1 saw 50 ms. Mean (300 + 1200 + 300 + 50) / 101 ms;
    sorted, tokens 0-29 are 10 ms, 30-89 20 ms, 90-99 30 ms, 100 50 ms: the median (position 50) 20 ms, p95
    (95) and p99 (99) 30 ms, the largest 50 ms; the std is the token-weighted one."""
    mean = (30 * 10 + 60 * 20 + 10 * 30 + 1 * 50) / 101
    var = (30 * (10 - mean) ** 2 + 60 * (20 - mean) ** 2 + 10 * (30 - mean) ** 2 + (50 - mean) ** 2) / 101
    want = {"mean": mean, "median": 20.0, "std": math.sqrt(var), "p95": 30.0, "p99": 30.0, "max": 50.0}
    assert serving["itl_ms"] == pytest.approx(want)
    assert itl_stats(GAPS_S, GAP_TOKENS) == pytest.approx(want)


def test_the_iteration_logs_itl_summary_names_the_median_p50():
    log = IterationLog()
    for gap, tokens in zip(GAPS_S, GAP_TOKENS):
        log.gap(float(gap), float(tokens))
    assert log.itl_percentiles() == pytest.approx({"mean": 1850 / 101, "p50": 20.0, "p95": 30.0, "p99": 30.0,
                                                   "max": 50.0})


def test_the_iteration_logs_itl_is_kept_until_more_gaps_are_logged():
    """`IterationLog.itl` (shared by the engine and serving summaries) is `itl_stats` of the gaps logged so far:
    a gap logged after a first call moves it, and a caller changing the dict it got changes nothing kept."""
    log = IterationLog()
    for gap, tokens in zip(GAPS_S, GAP_TOKENS):
        log.gap(float(gap), float(tokens))
    first = log.itl()
    assert first == pytest.approx(itl_stats(GAPS_S, GAP_TOKENS))
    first["max"] = -1.0
    assert log.itl()["max"] == pytest.approx(50.0)
    log.gap(0.5, 3.0)
    assert log.itl()["max"] == pytest.approx(500.0)
    assert log.itl() == pytest.approx(itl_stats(np.append(GAPS_S, 0.5), np.append(GAP_TOKENS, 3.0)))


def test_weighted_percentiles_sorted_once_equal_each_percentile_alone():
    values, weights = np.array([4.0, 1.0, 3.0, 2.0, 3.0]), np.array([1, 2, 1, 3, 2])
    qs = (0.0, 12.5, 50.0, 95.0, 99.0, 100.0)
    assert weighted_percentiles(values, weights, qs) == [weighted_percentile(values, weights, q) for q in qs]
    assert weighted_percentiles(values, weights, qs) == pytest.approx(
        [float(np.percentile(np.repeat(values, weights), q)) for q in qs])


def test_a_weighted_percentile_by_hand():
    """Values 1, 2, 3, 4 once each: the median sits at position 0.5 x 3 = 1.5, between 2 and 3: 2.5; with 2
    seen three times (1, 2, 2, 2, 3, 4) at 0.5 x 5 = 2.5: 2."""
    values = np.array([4.0, 1.0, 3.0, 2.0])
    assert weighted_percentile(values, np.array([1, 1, 1, 1]), 50.0) == pytest.approx(2.5)
    assert weighted_percentile(values, np.array([1, 1, 1, 3]), 50.0) == pytest.approx(2.0)
    assert weighted_percentile(values, np.array([1, 1, 1, 1]), 100.0) == 4.0
    assert weighted_percentile(values, np.array([1, 1, 1, 1]), 0.0) == 1.0


# ---- overload and the holders' figures -------------------------------------------------------------------------
ARRIVAL = np.arange(100, dtype=float)


def test_overload_growth_compares_the_last_quarter_with_the_second_in_arrival_order():
    """TTFT 0.2 x arrival + 0.1 s over arrivals 0..99: the second quarter's median 0.2 x 37 + 0.1 = 7.5 s, the
    last's 0.2 x 87 + 0.1 = 17.5 s: growth 7/3, overloaded. Handed over in another order, the same requests
    give the same answer (the quarters are of arrival order)."""
    ttft = 0.2 * ARRIVAL + 0.1
    assert overload(ARRIVAL, ttft) == {"ttft_growth": pytest.approx(7 / 3), "overloaded": True}
    shuffled = np.random.default_rng(5).permutation(100)
    assert overload(ARRIVAL[shuffled], ttft[shuffled]) == {"ttft_growth": pytest.approx(7 / 3), "overloaded": True}


def test_overload_needs_both_a_growing_queue_and_a_long_wait():
    fast = overload(ARRIVAL, 1e-3 * (ARRIVAL + 1))       # grows x 88 / 38 but every TTFT under 0.1 s
    assert fast == {"ttft_growth": pytest.approx(88 / 38), "overloaded": False}
    slow_but_steady = overload(ARRIVAL, np.full(100, 5.0))   # 5 s each: a long wait, no growth
    assert slow_but_steady == {"ttft_growth": pytest.approx(1.0), "overloaded": False}


def _holders(calls, fan_in, work) -> pa.Table:
    n = len(calls)
    calls, fan_in, work = (np.asarray(x, dtype=float) for x in (calls, fan_in, work))
    return pa.table({"holder": np.arange(n, dtype=np.int32), "queries": 2 * calls, "calls": calls,
                     "mean_fan_in": fan_in, "max_fan_in": np.array([1, 6, 0], np.int32),
                     "work_s": work, "work_share": work / 10.0, "wait_s": 1e-6 * calls,
                     "mean_wait_s": np.where(calls > 0, 1e-6, np.nan), "busy_share": work / 5.0})


def test_the_holders_mean_fan_in_is_weighted_by_calls_and_the_busiest_is_by_work():
    """Holder 0 ran 10 calls of fan-in 1, holder 1 2 calls of fan-in 4, holder 2 none: (10 + 8) / 12 = 1.5 per
    call (not the holders' mean 2.5). The busiest is holder 1 (0.9 s of partial work), not the one with most
    calls."""
    got = holder_summary(_holders([10, 2, 0], [1.0, 4.0, NAN], [0.5, 0.9, 0.0]))
    assert got["mean_fan_in"] == pytest.approx(1.5) and got["calls"] == 12.0 and got["queries"] == 24.0
    assert got["queries_per_call"] == pytest.approx(2.0) and got["max_fan_in"] == 6
    assert got["mean_wait_us"] == pytest.approx(1.0)
    assert got["busiest"]["holder"] == 1 and got["busiest"]["work_s"] == pytest.approx(0.9)
    assert got["busiest"]["mean_fan_in"] == pytest.approx(4.0)
