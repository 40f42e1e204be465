"""Latency-bound messages: probe + FIFO queueing + bytes over min(single block, fair share); paper Fig 7."""

from __future__ import annotations

import pytest
import simpy

from simroute.network import FlowEngine, load_topology
from simroute.scenarios.network import closed_loop_rtt

from conftest import TOPO_DIR


@pytest.fixture(scope="module")
def testbed():
    return load_topology(TOPO_DIR / "paper-testbed.yaml")


def test_idle_message_is_probe_plus_bytes_plus_latency(testbed):
    env = simpy.Environment()
    eng = FlowEngine(env, testbed)
    lat = sum(l.latency_s for l in testbed.path("h0.g0", "h1.g0"))
    d = eng.message_delay("h0.g0", "h1.g0", 256 * 1152, t_probe_s=16e-6, single_block_Bps=25e9)
    assert d == pytest.approx(16e-6 + 256 * 1152 / 25e9 + lat, rel=1e-12)
    # single block slower than the link: the dispatch rate binds
    d2 = eng.message_delay("h0.g1", "h1.g1", 21e3, t_probe_s=1e-6, single_block_Bps=21e9, now=1.0)
    assert d2 == pytest.approx(1e-6 + 1e-6 + lat, rel=1e-12)


def test_message_sees_bulk_share_without_rerating(testbed):
    env = simpy.Environment()
    eng = FlowEngine(env, testbed)
    for g in ("h1.g0", "h1.g1", "h1.g2"):
        eng.transfer("h0.g0", g, 1e12)                 # three elephants fill h0.g0's 25 GB/s uplink
    env.run(until=1e-3)
    rounds = eng.rerates
    d = eng.message_delay("h0.g0", "h1.g3", 250e3, t_probe_s=0.0, single_block_Bps=25e9)
    lat = sum(l.latency_s for l in testbed.path("h0.g0", "h1.g3"))
    assert d == pytest.approx(250e3 / (25e9 / 4) + lat, rel=1e-9)   # the fair share a 4th flow would get
    assert eng.rerates == rounds and len(eng.flow_rates()) == 3      # no re-rating, no flow


def test_fifo_virtual_clock_queues_back_to_back_messages(testbed):
    env = simpy.Environment()
    eng = FlowEngine(env, testbed)
    kw = dict(t_probe_s=0.0, single_block_Bps=25e9)
    d1 = eng.message_delay("h0.g0", "h1.g0", 25e3, **kw)
    d2 = eng.message_delay("h0.g0", "h1.g1", 25e3, **kw)      # same uplink, same instant: waits 1 us
    d3 = eng.message_delay("h0.g1", "h1.g2", 25e3, **kw)      # another uplink: no wait
    assert d2 - d1 == pytest.approx(1e-6, rel=1e-9) and d3 == pytest.approx(d1, rel=1e-12)


def test_fig7_flat_then_rising(testbed):
    """K background closed-loop requesters on one 25 GB/s uplink (Mq = 256 rows, 1152 B out / 1032 B back)."""
    rtt = [closed_loop_rtt(testbed, k, rounds=120) for k in range(6)]
    assert max(rtt[:3]) == pytest.approx(rtt[0], rel=1e-9)          # K = 0..2: unchanged
    assert rtt[3] > rtt[0] * 1.02                                     # K = 3: link full, rising
    assert rtt[4] > rtt[3] * 1.15 and rtt[5] > rtt[4] * 1.1           # and keeps rising
    assert 40e-6 < rtt[0] < 55e-6                                     # paper: 45.6 us at Mq = 256
