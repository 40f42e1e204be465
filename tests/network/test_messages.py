"""Latency-bound messages: probe + round-robin queueing over queue pairs + bytes over min(single block, fair
share); NIC queue-pair contexts (capacity and miss cost) and paper Fig 7 as the mechanism predicts it."""

from __future__ import annotations

import pytest
import simpy

from simroute.network import FlowEngine, MessageModel, MessageModelParams, load_topology, shipped_topology
from simroute.network.fig7 import fig7_round_trips, fig7_scorecard

from simroute.network import DATA_DIR as TOPO_DIR


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


def test_equal_messages_queue_as_in_a_fifo(testbed):
    env = simpy.Environment()
    eng = FlowEngine(env, testbed)
    kw = dict(t_probe_s=0.0, single_block_Bps=25e9)
    d1 = eng.message_delay("h0.g0", "h1.g0", 25e3, **kw)
    d2 = eng.message_delay("h0.g0", "h1.g1", 25e3, **kw)      # same uplink, same instant: waits its 1 us wire time
    d3 = eng.message_delay("h0.g1", "h1.g2", 25e3, **kw)      # another uplink: no wait
    d4 = eng.message_delay("h0.g0", "h1.g2", 25e3, **kw)      # third on the uplink: two messages ahead of it
    assert d2 - d1 == pytest.approx(1e-6, rel=1e-9) and d3 == pytest.approx(d1, rel=1e-12)
    assert d4 - d1 == pytest.approx(2e-6, rel=1e-9)
    assert eng.message_bytes == pytest.approx(100e3)


def test_a_small_message_slips_between_a_long_ones_packets():
    """Round-robin over queue pairs, by hand: a 2.5 MB message holds the 25 GB/s uplink 100 us from t = 0. At
    t = 10 us a 1 kB probe-sized message waits min(90, 0.04) = 0.04 us (not the 90 us a FIFO would charge), and
    a 25 kB one then waits min(90, 1) + min(0.04, 1) = 1.04 us; the link's clock moves by every byte."""
    model = MessageModel()
    eng = FlowEngine(simpy.Environment(), load_topology(TOPO_DIR / "paper-testbed.yaml"), message_model=model)
    kw = dict(t_probe_s=0.0, single_block_Bps=25e9, include_latency=False)
    assert eng.message_delay("h0.g0", "h1.g0", 2.5e6, now=0.0, **kw) == pytest.approx(100e-6, rel=1e-12)
    small = eng.message_delay("h0.g0", "h1.g1", 1e3, now=10e-6, **kw)
    assert small == pytest.approx(0.04e-6 + 0.04e-6, rel=1e-9)            # its wait + its own wire time
    medium = eng.message_delay("h0.g0", "h1.g2", 25e3, now=10e-6, **kw)
    assert medium == pytest.approx(1.04e-6 + 1e-6, rel=1e-9)
    uplink = eng.topology.links.index(next(link for link in eng.topology.links
                                           if link.src == "h0.g0" and link.tier == "nic-leaf"))
    assert model.busy[uplink] == pytest.approx(100e-6 + 0.04e-6 + 1e-6, rel=1e-12)
    # once the long message has drained, a message waits only for what is left of the others
    late = eng.message_delay("h0.g0", "h1.g3", 25e3, now=100.5e-6, **kw)
    assert late == pytest.approx((100e-6 + 1.04e-6 - 100.5e-6) + 1e-6, rel=1e-9)


