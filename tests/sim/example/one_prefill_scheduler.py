"""An example iteration scheduler, the whole of it, in its own file: decode-first, and at most one sequence's
whole prompt per iteration.

Adding it to simroute is this file in simroute/sim/schedulers/ (the package discovers its modules); the test
drops it into the package's search path instead.
"""

from __future__ import annotations

from simroute.sim.schedulers.base import SCHEDULERS, EngineView, Plan, Scheduler, SchedulerOptions, decoding
from simroute.sim.vocab import PREFILL


@SCHEDULERS.register("one-prefill")
class OnePrefillScheduler(Scheduler):
    """decode-first, one whole prompt per iteration (no prefill batching)."""

    def admissions(self, engine: EngineView) -> int:
        if any(seq.phase == PREFILL for seq in engine.running):
            return 0                                # a sequence left mid-prefill finishes first
        count = 0
        for seq in engine.waiting:                  # arrivals whose KV came prefilled, up to one prompt
            count += 1
            if seq.to_prefill > 0:
                break
        return count

    def plan(self, running: list, options: SchedulerOptions) -> Plan:
        decode = decoding(running)
        for seq in running:
            if seq.phase == PREFILL:
                return Plan(prefill=[(seq, seq.to_prefill)], decode=decode)
        return Plan(decode=decode, macro=True)
