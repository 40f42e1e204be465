"""A sequence as the instance engine sees it: tokens to prefill, context it attends, tokens to generate,
the holders it routes to, and the clocks its metrics come from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simroute.sim.vocab import DECODE, DONE, PREFILL, WAITING  # noqa: F401  (the phases, re-exported)


class RouteShare:
    """What one sequence asks of one holder per exchange: one query covering every chunk it attends there
    (`key_tokens` = those chunks' tokens); its rows are the engine's query heads x the sequence's new tokens.
    `premium` is the holder kernel's time over a dense kernel at the same keys: a sparse selection's share
    (`cost.sparse_premium` at its key count), 1 for dense chunks; a holder's call runs at its batch's largest."""

    __slots__ = ("holder", "key_tokens", "premium")

    def __init__(self, holder: Any, key_tokens: float, premium: float = 1.0) -> None:
        self.holder = holder            # the holder's InstanceEngine
        self.key_tokens = key_tokens
        self.premium = premium


class Sequence:
    """One request's work on one instance engine.

    `prompt` tokens are prefilled (their KV is the sequence's own), `resident_tokens` are tokens of resident
    chunks it attends (pinned or copies: no KV blocks of its own), then `output` tokens are generated: the
    first by the last prefill iteration, the rest one per decode iteration. `output = 0` is a re-prefill of a
    chunk (`keep_kv`: its blocks become a copy in `on_done`). `routes` are attended remotely every iteration.
    `step_wait(k)`, when given, is the critical-path wait each of its iterations pays before its attention
    (a sparse selection's fetch gathers its top-k entries every step), asked once per engine event of k
    iterations, in seconds per iteration: the iteration waits for the slowest of its routed exchanges and
    its sequences' waits (counted in `exchange_s`).
    """

    __slots__ = ("rid", "prompt", "resident_tokens", "output", "routes", "keep_kv", "on_first_token", "on_done",
                 "phase", "prefilled", "generated", "blocks", "recompute", "t_submit", "t_scheduled",
                 "t_first_token", "t_done", "t_last_token",
                 "prefill_compute_s", "exchange_s", "holder_wait_s", "preemptions", "admit_order", "routed_rows",
                 "step_wait")

    def __init__(self, rid: int, prompt: int, output: int, *, resident_tokens: float = 0.0,
                 routes: tuple[RouteShare, ...] = (), keep_kv: bool = False,
                 on_first_token: Callable[["Sequence"], None] | None = None,
                 on_done: Callable[["Sequence"], None] | None = None,
                 step_wait: Callable[[int], float] | None = None) -> None:
        self.rid = rid
        self.prompt = prompt
        self.resident_tokens = resident_tokens
        self.output = output
        self.routes = routes
        self.keep_kv = keep_kv
        self.on_first_token = on_first_token
        self.on_done = on_done
        self.step_wait = step_wait
        self.phase = WAITING
        self.prefilled = 0
        self.generated = 0
        self.blocks = 0
        self.recompute = 0              # tokens to re-prefill after a preemption (prompt + generated)
        self.t_submit = self.t_scheduled = self.t_first_token = self.t_done = self.t_last_token = -1.0
        self.prefill_compute_s = self.exchange_s = self.holder_wait_s = 0.0
        self.preemptions = 0
        self.admit_order = 0
        self.routed_rows = 0.0          # query rows sent, summed over holders and steps (x exchanges = bytes / (q+p))

    @property
    def to_prefill(self) -> int:
        """Tokens still to prefill (the prompt, or prompt + generated after a preemption)."""
        target = self.recompute if self.recompute else self.prompt
        return target - self.prefilled

    @property
    def remaining_decode(self) -> int:
        return max(self.output - max(self.generated, 1), 0)
