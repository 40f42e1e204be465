"""Iteration schedulers: which sequences run in the next engine iteration, and with how many tokens.

A scheduler is a registered class: a module in `simroute/sim/schedulers/` (the package discovers it) with a
`Scheduler` subclass that implements `plan(engine) -> Plan` and is decorated `@SCHEDULERS.register("name")`
(its docstring's first line is its help text). It sees the engine through `EngineView`, admits waiting
sequences through `engine.admit(seq)` (which reserves their KV blocks and enforces the running-sequence cap)
and never touches HBM itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np

from simroute.sim.registry import Registry, registry
from simroute.sim.vocab import DECODE

if TYPE_CHECKING:
    from simroute.sim.config import RunConfig
    from simroute.sim.engine.sequence import Sequence


@dataclass
class Plan:
    """One (macro-)iteration: prefill chunks (sequence, tokens), decoding sequences, and how many identical
    decode iterations it stands for (`k` > 1 only when nothing but decode runs)."""

    prefill: list[tuple[Sequence, int]] = field(default_factory=list)
    decode: list[Sequence] = field(default_factory=list)
    k: int = 1

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


class SchedulerOptions(Protocol):
    """The engine knobs a scheduler reads (`EngineOptions` has these and more)."""

    @property
    def token_budget(self) -> int: ...

    @property
    def prefill_chunk(self) -> int: ...


class EngineView(Protocol):
    """What a scheduler sees of its instance engine (`InstanceEngine` satisfies it)."""

    @property
    def options(self) -> SchedulerOptions: ...

    @property
    def waiting(self) -> deque[Sequence]: ...

    @property
    def running(self) -> list[Sequence]: ...

    def admit(self, seq: Sequence) -> bool:
        """Reserve the sequence's KV blocks and move it from waiting to running; False if it cannot run now."""
        ...

    def macro_k(self, decode: list[Sequence]) -> int:
        """How many identical decode iterations the next event may stand for."""
        ...


class Scheduler(ABC):
    """Contract: `plan` returns the next iteration's batch; an empty plan means the engine may go idle."""

    name: ClassVar[str]

    @classmethod
    def from_run(cls, config: RunConfig, rng: np.random.Generator) -> Scheduler:
        """The scheduler for one run (the built-ins need neither the config nor randomness)."""
        return cls()

    @abstractmethod
    def plan(self, engine: EngineView) -> Plan: ...

    def prefill_chunk(self, options: SchedulerOptions) -> float:
        """The largest chunk of one sequence's prefill when it runs alone (whole prompts unless overridden)."""
        return float("inf")


SCHEDULERS: Registry[type[Scheduler]] = registry("scheduler")


def get_scheduler(name: str) -> Scheduler:
    return SCHEDULERS.get(name)()


def decoding(engine: EngineView) -> list[Sequence]:
    """The engine's running sequences that are past their prefill."""
    return [s for s in engine.running if s.phase == DECODE]
