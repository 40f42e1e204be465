"""Admission, preemption, scheduler budgets and micro-batch overlap of the instance engine, each pinned on its
own (bench/planted_bugs.py plants a bug in each): the running-sequence cap, which sequence is preempted, where
it waits and what it recomputes, the token budget of both schedulers, and what two micro-batches can hide."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from fakes import FakeStep, NoNet
from simroute.sim.engine import RouteExchange, RouteShare, Sequence


def _stepped(env: simpy.Environment, check) -> None:
    """Run the simulation one event at a time, calling `check()` after each."""
    while env.peek() != float("inf"):
        env.step()
        check()


def test_the_running_set_never_exceeds_max_running(make_engine):
    env = simpy.Environment()
    eng = make_engine(env, max_running=2)
    seqs = [Sequence(i, 100, 20) for i in range(5)]
    for seq in seqs:
        eng.submit(seq)
    most = [0]
    _stepped(env, lambda: most.__setitem__(0, max(most[0], len(eng.running))))
    assert most[0] == 2
    assert all(s.generated == 20 for s in seqs)


def _two_growing(make_engine, third: bool = False):
    """Two sequences of 256 prompt tokens admitted together into 10 KV blocks; decoding 200 tokens each they
    outgrow it, so one is preempted. `third`: a later one waits behind them."""
    env = simpy.Environment()
    eng = make_engine(env, hbm_tokens=640, steps_per_event=1)
    seqs = [Sequence(i, 256, 200) for i in range(3 if third else 2)]
    for seq in seqs:
        eng.submit(seq)
    return env, eng, seqs


def test_the_latest_admitted_sequence_is_preempted(make_engine):
    env, eng, (first, second) = _two_growing(make_engine)
    env.run()
    assert eng.preemptions > 0
    assert first.preemptions == 0 and second.preemptions > 0
    assert first.t_done < second.t_done


def test_a_preempted_sequence_waits_ahead_of_later_arrivals(make_engine):
    """vLLM puts a preempted sequence back at the head of the waiting queue: the next sequence admitted after
    a preemption is the victim, not one that was waiting already."""
    env, eng, seqs = _two_growing(make_engine, third=True)
    events = []                         # ("admit" | "preempt", request id), in order
    admit, preempt = eng.admit, eng._preempt

    def admit_spy(seq: Sequence) -> bool:
        ok = admit(seq)
        if ok:
            events.append(("admit", seq.rid))
        return ok

    def preempt_spy(seq: Sequence) -> None:
        events.append(("preempt", seq.rid))
        preempt(seq)

    eng.admit, eng._preempt = admit_spy, preempt_spy
    env.run()
    assert all(s.generated == 200 for s in seqs)
    preempted = [i for i, (what, _rid) in enumerate(events) if what == "preempt"]
    assert preempted
    for i in preempted:
        victim = events[i][1]
        after = [rid for what, rid in events[i + 1:] if what == "admit"]
        assert after and after[0] == victim


def test_a_preempted_sequence_recomputes_its_prompt_and_what_it_generated(make_engine):
    """Recompute preemption re-prefills prompt + generated tokens: the prefill tokens the engine ran are the
    prompts plus, per preemption, the victim's whole context at that moment."""
    env, eng, seqs = _two_growing(make_engine)
    contexts = []
    preempt = eng._preempt

    def spy(seq: Sequence) -> None:
        contexts.append(seq.prompt + seq.generated)
        preempt(seq)

    eng._preempt = spy
    env.run()
    assert contexts and all(c > 256 for c in contexts)
    cols = eng.log.cols
    prefilled = int(np.sum(np.asarray(cols["new_tokens"]) - np.asarray(cols["decode_seqs"])))
    assert prefilled == sum(s.prompt for s in seqs) + sum(contexts)
    assert all(s.generated == 200 for s in seqs)


