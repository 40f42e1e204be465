"""An example iteration scheduler, the whole of it, in its own file: decode-first, and at most one sequence's
whole prompt per iteration.

Adding it to simroute is this file in simroute/sim/schedulers/ (the package discovers its modules); the test
drops it into the package's search path instead.
"""

from __future__ import annotations

from simroute.sim.schedulers.base import SCHEDULERS, EngineView, Plan, Scheduler, decoding
from simroute.sim.vocab import PREFILL


@SCHEDULERS.register("one-prefill")
class OnePrefillScheduler(Scheduler):
    """decode-first, one whole prompt per iteration (no prefill batching)."""

    def plan(self, engine: EngineView) -> Plan:
        decode = decoding(engine)
        for seq in engine.running:                  # a sequence left mid-prefill finishes first
            if seq.phase == PREFILL and seq.to_prefill > 0:
                return Plan(prefill=[(seq, seq.to_prefill)], decode=decode)
        while engine.waiting:
            seq = engine.waiting[0]
            if not engine.admit(seq):
                break
            if seq.to_prefill > 0:
                return Plan(prefill=[(seq, seq.to_prefill)], decode=decode)
            decode.append(seq)                      # its KV arrived prefilled: it decodes now
        return Plan(decode=decode, k=engine.macro_k(decode)) if decode else Plan()
