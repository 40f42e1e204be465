"""Messages share the links with bulk flows (docs/NETWORK.md, "Messages share the links with bulk flows"): each
link's message byte rate over a telemetry window is charged against its capacity for bulk flows from the window's
end, so a bulk flow's rate drops by the message rate, while a message still waits for the share bulk flows leave.
Hand counts on one 10 GB/s link."""

from __future__ import annotations

import math
import random

import pytest
import simpy

from simroute.network import FlowEngine, maxmin_rates
from simroute.network.bulk import CHARGE_MAX, CHARGE_STEP, BulkState

from netstub import AlwaysFull, CoreFromFirst, ObjectMode, StubTopology

CAP = 10e9                  # B/s, the one link a -> b
MSG = 10e3                  # bytes a message
GAP = 10e-6                 # a message every 10 us: 1 GB/s, a tenth of the link
WINDOW = 1e-3               # the telemetry window (the engine's default)
ENGINES = [ObjectMode, CoreFromFirst, AlwaysFull]


def _run(engine_cls: type[FlowEngine], n_messages: int, flow_bytes: float = 1e9, gap: float = GAP):
    """One bulk flow a -> b from t = 0 and `n_messages` messages a -> b, one every `gap` from gap / 2 on
    (half-way between ticks: none falls on a window's edge). Returns (flow's end, message delays, engine)."""
    env = simpy.Environment()
    topo = StubTopology([CAP], {("a", "b"): (0,)})
    eng = engine_cls(env, topo, telemetry_window_s=WINDOW)
    done = eng.transfer("a", "b", flow_bytes)
    delays: list[float] = []

    def stream():
        for i in range(n_messages):
            yield env.timeout((i + 0.5) * gap - env.now)
            delays.append(eng.message_delay("a", "b", MSG, t_probe_s=0.0, single_block_Bps=1e12))

    env.process(stream())
    env.run(until=done)
    return done.value.end, delays, eng


@pytest.mark.parametrize("engine_cls", ENGINES)
def test_a_flow_drops_by_the_message_rate_and_the_messages_wait_as_before(engine_cls):
    """Messages all run: the flow gets 10 GB/s in the first window (nothing measured yet), then 10 - 1 = 9 GB/s
    (100 messages of 10 kB in each 1 ms window: 1 GB/s charged from each window's end). 10 MB by 1 ms, then
    990 MB at 9 GB/s: ends at 1 ms + 110 ms. Every message waits as before the charge: 10 kB over the share a
    new flow would get beside the one bulk flow, max(10 - 9, 10 / 2) = 5 GB/s: 2 us, nothing queued (10 us
    apart)."""
    end, delays, eng = _run(engine_cls, n_messages=200_000)
    assert end == pytest.approx(1e-3 + 990e6 / 9e9, rel=1e-9)
    assert delays and all(d == pytest.approx(MSG / (CAP / 2), rel=1e-12) for d in delays)
    assert eng.bulk.charge[0] == pytest.approx(1e9, rel=1e-9)
    assert eng.bulk.cap[0] == CAP                      # the physical capacity is untouched


@pytest.mark.parametrize("engine_cls", ENGINES)
def test_the_charge_stops_one_window_after_the_messages(engine_cls):
    """Messages in [0, 5 ms) only: charged 1 GB/s from 1 ms (window 0's end) to 6 ms (window 5, empty, closes:
    the engine steps at the boundary with no other event due). 10 MB + 5 ms x 9 GB/s = 55 MB by 6 ms, then
    945 MB at 10 GB/s: ends at 6 ms + 94.5 ms."""
    end, delays, eng = _run(engine_cls, n_messages=500)
    assert len(delays) == 500
    assert end == pytest.approx(6e-3 + 945e6 / 10e9, rel=1e-9)
    assert not eng.bulk.charged and eng.bulk.residual[0] == CAP


def test_more_messages_never_make_the_flow_faster_and_bytes_are_conserved():
    """1, 2 and 4 GB/s of messages: the flow ends later each time; in every charged window flow + messages
    carry the link's capacity, never more."""
    ends = []
    for gap in (GAP, GAP / 2, GAP / 4):
        end, _delays, eng = _run(ObjectMode, n_messages=10**6, gap=gap)
        rate = MSG / gap
        assert end == pytest.approx(1e-3 + (1e9 - 10e6) / (CAP - rate), rel=1e-9)
        assert eng.bulk.residual[0] + rate == pytest.approx(CAP, rel=1e-12)
        ends.append(end)
    assert ends == sorted(ends) and len(set(ends)) == 3


def test_charge_arithmetic_by_hand():
    """`charge_messages` (a window's bytes per link over its duration): moves only by more than CHARGE_STEP of the
    link (or back to 0), at most CHARGE_MAX of it, and returns the links it moved in link order."""
    bulk = BulkState([100.0, 200.0])
    assert bulk.charge_messages({1: 10.0, 0: 5.0}, 1.0) == [0, 1]
    assert bulk.residual == [95.0, 190.0] and list(bulk.capacity_padded[:2]) == [95.0, 190.0]
    assert bulk.charge_messages({0: 5.0 + 100 * CHARGE_STEP, 1: 10.0}, 1.0) == []      # within the step: kept
    assert bulk.charge_messages({0: 2e6}, 2.0) == [0, 1]          # capped at CHARGE_MAX; link 1 back to 0
    assert bulk.charge == [100 * CHARGE_MAX, 0.0] and bulk.residual == [100 * (1 - CHARGE_MAX), 200.0]
    assert bulk.charged == {0} and bulk.recapped == [0, 1, 0, 1]
    assert bulk.link_share(0) == 100.0                       # messages see the physical link (no bulk flow)


