"""The instance engine always makes progress under HBM pressure: a sequence that can never fit is refused at once,
a refusal does not strand the queue behind it, preemptions per sequence stay bounded under overload, and no
event loop spins faster than an iteration can run (the ARK livelock of issue 24)."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from fakes import FakeStep
from simroute.sim.engine import Sequence, blocks_for
from simroute.sim.engine.sequence import DECODE, DONE, NEVER_FITS, THRASHED

# the shortest iteration FakeStep can run: overhead + every layer's weights read once
MIN_ITERATION_S = FakeStep.overhead_s + FakeStep.layers * FakeStep.weight_s_per_layer


def test_peak_tokens_is_what_the_engine_reserves_at_the_last_decode_event():
    assert Sequence(0, 900, 200).peak_tokens == 1100
    assert Sequence(0, 900, 1).peak_tokens == 900       # prefill only: the first token comes with the prompt
    assert Sequence(0, 900, 0).peak_tokens == 900       # a chunk's re-prefill


def test_a_sequence_that_outgrows_hbm_alone_is_refused_at_once(make_engine):
    """Its prompt fits (900 tokens in 960) but prompt + output does not: admitted, it would outgrow HBM alone,
    preempt itself, recompute and do it again for ever."""
    env = simpy.Environment()
    eng = make_engine(env, hbm_tokens=1000)
    assert eng.hbm.capacity_blocks == 15 and blocks_for(900) <= 15 < blocks_for(1100)
    seq = Sequence(0, 900, 200)
    eng.submit(seq)
    env.run(until=100.0)
    assert (seq.refused, seq.output, seq.phase, seq.t_done) == (NEVER_FITS, -1, DONE, 0.0)
    assert eng.preemptions == 0 and eng.rejected == 1 and eng.log.iterations == 0


def test_one_that_just_fits_is_served_alone(make_engine):
    env = simpy.Environment()
    eng = make_engine(env, hbm_tokens=1000)
    seq = Sequence(0, 900, 60)          # 960 tokens: exactly 15 blocks
    eng.submit(seq)
    env.run(until=100.0)
    assert seq.refused == 0 and seq.generated == 60 and eng.preemptions == 0


def test_a_refused_sequence_does_not_strand_the_queue_behind_it(make_engine):
    """a runs; b (never fits) and c queue behind it: when a ends, b is refused and c still runs."""
    env = simpy.Environment()
    eng = make_engine(env, hbm_tokens=1000)
    a, b, c = Sequence(0, 500, 50), Sequence(1, 5000, 10), Sequence(2, 500, 10)
    for seq in (a, b, c):
        eng.submit(seq)
    env.run(until=100.0)
    assert b.refused == NEVER_FITS
    assert a.generated == 50 and c.generated == 10 and c.phase == DONE


def _overload(make_engine, steps: int, scheduler: str, **options):
    """80 sequences of 2k-26k prompt tokens and 50-900 output tokens (half arriving prefilled, as PD decode
    sides do) at ~20 per second on an engine of 30k KV tokens: far more than fits."""
    env = simpy.Environment()
    eng = make_engine(env, hbm_tokens=30_000, steps_per_event=steps, scheduler=scheduler, **options)
    rng = np.random.default_rng(3)
    seqs = []

    def arrivals():
        for i in range(80):
            yield env.timeout(rng.exponential(0.05))
            seq = Sequence(i, int(rng.integers(2000, 26_000)), int(rng.integers(50, 900)))
            if i % 2:
                seq.prefilled, seq.generated = seq.prompt, 1
            seqs.append(seq)
            eng.submit(seq)

    env.process(arrivals())
    env.run(until=10_000.0)
    return eng, seqs


@pytest.mark.parametrize("scheduler", ["sarathi", "vllm"])
@pytest.mark.parametrize("steps", [8, 64, 128])
def test_overload_bounds_preemptions_per_sequence_and_iterations_per_simulated_second(make_engine, steps, scheduler):
    """Before issue 24's fix, 128 steps per event let admission leave less room than an event's growth: one
    sequence was admitted and preempted 146,638 times, at ~3,000 iterations per simulated second."""
    eng, seqs = _overload(make_engine, steps, scheduler)
    assert len(seqs) == 80 and all(seq.phase == DONE and seq.refused == 0 for seq in seqs)
    assert all(seq.generated == seq.output for seq in seqs)
    assert max(seq.preemptions for seq in seqs) <= 1
    end = max(seq.t_done for seq in seqs)
    assert eng.log.iterations / end <= 1 / MIN_ITERATION_S
    assert eng.hbm.kv_blocks == 0


def test_a_sequence_preempted_too_often_is_refused_as_thrashed(make_engine):
    """With max_preemptions 0 every victim is refused instead of recomputed (the thrash guard's account)."""
    env = simpy.Environment()
    eng = make_engine(env, hbm_tokens=60_000, scheduler="sarathi", steps_per_event=4, max_preemptions=0)
    seqs = [Sequence(i, 4000, 800) for i in range(40)]
    for seq in seqs:
        eng.submit(seq)
    env.run(until=10_000.0)
    thrashed = [seq for seq in seqs if seq.refused == THRASHED]
    assert thrashed and eng.thrashed == len(thrashed) == eng.preemptions == eng.rejected
    assert all(seq.output == -1 and seq.preemptions == 1 for seq in thrashed)
    assert all(seq.generated == 800 for seq in seqs if seq.refused == 0)
    assert eng.hbm.kv_blocks == 0 and not eng.waiting and not eng.running


def test_an_idle_engine_admits_past_a_head_that_waits_for_copies_pinned_behind_it(make_engine):
    """A copy pinned by the request of the small sequence fills HBM; the big sequence ahead of it cannot be
    admitted until that request ends and unpins it. FCFS alone would wait for ever (the default scenario under
    always-local stalled this way with 137 of 519 requests)."""
    env = simpy.Environment()
    eng = make_engine(env, hbm_tokens=10_000)
    pinned = {"copy"}
    eng.hbm.evictable = lambda key: key not in pinned
    assert eng.hbm.add_copy("copy", blocks_for(8000))

    def unpin(_seq):
        pinned.clear()
        eng.poke()

    big, small = Sequence(0, 5000, 10), Sequence(1, 100, 10, on_done=unpin)
    eng.submit(big)
    eng.submit(small)
    env.run(until=100.0)
    assert small.phase == DONE and big.phase == DONE and big.generated == 10
    assert big.t_scheduled >= small.t_done and eng.hbm.evictions == 1


def test_admission_keeps_one_events_growth_of_every_sequence_that_decodes_next(make_engine):
    """128 steps per event: a decoding sequence may take 2 blocks an event. With 8 decoding, admission leaves
    16 blocks (more than vLLM's 1% watermark, 10 of 1000); a prefilled arrival decodes at once and counts
    itself (18)."""
    env = simpy.Environment()
    eng = make_engine(env, hbm_tokens=64_000, steps_per_event=128)
    assert eng.hbm.capacity_blocks == 1000
    for i in range(8):
        seq = Sequence(i, 640, 500)
        seq.phase, seq.prefilled, seq.generated, seq.blocks = DECODE, 640, 1, 10
        eng.running.append(seq)
    assert eng.hbm.reserve_kv(80)
    free = eng.hbm.free_blocks
    for need, room, prefilled, admitted in ((free - 15, 16, False, False), (free - 16, 16, False, True),
                                            (free - 17, 18, True, False), (free - 18, 18, True, True)):
        seq = Sequence(100 + need, need * 64, 10)
        if prefilled:
            seq.prefilled, seq.generated = seq.prompt, 1
        eng.waiting.clear()
        eng.waiting.append(seq)
        assert eng.admit(seq) is admitted, (need, room)
        if admitted:
            assert eng.hbm.free_blocks == room
            eng.running.remove(seq)
            eng.hbm.release_kv(seq.blocks)


def _two_long_sequences(make_engine, scheduler):
    """Two 4000 + 800-token sequences on an engine of 140 blocks (9000 tokens) under `scheduler`, run to the end:
    (engine, sequences, tokens the first had out when the second was first seen running)."""
    env = simpy.Environment()
    eng = make_engine(env, hbm_tokens=9000, scheduler=scheduler, token_budget=8192, prefill_chunk=8192)
    first, second = seqs = [Sequence(i, 4000, 800) for i in range(2)]
    for seq in seqs:
        eng.submit(seq)
    out_at_admission = None
    while out_at_admission is None and env.peek() < 10_000.0:
        env.step()
        if second in eng.running:
            out_at_admission = first.generated
    env.run(until=10_000.0)
    assert eng.hbm.capacity_blocks == 140 and all(seq.generated == 800 for seq in seqs)
    return eng, seqs, out_at_admission


def test_trtllm_admission_holds_each_sequence_s_kv_to_its_last_token_so_nothing_is_preempted(make_engine):
    """TensorRT-LLM's GUARANTEED_NO_EVICT: two 4000 + 800-token sequences in 140 blocks of 64 tokens (9000 tokens).
    Each needs 75 blocks to its last token: the second (75 + the first's 12 still to grow > 140 - 63 free) waits
    for the first to finish, and no decode preempts; the vLLM-style admission takes both and preempts one."""
    runs = {scheduler: _two_long_sequences(make_engine, scheduler) for scheduler in ("trtllm", "sarathi")}
    eng, (first, second), _ = runs["trtllm"]
    assert eng.preemptions == 0 and eng.hbm.peak_kv_blocks == 75         # one sequence at a time
    assert second.t_scheduled == first.t_done > 0
    eng, (first, second), _ = runs["sarathi"]
    assert eng.preemptions == 1 and second.t_scheduled < first.t_done


def test_sglang_admission_queues_a_request_the_pool_cannot_carry_to_completion_rather_than_preempting(make_engine):
    """SGLang's PrefillAdder (add_one_req_ignore_eos): two 4000 + 800-token sequences in 140 blocks (8960 tokens).
    Beside the first (63 blocks), the second's prompt fits but both could not reach their last token: it waits in the
    queue until the first has few enough tokens left (896 - g free > 2 x (800 - g) + 2: g > 706; the new-token
    ratio's estimate, 0.7 falling to 0.098, holds less), is admitted before the first ends, and no decode is
    preempted (peak 75 + 64 blocks); the vLLM-style admission takes both at once and preempts one."""
    runs = {scheduler: _two_long_sequences(make_engine, scheduler) for scheduler in ("sglang", "sarathi")}
    eng, (first, second), out_at_admission = runs["sglang"]
    assert eng.preemptions == 0 and eng.hbm.peak_kv_blocks <= 140
    assert first.t_scheduled < second.t_scheduled < first.t_done
    assert 706 < out_at_admission <= 706 + 16       # at the first event boundary past 706 tokens out
    eng, (first, second), _ = runs["sarathi"]
    assert eng.preemptions == 1 and second.t_scheduled <= first.t_first_token   # admitted with the first
