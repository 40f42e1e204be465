"""Iteration schedulers: which sequences run in the next engine iteration, and with how many tokens.

A scheduler is a registered class: subclass `Scheduler`, implement `admissions(queue) -> int` and
`plan(running, options) -> Plan`, and decorate it with `@SCHEDULERS.register("name")` (its docstring's first
line is its help text). It returns its decisions and calls nothing back: `admissions` says how many at the
head of the waiting queue to admit (FCFS, as if each fits); the engine admits them in order, reserving their
KV blocks, and stops at the first that does not fit (or the running-sequence cap); `plan` then batches the
running set. A decode-only plan sets `macro` and the engine picks how many iterations it stands for.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from typing import TYPE_CHECKING, ClassVar, Protocol

from simroute.sim.engine.sequence import DECODE, PREFILL, Sequence
from simroute.sim.registry import Registry

if TYPE_CHECKING:
    from simroute.sim.engine.engine import EngineOptions


class EngineQueue(Protocol):
    """What a scheduler sees of its engine when it chooses admissions (read only)."""

    options: "EngineOptions"
    running: list[Sequence]
    waiting: deque[Sequence]


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


class Scheduler(ABC):
    """Contract, in two steps the engine takes: `admissions` says how many sequences at the head of the
    waiting queue to admit now (the engine admits them in order and stops at the first that does not fit);
    then `plan` returns the next iteration's batch from the running set alone. An empty plan means the
    engine may go idle. Neither touches HBM nor calls back into the engine."""

    name: ClassVar[str]

    @abstractmethod
    def admissions(self, queue: EngineQueue) -> int: ...

    @abstractmethod
    def plan(self, running: list[Sequence], options: "EngineOptions") -> Plan: ...

    def prefill_chunk(self, options: "EngineOptions") -> float:
        """The largest chunk of one sequence's prefill when it runs alone (whole prompts unless overridden)."""
        return float("inf")


SCHEDULERS: Registry[type[Scheduler]] = Registry("scheduler")


def get_scheduler(name: str) -> Scheduler:
    return SCHEDULERS.get(name)()


@SCHEDULERS.register("vllm")
class VllmScheduler(Scheduler):
    """prefill-first: whole prompts as soon as they fit, decodes wait.

    vLLM's default scheduler without chunked prefill: whenever waiting prompts can be
    admitted, the iteration prefills whole prompts (up to the token budget, at least one); otherwise every
    running sequence decodes one token. New prompts therefore stall running decodes (TPOT pays, TTFT gains)."""

    def admissions(self, queue: EngineQueue) -> int:
        budget = queue.options.token_budget
        used = count = 0
        prefilling = False
        for seq in queue.waiting:
            tokens = seq.to_prefill
            if prefilling and used + tokens > budget:
                break
            count += 1
            if tokens > 0:
                prefilling = True
                used += tokens
        return count

    def plan(self, running: list[Sequence], options: "EngineOptions") -> Plan:
        # whole prompts: a sequence is mid-prefill only in the event that admitted it
        prefill = [(seq, seq.to_prefill) for seq in running if seq.phase == PREFILL]
        if prefill:
            return Plan(prefill=prefill)
        return Plan(decode=[seq for seq in running if seq.phase == DECODE], macro=True)


@SCHEDULERS.register("sarathi")
class SarathiScheduler(Scheduler):
    """decode-first, prefill chunks fill the token budget (stall-free).

    Sarathi-Serve's stall-free batching: every iteration carries
    every running decode, and the token budget's remainder is filled with prefill chunks of at most
    `prefill_chunk` tokens (partly prefilled sequences first, then newly admitted ones, in admission order)."""

    def prefill_chunk(self, options: "EngineOptions") -> float:
        return float(min(options.prefill_chunk, options.token_budget))

    def admissions(self, queue: EngineQueue) -> int:
        """As many as the budget left by the running decodes and prefill chunks takes: each a chunk, or one
        token if its KV arrived prefilled (PD decode side: it decodes at once)."""
        options = queue.options
        chunk = options.prefill_chunk
        budget = options.token_budget
        partial = None
        for seq in queue.running:
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
        for seq in queue.waiting:
            if budget <= 0:
                break
            tokens = min(seq.to_prefill, chunk, budget)
            budget -= tokens if tokens > 0 else 1
            count += 1
        return count

    def plan(self, running: list[Sequence], options: "EngineOptions") -> Plan:
        decode: list[Sequence] = []
        partial: list[Sequence] | None = None       # running sequences with prompt tokens left to prefill
        for seq in running:
            phase = seq.phase
            if phase == DECODE:
                decode.append(seq)
            elif phase == PREFILL:
                if partial is None:
                    partial = []
                partial.append(seq)
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
