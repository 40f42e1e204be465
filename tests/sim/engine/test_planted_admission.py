"""SGLang's admission under the sglang scheduler (`InstanceEngine._completes_in_order`, the new-token ratio), worked
by hand from sglang 0.5.9's rules (docs/ENGINES.md; `PrefillAdder.add_one_req_ignore_eos`, managers/schedule_policy.py;
`new_token_ratio`, managers/scheduler.py; `retract_decode`, schedule_batch.py).

A request is admitted when (1) its prompt's blocks fit, (2) the free tokens after it cover what the running ones still
hold back: a sequence still in its prefill its whole output, a decoding one its tokens left x the ratio, each clipped at
4096, and (3) taking it and the running ones in order of tokens left, when the i-th ends each of the n - i still running
has grown by its tokens left, beside what those ended before it freed, with a token to spare each. The ratio starts at
0.7, falls by (0.7 - 0.098) / 600 per decode iteration to 0.098, returns to 0.7 when the engine idles and after a
retraction is what the ones left decoded, plus 20 each, over their outputs (+ 1), at most 1.

The engine's KV room is set in blocks of 64 tokens (`hbm_tokens = blocks x 64`); the running sequences are placed by
hand, so every count below is the rule's, not a recorded run's."""

from __future__ import annotations

import pytest
import simpy

from simroute.sim.engine import Sequence
from simroute.sim.engine.sequence import DECODE, DONE, PREFILL

INIT, FLOOR = 0.7, 0.7 * 0.14                       # SGLANG_INIT_NEW_TOKEN_RATIO x 1.0; x the min ratio factor 0.14
DECAY = (INIT - FLOOR) / 600                         # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS 600


def _engine(make_engine, blocks: int, **options):
    eng = make_engine(simpy.Environment(), hbm_tokens=blocks * 64, scheduler="sglang", **options)
    assert eng.hbm.capacity_blocks == blocks
    return eng


def _running(eng, rid: int, blocks: int, generated: int, output: int) -> Sequence:
    """A sequence already running on `eng`, holding `blocks` blocks: decoding with `generated` tokens out, or still in
    its prefill (`generated` 0)."""
    seq = Sequence(rid, blocks * 64, output)
    seq.phase = DECODE if generated else PREFILL
    seq.prefilled = seq.prompt if generated else 0
    seq.generated, seq.blocks = generated, blocks
    assert eng.hbm.reserve_kv(blocks)
    eng.running.append(seq)
    return seq


def _admits(eng, prompt: int, output: int) -> bool:
    seq = Sequence(99, prompt, output)
    eng.waiting.append(seq)
    return eng.admit(seq)


@pytest.mark.parametrize("ratio, blocks, admitted", [
    (INIT, 41, True),        # free 704 tokens >= 999 x 0.7 = 699.3 held back
    (INIT, 40, False),       # free 640 < 699.3
    (FLOOR, 32, True),       # free 128 >= 999 x 0.098 = 97.9
    (FLOOR, 31, False),      # free 64 < 97.9
])
def test_a_decoding_sequence_holds_back_its_tokens_left_times_the_ratio(make_engine, ratio, blocks, admitted):
    """A decodes (10 blocks, 999 tokens left); B's prompt is 1280 tokens (20 blocks), 10 out. The completion order
    passes in every case (B first: free - 2 x 10 > 2; then A: free + 1280 - 999 > 1): only the held-back tokens
    decide."""
    eng = _engine(make_engine, blocks)
    _running(eng, 0, blocks=10, generated=1, output=1000)
    eng._ratio = ratio
    assert _admits(eng, 1280, 10) is admitted


@pytest.mark.parametrize("blocks, admitted", [(51, True), (50, False)])
def test_the_running_sequences_held_back_tokens_add_up(make_engine, blocks, admitted):
    """A1 and A2 decode with 500 tokens left each (10 blocks each): together they hold back (500 + 500) x 0.7 = 700
    tokens; B (1280-token prompt, 10 out) is admitted with 704 free (51 - 40 blocks), not with 640 (one of them alone
    would hold back 350). The completion order passes both (B first: free - 3 x 10 > 3; then A1 and A2 with B's 1280
    freed)."""
    eng = _engine(make_engine, blocks)
    _running(eng, 0, blocks=10, generated=1, output=501)
    _running(eng, 1, blocks=10, generated=1, output=501)
    assert _admits(eng, 1280, 10) is admitted


@pytest.mark.parametrize("blocks, admitted", [(46, True), (45, False)])
def test_a_sequence_still_in_its_prefill_holds_back_its_whole_output(make_engine, blocks, admitted):
    """A has not produced its first token (1000 out, none yet): it holds back all 1000, whatever the ratio (even at its
    floor): free 1024 tokens (46 blocks - 10 - 20) admit B, free 960 do not."""
    eng = _engine(make_engine, blocks)
    _running(eng, 0, blocks=10, generated=0, output=1000)
    eng._ratio = FLOOR
    assert _admits(eng, 1280, 10) is admitted


@pytest.mark.parametrize("ratio, blocks, admitted", [
    (INIT, 167, True),       # free 3648 >= 4096 x 0.7 = 2867.2 (unclipped: 10000 x 0.7 = 7000)
    (1.0, 174, True),        # free 4096 >= 4096
    (1.0, 173, False),       # free 4032 < 4096
])
def test_a_running_sequence_s_tokens_left_are_clipped_at_4096(make_engine, ratio, blocks, admitted):
    """A decodes with 10,000 tokens left (10 blocks); B's prompt is 6400 tokens (100 blocks), 10 out, so the
    completion order needs free > 10000 - 6400 + 1 = 3601 only (B ends first and frees its 6400): the clip of A's
    estimate at SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION 4096 decides. A ratio of 1.0 is what a retraction can set."""
    eng = _engine(make_engine, blocks)
    _running(eng, 0, blocks=10, generated=1, output=10_001)
    eng._ratio = ratio
    assert _admits(eng, 6400, 10) is admitted


