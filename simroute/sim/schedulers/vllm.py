"""vLLM's default scheduler without chunked prefill: prefill-first, decodes wait."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.schedulers.base import SCHEDULERS, EngineView, Plan, Scheduler, decoding

if TYPE_CHECKING:
    from simroute.sim.engine.sequence import Sequence


@SCHEDULERS.register("vllm")
class VllmScheduler(Scheduler):
    """prefill-first: whole prompts as soon as they fit, decodes wait.

    vLLM's default scheduler without chunked prefill: whenever waiting prompts can be
    admitted, the iteration prefills whole prompts (up to the token budget, at least one); otherwise every
    running sequence decodes one token. New prompts therefore stall running decodes (TPOT pays, TTFT gains)."""

    def plan(self, engine: EngineView) -> Plan:
        prefill: list[tuple[Sequence, int]] = []
        used = 0
        budget = engine.options.token_budget
        while engine.waiting:
            seq = engine.waiting[0]
            tokens = seq.to_prefill
            if prefill and used + tokens > budget:
                break
            if not engine.admit(seq):
                break
            if tokens > 0:
                prefill.append((seq, tokens))
                used += tokens
        if prefill:
            return Plan(prefill=prefill)
        decode = decoding(engine)
        return Plan(decode=decode, k=engine.macro_k(decode))
