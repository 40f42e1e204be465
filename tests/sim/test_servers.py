"""The holder-side servers, one at a time: FIFO server, staging pool and its elbow."""

from __future__ import annotations

import pytest
import simpy

from simroute.model.staging import StagingParams
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
LAYERS = 27
COPY = 27e6         # bytes per staged chunk: 27 copies of 1 MB, 1 ms each on one engine
PARAMS = StagingParams(dispatch_s=10e-6, join_s=5e-6, copy_Bps=1e9, hbm_copy_Bps=1e12, copy_engines=3, hw_queues=8)


def _staging_run(streams, chunks, *, params=PARAMS, layers=LAYERS, nbytes=COPY):
    env = simpy.Environment()
    pool = StagingPool(env, streams, params, layers=layers)
    ends = []

    def job():
        yield from pool.stage(nbytes)
        ends.append(env.now)
    for _ in range(chunks):
        env.process(job())
    env.run()
    return sorted(ends), pool


def test_chunks_are_staged_one_after_another():
    """One issuing thread: a chunk holds the pool for its whole staging, the next waits (FIFO). At K = 1 a
    chunk is 27 copies of 1 ms, the first issued at 10 us: 27.01 ms each."""
    ends, pool = _staging_run(1, 4)
    one = 27e-3 + 10e-6
    assert ends == [pytest.approx((i + 1) * one) for i in range(4)]
    assert pool.max_queue == 3


def test_copy_engines_set_the_elbow_and_more_streams_only_add_joins():
    """27 copies of 1 ms, issued 10 us apart, on 3 engines: K = 1 runs them back to back from 10 us (27.01 ms);
    K = 2 puts 14 on stream 0 (14.01 ms); K = 3 nine per stream, stream 2's from 30 us (9.03 ms); more streams
    find no fourth engine. A stream more costs its join only where the host is the bottleneck."""
    t = {k: _staging_run(k, 1)[0][0] for k in (1, 2, 3, 4, 8, 16)}
    assert t[1] == pytest.approx(27.01e-3)
    assert t[2] == pytest.approx(14.01e-3)
    assert t[3] == pytest.approx(9.03e-3) and t[4] == t[8] == t[16] == t[3]
    host = _staging_run(16, 1, nbytes=27e3)[0][0]          # 1 us copies: the host's 27 issues and 16 joins
    assert host == pytest.approx(27 * 10e-6 + 16 * 5e-6)
    eight = _staging_run(8, 1, nbytes=27e3)[0][0]
    assert eight == pytest.approx(27 * 10e-6 + 8 * 5e-6) and eight < host


def test_streams_beyond_the_layers_are_idle():
    """A chunk has one copy per layer: more streams than layers join no more streams."""
    assert _staging_run(16, 1, layers=4, nbytes=4e3)[0] == _staging_run(4, 1, layers=4, nbytes=4e3)[0]


def test_a_chunks_time_is_kept_per_size():
    pool = _staging_run(8, 1)[1]
    first = pool.stage_s(COPY)
    assert pool.stage_s(COPY) == first and list(pool._seconds) == [COPY]


def test_staging_samples_record_waiting_and_in_flight():
    _, pool = _staging_run(2, 4)
    times, waiting, staging = pool.samples
    assert max(staging) == 1 and max(waiting) == 3 and staging[-1] == 0
    assert list(times) == sorted(times)
