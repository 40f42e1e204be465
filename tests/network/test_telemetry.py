"""Telemetry that names the bottleneck: windows, peak / p99 / mean utilisation, time saturated, messages."""

from __future__ import annotations

import json

import numpy as np
import pytest
import simpy

from simroute.network import SOLVERS, FlowEngine, SolverMode, load_topology
from simroute.network.solvers.arrays import ArraySolver

from simroute.network import DATA_DIR as TOPO_DIR


@pytest.fixture(scope="module")
def testbed():
    return load_topology(TOPO_DIR / "paper-testbed.yaml")


def test_saturated_uplink_is_the_hottest_link(testbed):
    env = simpy.Environment()
    eng = FlowEngine(env, testbed, telemetry_window_s=1e-3)
    eng.transfer("h0.g0", "h1.g0", 25e6)          # 1 ms alone at 25 GB/s ...
    eng.transfer("h0.g0", "h1.g1", 25e6)          # ... 2 ms for both: the uplink is full for 2 ms
    env.run()
    env.run(until=10e-3)                           # then idle to 10 ms
    out = eng.telemetry.bottlenecks()
    json.dumps(out)                                # JSON-ready
    uplink = testbed.link("h0.g0", "leaf0").id
    top = out["hottest_links"][0]
    assert top["link"] == uplink and top["tier"] == "nic-leaf" and (top["src"], top["dst"]) == ("h0.g0", "leaf0")
    assert top["peak_utilisation"] == pytest.approx(1.0, rel=1e-3)
    assert top["saturated_s"] == pytest.approx(2e-3, rel=1e-3)
    assert top["mean_utilisation"] == pytest.approx(0.2, rel=1e-2)      # 50 MB over 10 ms of 25 GB/s
    assert top["bulk_bytes"] == pytest.approx(50e6, rel=1e-9)
    assert out["window_s"] == pytest.approx(1e-3) and out["span_s"] == pytest.approx(10e-3)
    assert out["most_saturated_tier"] == "nic-leaf"
    assert out["tiers"]["nic-leaf"]["saturated_link_s"] == pytest.approx(2e-3, rel=1e-3)   # the downlinks are not full
    coarse = eng.telemetry.bottlenecks(window_s=5e-3)
    assert coarse["window_s"] == pytest.approx(5e-3)
    assert coarse["hottest_links"][0]["peak_utilisation"] == pytest.approx(0.4, rel=1e-3)  # 50 MB in 5 ms


def test_a_moment_at_capacity_names_no_bottleneck(testbed):
    """One flow fills its NIC link while it lasts; over a mostly idle run the tier is no bottleneck (p99 window
    utilisation below BOTTLENECK_P99), though its links spent time at capacity."""
    from simroute.network.telemetry import BOTTLENECK_P99
    env = simpy.Environment()
    eng = FlowEngine(env, testbed, telemetry_window_s=1e-3)
    eng.transfer("h0.g0", "h1.g0", 25e6)          # 1 ms at 25 GB/s ...
    env.run()
    env.run(until=1.0)                             # ... in a second of idle links
    out = eng.telemetry.bottlenecks()
    assert out["tiers"]["nic-leaf"]["saturated_link_s"] == pytest.approx(2e-3, rel=1e-3)   # up- and downlink
    assert out["tiers"]["nic-leaf"]["p99_utilisation"] < BOTTLENECK_P99
    assert out["most_saturated_tier"] is None and out["most_saturated_floor_p99"] == BOTTLENECK_P99


def test_routed_messages_count_in_link_bytes_and_utilisation(testbed):
    env = simpy.Environment()
    eng = FlowEngine(env, testbed, telemetry_window_s=1e-3)

    def requester():
        for _ in range(100):
            yield env.timeout(eng.message_delay("h0.g0", "h1.g0", 250e3, t_probe_s=16e-6, single_block_Bps=25e9))

    env.process(requester())
    env.run()
    out = eng.telemetry.bottlenecks()
    links = eng.telemetry.links_frame()
    path = [link.id for link in testbed.path("h0.g0", "h1.g0")]
    assert links.loc[path, "message_bytes"].tolist() == pytest.approx([25e6] * len(path))
    assert links.loc[path, "mean_utilisation"].min() > 0 and links["bulk_bytes"].sum() == 0
    assert out["tiers"]["nic-leaf"]["message_bytes"] == pytest.approx(2 * 25e6)
    assert out["hottest_links"] and all(row["message_bytes"] > 0 for row in out["hottest_links"])
    assert 0 < out["hottest_links"][0]["peak_utilisation"] <= 1.0