def test_nic_working_set_beyond_the_context_cache_misses():
    params = MessageModelParams(nic_context_slots=3, nic_active_window_s=100e-6, nic_miss_s=20e-6)
    model = MessageModel(params)
    eng = FlowEngine(simpy.Environment(), load_topology(TOPO_DIR / "paper-testbed.yaml"), message_model=model)
    kw = dict(t_probe_s=0.0, single_block_Bps=25e9, include_latency=False)
    holders = ["h1.g0", "h1.g1", "h1.g2", "h1.g3"]
    base = [eng.message_delay("h0.g0", h, 1.0, now=1.0 + i * 1e-6, **kw) for i, h in enumerate(holders[:3])]
    assert model.misses == 0 and max(base) < 1e-9            # three pairs fit the cache: no penalty
    fourth = eng.message_delay("h0.g0", holders[3], 1.0, now=1.0 + 3e-6, **kw)
    assert model.misses == 1 and fourth == pytest.approx(20e-6 + 1.0 / (25e9 * params.nic_miss_rate_factor))
    later = eng.message_delay("h0.g0", holders[3], 1.0, now=2.0, **kw)   # the others went idle: a hit again
    assert model.misses == 1 and later < 1e-9


FIG7 = dict(q_bytes=1152, p_bytes=1032, t_probe_s=25e-6, single_block_Bps=25e9, rounds=120)


def test_fig7_identical_loops_rise_once_the_uplink_is_oversubscribed(testbed):
    """K + 1 identical closed loops on one 25 GB/s uplink, by hand: an Mq = 1024 query (1.18 MB) holds it 47.2 us
    of a 118.5 us round trip (40%), so two loops fit (K = 1 flat) and three (K = 2) oversubscribe it: each
    round then takes the three queries' wire time, 3 x 47.2 = 141.6 us; four take 188.7 us. More load is never
    faster."""
    rtt = fig7_round_trips(testbed, range(5), rows=1024, **FIG7)
    query_s = 1024 * 1152 / 25e9
    assert rtt[1] == pytest.approx(rtt[0], rel=1e-9)
    assert rtt[2] == pytest.approx(3 * query_s, rel=0.01) and rtt[3] == pytest.approx(4 * query_s, rel=0.01)
    assert all(later >= earlier * (1 - 1e-9) for earlier, later in zip(rtt, rtt[1:]))


def test_fig7_the_probe_does_not_queue_behind_data(testbed):
    """A payload-free put + signal (rows = 0) beside K loops of Mq = 1024 data: round-robin lets it between
    their packets, so it stays at its probe (plus the path's latency) at every K (a FIFO would charge it the
    data ahead of it: +36% at K = 1)."""
    rtt = fig7_round_trips(testbed, range(4), rows=0, background_rows=1024, **FIG7)
    assert max(rtt) == pytest.approx(min(rtt), rel=1e-9)


def test_fig7_decode_size_background_fills_the_uplink_only_at_k3(testbed):
    """With the K background loops at the decode batch (Mq = 256: 11.8 us of query wire per 51.4 us round trip,
    23%), an Mq = 1024 loop (40%) shares the uplink without waiting through K = 2 (86%) and queues at K = 3
    (109%): the paper's 'flat until fully subscribed at K = 3'."""
    rtt = fig7_round_trips(testbed, range(5), rows=1024, background_rows=256, **FIG7)
    assert max(rtt[:3]) / rtt[0] < 1.03 and rtt[4] > rtt[0] * 1.01


def test_a_context_cache_of_three_makes_the_fourth_loop_miss(testbed):
    """The NIC's capacity and miss cost as a probe would set them (3 queue pairs, 20 us a miss): K + 1 probe
    loops (no payload) through one NIC hit while K + 1 <= 3 and all miss from K = 3, each round trip paying
    two misses (query and signal back): + 40 us, by hand."""
    params = MessageModelParams(nic_context_slots=3, nic_miss_s=20e-6)
    rtt = fig7_round_trips(testbed, range(5), rows=0, message_params=params, **FIG7)
    assert max(rtt[:3]) == pytest.approx(rtt[0], rel=1e-9)
    assert rtt[3] - rtt[0] == pytest.approx(40e-6, rel=1e-6) and rtt[4] == pytest.approx(rtt[3], rel=1e-9)


