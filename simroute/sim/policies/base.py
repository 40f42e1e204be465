"""Choosing route / fetch / local: the `Policy` interface, the `DecisionContext` it sees, and its registry.

A decision covers one remote unit of attention: a dense chunk, or a sparse selection spread over M holders.
Its horizon is the first pass (the request's own prompt rows attend the unit) plus R = output_tokens - 1
decode steps (one query row per head). Every policy sees the same `DecisionContext`, built in one place
(`simroute.sim.request.build_decision_context`) for dense and sparse requests alike: the request's shape,
the live state of the holders and the path (when the policy asks for it), and the cost model.

To add a policy: write a module in `simroute/sim/policies/` with a `Policy` subclass decorated by
`@POLICIES.register("name")` (its docstring's first line is the CLI help); the package discovers its
modules. Nothing else changes: `RunConfig`, the CLI help and the request flow take the name from the
registry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import numpy as np

from simroute.model.cost import CostParams, Shape, costs
from simroute.model.scalar import ScalarModel
from simroute.model.steptime import BatchShape, StepTimeModel
from simroute.sim.registry import Registry, registry
from simroute.sim.vocab import Primitive

if TYPE_CHECKING:
    from simroute.sim.config import RunConfig


class HorizonCosts(NamedTuple):
    """Seconds each primitive would cost over the decision's whole horizon (first pass + decode steps)."""

    route: float
    fetch: float
    local: float

    def cheapest(self) -> Primitive:
        """Ties go to route, then fetch (the order of the paper's predicate)."""
        if self.route <= self.fetch and self.route <= self.local:
            return Primitive.ROUTE
        return Primitive.FETCH if self.fetch <= self.local else Primitive.LOCAL


@dataclass(frozen=True, slots=True)
class RequestShape:
    """The request side of one decision."""

    mq_first: float         # query rows of the first pass (heads x prompt tokens)
    mq_step: float          # query rows of one decode step (heads)
    steps: int              # decode steps after the first token
    tokens: float           # tokens of the chunk (dense) or of every chunk the selection draws from (sparse)
    fabric: int             # index of the requester-holder fabric in the cost parameters
    cached: bool            # served at the offset it was cached at (a fetched copy needs no splice)
    topk: int = 0           # entries a sparse selection attends per step (0 = dense)
    holders: int = 1        # holders a sparse selection spans
    tp: int = 1             # GPUs per instance (tensor-parallel rank pairs move 1/tp of the bytes each)


@dataclass(frozen=True, slots=True)
class LiveState:
    """What the cluster looks like at decision time."""

    holder_wait_s: float            # per exchange, if the (busiest) holder's current queue persists
    path_share_Bps: float | None    # what a new transfer on the (tightest) holder-requester path would get now
    hbm_free: bool                  # whether a copy of the unit would fit in the requester's free HBM


@dataclass(frozen=True, slots=True)
class DecisionContext:
    """What a policy sees. `reprefill_s(tokens)`, when set, prices local's re-prefill as the run's engines
    charge it (`engine_reprefill_s`); unset, the closed form's `ct L c` prices it (the paper's model).
    `fanout_s(tokens)`, when set, is what the run adds to fetching a copy of that many tokens (the in-host
    all-gather of the replicated MLA layout); unset, nothing (the paper's model)."""

    shape: RequestShape
    live: LiveState | None          # None unless the policy sets `needs_live_state`
    params: CostParams
    model: ScalarModel
    reprefill_s: Callable[[float], float] | None = None
    fanout_s: Callable[[float], float] | None = None

    def horizon(self) -> HorizonCosts:
        s = self.shape
        reprefill = None if self.reprefill_s is None else self.reprefill_s(s.tokens)
        fanout = 0.0 if self.fanout_s is None else self.fanout_s(s.tokens)
        return HorizonCosts(*horizon_costs_scalar(self.model, mq_first=s.mq_first, mq_step=s.mq_step,
                                                  steps=s.steps, ct=s.tokens, fabric=s.fabric, cached=s.cached,
                                                  topk=s.topk, holders=s.holders, tp=s.tp, reprefill_s=reprefill,
                                                  fanout_s=fanout))