def test_windows_stay_bounded_by_merging(testbed):
    env = simpy.Environment()
    eng = FlowEngine(env, testbed, telemetry_window_s=1e-4)
    eng.telemetry.max_windows = 8
    eng.transfer("h0.g0", "h1.g0", 25e6)
    env.run()
    env.run(until=5e-3)
    tel = eng.telemetry
    matrix, durations, window = tel.window_matrix()
    assert len(tel.windows) < 8 and window >= 8e-4 and durations.sum() == pytest.approx(5e-3)
    uplink = testbed.link("h0.g0", "leaf0").id
    assert matrix[:, uplink].sum() == pytest.approx(25e6, rel=1e-5)         # merging keeps every byte
    assert np.all(matrix >= 0)


@pytest.mark.parametrize("arrays_on, core", [(10**9, False), (12, False), (10**9, True)],
                         ids=["object mode", "crossing array mode", "online core (compiled)"])
def test_windows_hold_every_bulk_byte(arrays_on, core):
    """Window closes visit only the links that can hold bytes (loaded at the last close, or joined since):
    summed over the windows, each link still has exactly the bytes of the flows that crossed it, also when
    flows start and end inside one window and when the engine moves into array mode and back."""
    class CountedArrays(ArraySolver):
        entered = 0

        def enter(self, now, previous):
            type(self).entered += 1
            super().enter(now, previous)

    class Engine(FlowEngine):
        solvers = {**SOLVERS, SolverMode.ARRAYS: CountedArrays}

    Engine.online_core, Engine.core_on = core, 1
    Engine.arrays_on = Engine.numpy_arrays_on = arrays_on
    Engine.arrays_off = Engine.numpy_arrays_off = arrays_on // 2
    topo = load_topology(TOPO_DIR / "fattree-1024.yaml")
    env = simpy.Environment()
    eng = Engine(env, topo, telemetry_window_s=1e-4)
    rng = np.random.default_rng(4)
    events = []

    def starter(t, src, dst, nbytes):
        yield env.timeout(t)
        events.append(eng.transfer(topo.gpus[src], topo.gpus[dst], nbytes))

    for t, (src, dst), nbytes in zip(rng.uniform(0, 3e-3, 120), rng.integers(0, 1024, (120, 2)).tolist(),
                                     rng.uniform(1e4, 2e7, 120)):
        env.process(starter(float(t), src, dst, float(nbytes)))
    env.run()
    env.run(until=env.now + 1e-3)
    matrix, durations, _window = eng.telemetry.window_matrix()
    capacity = np.array(eng.cap)
    assert (matrix <= durations[:, None] * capacity[None, :] * (1 + 1e-5)).all()   # no window holds more than fits
    assert not matrix[-3:].any()                           # the idle tail is empty: bytes sit in their own windows
    want = np.zeros(len(topo.links))
    for ev in events:
        want[list(ev.value.links)] += ev.value.nbytes
    assert matrix.sum(0) == pytest.approx(want, rel=1e-5, abs=1.0)        # float32 windows
    assert eng.telemetry.link_bytes == pytest.approx(want, rel=1e-9, abs=1e-3)
    assert (CountedArrays.entered > 0) == (arrays_on < 10**9)
    assert eng.array_mode == (eng.mode is SolverMode.ONLINE)                   # array mode: in and out again


def test_idle_windows_close_empty_and_message_windows_keep_their_bytes(testbed):
    """Between messages the windows are idle (None, closed without integrating any link); a window a message
    was sent in holds its bytes on every link of the path, whatever idle windows came before it."""
    env = simpy.Environment()
    eng = FlowEngine(env, testbed, telemetry_window_s=1e-3)
    path = [link.id for link in testbed.path("h0.g0", "h1.g0")]

    def requester():
        for at in (0.5e-3, 3.5e-3, 3.7e-3):           # windows 0 and 3 (two messages)
            yield env.timeout(at - env.now)
            eng.message_delay("h0.g0", "h1.g0", 250e3, t_probe_s=16e-6, single_block_Bps=25e9)

    env.process(requester())
    env.run(until=6.5e-3)
    tel = eng.telemetry
    tel.advance_to(env.now)
    assert [window is not None for window in tel.windows] == [True, False, False, True, False, False]
    assert tel.windows[0][path].tolist() == [250e3] * len(path)
    assert tel.windows[3][path].tolist() == [500e3] * len(path)
    assert tel.windows[0].sum() == 250e3 * len(path) and tel.window_index == 6
    assert tel.window_end == pytest.approx(7e-3)