def test_fig7_processor_sharing_by_hand(testbed):
    """The faithful queueing check (every message a max-min flow): a loop alone pays its probe, its bytes at 25
    GB/s and the path's latency both ways; a payload-free loop stays at its probe whatever the load (no bytes
    to share); a loop beside background loops is never faster than alone, and no slower than if the link
    carried every loop's query and partial one after another each round."""
    from simroute.network.fig7 import fig7_fluid_round_trips
    latency = sum(link.latency_s for link in testbed.path("h0.g0", "h1.g0"))
    latency += sum(link.latency_s for link in testbed.path("h1.g0", "h0.g0"))
    fluid = dict(q_bytes=1152, p_bytes=1032, t_probe_s=25e-6, single_block_Bps=25e9, rounds=40, seeds=(0, 1))
    alone, = fig7_fluid_round_trips(testbed, (0,), rows=1024, **fluid)
    assert alone == pytest.approx(25e-6 + 1024 * 2184 / 25e9 + latency, rel=1e-9)
    assert fig7_fluid_round_trips(testbed, (0, 3), rows=0, background_rows=1024, **fluid) == \
        [pytest.approx(25e-6, rel=1e-9)] * 2
    crowded = fig7_fluid_round_trips(testbed, (0, 1, 3), rows=1024, background_rows=1024, **fluid)
    assert crowded[0] <= crowded[1] <= crowded[2] <= 25e-6 + 4 * 1024 * 2184 / 25e9 + latency


def test_fig7_scorecard_has_a_verdict(testbed):
    card = fig7_scorecard(testbed, q_bytes=1152, p_bytes=1032, t_probe_s=25e-6, single_block_Bps=25e9, rounds=80,
                          background_rows=256)
    assert set(card["batches"]) == {"256", "1024"} and card["background_rows"] == 256
    assert all(entry["flat_k1_k2_ratio"] < 1.05 for entry in card["batches"].values())
    assert card["ok"] is False            # the wire alone gives a few percent at K = 3, not the paper's +108-119%


def test_context_misses_match_the_working_set_rule():
    """A message misses exactly when, at its requester or holder NIC, more distinct queue pairs than the cache
    holds were used within the active window (counted from the full send history), over random sends among
    few and many pairs, with replies on the same pair."""
    import random
    rng = random.Random(7)
    topo = load_topology(shipped_topology("fattree-1024"))
    gpus = topo.gpus[:24]
    eng = FlowEngine(simpy.Environment(), topo, message_model=MessageModel(MessageModelParams(nic_context_slots=3)))
    model, params = eng.messages, eng.messages.params
    history: dict[int, list[tuple[float, int]]] = {}
    pairs = [(a, b) for a in gpus for b in gpus if a != b and model.route(a, b).src_nic >= 0]
    rng.shuffle(pairs)
    now, hits, misses, last = 0.0, 0, 0, pairs[0]
    for step in range(4000):
        src, dst = rng.choice(pairs[:3] if step < 2000 else pairs)
        if rng.random() < 0.5:
            src, dst = last[1], last[0]                     # a reply: the same queue pair again
        last = (src, dst)
        now += rng.choice([1e-6, 2e-6, 5e-6, 400e-6])
        route = model.route(src, dst)
        expected = False
        for nic in (route.src_nic, route.dst_nic):
            history.setdefault(nic, []).append((now, route.pair))
            active = {pair for t, pair in history[nic] if t >= now - params.nic_active_window_s}
            expected |= len(active) > params.nic_context_slots
        got = model._pair_misses(route, now)
        assert got == expected, step
        hits, misses = hits + (not got), misses + got
    assert hits and misses                                  # both answers were exercised


