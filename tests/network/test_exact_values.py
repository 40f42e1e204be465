"""Exact values of the network layer's small formulas: the one integer hash against SplitMix64's published
outputs, the RoCEv2 5-tuple's packing, a context miss's hold on the wire, and the bisection bandwidth."""

from __future__ import annotations

import pytest
import simpy

from simroute.network import FlowEngine, MessageModel, MessageModelParams, load_topology
from simroute.network.hashing import M64, SPORT_MAX, SPORT_MIN, flow_key, mix64

from simroute.network import DATA_DIR as TOPO_DIR

GOLDEN = 0x9E3779B97F4A7C15


def test_mix64_is_splitmix64():
    # SplitMix64 from state 0 (Steele, Lea and Flood; the reference outputs, also Java's
    # new SplittableRandom(0).nextLong() = -2152535657050944081): mix64(k x golden) is its k-th output
    expected = [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F, 0xF88BB8A8724C81EC]
    assert [mix64(k * GOLDEN & M64) for k in range(4)] == expected
    assert mix64(-1) == mix64(M64)                      # wraps to 64 bits


def test_every_source_port_gives_its_own_flow_key():
    """The 5-tuple packs sport above dport and the protocol without overlap, so the ECMP hash sees every port
    of the RoCEv2 range as a different flow (an overlap would merge ports before hashing)."""
    keys = {flow_key(3, 7, sport) for sport in range(SPORT_MIN, SPORT_MAX + 1)}
    assert len(keys) == SPORT_MAX - SPORT_MIN + 1


def test_a_context_miss_holds_the_wire_for_the_slowed_rate():
    params = MessageModelParams(nic_context_slots=3, nic_active_window_s=100e-6, nic_miss_s=20e-6)
    model = MessageModel(params)
    eng = FlowEngine(simpy.Environment(), load_topology(TOPO_DIR / "paper-testbed.yaml"), message_model=model)
    kw = dict(t_probe_s=0.0, single_block_Bps=25e9, include_latency=False)
    for i, holder in enumerate(["h1.g0", "h1.g1", "h1.g2"]):
        eng.message_delay("h0.g0", holder, 1.0, now=1.0 + i * 1e-6, **kw)
    before, now, nbytes = list(model.busy), 1.0 + 3e-6, 25e3
    eng.message_delay("h0.g0", "h1.g3", nbytes, now=now, **kw)
    assert model.misses == 1
    changed = [link for link, (old, new) in enumerate(zip(before, model.busy)) if old != new]
    assert changed
    for link in changed:     # idle links: the message holds each for bytes / miss factor x occupancy / capacity
        expected = nbytes / params.nic_miss_rate_factor * params.wire_occupancy / eng.cap[link]
        assert model.busy[link] - now == pytest.approx(expected, rel=1e-12)


def test_bisection_of_the_testbed_is_half_its_nics():
    testbed = load_topology(TOPO_DIR / "paper-testbed.yaml")      # 2 hosts x 4 NICs x 25 GB/s, one switch
    assert testbed.bisection_Bps() == 2 * 4 * 25e9 / 2


def test_a_gpu_pair_in_a_host_is_one_intra_host_latency_apart_whatever_the_switching():
    from simroute.network import shipped_topology
    for name in ("paper-testbed", "fattree"):          # an NVLink mesh (one hop) and an NVSwitch (two halves)
        topology = load_topology(shipped_topology(name))
        path = topology.path("h0.g0", "h0.g1")
        assert sum(link.latency_s for link in path) == pytest.approx(topology.spec.intra.latency_s, rel=1e-12)
        assert min(link.capacity_Bps for link in path) == topology.spec.intra.link_Bps
