"""The holder-side servers, one at a time: FIFO server, staging pool and its elbow."""

from __future__ import annotations

import pytest
import simpy

from simroute.sim.staging import FifoServer, StagingPool


# ---- FifoServer ---------------------------------------------------------------------------------------
def test_fifo_server_serves_in_arrival_order_on_its_capacity():
    env = simpy.Environment()
    server = FifoServer(env, 2)
    spans = {}

    def job(name, t, seconds):
        yield env.timeout(t)
        start_wait = env.now
        yield from server.hold(seconds)
        spans[name] = (start_wait, env.now)
    for name, t in (("a", 0.0), ("b", 0.0), ("c", 0.1), ("d", 0.2)):
        env.process(job(name, t, 1.0))
    env.run()
    assert spans["a"][1] == spans["b"][1] == pytest.approx(1.0)     # two servers at once
    assert spans["c"][1] == pytest.approx(2.0) and spans["d"][1] == pytest.approx(2.0)
    assert server.max_waiting == 2 and server.busy == 0


# ---- StagingPool ----------------------------------------------------------------------------------------
RATE = 1e9          # one stream's copy rate
COPY = 1e6          # bytes per staged chunk: 1 ms on one stream
LAYERS = 27


def _staging_run(streams, copies, *, gain=0.07, loss=0.05, layers=LAYERS):
    env = simpy.Environment()
    pool = StagingPool(env, streams, RATE, layers=layers, elbow=8, gain_at_elbow=gain, oversubscription_loss=loss)
    ends = []

    def job():
        yield from pool.stage(COPY)
        ends.append(env.now)
    for _ in range(copies):
        env.process(job())
    env.run()
    return sorted(ends), pool


def test_k1_stages_serially_at_one_streams_rate():
    ends, pool = _staging_run(1, 16)
    assert ends == [pytest.approx((i + 1) * COPY / RATE) for i in range(16)]
    assert pool.max_queue == 15


def test_staging_elbow_k8_best_k1_no_help_k16_regresses():
    """Move the Query, Not the Cache, §6.2 / Fig 5b: 7% faster at K = 8 than serialised, K = 4 between,
    K = 16 worse than K = 8; for a lone chunk, the p50 and the makespan of a backlog alike."""
    for copies, rank in ((1, 0), (32, 15), (32, 31)):
        t = {k: _staging_run(k, copies)[0][rank] for k in (1, 4, 8, 16)}
        assert t[1] == pytest.approx((rank + 1) * COPY / RATE)
        assert t[8] == pytest.approx(t[1] * (1 - 0.07))
        assert t[8] < t[4] < t[1] and t[16] > t[8]


def test_streams_beyond_the_layers_are_idle():
    """A chunk has one copy per layer: more streams than layers cannot be used."""
    assert _staging_run(16, 1, layers=4)[0] == _staging_run(4, 1, layers=4)[0]


def test_aggregate_rate_curve():
    pool = StagingPool(simpy.Environment(), 16, RATE, layers=LAYERS, elbow=8, gain_at_elbow=0.07,
                       oversubscription_loss=0.05)
    rates = [pool.aggregate_Bps(c) for c in range(1, 17)]
    assert rates[0] == RATE
    assert all(a < b for a, b in zip(rates[:7], rates[1:8]))        # rising to the elbow
    assert rates[7] == pytest.approx(RATE / 0.93)
    assert all(a > b for a, b in zip(rates[7:-1], rates[8:]))        # falling past it
    assert rates[15] == pytest.approx(RATE / 0.93 * 0.95)


def test_staging_samples_record_waiting_and_in_flight():
    _, pool = _staging_run(2, 4)
    times, waiting, staging = pool.samples
    assert max(staging) == 1 and max(waiting) == 3 and staging[-1] == 0
    assert list(times) == sorted(times)
