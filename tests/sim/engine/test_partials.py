"""HolderPartials' view of the other requesters routing to a holder (the per-leg query of every requester event)."""

from __future__ import annotations

import random

import pytest

from simroute.sim.engine.exchange import HolderPartials


def _reference(demand: list[list], now: float, requester: int) -> tuple[float, int]:
    """From scratch: the live entries (until > now) of the other requesters, their rates in list order."""
    rho = 0.0
    for entry in demand:
        if entry.until > now and entry.requester != requester:
            rho += entry.rate
    return rho, len({entry.requester for entry in demand if entry.until > now and entry.requester != requester})


def test_others_counts_distinct_live_requesters_and_sums_their_rates_in_order():
    """Random adds (several entries per requester, overlapping spans), retractions and queries at rising times:
    `others` equals the from-scratch count and sum bit for bit, and `concurrent` counts the asker once."""
    rng = random.Random(3)
    partials, history = HolderPartials(), []
    now, checked_multi = 0.0, 0
    for step in range(1500):
        now += rng.choice([0.0, 1e-6, 1e-4, 2e-3])
        requester = rng.randrange(6)
        if rng.random() < 0.4:
            entry = partials.add(1e-5, 2.0, 1.0, now, rng.choice([1e-4, 1e-3, 5e-3]), rng.random() < 0.5, requester)
            history.append(entry)
        elif history and rng.random() < 0.2:
            entry = rng.choice(history)
            partials.retract(1e-5, 1.0, 1.0, entry, rng.random())
        expected = _reference(history, now, requester)
        got = partials.others(now, requester)
        assert got == expected, step
        assert partials.concurrent(now, requester) == 1 + expected[1]
        live = [e for e in history if e.until > now and e.requester != requester]
        checked_multi += len(live) > len({e.requester for e in live})
    assert checked_multi > 30          # a requester with two live entries was counted once, many times


def test_others_of_an_idle_holder_is_zero():
    assert HolderPartials().others(1.0, 0) == (0.0, 0)
    partials = HolderPartials()
    partials.add(1e-5, 1.0, 1.0, 0.0, 1e-3, True, 4)
    assert partials.others(0.5e-3, 4) == (0.0, 0)                    # only the asker itself
    assert partials.others(0.5e-3, 5) == pytest.approx((1e-5 / 1e-3, 1))
    assert partials.others(2e-3, 5) == (0.0, 0)                      # its span ended


@pytest.mark.parametrize("mode", ["inline", "stream"])
def test_wait_of_a_holder_nobody_routes_to_is_its_layer_wait_only(mode):
    """`wait_s` skips the demand pass when nobody asks (the replica choice reads hundreds of idle holders): the
    same value as the formula at utilisation 0, busy or not, and the M/D/1 wait again once another requester
    asks."""
    from simroute.sim.vocab import HolderMode

    partials = HolderPartials(HolderMode(mode))
    for busy in (True, False):
        assert partials.wait_s(1e-5, 0.5, busy, 4e-4, requester=3) == partials.queue_wait_s(1e-5, 0.0, busy, 4e-4)
    partials.add(1e-5, 50.0, 1.0, 0.0, 1e-3, False, requester=4)       # rho 0.5 from requester 4
    assert partials.wait_s(1e-5, 0.5e-3, False, 4e-4, requester=3) == partials.queue_wait_s(1e-5, 0.5, False, 4e-4)
    assert partials.wait_s(1e-5, 0.5e-3, False, 4e-4, requester=4) == 0.0      # its own demand left out


@pytest.mark.parametrize("mode", ["inline", "stream"])
def test_the_modes_wait_and_charge_as_their_formulas_say(mode):
    """`queue_wait_s` and `add` per mode (their mode-dependent terms are kept as plain values): the M/D/1 wait,
    plus half a layer inline on a busy holder; a busy holder's charge is the work inline and the interference
    share of it on a stream, an idle one's none; a mode or interference set later is what counts."""
    from simroute.sim.vocab import HolderMode

    partials = HolderPartials(HolderMode(mode), 0.25)
    inline = mode == "inline"
    assert partials.queue_wait_s(1e-5, 0.5, True, 4e-4) == 1e-5 * 0.5 / (2 * (1 - 0.5)) + (2e-4 if inline else 0.0)
    assert partials.queue_wait_s(1e-5, 2.0, False, 4e-4) == 1e-5 * 0.95 / (2 * (1 - 0.95))     # capped, idle
    assert partials.queue_wait_s(1e-5, 0.0, True, 4e-4) == (2e-4 if inline else 0.0)
    busy = partials.add(1e-5, 8, 1, 0.0, 1e-3, True, requester=2)
    assert busy.charge == (1.0 if inline else 0.25) * 8e-5 / 1e-3
    assert partials.add(1e-5, 8, 1, 0.0, 1e-3, False, requester=2).charge == 0.0
    partials.mode = HolderMode.STREAM if inline else HolderMode.INLINE
    partials.interference = 0.5
    assert partials.mode is not HolderMode(mode) and partials.interference == 0.5
    assert partials.queue_wait_s(1e-5, 0.0, True, 4e-4) == (0.0 if inline else 2e-4)
    assert partials.add(1e-5, 8, 1, 0.0, 1e-3, True, requester=2).charge == (0.5 if inline else 1.0) * 8e-5 / 1e-3
