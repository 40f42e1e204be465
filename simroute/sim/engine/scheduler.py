"""Iteration schedulers: which sequences run in the next engine iteration, and with how many tokens.

A scheduler is a registered class: subclass `Scheduler`, implement `plan(queue) -> Plan`, and decorate it
with `@SCHEDULERS.register("name")` (its docstring's first line is its help text). It sees the engine only as
an `EngineQueue`: the running set, the waiting queue, the options, and `admit(seq)`, the admission gate
(which reserves the sequence's KV blocks and enforces the running-sequence cap; as vLLM's scheduler asks its
KV cache manager, one admission at a time, since each reservation decides whether the next fits). It never
touches HBM itself; a decode-only plan sets `macro` and the engine picks how many iterations it stands for.
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
    """What a scheduler sees of its engine."""

    options: "EngineOptions"
    running: list[Sequence]
    waiting: deque[Sequence]

    def admit(self, seq: Sequence) -> bool:
        """Move the head of `waiting` to `running` if the cap and its KV blocks allow."""


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
    """Contract: `plan` returns the next iteration's batch; an empty plan means the engine may go idle."""

    name: ClassVar[str]

    @abstractmethod
    def plan(self, queue: EngineQueue) -> Plan: ...

    def prefill_chunk(self, options: "EngineOptions") -> float:
        """The largest chunk of one sequence's prefill when it runs alone (whole prompts unless overridden)."""
        return float("inf")


SCHEDULERS: Registry[type[Scheduler]] = Registry("scheduler")


def get_scheduler(name: str) -> Scheduler:
    return SCHEDULERS.get(name)()


def _decoding(queue: EngineQueue) -> list[Sequence]:
    return [s for s in queue.running if s.phase == DECODE]


@SCHEDULERS.register("vllm")
class VllmScheduler(Scheduler):
    """prefill-first: whole prompts as soon as they fit, decodes wait.

    vLLM's default scheduler without chunked prefill: whenever waiting prompts can be
    admitted, the iteration prefills whole prompts (up to the token budget, at least one); otherwise every
    running sequence decodes one token. New prompts therefore stall running decodes (TPOT pays, TTFT gains)."""

    def plan(self, queue: EngineQueue) -> Plan:
        prefill: list[tuple[Sequence, int]] = []
        used = 0
        budget = queue.options.token_budget
        while queue.waiting:
            seq = queue.waiting[0]
            tokens = seq.to_prefill
            if prefill and used + tokens > budget:
                break
            if not queue.admit(seq):
                break
            if tokens > 0:
                prefill.append((seq, tokens))
                used += tokens
        if prefill:
            return Plan(prefill=prefill)
        return Plan(decode=_decoding(queue), macro=True)


@SCHEDULERS.register("sarathi")
class SarathiScheduler(Scheduler):
    """decode-first, prefill chunks fill the token budget (stall-free).

    Sarathi-Serve's stall-free batching: every iteration carries
    every running decode, and the token budget's remainder is filled with prefill chunks of at most
    `prefill_chunk` tokens (partly prefilled sequences first, then newly admitted ones)."""

    def prefill_chunk(self, options: "EngineOptions") -> float:
        return float(min(options.prefill_chunk, options.token_budget))

    def plan(self, queue: EngineQueue) -> Plan:
        opts = queue.options
        decode: list[Sequence] = []
        partial: list[Sequence] | None = None       # running sequences part-way through their prefill
        for seq in queue.running:
            phase = seq.phase
            if phase == DECODE:
                decode.append(seq)
            elif phase == PREFILL:
                if partial is None:
                    partial = []
                partial.append(seq)
        budget = opts.token_budget - len(decode)
        chunk = opts.prefill_chunk
        prefill: list[tuple[Sequence, int]] = []
        if partial is not None:
            for seq in partial:
                if budget <= 0:
                    break
                tokens = min(seq.to_prefill, chunk, budget)
                prefill.append((seq, tokens))
                budget -= tokens
        waiting = queue.waiting
        while budget > 0 and waiting:
            seq = waiting[0]
            if not queue.admit(seq):
                break
            tokens = min(seq.to_prefill, chunk, budget)
            if tokens > 0:
                prefill.append((seq, tokens))
                budget -= tokens
            else:                       # its KV arrived prefilled (PD decode side): it decodes now
                decode.append(seq)
                budget -= 1
        if prefill or partial is not None:
            return Plan(prefill, decode)
        return Plan(decode=decode, macro=True)
