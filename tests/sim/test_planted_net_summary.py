"""The run summary's network block (`Simulation._network_summary`) over a network run driven here: bulk flows of
twenty sizes and routed messages on the 8-leaf, 4-spine ARK leaf-spine. The expected figures come from the flow
records and the bytes sent, with numpy and by hand: the FCT mean and 95th percentile, each spine's peak of
concurrent flows (every flow starts at t = 0, so a spine's peak is the number of flows it carries), the bytes per
tier (each flow's bytes on each of its links, tp-fold where one rank pair's flow stands for all; messages tp-fold;
nothing on NVLink)
and the most utilised link's mean utilisation."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import simpy

from simroute.network import FlowEngine, load_topology, shipped_topology
from simroute.sim.runner import Simulation

TP = 4
MESSAGE_BYTES = 64e3


@pytest.fixture(scope="module")
def run():
    topo = load_topology(shipped_topology("ark-leafspine"))
    env = simpy.Environment()
    engine = FlowEngine(env, topo, seed=5)
    flows = []
    for i in range(20):           # GPU i of hosts 0-2 to GPU i of hosts 4-6: distinct NICs, shared spines
        src, dst = f"h{i // 8}.g{i % 8}", f"h{4 + i // 8}.g{i % 8}"
        nbytes = (i + 1) * 1e6
        flows.append((src, dst, nbytes))
        engine.transfer(src, dst, nbytes, tag="fetch" if i % 2 else "pd")
    messages = [("h7.g0", "h3.g1"), ("h7.g1", "h2.g2"), ("h7.g2", "h1.g3")]
    for src, dst in messages:
        engine.message_delay(src, dst, MESSAGE_BYTES, t_probe_s=0.0, single_block_Bps=50e9)
    env.run()
    fake = SimpleNamespace(cfg=SimpleNamespace(routing="ecmp", instance_gpus=TP, rank_flows="shortcut"),
                           ctx=SimpleNamespace(network=engine, topology=topo,
                                               cluster=SimpleNamespace(tier_planes=lambda: {},
                                                                       rank_flows=(False, False)),
                                               engines=SimpleNamespace(a2a_tier_bytes=lambda: {})))
    fake._spine_names = lambda: Simulation._spine_names(fake)
    summary = Simulation._network_summary(fake)
    return SimpleNamespace(topo=topo, engine=engine, env=env, flows=flows, messages=messages, summary=summary)


def test_the_fct_mean_and_95th_percentile_of_the_flows(run):
    fct = np.array([record.end - record.start for record in run.engine.telemetry.records])
    assert len(fct) == 20 and len(set(fct.round(12))) == 20          # twenty distinct FCTs: percentiles differ
    assert run.summary["fct_ms"]["mean"] == pytest.approx(fct.mean() * 1e3, rel=1e-12)
    assert run.summary["fct_ms"]["p95"] == pytest.approx(np.percentile(fct, 95) * 1e3, rel=1e-12)
    assert np.percentile(fct, 95) != pytest.approx(np.percentile(fct, 90), rel=1e-3)
    fetch = np.array([record.end - record.start for record in run.engine.telemetry.records if record.tag == "fetch"])
    assert run.summary["fct_ms_fetch"] == pytest.approx({"mean": fetch.mean() * 1e3,
                                                        "p95": np.percentile(fetch, 95) * 1e3, "flows": 10})


def test_each_spines_peak_is_the_flows_it_carried_at_once(run):
    carried = {f"spine{s}": 0 for s in range(4)}
    for record in run.engine.telemetry.records:
        carried[record.spine] += 1
    assert run.summary["peak_spine_concurrency"] == carried
    assert sum(carried.values()) == 20 and max(carried.values()) > 1


def test_bytes_per_tier_count_every_rank(run):
    """A cross-leaf path is NIC up, leaf to spine, spine to leaf, NIC down: each flow's bytes twice on each tier,
    tp-fold (one rank pair's flow stands for all here); each message's likewise."""
    bulk = sum(nbytes for _src, _dst, nbytes in run.flows)
    expected = 2 * bulk * TP + 2 * MESSAGE_BYTES * len(run.messages) * TP
    assert run.summary["bytes_by_tier"] == pytest.approx({"nic-leaf": expected, "leaf-spine": expected,
                                                          "nvlink": 0.0}, rel=1e-9)
    per_gpu = expected / TP
    assert run.summary["bytes_by_tier_per_gpu"] == pytest.approx({"nic-leaf": per_gpu, "leaf-spine": per_gpu,
                                                                  "nvlink": 0.0}, rel=1e-9)


def test_the_most_utilised_link(run):
    """Each link's bytes (the flows' and messages' crossing it) over its capacity and the run's span."""
    carried = np.zeros(len(run.topo.links))
    for record in run.engine.telemetry.records:
        carried[list(record.links)] += record.nbytes
    for src, dst in run.messages:
        carried[list(run.engine.message_route(src, dst).links)] += MESSAGE_BYTES
    capacity = np.array([link.capacity_Bps for link in run.topo.links])
    assert run.summary["max_link_utilisation"] == pytest.approx(float((carried / (capacity * run.env.now)).max()),
                                                                rel=1e-9)
