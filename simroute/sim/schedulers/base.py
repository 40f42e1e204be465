"""Iteration schedulers: which sequences run in the next engine iteration, and with how many tokens.

A scheduler is a registered class: a module in `simroute/sim/schedulers/` (the package discovers it) with a
`Scheduler` subclass that implements `admissions(engine) -> int` and `plan(running, options) -> Plan` and is
decorated `@SCHEDULERS.register("name")` (its docstring's first line is its help text). It returns its
decisions and calls nothing back: `admissions` says how many sequences at the head of the waiting queue to
admit (FCFS, as if each fits; it sees the engine through the read-only `EngineView`); the engine admits them
in order, reserving their KV blocks, and stops at the first that does not fit (or the running-sequence cap);
`plan` then batches the running set. A decode-only plan sets `macro` and the engine picks how many identical
iterations it stands for. A scheduler never touches HBM.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np

from simroute.sim.registry import Registry, registry
from simroute.sim.vocab import DECODE, PREFILL

if TYPE_CHECKING:
    from simroute.sim.config import RunConfig
    from simroute.sim.engine.sequence import Sequence


class Plan:
    """One (macro-)iteration: prefill chunks (sequence, tokens), decoding sequences, and how many identical
    decode iterations it stands for. A scheduler sets `macro` when nothing but decode runs; the engine then
    picks `k` (up to its steps per event, never past a completion)."""

    __slots__ = ("prefill", "decode", "k", "macro")

    def __init__(self, prefill: list[tuple[Sequence, int]] | None = None, decode: list[Sequence] | None = None,
                 k: int = 1, macro: bool = False) -> None:
        self.prefill = prefill if prefill is not None else []
        self.decode = decode if decode is not None else []
        self.k = k
        self.macro = macro

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode

    def __repr__(self) -> str:
        return f"Plan(prefill={self.prefill!r}, decode={self.decode!r}, k={self.k}, macro={self.macro})"


class SchedulerOptions(Protocol):
    """The engine knobs a scheduler reads (`EngineOptions` has these and more)."""

    @property
    def token_budget(self) -> int: ...

    @property
    def prefill_chunk(self) -> int: ...


class EngineView(Protocol):
    """What a scheduler sees of its instance engine when it chooses admissions (read only; `InstanceEngine`
    satisfies it)."""

    @property
    def options(self) -> SchedulerOptions: ...

    @property
    def waiting(self) -> deque[Sequence]: ...

    @property
    def running(self) -> list[Sequence]: ...


class Scheduler(ABC):
    """Contract, in two steps the engine takes: `admissions` says how many sequences at the head of the
    waiting queue to admit now (the engine admits them in order and stops at the first that does not fit);
    then `plan` returns the next iteration's batch from the running set alone. An empty plan means the
    engine may go idle. Neither touches HBM nor calls back into the engine."""

    name: ClassVar[str]
    # admission holds every running sequence's KV to its last token (prompt + output): a prompt is admitted only
    # if its own whole length fits beside what the running ones still need, so decodes never preempt (TensorRT-LLM's
    # GUARANTEED_NO_EVICT capacity scheduler); else the engine reserves a prompt's blocks and grows them
    reserves_to_completion: ClassVar[bool] = False
    # admission checks that every running sequence and the new one can reach their last token if they finish in
    # order of tokens left, each freeing its KV as it ends (SGLang's PrefillAdder.add_one_req_ignore_eos): a prompt
    # that would not leave that room waits in the queue; decodes preempt only on a real shortfall
    completes_in_order: ClassVar[bool] = False
    # with `completes_in_order`: the new-token ratio of the running sequences' future tokens that admission holds
    # back (init, floor, decay per decode iteration; SGLang's new_token_ratio) and the clip of one's estimate
    token_ratio: ClassVar[tuple[float, float, float]] = (1.0, 1.0, 0.0)
    token_ratio_clip: ClassVar[int] = 1 << 30

    @classmethod
    def from_run(cls, config: RunConfig, rng: np.random.Generator) -> Scheduler:
        """The scheduler for one run (the built-ins need neither the config nor randomness)."""
        return cls()

    @abstractmethod
    def admissions(self, engine: EngineView) -> int: ...

    @abstractmethod
    def plan(self, running: list[Sequence], options: SchedulerOptions) -> Plan: ...

    def prefill_chunk(self, options: SchedulerOptions) -> float:
        """The largest chunk of one sequence's prefill when it runs alone (whole prompts unless overridden)."""
        return float("inf")


SCHEDULERS: Registry[type[Scheduler]] = registry("scheduler")


def get_scheduler(name: str) -> Scheduler:
    return SCHEDULERS.get(name)()


def decoding(running: list[Sequence]) -> list[Sequence]:
    """The running sequences that are past their prefill."""
    return [s for s in running if s.phase == DECODE]


def by_phase(running: list[Sequence]) -> tuple[list[Sequence], list[Sequence] | None]:
    """(decoding sequences, sequences with prompt tokens left to prefill or None when there are none), in running
    order: the split every chunked or whole-prompt scheduler starts its plan from."""
    decode: list[Sequence] = []
    prefilling: list[Sequence] | None = None
    for seq in running:
        phase = seq.phase
        if phase == DECODE:
            decode.append(seq)
        elif phase == PREFILL:
            if prefilling is None:
                prefilling = []
            prefilling.append(seq)
    return decode, prefilling