def _new_tokens_per_iteration(eng) -> np.ndarray:
    return np.asarray(eng.log.cols["new_tokens"])


def test_vllm_packs_whole_prompts_up_to_the_token_budget(make_engine):
    env = simpy.Environment()
    eng = make_engine(env, scheduler="vllm", token_budget=100)
    for i in range(5):
        eng.submit(Sequence(i, 60, 3))
    env.run()
    tokens = _new_tokens_per_iteration(eng)
    assert tokens.max() <= 100
    assert np.sum(np.asarray(eng.log.cols["prefill_seqs"])) == 5


def test_sarathi_decodes_count_against_the_token_budget(make_engine):
    """A prefill arriving while others decode is chunked to what the budget leaves after the decodes."""
    env = simpy.Environment()
    eng = make_engine(env, scheduler="sarathi", token_budget=100, steps_per_event=1)
    for i in range(4):
        eng.submit(Sequence(i, 10, 40))

    def late():
        yield env.timeout(0.05)
        eng.submit(Sequence(9, 1000, 2))

    env.process(late())
    env.run()
    cols = eng.log.cols
    mixed = [t for t, d, p in zip(cols["new_tokens"], cols["decode_seqs"], cols["prefill_seqs"]) if d and p]
    assert mixed and max(mixed) == 100
    assert _new_tokens_per_iteration(eng).max() <= 100


class _SlowProbe:
    """A fabric whose probe (1 ms) makes the exchange longer than half the iteration's compute."""
    t_probe_s = 1e-3
    turnaround_s = 5e-6
    single_block_Bps = 10e9


def test_two_micro_batches_hide_at_most_half_the_compute(make_engine):
    """Per layer max(c, c/2 + r): one micro-batch's exchange hides behind the other's compute, so the time
    hidden per iteration is min(exchange, compute / 2), never the whole compute."""
    env = simpy.Environment()
    ex = RouteExchange(NoNet(), lambda a, b: _SlowProbe, q_bytes=1152, p_bytes=1032, tp=1, merge_s=0.0,
                       exchanges_per_step=FakeStep.layers)
    holder = make_engine(env, 1)
    req = make_engine(env, 0, exchange=ex, overlap=True)
    req.submit(Sequence(0, 100, 20, routes=(RouteShare(holder, 4096.0),)))
    env.run()
    cols = req.log.cols
    compute, exch = np.asarray(cols["compute_s"]), np.asarray(cols["exchange_s"])
    hidden = np.asarray(cols["hidden_s"]) / np.asarray(cols["iterations"])
    assert np.all(exch > compute / 2)
    assert hidden == pytest.approx(np.minimum(exch, compute / 2), rel=1e-9)


def test_vllm_admission_that_waits_for_blocks_still_finishes_everything(make_engine):
    """vLLM's prefill-first loop stops at the first prompt that does not fit (head of line), rather than
    spinning on it: under HBM pressure every sequence still finishes, with preemptions and the invariant held."""
    env = simpy.Environment()
    eng = make_engine(env, scheduler="vllm", hbm_tokens=8000, steps_per_event=4)
    seqs = [Sequence(i, 3000, 300) for i in range(6)]
    for seq in seqs:
        eng.submit(seq)
    env.run()
    assert all(s.generated == 300 for s in seqs)
    assert eng.hbm.kv_blocks == 0


def test_itl_percentiles_are_token_weighted_up_to_the_largest_gap():
    """Nine tokens saw a 2 ms gap and one a 1 ms gap: the median token saw 2 ms (the largest value)."""
    from simroute.sim.engine import IterationLog
    log = IterationLog()
    log.gap(1e-3, 1)
    log.gap(2e-3, 9)
    p = log.itl_percentiles()
    assert p["p50"] == pytest.approx(2.0) and p["p99"] == pytest.approx(2.0) and p["max"] == pytest.approx(2.0)
    assert p["mean"] == pytest.approx(1.9)
