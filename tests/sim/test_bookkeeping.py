"""The routed-exchange and request-flow bookkeeping, hand-counted on tiny scenarios, so that a change made for
speed (issue 24: one message-model call per leg, legs cached per requester, kernel calls kept per shape, a
request's decisions recorded in one extend, copies arriving together) cannot change a count silently.

Engine scenarios use the fakes of tests/sim/engine (FakeStep: 10 layers, 16 query heads, every holder kernel
here at its 15 us floor). With `exchanges_per_step` = 10, a requester iteration asks 10 kernel calls of each
holder it routes to and sends 10 queries and 10 partials each way; a k-iteration event sends one message per
leg through the message model and accounts the other 10 k - 1 beside it.
"""

from __future__ import annotations

import sys
from array import array
from pathlib import Path

import numpy as np
import pytest
import simpy

sys.path.insert(0, str(Path(__file__).resolve().parent / "engine"))
from fakes import Fabric, FakeStep, NoNet  # noqa: E402

from simroute.sim.engine import EngineOptions, HbmBudget, InstanceEngine, IterationLog  # noqa: E402
from simroute.sim.engine import RouteExchange, RouteShare, Sequence  # noqa: E402
from simroute.sim.metrics import Recorder  # noqa: E402
from simroute.sim.vocab import Primitive  # noqa: E402

EXCHANGES = FakeStep.layers      # 10 per iteration
HEADS = 16
Q_BYTES, P_BYTES = 1152, 1032


class CountingMessages:
    """A message model that records what the exchange sends one by one and what it accounts beside them."""

    def __init__(self) -> None:
        self.sent: list[tuple] = []          # (route, bytes)
        self.accounted: list[tuple] = []     # (route, bytes, count)

    def send(self, route, nbytes, t_probe_s, single_block_Bps, now, include_latency=True):
        self.sent.append((route, nbytes))
        return t_probe_s + nbytes / single_block_Bps

    def account(self, route, nbytes, count, now):
        if count > 0:
            self.accounted.append((route, nbytes, count))

    def bytes_on(self, route) -> float:
        return sum(b for r, b in self.sent if r == route) + sum(b * c for r, b, c in self.accounted if r == route)

    def count_on(self, route) -> int:
        return sum(1 for r, _ in self.sent if r == route) + sum(c for r, _, c in self.accounted if r == route)


