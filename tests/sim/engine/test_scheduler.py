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
