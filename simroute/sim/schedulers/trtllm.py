"""TensorRT-LLM's in-flight batching without chunked prefill: every decode, then whole prompts while they fit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.schedulers.base import SCHEDULERS, EngineView, Plan, Scheduler, SchedulerOptions, by_phase
from simroute.sim.vocab import DECODE, PREFILL

if TYPE_CHECKING:
    from simroute.sim.engine.sequence import Sequence


@SCHEDULERS.register("trtllm")
class TrtllmScheduler(Scheduler):
    """in-flight batching: every decode, then whole prompts in order while they fit the token budget.

    TensorRT-LLM's micro-batch scheduler with chunked prefill off (its default; docs/ENGINES.md): each
    generation request adds one token, each context request its whole prompt, in order, and the first prompt
    that would take the batch past `max_num_tokens` (`token_budget`) stops the scan
    (microBatchScheduler.cpp). Prompts are never chunked (`prefill_chunk` is not read). A prompt longer than
    the budget, which TensorRT-LLM refuses at admission, runs alone here, whole, when nothing else is batched.

    Admission is the capacity scheduler's GUARANTEED_NO_EVICT (trtllm-serve's default `capacity_scheduler_policy`,
    tensorrt_llm/commands/serve.py): a context request is scheduled only if the blocks to complete it fit beside
    the blocks every running request still needs to complete (capacityScheduler.cpp GuaranteedNoEvictScheduler,
    NoEvictScheduledBlocksManager), so a request waits rather than one being evicted."""

    reserves_to_completion = True

    def admissions(self, engine: EngineView) -> int:
        """The waiting prompts that fit, whole, beside the running decodes and admitted prompts (the first that
        does not stops the count; one over the budget is admitted when the batch would be empty)."""
        budget = engine.options.token_budget
        batched = 0
        for seq in engine.running:
            if seq.phase == DECODE:
                budget -= 1
                batched += 1
            elif seq.phase == PREFILL:
                budget -= seq.to_prefill
                batched += 1
        count = 0
        for seq in engine.waiting:
            tokens = seq.to_prefill if seq.to_prefill > 0 else 1
            if tokens > budget and batched > 0:
                break
            budget -= tokens
            batched += 1
            count += 1
        return count

    def prefill_chunk(self, options: SchedulerOptions) -> float:
        return float("inf")             # whole prompts

    def plan(self, running: list[Sequence], options: SchedulerOptions) -> Plan:
        decode, waiting_prompts = by_phase(running)
        if waiting_prompts is None:
            return Plan(decode=decode, macro=True)
        budget = options.token_budget - len(decode)
        prefill: list[tuple[Sequence, int]] = []
        for seq in waiting_prompts:
            tokens = seq.to_prefill
            if tokens > budget and (decode or prefill):
                break
            prefill.append((seq, tokens))
            budget -= tokens
        return Plan(prefill, decode)