@pytest.mark.parametrize("engine_cls", ENGINES)
def test_a_capped_flow_keeps_its_rate_and_its_end_under_a_charge(engine_cls):
    """A flow capped at 4 GB/s on the 10 GB/s link: a 1 GB/s charge leaves it 9 GB/s, more than its cap, so its
    rate never moves and it ends at 1 GB / 4 GB/s = 250 ms whatever the re-ratings at each window's end (the
    charge re-solves it; its completion stays where its bytes put it)."""
    env = simpy.Environment()
    eng = engine_cls(env, StubTopology([CAP], {("a", "b"): (0,)}), telemetry_window_s=WINDOW)
    done = eng.transfer("a", "b", 1e9, rate_cap_Bps=4e9)

    def stream():            # 1 GB/s in even windows, 0.5 GB/s in odd ones: the charge moves at every window's end
        for window in range(300):
            gap = GAP if window % 2 == 0 else 2 * GAP
            for i in range(round(WINDOW / gap)):
                yield env.timeout(window * WINDOW + (i + 0.5) * gap - env.now)
                eng.message_delay("a", "b", MSG, t_probe_s=0.0, single_block_Bps=1e12)

    env.process(stream())
    env.run(until=done)
    assert eng.bulk.recharges >= 249            # one at each window's end while the flow runs
    assert done.value.end == pytest.approx(0.25, rel=1e-12)


@pytest.mark.parametrize("engine_cls", ENGINES)
def test_a_flow_started_beside_running_messages_is_charged_from_its_start(engine_cls):
    """Messages at 1 GB/s from t = 0, no bulk flow (the charge waits, nothing to re-rate); a 1 GB flow starts at
    2.5 ms and gets 9 GB/s at once (the last closed window, [1, 2) ms, carried 1 GB/s): ends at 2.5 ms + 1/9 s."""
    env = simpy.Environment()
    eng = engine_cls(env, StubTopology([CAP], {("a", "b"): (0,)}), telemetry_window_s=WINDOW)
    ends: list[float] = []

    def stream():
        for i in range(20_000):
            yield env.timeout((i + 0.5) * GAP - env.now)
            eng.message_delay("a", "b", MSG, t_probe_s=0.0, single_block_Bps=1e12)

    def flow():
        yield env.timeout(2.5e-3)
        assert not eng.bulk.charged                 # nothing charged while no bulk flow ran
        record = yield eng.transfer("a", "b", 1e9)
        ends.append(record.end)

    env.process(stream())
    env.run(until=env.process(flow()))
    assert ends[0] == pytest.approx(2.5e-3 + 1e9 / 9e9, rel=1e-9)


@pytest.mark.parametrize("engine_cls", ENGINES)
@pytest.mark.parametrize("seed", [0, 1])
def test_rates_are_max_min_on_what_messages_leave(engine_cls, seed):
    """Random flows (some capped) and message streams over 6 links of 10 GB/s, 8 endpoints with random 1-3-link
    paths: at every check each flow's rate is the textbook max-min rate (`maxmin_rates`) over the links'
    residual capacity (capacity less the charge), and every link carries at most its capacity in total."""
    rng = random.Random(seed)
    names = "abcdefgh"
    routes = {(a, b): tuple(sorted(rng.sample(range(6), rng.randint(1, 3)))) for a in names for b in names if a != b}
    env = simpy.Environment()
    eng = engine_cls(env, StubTopology([CAP] * 6, routes), telemetry_window_s=WINDOW)
    checked = []

    def flows():
        for _ in range(25):
            yield env.timeout(rng.uniform(0, 2e-3))
            a, b = rng.sample(names, 2)
            eng.transfer(a, b, rng.uniform(1e6, 5e7), rate_cap_Bps=rng.choice([None, 3e9]))

    def messages():
        for _ in range(6000):
            yield env.timeout(rng.uniform(0, 20e-6))
            a, b = rng.sample(names, 2)
            eng.message_delay(a, b, rng.uniform(1e3, 60e3), t_probe_s=0.0, single_block_Bps=1e12)

    def check():
        while True:
            yield env.timeout(0.37e-3)
            active = eng.active_flows()
            if not active:
                continue
            want = maxmin_rates([links for _fid, links, _cap in active], eng.bulk.residual,
                                [None if cap == math.inf else cap for *_rest, cap in active])
            got = eng.flow_rates()
            for (fid, _links, _cap), rate in zip(active, want):
                assert got[fid] == pytest.approx(rate, rel=1e-9)
            for link in range(6):
                assert float(eng.bulk.load[link]) + eng.bulk.charge[link] <= CAP * (1 + 1e-9)
            checked.append(bool(eng.bulk.charged))

    env.process(flows())
    env.process(messages())
    env.process(check())
    env.run(until=0.06)
    assert eng.bulk.recharges > 10 and any(checked)
