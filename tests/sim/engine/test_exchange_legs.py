"""RouteExchange's per-requester cache of the legs' static part (`_static_legs`) and the shared kernel
(`_kernel`): exact values, and the cache follows the groups (values and order)."""

from __future__ import annotations

from types import SimpleNamespace

from fakes import Fabric, FakeStep, NoNet
from simroute.sim.engine import HolderPartials, RouteExchange


def _exchange() -> RouteExchange:
    return RouteExchange(NoNet(), lambda a, b: Fabric, q_bytes=1152, p_bytes=1032, tp=2, merge_s=1e-6,
                         exchanges_per_step=FakeStep.layers)


class _Engine:
    """What the exchange reads of an engine: its clock, id, GPU, step model and holder side (idle)."""

    def __init__(self, eid: int) -> None:
        self.env, self.eid, self.gpu, self.step = SimpleNamespace(now=0.5), eid, f"g{eid}", FakeStep()
        self.partials, self.busy, self.layer_s = HolderPartials(), False, 0.0


def _engine(eid: int) -> _Engine:
    return _Engine(eid)


def test_static_legs_hold_the_routes_fabric_and_bytes_of_each_holder_in_order():
    exchange, requester, first, second = _exchange(), _engine(0), _engine(1), _engine(2)
    items = [(second, [128.0, 64.0], [1000.0, 3000.0], 1.0), (first, [128.0], [2000.0], 1.5)]
    legs, sends, messages = exchange._static_legs(requester, [(h, [rows, keys, premium])
                                                              for h, rows, keys, premium in items])
    assert [leg[:-1] for leg in legs] == [(second, second.partials, 2, [128.0, 64.0], [1000.0, 3000.0], 1.0),
                                          (first, first.partials, 1, [128.0], [2000.0], 1.5)]
    assert sends == [(("g0", "g2"), 192.0 * 1152 / 2, 20e-6, ("g2", "g0"), 192.0 * 1032 / 2, 5e-6, 10e9),
                     (("g0", "g1"), 128.0 * 1152 / 2, 20e-6, ("g1", "g0"), 128.0 * 1032 / 2, 5e-6, 10e9)]
    # each leg's query then its partial, leg after leg (the order `account_messages` counts them in)
    assert messages == [(("g0", "g2"), 192.0 * 1152 / 2), (("g2", "g0"), 192.0 * 1032 / 2),
                        (("g0", "g1"), 128.0 * 1152 / 2), (("g1", "g0"), 128.0 * 1032 / 2)]
    assert legs[0][-1] == {} and legs[0][-1] is not legs[1][-1]      # each shape its own kernel per sharing
    again, _, _ = exchange._static_legs(_engine(3), [(second, [[128.0, 64.0], [1000.0, 3000.0], 1.0])])
    assert again[0][-1] is legs[0][-1]                  # another requester, the same holder and shape: shared


def test_kernel_is_the_step_models_call_over_sharing_times_the_queries():
    exchange, step = _exchange(), FakeStep()
    assert exchange._kernel(step, 1, [128.0], [1e6], 1.0) == 128.0 * 1e6 * 1e-12
    assert exchange._kernel(step, 3, [128.0], [1e6], 1.0) == 3 * 128.0 * 1e6 * 1e-12
    # several queries: n requesters x this one's queries, each its own rows and keys
    assert exchange._kernel(step, 2, [128.0, 64.0], [1e6, 2e6], 1.0) == \
        (128.0 * 1e6 + 64.0 * 2e6 + 128.0 * 1e6 + 64.0 * 2e6) * 1e-12
    assert exchange._kernel(step, 1, [1.0], [10.0], 1.0) == 15e-6                 # the fake's floor


def test_the_cache_follows_the_groups_values_and_order():
    exchange, requester, first, second = _exchange(), _engine(0), _engine(1), _engine(2)
    groups = {first: [[128.0], [1e6], 1.0], second: [[128.0], [2e6], 1.0]}
    exchange.iteration(requester, groups, 1, 1e-3)
    kept = exchange._static[0][2]
    exchange.iteration(requester, {first: [[128.0], [1e6], 1.0], second: [[128.0], [2e6], 1.0]}, 1, 1e-3)
    assert all(now is before for now, before in zip(exchange._static[0][2], kept))   # same groups: reused
    exchange.iteration(requester, {second: [[128.0], [2e6], 1.0], first: [[128.0], [1e6], 1.0]}, 1, 1e-3)
    assert [leg[0] for leg in exchange._static[0][2][0]] == [second, first]       # reordered: rebuilt
    exchange.iteration(requester, {second: [[256.0], [2e6], 1.0], first: [[128.0], [1e6], 1.0]}, 1, 1e-3)
    assert exchange._static[0][2][1][0][1] == 256.0 * 1152 / 2                     # new rows: new bytes
    _, _, legs = exchange.iteration(requester, {first: [[128.0], [1e6], 1.0]}, 2, 1e-3)
    # holder 1 alone: the other requester's entries are this requester's own, so it shares nothing
    assert [(leg[0], leg[1], leg[5]) for leg in legs] == [(first, 128.0 * 1e6 * 1e-12, 1)]


def test_an_engine_hands_the_same_groups_while_its_decode_batch_holds(make_engine):
    """A decode-only batch of the sequences of the last one routes the same groups: the engine hands the very
    dict again (the exchange then skips comparing them); a prefill or another batch builds new ones."""
    import simpy

    from simroute.sim.engine import RouteShare, Sequence
    from simroute.sim.schedulers.base import Plan

    env = simpy.Environment()
    first, second = make_engine(env, 1), make_engine(env, 2)
    requester = make_engine(env, 0, exchange=_exchange())
    routed = Sequence(0, 100, 40, routes=(RouteShare(first, 4096.0), RouteShare(second, 512.0, 1.5)))
    other = Sequence(1, 100, 40, routes=(RouteShare(first, 1024.0),))
    _, groups, _, _ = requester._batch_cost(Plan(decode=[routed, other], macro=True))
    assert groups == {first: [[16, 16], [4096.0, 1024.0], 1.0], second: [[16], [512.0], 1.5]}
    assert requester._batch_cost(Plan(decode=[routed, other], macro=True))[1] is groups
    alone = requester._batch_cost(Plan(decode=[routed], macro=True))[1]
    assert alone == {first: [[16], [4096.0], 1.0], second: [[16], [512.0], 1.5]}
    with_prefill = requester._batch_cost(Plan(prefill=[(other, 4)], decode=[routed]))[1]
    assert with_prefill == {first: [[16, 64], [4096.0, 1024.0], 1.0], second: [[16], [512.0], 1.5]}
    assert requester._batch_cost(Plan(decode=[routed], macro=True))[1] is alone       # the last decode-only one