def test_by_name_is_the_handle_path_and_counts_every_message():
    """`message_delay` by name and `send_message` over handles give the same delays and leave the same link
    clocks; each pair's route is built once (the name table returns that same handle); `sends` counts the
    messages whose delay was computed and `total_count` those plus the ones `account`ed beside them."""
    import random
    rng = random.Random(5)
    topo = load_topology(shipped_topology("fattree"))
    by_name, by_handle = (FlowEngine(simpy.Environment(), topo,
                                     message_model=MessageModel(MessageModelParams(nic_context_slots=3)))
                          for _ in range(2))
    gpus = topo.gpus[::5]                      # across hosts: NICs serve more queue pairs than the 3 contexts
    kw = dict(t_probe_s=16e-6, single_block_Bps=25e9)
    now = 0.0
    for _ in range(400):
        src, dst = rng.sample(gpus, 2)
        now += rng.choice([0.0, 1e-6, 1e-5, 3e-4])
        nbytes = rng.choice([1e3, 64e3])
        a = by_name.message_delay(src, dst, nbytes, now=now, **kw)
        b = by_handle.send_message(by_handle.message_route(src, dst), nbytes, now=now, **kw)
        assert a == b
    assert by_name.messages.busy == by_handle.messages.busy
    assert by_name.messages.misses == by_handle.messages.misses > 0
    model = by_name.messages
    assert all(model.route(src, dst) is route for (src, dst), route in model.routes.items())
    assert model.sends == model.total_count() == 400
    model.account(next(iter(model.routes.values())), 1e3, 7, now)
    assert model.sends == 400 and model.total_count() == 407


