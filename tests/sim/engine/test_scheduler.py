"""The schedulers on their own: what they admit and how they batch, from a queue state alone (no engine)."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

from simroute.sim.engine import EngineOptions, Sequence
from simroute.sim.schedulers import get_scheduler
from simroute.sim.engine.sequence import DECODE, PREFILL


def _running(prompt: int, phase: int, prefilled: int = 0, generated: int = 0) -> Sequence:
    seq = Sequence(0, prompt, 100)
    seq.phase, seq.prefilled, seq.generated = phase, prefilled, generated
    return seq


def _pd(prompt: int) -> Sequence:
    seq = Sequence(0, prompt, 100)
    seq.prefilled, seq.generated = prompt, 1          # its KV arrived: nothing to prefill
    return seq


def _queue(running, waiting, **options):
    return SimpleNamespace(running=running, waiting=deque(waiting), options=EngineOptions(**options))


def test_sarathi_admits_what_the_budget_left_by_decodes_and_partial_prefills_takes():
    # 1024 - 2 decodes - 300 (the partial prefill's rest) = 722: a 500-token prompt, a PD arrival (1), 221 of
    # a 4000-token prompt, then the budget is spent
    running = [_running(50, DECODE, 50, 3), _running(1000, PREFILL, 700), _running(60, DECODE, 60, 9)]
    waiting = [Sequence(1, 500, 10), _pd(800), Sequence(2, 4000, 10), Sequence(3, 10, 10)]
    queue = _queue(running, waiting, token_budget=1024, prefill_chunk=512)
    assert get_scheduler("sarathi").admissions(queue) == 3


def test_sarathi_plans_decodes_then_chunks_in_running_order_and_a_macro_only_without_prefill():
    options = EngineOptions(token_budget=1024, prefill_chunk=512)
    a, b = _running(50, DECODE, 50, 3), _running(1000, PREFILL, 700)
    c, d = _running(60, DECODE, 60, 9), _running(2000, PREFILL, 0)
    plan = get_scheduler("sarathi").plan([a, b, c, d], options)
    assert plan.decode == [a, c] and plan.prefill == [(b, 300), (d, 512)] and not plan.macro and plan.k == 1
    plan = get_scheduler("sarathi").plan([a, c], options)
    assert plan.decode == [a, c] and plan.prefill == [] and plan.macro


def test_vllm_admits_whole_prompts_up_to_the_budget_at_least_one():
    scheduler = get_scheduler("vllm")
    waiting = [Sequence(1, 3000, 10), Sequence(2, 10, 10)]
    assert scheduler.admissions(_queue([], waiting, token_budget=2048)) == 1      # one prompt over the budget
    waiting = [_pd(900), Sequence(1, 1500, 10), Sequence(2, 500, 10), Sequence(3, 49, 10), Sequence(4, 1, 10)]
    assert scheduler.admissions(_queue([], waiting, token_budget=2048)) == 3      # PD, 1500, 500: 49 more > 2048


def test_vllm_plans_prefill_first_and_decodes_only_when_nothing_prefills():
    options = EngineOptions(scheduler="vllm")
    a, b = _running(50, DECODE, 50, 3), _running(700, PREFILL, 0)
    plan = get_scheduler("vllm").plan([a, b], options)
    assert plan.prefill == [(b, 700)] and plan.decode == [] and not plan.macro
    plan = get_scheduler("vllm").plan([a], options)
    assert plan.decode == [a] and plan.macro


def test_sglang_admits_what_one_chunked_prefill_batch_takes_after_the_chunked_sequence():
    # min(chunk 8192, budget 16384) = 8192 tokens: the chunked sequence's rest (1808), then 5000 and 1384 of the
    # next prompt; a PD arrival takes no prefill tokens; the 100-token prompt after them finds the batch full
    running = [_running(60, DECODE, 60, 9), _running(10000, PREFILL, 8192)]
    waiting = [Sequence(1, 5000, 10), _pd(700), Sequence(2, 3000, 10), Sequence(3, 100, 10)]
    queue = _queue(running, waiting, token_budget=16384, prefill_chunk=8192)
    assert get_scheduler("sglang").admissions(queue) == 3
    # a 4096-token budget binds: 2288 left after the chunked rest, all taken by the 5000-token prompt; the PD arrival
    # behind it takes none, and the 3000-token prompt finds the batch full
    assert get_scheduler("sglang").admissions(_queue(running, waiting, token_budget=4096, prefill_chunk=8192)) == 2


def test_sglang_runs_a_prefill_batch_alone_and_decodes_only_when_none_can_be_formed():
    options = EngineOptions(token_budget=16384, prefill_chunk=8192)
    a, b = _running(60, DECODE, 60, 9), _running(10000, PREFILL, 8192)       # 1808 left
    c, d = _running(5000, PREFILL), _running(3000, PREFILL)
    plan = get_scheduler("sglang").plan([a, b, c, d], options)
    assert plan.prefill == [(b, 1808), (c, 5000), (d, 1384)] and plan.decode == [] and not plan.macro
    plan = get_scheduler("sglang").plan([a], options)
    assert plan.decode == [a] and plan.prefill == [] and plan.macro
    assert get_scheduler("sglang").prefill_chunk(EngineOptions(token_budget=4096, prefill_chunk=8192)) == 4096


def test_trtllm_admits_whole_prompts_in_order_while_they_fit_beside_the_decodes():
    decodes = [_running(60, DECODE, 60, 9) for _ in range(3)]
    # 8192 - 3 decodes = 8189: 4000 (4189 left), 4000 (189 left), 100 (89 left)
    waiting = [Sequence(1, 4000, 10), Sequence(2, 4000, 10), Sequence(3, 100, 10)]
    assert get_scheduler("trtllm").admissions(_queue(decodes, waiting, token_budget=8192)) == 3
    # 6000 fits (2189 left); 3000 does not and stops the scan: the 10-token prompt behind it waits (FCFS)
    waiting = [Sequence(1, 6000, 10), Sequence(2, 3000, 10), Sequence(3, 10, 10)]
    assert get_scheduler("trtllm").admissions(_queue(decodes, waiting, token_budget=8192)) == 1
    # a prompt over the budget waits for the decodes to drain, then runs alone, whole
    assert get_scheduler("trtllm").admissions(_queue(decodes, [Sequence(1, 10000, 10)], token_budget=8192)) == 0
    assert get_scheduler("trtllm").admissions(_queue([], [Sequence(1, 10000, 10)], token_budget=8192)) == 1


def test_trtllm_plans_every_decode_with_whole_prompts_and_never_chunks():
    options = EngineOptions(scheduler="trtllm", token_budget=8192)
    a, b = _running(60, DECODE, 60, 9), _running(50, DECODE, 50, 3)
    c, d, e = _running(5000, PREFILL), _running(4000, PREFILL), _running(10, PREFILL)
    plan = get_scheduler("trtllm").plan([a, c, b, d, e], options)
    assert plan.decode == [a, b] and plan.prefill == [(c, 5000)] and not plan.macro    # 4000 > 8190 - 5000
    plan = get_scheduler("trtllm").plan([_running(12000, PREFILL)], options)
    assert plan.prefill[0][1] == 12000                                                 # alone, whole
    assert get_scheduler("trtllm").plan([a, b], options).macro
    assert get_scheduler("trtllm").prefill_chunk(options) == float("inf")
