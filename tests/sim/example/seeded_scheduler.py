"""An example iteration scheduler that takes the run's seed, the whole of it, in its own file: prefill-first like
vllm, but each iteration admits a random number (1 to 3) of waiting prompts, drawn from the stream the run
hands schedulers (`create(kind, config, rng)`), so a run stays a pure function of its inputs and seed.

Adding it to simroute is this file in simroute/sim/schedulers/ (the package discovers its modules); the test
drops it into the package's search path instead.
"""

from __future__ import annotations

import numpy as np

from simroute.sim.schedulers.base import SCHEDULERS, EngineView, Plan, Scheduler, SchedulerOptions, decoding
from simroute.sim.vocab import PREFILL


@SCHEDULERS.register("seeded-admissions")
class SeededAdmissionsScheduler(Scheduler):
    """prefill-first, a seeded random 1-3 prompts admitted per iteration."""

    def __init__(self, rng: np.random.Generator, token_budget: int) -> None:
        self.rng = rng
        self.first_draw = int(rng.integers(1 << 30))     # what the test compares with the run's stream
        self.token_budget = token_budget

    @classmethod
    def from_run(cls, config, rng: np.random.Generator) -> SeededAdmissionsScheduler:
        return cls(rng, config.token_budget)

    def admissions(self, engine: EngineView) -> int:
        if not engine.waiting:
            return 0
        return min(len(engine.waiting), int(self.rng.integers(1, 4)))

    def plan(self, running: list, options: SchedulerOptions) -> Plan:
        prefill = [(seq, seq.to_prefill) for seq in running if seq.phase == PREFILL]
        if prefill:
            return Plan(prefill=prefill)
        return Plan(decode=decoding(running), macro=True)
