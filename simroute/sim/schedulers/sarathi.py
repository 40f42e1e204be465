"""Sarathi-Serve's stall-free batching: decode-first, prefill chunks fill the token budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.schedulers.base import SCHEDULERS, EngineView, Plan, Scheduler, SchedulerOptions, by_phase
from simroute.sim.vocab import DECODE, PREFILL

if TYPE_CHECKING:
    from simroute.sim.engine.sequence import Sequence


@SCHEDULERS.register("sarathi")
class SarathiScheduler(Scheduler):
    """decode-first, prefill chunks fill the token budget (stall-free).

    Sarathi-Serve's stall-free batching: every iteration carries
    every running decode, and the token budget's remainder is filled with prefill chunks of at most
    `prefill_chunk` tokens (partly prefilled sequences first, then newly admitted ones, in admission order)."""

    def prefill_chunk(self, options: SchedulerOptions) -> float:
        return float(min(options.prefill_chunk, options.token_budget))

    def admissions(self, engine: EngineView) -> int:
        """As many as the budget left by the running decodes and prefill chunks takes: each a chunk, or one
        token if its KV arrived prefilled (PD decode side: it decodes at once)."""
        options = engine.options
        chunk = options.prefill_chunk
        budget = options.token_budget
        partial = None
        for seq in engine.running:
            phase = seq.phase
            if phase == DECODE:
                budget -= 1
            elif phase == PREFILL:
                if partial is None:
                    partial = []
                partial.append(seq)
        if partial is not None:
            for seq in partial:
                if budget <= 0:
                    break
                budget -= min(seq.to_prefill, chunk, budget)
        count = 0
        for seq in engine.waiting:
            if budget <= 0:
                break
            tokens = min(seq.to_prefill, chunk, budget)
            budget -= tokens if tokens > 0 else 1
            count += 1
        return count

    def plan(self, running: list[Sequence], options: SchedulerOptions) -> Plan:
        decode, partial = by_phase(running)
        if partial is None:
            return Plan(decode=decode, macro=True)
        budget = options.token_budget - len(decode)
        chunk = options.prefill_chunk
        prefill: list[tuple[Sequence, int]] = []
        for seq in partial:
            if budget <= 0:
                break
            tokens = min(seq.to_prefill, chunk, budget)
            prefill.append((seq, tokens))
            budget -= tokens
        return Plan(prefill, decode)