class Policy(ABC):
    """Picks route, fetch or local for one decision.

    Contract: `choose` is a pure function of the context (a run must stay a pure function of its inputs and
    seed) and returns one of `Primitive.ROUTE / FETCH / LOCAL`. A policy that reads `ctx.live` sets
    `needs_live_state = True`; the request flow only measures live state for such policies.
    """

    name: ClassVar[str]
    needs_live_state: ClassVar[bool] = False

    @classmethod
    def from_run(cls, config: RunConfig, rng: np.random.Generator) -> Policy:
        """The policy for one run (the built-ins need neither the config nor randomness)."""
        return cls()

    @abstractmethod
    def choose(self, ctx: DecisionContext) -> Primitive: ...


POLICIES: Registry[type[Policy]] = registry("policy")


def horizon_costs(p: CostParams, *, mq_first: float, mq_step: float, steps: int, ct: np.ndarray,
                  fabric: np.ndarray, cached: np.ndarray, topk: int = 0, holders: int = 1) -> np.ndarray:
    """(3, n) total costs, vectorised: first pass at mq_first, then `steps` decode steps at mq_step.

    The reference for `horizon_costs_scalar` (a property test checks they agree); studies use it on arrays.
    """
    first = costs(Shape(mq=mq_first, ct=ct, fabric=fabric, cached=cached, topk=topk, holders=holders,
                        query_tokens=mq_first / mq_step), p)
    step = costs(Shape(mq=mq_step, ct=ct, fabric=fabric, cached=True, topk=topk, holders=holders), p)
    out = np.empty((3,) + np.shape(first["route"]["total"]))
    out[Primitive.ROUTE] = first["route"]["total"] + steps * step["route"]["total"]
    if topk > 0:   # a selection is re-chosen every step: the gather does not amortise
        out[Primitive.FETCH] = first["fetch"]["total"] + steps * step["fetch"]["total"]
    else:          # a fetched copy is attended locally afterwards
        out[Primitive.FETCH] = first["fetch"]["total"] + steps * step["fetch"]["attend"]
    out[Primitive.LOCAL] = first["local"]["total"] + steps * step["local"]["attend"]
    return out


def horizon_costs_scalar(m: ScalarModel, *, mq_first: float, mq_step: float, steps: int, ct: float,
                         fabric: int, cached: bool, topk: int = 0, holders: int = 1, tp: int = 1,
                         reprefill_s: float | None = None, fanout_s: float = 0.0) -> tuple[float, float, float]:
    """`horizon_costs` for one unit, in plain floats (the simulator's per-request path); `reprefill_s`
    replaces the closed form's re-prefill in local's cost; `fanout_s` is added to a dense fetch (the
    in-host all-gather of the replicated MLA layout, `StepTimeModel.fanout_s`)."""
    first_route, _, first_move, first_attend, prefill = m.step(mq_first, ct, fabric, cached, topk, holders, tp,
                                                               mq_first / mq_step)   # the prompt's tokens
    if reprefill_s is not None:
        prefill = reprefill_s
    step_route, _, step_move, step_attend, _ = m.decode_step(mq_step, ct, fabric, topk, holders, tp)
    route = first_route + steps * step_route
    fetch = first_move + first_attend + steps * ((step_move + step_attend) if topk > 0 else step_attend)
    if topk <= 0:
        fetch += fanout_s
    local = prefill + first_attend + steps * step_attend
    return route, fetch, local


@lru_cache(maxsize=4096)
def engine_reprefill_s(step: StepTimeModel, chunk: float, tokens: float) -> float:
    """Seconds an instance engine takes to re-prefill `tokens` alone: one sequence prefilled in chunks of at
    most `chunk` tokens (the scheduler's `prefill_chunk`), one step-time iteration each, each chunk attending
    the tokens before it in the prefill form (a one-token chunk in the decode form), as the engine's
    iteration charges a prefill chunk. The policies' price of local where a run has engines."""
    done, total = 0.0, 0.0
    while done < tokens:
        t = min(chunk, tokens - done)
        batch = BatchShape.uniform(prefill_tokens=t, prefill_context=done)
        one_token = t <= 1                          # charged as a decode-form query, as the engine does
        total += step.iteration_s(batch.new_tokens, batch.sequences, batch.kv_read_tokens, batch.attention_pairs,
                                  0.0 if one_token else batch.prefill_pairs, 1.0 if one_token else 0.0)
        done += t
    return total
