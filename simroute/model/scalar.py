"""The cost model for one shape in plain Python floats: the simulator's per-request fast path, and the
predicate for one shape (`decide_scalar`, what `simroute predict` answers with, no numpy imported).

A request attends a handful of chunks, so numpy's per-call overhead dominates there; this evaluates the one
cost formula (`cost.step_parts`) on floats, about 20x faster per shape than the array evaluation.
"""

from __future__ import annotations

from typing import NamedTuple

from simroute.model.cost import (FETCH, FLOATS, LOCAL, ROUTE, SCALARS, CostParams, Shape, holder_compute_s, host_s,
                                 scalar_inputs, step_parts)
from simroute.model.curves import interp_extrap as _interp   # noqa: F401  (kept for existing importers)


class StepCosts(NamedTuple):
    """One step of one (chunk, request) shape, seconds. fetch_move: pull + splice (or one step's gather of a
    selection) + the fetch host cost; attend: the requester's own attention over the copy, all exchanges."""

    route: float
    route_no_compute: float
    fetch_move: float
    attend: float
    prefill: float


class ScalarModel:
    """Per-step cost terms of one (chunk, request) shape; seconds."""

    def __init__(self, params: CostParams) -> None:
        self.p = params
        geometry = params.geometry
        self.L = float(geometry.layers)
        self.exch = float(params.exchanges)
        self.frac = geometry.token_fraction
        self.q, self.pb, self.qp, self.bkv = geometry.q_bytes, geometry.p_bytes, geometry.qp_bytes, geometry.b_kv
        self.probe = [row.probe_s for row in params.float_rows]
        self.single = [fabric.single_block_Bps for fabric in params.fabrics]
        self.bulk = [fabric.bulk_Bps for fabric in params.fabrics]
        self.div = params.dispatch_batch if params.dispatcher_batching else 1
        self._decode_steps: dict[tuple, StepCosts] = {}     # `decode_step`'s, per shape

    def compute(self, rows: float, ct: float, topk: float = 0) -> float:
        """Holder (or local) partial attention of `rows` query rows, one exchange."""
        return holder_compute_s(rows, ct, topk, self.p, FLOATS)

    def step(self, mq: float, ct: float, fabric: int, cached: bool, topk: int = 0, holders: int = 1,
             tp: int = 1, query_tokens: float = 1) -> StepCosts:
        """One step's costs (route, route without holder compute, fetch move, attend, local prefill);
        `query_tokens` > 1: the rows are one sequence's first pass (`cost.holder_compute_s`)."""
        params, exch = self.p, self.exch
        parts = step_parts(mq, ct, fabric, topk, holders, tp, cached, params, FLOATS, query_tokens)
        no_compute = exch * (parts.probe + parts.wire + parts.ret_extra + params.merge_s)
        route = no_compute + exch * parts.compute
        move = parts.gather if topk > 0 else parts.pull + parts.splice
        if params.host_overhead:
            host_route, host_fetch = host_s(mq, params)
            route += host_route
            move += host_fetch
        return StepCosts(route, no_compute, move, exch * parts.attend, parts.prefill)

    def decode_step(self, mq: float, ct: float, fabric: int, topk: int = 0, holders: int = 1,
                    tp: int = 1) -> StepCosts:
        """`step` of one decode step (served at its cached offset, one query token), kept per shape: a pure
        function of the shape for the run's parameters, and every decision's horizon asks it with the same rows
        (the heads) for units of few sizes, where its first pass (the prompt's rows) differs per request."""
        key = (mq, ct, fabric, topk, holders, tp)
        costs = self._decode_steps.get(key)
        if costs is None:
            if len(self._decode_steps) >= 65536:    # bounded; a run has far fewer shapes
                self._decode_steps.clear()
            costs = self._decode_steps[key] = self.step(mq, ct, fabric, True, topk, holders, tp)
        return costs


def totals_scalar(shape: Shape, params: CostParams) -> tuple[float, float, float]:
    """`predicate.totals` of one shape (route, fetch, local over the 1 + R step horizon), summed in the same
    order on floats, so equal to it bit for bit (tests/model/test_scalar_predicate.py)."""
    mq, ct, fabric, topk, holders, tp, cached, steps, query_tokens = scalar_inputs(shape)
    parts = step_parts(mq, ct, fabric, topk, holders, tp, cached, params, SCALARS, query_tokens)
    per_step = steps * float(params.exchanges)
    route_x = parts.probe + parts.wire
    route_x += parts.compute + (params.merge_s + parts.ret_extra if params.host_overhead else params.merge_s)
    attend = per_step * parts.attend
    route = per_step * route_x
    # one shape: dense or a selection
    fetch = parts.pull + parts.splice if parts.gather is None else steps * parts.gather
    fetch += attend
    local = parts.prefill + attend
    if params.host_overhead:
        host_route, host_fetch = host_s(mq, params)
        route += steps * host_route
        fetch += steps * host_fetch
    return route, fetch, local


def decide_scalar(shape: Shape, params: CostParams) -> tuple[int, tuple[float, float, float]]:
    """`predicate.decide` for one shape: (index into PRIMITIVES, the three totals); ties go to route, then
    fetch (fewest moved bytes first)."""
    totals = totals_scalar(shape, params)
    route, fetch, local = totals
    if route <= fetch and route <= local:
        return ROUTE, totals
    return (FETCH if fetch <= local and not route <= fetch else LOCAL), totals
