"""vLLM's default scheduler without chunked prefill: prefill-first, decodes wait."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.schedulers.base import SCHEDULERS, EngineView, Plan, Scheduler, SchedulerOptions, decoding
from simroute.sim.vocab import PREFILL

if TYPE_CHECKING:
    from simroute.sim.engine.sequence import Sequence


@SCHEDULERS.register("vllm")
class VllmScheduler(Scheduler):
    """prefill-first: whole prompts as soon as they fit, decodes wait.

    vLLM's default scheduler without chunked prefill: whenever waiting prompts can be
    admitted, the iteration prefills whole prompts (up to the token budget, at least one); otherwise every
    running sequence decodes one token. New prompts therefore stall running decodes (TPOT pays, TTFT gains)."""

    def admissions(self, engine: EngineView) -> int:
        budget = engine.options.token_budget
        used = count = 0
        prefilling = False
        for seq in engine.waiting:
            tokens = seq.to_prefill
            if prefilling and used + tokens > budget:
                break
            count += 1
            if tokens > 0:
                prefilling = True
                used += tokens
        return count

    def plan(self, running: list[Sequence], options: SchedulerOptions) -> Plan:
        # whole prompts: a sequence is mid-prefill only in the event that admitted it
        prefill = [(seq, seq.to_prefill) for seq in running if seq.phase == PREFILL]
        if prefill:
            return Plan(prefill=prefill)
        return Plan(decode=decoding(running), macro=True)
