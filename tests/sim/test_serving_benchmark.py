"""The serving benchmark in a run: the clients' concurrency limit (never more than N in flight, a slot refilled at
the completion instant, prompts sent in list order), from the trace or `--concurrency`, with a rate too; and the
figures the clients print (summary.json `serving`) against hand counts and against the run's own requests."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from simroute.sim import RunConfig, simulate
from simroute.sim.arrivals import ConcurrencyLimit
from simroute.sim.engine.log import itl_stats, weighted_percentile
from simroute.sim.metrics import Recorder, serving_summary
from simroute.sim.request_spec import RequestSpec
from simroute.sim.vocab import Status
from simroute.workload import generate


class _Clients:
    """The context a `ConcurrencyLimit` reads (a SimPy clock and per-request done events); each started request
    ends `durations[id]` later."""

    def __init__(self, durations: list[float]) -> None:
        self.env, self.durations = simpy.Environment(), durations
        self.events: dict[int, simpy.Event] = {}
        self.starts: dict[int, float] = {}

    def done_event(self, request: int) -> simpy.Event:
        return self.events.setdefault(request, self.env.event())

    def start(self, spec: RequestSpec) -> None:
        self.starts[spec.request_id] = self.env.now
        self.env.process(self._serve(spec.request_id))

    def _serve(self, request: int):
        yield self.env.timeout(self.durations[request])
        self.done_event(request).succeed()


def _spec(request: int) -> RequestSpec:
    return RequestSpec(request, -1, -1, 1, 1, [], [], 0, 0)


def test_the_limit_is_a_fifo_semaphore_over_the_prompt_list():
    """3 slots, 7 requests due at t = 0 lasting 5, 1, 3, 2, 2, 1, 4 s. By hand: r0-r2 start at 0; r1 ends at 1 and
    r3 takes its slot; at 3 r2 and r3 end (r2's end was scheduled first) and r4, r5 start; r5 ends at 4 and r6
    starts. Fixed chains of clients (r3 after r0, r4 after r1, ...) would start r3 at 5, r4 at 1, r5 at 3."""
    clients = _Clients([5, 1, 3, 2, 2, 1, 4])
    limit = ConcurrencyLimit(clients, 3, clients.start)
    for request in range(7):
        limit.submit(_spec(request))
    clients.env.run()
    assert [clients.starts[r] for r in range(7)] == [0, 0, 0, 1, 3, 3, 4]
    assert limit.peak == 3 and limit.free == 3 and not limit.queue


def test_requests_due_later_wait_in_arrival_order():
    """Requests due at 0, 0, 0.5, 0.6 with one slot: each starts when the one before it ends, in the order they
    came due, and a request due while a slot is free starts at once (r3 due at 9, after r2 ended at 7)."""
    clients = _Clients([2, 2, 3, 1])
    limit = ConcurrencyLimit(clients, 1, clients.start)

    def feed():
        for request, due in enumerate((0, 0, 0.5, 9)):
            yield clients.env.timeout(due - clients.env.now)
            limit.submit(_spec(request))
    clients.env.process(feed())
    clients.env.run()
    assert [clients.starts[r] for r in range(4)] == [0, 2, 4, 9]


def _serving(tmp_path, name="s.parquet", seed=1, **params):
    base = {"requests": 40, "input_tokens": 512, "output_tokens": 48, "range_ratio": 0.5}
    return str(generate("serving", tmp_path / name, seed=seed, params={**base, **params}))


def _run(trace, **kw):
    return simulate(RunConfig(topology="fattree", calib="h100-ibgda", trace=trace, hosts=1, telemetry=False, **kw))


def _intervals(res):
    requests = res.tables["requests"].to_pandas()
    start = requests["arrival_s"].to_numpy()
    return start, start + requests["e2e_s"].to_numpy(), requests


def _most_in_flight(start, end) -> int:
    """Sweep over [start, end) intervals (an end before a start at the same instant)."""
    events = sorted([(t, 1) for t in start] + [(t, -1) for t in end], key=lambda event: (event[0], event[1]))
    return int(max(np.cumsum([delta for _, delta in events])))


def test_a_closed_loop_keeps_exactly_n_in_flight_and_refills_at_completions(tmp_path):
    """One DeepSeek-V3 host, 40 prompts, 6 clients: never more than 6 in flight; the first 6 go at t = 0, every
    later one at the instant a request completed (the same float), the prompts in list order; all complete."""
    res = _run(_serving(tmp_path, concurrency=6))
    start, end, requests = _intervals(res)
    assert res.summary["completed"] == 40
    assert _most_in_flight(start, end) == 6
    assert np.all(start[:6] == 0.0) and np.all(start[6:] > 0)
    assert np.all(np.isin(start[6:], end))                   # each later send is some request's completion instant
    assert np.all(np.diff(start) >= 0)                       # FIFO: request i is sent no later than request i + 1
    ends = np.sort(end)
    assert np.array_equal(np.sort(start[6:]), ends[:34])     # the k-th completion sends prompt 6 + k
    load = res.summary["load"]
    assert (load["concurrency"], load["concurrency_from"], load["peak_in_flight"]) == (6, "trace", 6)


def test_the_run_option_overrides_the_trace_and_deterministic(tmp_path):
    trace = _serving(tmp_path, concurrency=6)
    first, again = _run(trace, concurrency=2), _run(trace, concurrency=2)
    start, end, _ = _intervals(first)
    assert _most_in_flight(start, end) == 2 and first.summary["load"]["concurrency_from"] == "run"
    assert first.summary["serving"] == again.summary["serving"]
    assert first.tables["requests"].equals(again.tables["requests"])


def test_rate_and_concurrency_together(tmp_path):
    """A Poisson stream of 50 requests/s capped at 3 in flight: a request is sent at its arrival or later, never
    more than 3 at once, and the offered rate is recorded."""
    trace = _serving(tmp_path, qps=50.0, concurrency=3)
    res = _run(trace)
    from simroute.workload import read_requests
    arrival = read_requests(trace)["arrival_s"].to_numpy()
    start, end, _ = _intervals(res)
    assert np.all(start >= arrival) and np.any(start > arrival) and _most_in_flight(start, end) <= 3
    assert res.summary["serving"]["request_rate"] == pytest.approx((40 - 1) / arrival[-1])


def test_weighted_percentile_is_numpys_over_the_repeated_values():
    rng = np.random.default_rng(0)
    for size in (1, 2, 7, 50):
        values, weights = rng.random(size), rng.integers(1, 9, size)
        for q in (0.0, 1.0, 50.0, 95.0, 99.0, 100.0):
            assert weighted_percentile(values, weights, q) == pytest.approx(
                np.percentile(np.repeat(values, weights), q), rel=1e-12, abs=1e-15)


def test_the_clients_figures_by_hand():
    """Three requests sent at 0, 0 and 1 s: TTFT 0.1, 0.2, 0.3 s; E2E 1.1, 2.2, 0.3 s; 11, 21 and 1 output
    tokens; 100, 200, 300 input tokens. Duration 2.2 s (first send to last completion); TPOT (E2E - TTFT) /
    (output - 1) of the first two only: 0.1 and 0.1 s; ITL pairs (0.1 s x 10 tokens, 0.05 s x 20 tokens):
    mean 2 / 30 s, median and p95 of [0.05 x 20, 0.1 x 10] at positions 14.5 and 27.55: 0.05 and 0.1 s."""
    rec = Recorder(3)
    rec.arrival[:] = [0.0, 0.0, 1.0]
    rec.ttft[:], rec.e2e[:] = [0.1, 0.2, 0.3], [1.1, 2.2, 0.3]
    rec.tpot[:] = [0.1, 0.1, 0.0]
    rec.output_tokens[:], rec.input_tokens[:] = [11, 21, 1], [100, 200, 300]
    rec.status[:] = Status.COMPLETED
    s = serving_summary(rec, np.array([0.1, 0.05]), np.array([10.0, 20.0]), gpus=8, concurrency=2, offered_qps=None)
    assert s["duration_s"] == pytest.approx(2.2)
    assert s["throughput"]["requests_per_s"] == pytest.approx(3 / 2.2)
    assert s["throughput"]["input_tokens_per_s"] == pytest.approx(600 / 2.2)
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(33 / 2.2)
    assert s["throughput"]["total_tokens_per_s"] == pytest.approx(633 / 2.2)
    assert s["throughput_per_gpu"]["output_tokens_per_s"] == pytest.approx(33 / 2.2 / 8)
    assert s["ttft_ms"]["mean"] == pytest.approx(200) and s["ttft_ms"]["median"] == pytest.approx(200)
    assert s["ttft_ms"]["p99"] == pytest.approx(298)       # position 0.99 x 2 = 1.98: 200 + 0.98 x 100
    assert s["tpot_ms"]["mean"] == pytest.approx(100) and s["tpot_ms"]["std"] == pytest.approx(0, abs=1e-9)
    assert s["e2e_ms"]["median"] == pytest.approx(1100)
    assert s["itl_ms"]["mean"] == pytest.approx(2000 / 30)
    assert s["itl_ms"]["median"] == pytest.approx(50) and s["itl_ms"]["p95"] == pytest.approx(100)
    assert s["itl_ms"]["max"] == pytest.approx(100)
    assert s["mean_in_flight"] == pytest.approx(3.6 / 2.2)
    assert itl_stats(np.zeros(0), np.zeros(0))["mean"] is None


def test_a_runs_figures_are_the_clients_over_its_requests(tmp_path):
    """Recomputed from requests.parquet the clients' way (numpy over the completed requests, the duration from
    the first send to the last completion), and the ITL entries sum, token by token, to each request's time
    from its first token to its last: their mean is sum(E2E - TTFT) / sum(output - 1), exactly."""
    res = _run(_serving(tmp_path, concurrency=4))
    s = res.summary["serving"]
    start, end, requests = _intervals(res)
    duration = end.max() - start.min()
    assert s["duration_s"] == pytest.approx(duration, rel=1e-12)
    out = requests["output_tokens"].to_numpy()
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(out.sum() / duration, rel=1e-12)
    assert s["total_input_tokens"] == requests["input_tokens"].sum() and s["gpus"] == 8
    for key, column in (("ttft_ms", "ttft_s"), ("e2e_ms", "e2e_s")):
        values = requests[column].to_numpy() * 1e3
        assert s[key]["mean"] == pytest.approx(values.mean()) and s[key]["median"] == pytest.approx(np.median(values))
        assert s[key]["p99"] == pytest.approx(np.percentile(values, 99))
    tpot = (requests["e2e_s"] - requests["ttft_s"]).to_numpy()[out > 1] / (out[out > 1] - 1) * 1e3
    assert s["tpot_ms"]["mean"] == pytest.approx(tpot.mean())
    decode_s = (requests["e2e_s"] - requests["ttft_s"]).sum()
    assert s["itl_ms"]["mean"] == pytest.approx(decode_s / (out - 1).sum() * 1e3, rel=1e-9)
    assert s["itl_ms"]["max"] >= s["itl_ms"]["p99"] >= s["itl_ms"]["median"] > 0


def test_one_request_alone_decodes_at_its_tpot(tmp_path):
    """A lone request: no other sequence shares its iterations, so every inter-token gap is its TPOT up to the
    context growing by one token a step (bounded here at 0.1%), and E2E = TTFT + (output - 1) x TPOT."""
    res = _run(_serving(tmp_path, requests=1, range_ratio=1.0, output_tokens=200))
    s = res.summary["serving"]
    assert s["itl_ms"]["median"] == pytest.approx(s["tpot_ms"]["mean"], rel=1e-3)
    assert s["itl_ms"]["p99"] == pytest.approx(s["tpot_ms"]["mean"], rel=1e-3)
    assert s["e2e_ms"]["mean"] == pytest.approx(s["ttft_ms"]["mean"] + 199 * s["tpot_ms"]["mean"], rel=1e-12)


def test_itl_of_macro_events_is_within_a_bound_of_single_iterations(tmp_path):
    """The engine runs up to decode_steps_per_event identical decode iterations in one event at the mid-point
    context, so the k gaps of one event are equal where single iterations would grow by one token of context
    each: a gap is off by at most (k - 1) / 2 tokens of each sequence's context growth. Against one event per
    iteration (exact), ITL mean / median / p95 / p99 / max, TPOT and TTFT stay within 0.1% (measured on this run,
    DeepSeek-V3 at TP 8, 8 clients of ~400-token contexts: equal to 1e-14, a lone sequence's gaps growing by 1.1 us
    over 200 tokens)."""
    trace = _serving(tmp_path, concurrency=8, requests=24, output_tokens=96)
    exact, macro = _run(trace, decode_steps_per_event=1), _run(trace, decode_steps_per_event=8)
    assert macro.summary["engine"]["events"] < exact.summary["engine"]["events"] / 2
    for key, stats in (("itl_ms", ("mean", "median", "p95", "p99", "max")), ("tpot_ms", ("mean", "p99")),
                       ("ttft_ms", ("mean", "p99"))):
        for stat in stats:
            assert macro.summary["serving"][key][stat] == pytest.approx(exact.summary["serving"][key][stat],
                                                                         rel=1e-3), (key, stat)


@pytest.mark.parametrize("args", [("run", "--concurrency", "0"), ("run", "--concurrency", "2.5"),
                                  ("trace", "gen", "serving", "-p", "concurrency=0"),
                                  ("trace", "gen", "serving", "-p", "range_ratio=2")])
def test_a_bad_limit_or_ratio_is_one_line_exit_2(cli, tmp_path, args):
    code, out, err = cli(*args, "-o", tmp_path / "out.parquet")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert ("concurrency" in err or "range_ratio" in err) and not (tmp_path / "out.parquet").exists()