def test_send_pair_is_the_query_then_the_partial():
    """`send_pair` against two `send`s: every delay equal to the bit, the
    same context misses, FIFO clocks and byte counts, over a rotation of 5 requester-holder pairs (each twice in a row) that misses."""
    params = MessageModelParams(nic_context_slots=2, nic_active_window_s=100e-6, nic_miss_s=20e-6)
    topology = load_topology(TOPO_DIR / "paper-testbed.yaml")
    apart, paired = (FlowEngine(simpy.Environment(), topology, message_model=MessageModel(params))
                     for _ in range(2))
    pairs = [("h0.g0", "h1.g0"), ("h0.g0", "h1.g1"), ("h0.g1", "h1.g2"), ("h0.g0", "h1.g3"), ("h0.g2", "h1.g0")]
    for step in range(40):
        now = step * 7e-6
        requester, holder = pairs[(step // 2) % len(pairs)]     # each pair twice in a row: the repeat path
        out_bytes, back_bytes = 1024.0 * (1 + step % 3), 2048.0 * (1 + step % 4)
        legs = [(engine.message_route(requester, holder), engine.message_route(holder, requester))
                for engine in (apart, paired)]
        want = (apart.messages.send(legs[0][0], out_bytes, 16e-6, 25e9, now, False),
                apart.messages.send(legs[0][1], back_bytes, 9e-6, 25e9, now, False))
        got = paired.messages.send_pair(legs[1][0], out_bytes, 16e-6, legs[1][1], back_bytes, 9e-6, 25e9, now)
        assert got == want
        apart.messages.account(legs[0][0], out_bytes, 3, now)
        apart.messages.account(legs[0][1], back_bytes, 3, now)
        paired.messages.account(legs[1][0], out_bytes, 3, now)
        paired.messages.account(legs[1][1], back_bytes, 3, now)
    assert apart.messages.misses == paired.messages.misses > 0
    assert apart.messages.sends == paired.messages.sends == 80
    assert apart.messages.busy == paired.messages.busy
    assert {key: (route.sent_bytes, route.sent_count, route.window_bytes) for key, route in apart.messages.routes.items()} \
        == {key: (route.sent_bytes, route.sent_count, route.window_bytes) for key, route in paired.messages.routes.items()}


def test_account_pair_is_two_accounts():
    """`account_pair` (a leg's query and partial in one call) against two `account`s across a window boundary:
    the same bytes, counts and window bytes per route, and the same routes listed in the window."""
    topology = load_topology(TOPO_DIR / "paper-testbed.yaml")
    apart, paired = (FlowEngine(simpy.Environment(), topology, message_model=MessageModel()) for _ in range(2))
    for step, now in enumerate([0.0, 1e-3, 0.5, 1.5, 1.5, 2.25]):
        count = step % 3                    # 0: nothing counted
        out_bytes, back_bytes = 1024.0 * (1 + step), 3000.0 / (1 + step)
        legs = [(engine.message_route("h0.g0", "h1.g1"), engine.message_route("h1.g1", "h0.g0"))
                for engine in (apart, paired)]
        apart.messages.account(legs[0][0], out_bytes, count, now)
        apart.messages.account(legs[0][1], back_bytes, count, now)
        paired.messages.account_pair(legs[1][0], out_bytes, legs[1][1], back_bytes, count, now)
    routes = {key: (route.sent_bytes, route.sent_count, route.window, route.window_bytes)
              for key, route in paired.messages.routes.items()}
    assert routes == {key: (route.sent_bytes, route.sent_count, route.window, route.window_bytes)
                      for key, route in apart.messages.routes.items()}
    assert routes[("h0.g0", "h1.g1")][:2] == (1024.0 * 2 * 1 + 1024.0 * 3 * 2 + 1024.0 * 5 * 1 + 1024.0 * 6 * 2, 6)
    assert [(r.src, r.dst) for r in paired.telemetry.message_routes] == \
        [(r.src, r.dst) for r in apart.telemetry.message_routes]
    assert paired.telemetry.window_index == apart.telemetry.window_index > 0


def test_send_legs_is_each_leg_sent_in_order_then_accounted():
    """`send_legs` (a requester event's legs in one call) against two `send`s per leg, leg after leg: every
    delay equal to the bit, the same context misses, FIFO clocks, byte counts, window bytes and routes listed in
    the telemetry's window (in the same order), over events of 1 to 4 legs (one holder twice) crossing windows;
    `account_messages` of the event's later exchanges against an `account` per message."""
    params = MessageModelParams(nic_context_slots=2, nic_active_window_s=100e-6, nic_miss_s=20e-6)
    topology = load_topology(TOPO_DIR / "paper-testbed.yaml")
    apart, batched = (FlowEngine(simpy.Environment(), topology, message_model=MessageModel(params))
                      for _ in range(2))
    holders = ["h1.g0", "h1.g1", "h0.g2", "h1.g3", "h1.g0"]
    for step in range(30):
        now = step * 9e-6 + (0.75 if step >= 20 else 0.0)
        requester = ("h0.g0", "h0.g1")[step % 2]
        event = holders[step % 3: step % 3 + 1 + step % 4]
        want, got = [], None
        for engine in (apart, batched):
            sends = [(engine.message_route(requester, holder), 512.0 * (1 + i + step % 3), 16e-6,
                      engine.message_route(holder, requester), 2048.0 * (1 + i), 9e-6, 25e9)
                     for i, holder in enumerate(event)]
            messages = [message for out, out_bytes, _, back, back_bytes, _, _ in sends
                        for message in ((out, out_bytes), (back, back_bytes))]
            if engine is apart:
                for out, out_bytes, out_probe_s, back, back_bytes, back_probe_s, single_block_Bps in sends:
                    want.append((engine.messages.send(out, out_bytes, out_probe_s, single_block_Bps, now, False),
                                 engine.messages.send(back, back_bytes, back_probe_s, single_block_Bps, now, False)))
                for route, nbytes in messages:
                    engine.messages.account(route, nbytes, 1 + step % 3, now + 1e-4)
            else:
                got = engine.messages.send_legs(sends, messages, now)
                engine.messages.account_messages(messages, 1 + step % 3, now + 1e-4)
        assert got == want
        assert [(r.src, r.dst) for r in batched.telemetry.message_routes] == \
            [(r.src, r.dst) for r in apart.telemetry.message_routes]
    assert apart.messages.misses == batched.messages.misses > 0
    assert apart.messages.sends == batched.messages.sends
    assert apart.messages.busy == batched.messages.busy
    assert batched.telemetry.window_index == apart.telemetry.window_index > 0
    assert {key: (route.sent_bytes, route.sent_count, route.window, route.window_bytes)
            for key, route in apart.messages.routes.items()} == \
        {key: (route.sent_bytes, route.sent_count, route.window, route.window_bytes)
         for key, route in batched.messages.routes.items()}
