"""Sarathi-Serve's stall-free batching: decode-first, prefill chunks fill the token budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.schedulers.base import SCHEDULERS, EngineView, Plan, Scheduler, SchedulerOptions, decoding
from simroute.sim.vocab import PREFILL

if TYPE_CHECKING:
    from simroute.sim.engine.sequence import Sequence


@SCHEDULERS.register("sarathi")
class SarathiScheduler(Scheduler):
    """decode-first, prefill chunks fill the token budget (stall-free).

    Sarathi-Serve's stall-free batching: every iteration carries
    every running decode, and the token budget's remainder is filled with prefill chunks of at most
    `prefill_chunk` tokens (partly prefilled sequences first, then newly admitted ones)."""

    def prefill_chunk(self, options: SchedulerOptions) -> float:
        return float(min(options.prefill_chunk, options.token_budget))

    def plan(self, engine: EngineView) -> Plan:
        opts = engine.options
        decode = decoding(engine)
        budget = opts.token_budget - len(decode)
        prefill: list[tuple[Sequence, int]] = []
        for seq in engine.running:
            if budget <= 0:
                break
            if seq.phase == PREFILL:
                tokens = min(seq.to_prefill, opts.prefill_chunk, budget)
                prefill.append((seq, tokens))
                budget -= tokens
        while budget > 0 and engine.waiting:
            seq = engine.waiting[0]
            if not engine.admit(seq):
                break
            tokens = min(seq.to_prefill, opts.prefill_chunk, budget)
            if tokens > 0:
                prefill.append((seq, tokens))
                budget -= tokens
            else:                       # its KV arrived prefilled (PD decode side): it decodes now
                decode.append(seq)
                budget -= 1
        if prefill or any(s.phase == PREFILL for s in engine.running):
            return Plan(prefill=prefill, decode=decode)
        return Plan(decode=decode, k=engine.macro_k(decode))