@pytest.mark.parametrize("blocks, admitted", [(26, True), (25, False)])
def test_the_completion_order_takes_the_fewest_tokens_left_first(make_engine, blocks, admitted):
    """A decodes with 100 left (10 blocks); B: 640-token prompt (10 blocks), 1000 out. In order of tokens left A ends
    first (free - 2 x 100 > 2), then B alone, with A's 640 freed (free + 640 - 1000 > 1: free > 361): free 384
    admits, 320 does not. Taken in arrival order (B first: free - 2 x 1000 > 2) neither would."""
    eng = _engine(make_engine, blocks)
    _running(eng, 0, blocks=10, generated=1, output=101)
    assert _admits(eng, 640, 1000) is admitted


@pytest.mark.parametrize("output, admitted", [(190, True), (191, False)])
def test_the_completion_order_keeps_a_token_to_spare_for_each_sequence_still_running(make_engine, output, admitted):
    """Free 384 tokens (26 blocks - A's 10 - B's 10); A decodes with 500 left; B (640-token prompt) has the fewest
    left, so it ends first with both running: 384 - 2 x 190 = 4 > 2 admits, 384 - 2 x 191 = 2 is not more than 2
    (IGNORE_EOS_RESERVE_TOKENS, one per running request)."""
    eng = _engine(make_engine, 26)
    _running(eng, 0, blocks=10, generated=1, output=501)
    assert _admits(eng, 640, output) is admitted


@pytest.mark.parametrize("blocks, admitted", [(42, True), (41, False)])
def test_the_completion_order_counts_everything_the_earlier_ones_freed(make_engine, blocks, admitted):
    """B (640-token prompt, 10 out), A1 (1 block, 20 left), A2 (10 blocks, 2000 left), at the floor ratio (held back
    (20 + 2000) x 0.098 = 198). A2 ends last, alone, after B and A1 freed 640 + 64: free + 704 - 2000 > 1. Free 1344
    (42 - 21 blocks) admits, 1280 does not; A1's 64 alone would admit neither."""
    eng = _engine(make_engine, blocks)
    _running(eng, 0, blocks=1, generated=1, output=21)
    _running(eng, 1, blocks=10, generated=1, output=2001)
    eng._ratio = FLOOR
    assert _admits(eng, 640, 10) is admitted


def test_copies_count_as_free_room(make_engine):
    """The first case of the held-back test (free 704 >= 699.3) with 2 of those free blocks taken by a copy, which a
    running sequence may evict: still admitted; the prompt's blocks come from the free ones (29 - 20), so the copy
    stays."""
    eng = _engine(make_engine, 41)
    _running(eng, 0, blocks=10, generated=1, output=1000)
    assert eng.hbm.add_copy("copy", 2)
    assert eng.hbm.free_blocks == 29 and eng.hbm.copy_blocks == 2
    assert _admits(eng, 1280, 10)
    assert eng.hbm.free_blocks == 9 and eng.hbm.copy_blocks == 2


def test_the_ratio_falls_by_its_decay_per_decode_iteration_to_the_floor_and_resets_when_idle(make_engine):
    """One sequence (100-token prompt, 700 out) alone, 16 decode iterations per event: after each event the ratio is
    0.7 - (tokens out - 1) x (0.7 - 0.098) / 600 (every token after the first is one decode iteration), floored at
    0.098 from the 601st decode iteration on; the engine then idles and the ratio is 0.7 again."""
    eng = _engine(make_engine, 100, steps_per_event=16)
    env = eng.env
    seq = Sequence(0, 100, 700)
    eng.submit(seq)
    seen = set()
    while seq.phase != DONE and env.peek() < 1e9:
        env.step()
        if seq.generated >= 1 and seq.generated not in seen and seq.generated < 700:
            seen.add(seq.generated)
            assert eng._ratio == pytest.approx(max(INIT - (seq.generated - 1) * DECAY, FLOOR), abs=1e-12), \
                seq.generated
    assert max(seen) > 601 and len(seen) > 40             # the floor reached; events of up to 16 iterations
    env.run()
    assert seq.generated == 700 and not eng.busy
    assert eng._ratio == INIT


def test_a_retraction_sets_the_ratio_from_what_the_ones_left_decoded(make_engine):
    """Preempting C leaves A (100 of 500 out) and B (50 of 300): the ratio is (100 + 50 + 2 x 20) / (500 + 300 + 1)
    = 190 / 801; preempting B next leaves A alone at (100 + 20) / 501; a ratio over 1 is 1."""
    eng = _engine(make_engine, 100)
    a = _running(eng, 0, blocks=10, generated=100, output=500)
    b = _running(eng, 1, blocks=10, generated=50, output=300)
    c = _running(eng, 2, blocks=10, generated=10, output=400)
    eng._preempt(c)
    assert eng._ratio == pytest.approx(190 / 801, rel=1e-12)
    eng._preempt(b)
    assert eng._ratio == pytest.approx(120 / 501, rel=1e-12)
    a.generated = 490
    eng._preempt(_running(eng, 3, blocks=1, generated=1, output=10))
    assert eng._ratio == 1.0                               # (490 + 20) / 501 > 1