class MessageNet:
    """A network with a message model (the exchange's fast path: routes, then `messages.send` per leg)."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.messages = CountingMessages()

    def message_route(self, src, dst):
        return (src, dst)

    def send_message(self, route, nbytes, *, t_probe_s, single_block_Bps, now=None, include_latency=True):
        return self.messages.send(route, nbytes, t_probe_s, single_block_Bps, self.env.now if now is None else now,
                                  include_latency)


def _engine(env, eid, exchange=None, **options) -> InstanceEngine:
    opts = EngineOptions(**{"check_hbm": True, **options})
    hbm = HbmBudget(hbm_bytes=1e9 + (1 << 20) * 100.0, weight_bytes=1e9, kv_bytes_per_token=100.0)
    return InstanceEngine(env, eid, f"g{eid}", FakeStep(), hbm, opts, layers=FakeStep.layers, heads=HEADS,
                          exchange=exchange, log=IterationLog())


def _exchange(net) -> RouteExchange:
    return RouteExchange(net, lambda a, b: Fabric, q_bytes=Q_BYTES, p_bytes=P_BYTES, tp=1, merge_s=0.0,
                         exchanges_per_step=EXCHANGES)


def test_one_sequence_on_an_idle_holder_by_hand():
    """Prompt 100, 40 tokens out, 8 iterations per event at most: a prefill event, then decode events of
    8, 8, 8, 8 and 7 iterations (the first token came from the prefill): 6 events, 40 iterations."""
    env = simpy.Environment()
    net = MessageNet(env)
    holder = _engine(env, 1)
    requester = _engine(env, 0, exchange=_exchange(net), steps_per_event=8)
    seq = Sequence(0, 100, 40, routes=(RouteShare(holder, 4096.0),))
    requester.submit(seq)
    env.run()
    assert requester.log.events == 6 and requester.log.iterations == 40
    partials = holder.partials
    assert partials.calls == 400                                  # 10 exchanges x 40 iterations
    assert partials.queries == 400                                # one query per call
    assert partials.fan_in_calls == 400 and partials.max_fan_in == 1
    assert partials.queued_s == 0.0                               # idle holder, nobody else asking
    assert list(partials.kernel_s) == [15e-6] * 6                 # one kernel call's time per requester event
    assert partials.work_s == pytest.approx(400 * 15e-6, rel=1e-12)
    assert requester.exchange.messages == 800                     # 2 x 10 x 40
    assert seq.routed_rows == HEADS * 100 + HEADS * 39            # the prompt's rows once, one row set per token
    out, back = ("g0", "g1"), ("g1", "g0")
    messages = net.messages
    assert len(messages.sent) == 12                               # one per leg per event
    assert messages.count_on(out) == 400 and messages.count_on(back) == 400
    # each message carries its iteration's rows: the prompt's 1600 once (x 10 exchanges), then 16 per token
    assert messages.bytes_on(out) == Q_BYTES * EXCHANGES * (HEADS * 100 + HEADS * 39)
    assert messages.bytes_on(back) == P_BYTES * EXCHANGES * (HEADS * 100 + HEADS * 39)
    assert [b for r, b in messages.sent if r == out] == [Q_BYTES * HEADS * 100] + [Q_BYTES * HEADS] * 5


def test_two_sequences_of_one_batch_share_one_leg_by_hand():
    """Two prompts of 100 on one requester, 3 tokens out each, both routing to one holder. The first starts
    alone (an idle engine begins at once; a one-iteration event is not cut): prefill 0 | prefill 1 + decode 0
    (one leg, two queries per call) | decode 0 + 1 (one left for 0: one iteration) | decode 1: 4 events of one
    iteration, 1 + 2 + 2 + 1 queries per call."""
    env = simpy.Environment()
    net = NoNet()
    holder = _engine(env, 1)
    requester = _engine(env, 0, exchange=_exchange(net), steps_per_event=8)
    seqs = [Sequence(i, 100, 3, routes=(RouteShare(holder, 2048.0),)) for i in range(2)]
    for seq in seqs:
        requester.submit(seq)
    env.run()
    assert requester.log.events == 4 and requester.log.iterations == 4
    assert holder.partials.calls == 40 and holder.partials.queries == EXCHANGES * (1 + 2 + 2 + 1)
    assert requester.exchange.messages == 80                      # 2 x 10 x 4 iterations x 1 leg
    assert net.calls == 8                                         # 2 messages (one leg) per event, 4 events
    assert [seq.routed_rows for seq in seqs] == [HEADS * 100 + HEADS * 2] * 2


def test_two_holders_two_legs_and_a_cut_event_count_only_what_ran():
    """One sequence routing to two holders; a second sequence arrives and cuts a 64-iteration event: every
    holder's calls and the exchange's messages count the iterations that ran, not those planned."""
    env = simpy.Environment()
    net = MessageNet(env)
    holders = [_engine(env, 1), _engine(env, 2)]
    requester = _engine(env, 0, exchange=_exchange(net), steps_per_event=64)
    seq = Sequence(0, 100, 200, routes=tuple(RouteShare(h, 1024.0 * (i + 1)) for i, h in enumerate(holders)))
    requester.submit(seq)

    def late():
        yield env.timeout(0.05)
        requester.submit(Sequence(1, 10, 2))
    env.process(late())
    env.run()
    assert requester.cuts == 1
    ran = 200                                                     # seq 0's iterations: its prompt, 199 decodes
    for holder in holders:
        assert holder.partials.calls == EXCHANGES * ran and holder.partials.queries == EXCHANGES * ran
    assert requester.exchange.messages == 2 * 2 * EXCHANGES * ran
    assert seq.routed_rows == 2 * (HEADS * 100 + HEADS * 199)
    for holder in holders:
        assert net.messages.count_on(("g0", holder.gpu)) == EXCHANGES * ran


def test_a_requests_decisions_recorded_at_once_equal_one_by_one():
    """`Recorder.decisions` (one extend per column) leaves the columns and counts `decision` one by one does."""
    chunk_ids, holders = [70, 71, 72, 73, 74], [1, 1, 2, 0, 2]
    primitives = [Primitive.ROUTE, Primitive.ROUTE, Primitive.FETCH, Primitive.RESIDENT, Primitive.ROUTE]
    batched, single = Recorder(4), Recorder(4)
    batched.decisions(3, chunk_ids, holders, primitives)
    batched.decisions(1, [], [], [])
    for chunk, holder, primitive in zip(chunk_ids, holders, primitives):
        single.decision(3, chunk, holder, primitive)
    assert batched.dec_req == array("q", [3] * 5) == single.dec_req
    assert batched.dec_chunk == array("q", chunk_ids) == single.dec_chunk
    assert batched.dec_holder == single.dec_holder and batched.dec_prim == single.dec_prim
    assert batched.counts[3].tolist() == [3, 1, 0, 1, 0] == single.counts[3].tolist()
    assert batched.counts[[0, 1, 2]].sum() == 0


def test_decisions_by_chunk_index_are_logged_as_chunk_ids():
    """With `chunk_id_of` (a run's chunk store ids) the log takes chunk indices, as arrays of its own types, and
    its table names the chunks by id, in the log's order; the counts are per primitive either way."""
    chunk_ids = np.array([70, 71, 72, 73, 74], dtype=np.int64)
    by_index = Recorder(4, chunk_id_of=chunk_ids)
    by_index.decisions(2, array("q", [4, 0, 4]), array("i", [1, 0, 2]),
                       array("b", [Primitive.ROUTE, Primitive.RESIDENT, Primitive.FETCH]))
    by_index.decisions(0, array("q", [3]), array("i", [5]), array("b", [Primitive.ROUTE]))
    table = by_index.decisions_table()
    assert table.column("chunk_id").to_pylist() == [74, 70, 74, 73]
    assert table.column("request_id").to_pylist() == [2, 2, 2, 0]
    assert table.column("holder").to_pylist() == [1, 0, 2, 5]
    assert by_index.counts[2, Primitive.ROUTE] == 1 and by_index.counts[2, Primitive.FETCH] == 1
    assert by_index.counts[0, Primitive.ROUTE] == 1 and by_index.counts.sum() == 4
    assert Recorder(1).decided_chunk_ids().tolist() == []


def test_room_is_made_by_evicting_the_least_recent_unpinned_copies_in_order():
    hbm = HbmBudget(hbm_bytes=10 * 64 * 100.0, weight_bytes=0.0, kv_bytes_per_token=100.0)   # 10 blocks
    gone: list = []
    hbm.evictable = lambda key: key != "a"
    hbm.on_evict = gone.append
    for key in ("a", "b", "c", "d"):
        assert hbm.add_copy(key, 2)
    assert hbm.free_blocks == 2
    assert hbm.add_copy("e", 5)                                   # needs 3 more: b, then c (a is pinned)
    assert gone == ["b", "c"] and hbm.evictions == 2
    assert list(hbm.copies) == ["a", "d", "e"] and hbm.copy_blocks == 9
    assert not hbm.add_copy("f", 9)                               # 1 free + d and e's 7 < 9: nothing goes
    assert gone == ["b", "c"] and hbm.evictions == 2 and hbm.refused == 1
