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

    def __init__(self, p: CostParams) -> None:
        self.p = p
        g = p.geometry
        self.L = float(g.layers)
        self.exch = float(p.exchanges)
        self.frac = g.token_fraction
        self.q, self.pb, self.qp, self.bkv = g.q_bytes, g.p_bytes, g.qp_bytes, g.b_kv
        self.probe = [row.probe_s for row in p.float_rows]
        self.single = [f.single_block_Bps for f in p.fabrics]
        self.bulk = [f.bulk_Bps for f in p.fabrics]
        self.div = p.dispatch_batch if p.dispatcher_batching else 1

    def compute(self, rows: float, ct: float, topk: float = 0) -> float:
        """Holder (or local) partial attention of `rows` query rows, one exchange."""
        return holder_compute_s(rows, ct, topk, self.p, FLOATS)

    def step(self, mq: float, ct: float, fabric: int, cached: bool, topk: int = 0, holders: int = 1,
             tp: int = 1, query_tokens: float = 1) -> StepCosts:
        """One step's costs (route, route without holder compute, fetch move, attend, local prefill);
        `query_tokens` > 1: the rows are one sequence's first pass (`cost.holder_compute_s`)."""
        p, exch = self.p, self.exch
        s = step_parts(mq, ct, fabric, topk, holders, tp, cached, p, FLOATS, query_tokens)
        no_compute = exch * (s.probe + s.wire + s.ret_extra + p.merge_s)
        route = no_compute + exch * s.compute
        move = s.gather if topk > 0 else s.pull + s.splice
        if p.host_overhead:
            host_route, host_fetch = host_s(mq, p)
            route += host_route
            move += host_fetch
        return StepCosts(route, no_compute, move, exch * s.attend, s.prefill)


def totals_scalar(shape: Shape, p: CostParams) -> tuple[float, float, float]:
    """`predicate.totals` of one shape (route, fetch, local over the 1 + R step horizon), summed in the same
    order on floats, so equal to it bit for bit (tests/model/test_scalar_predicate.py)."""
    mq, ct, fabric, topk, holders, tp, cached, steps, qt = scalar_inputs(shape)
    s = step_parts(mq, ct, fabric, topk, holders, tp, cached, p, SCALARS, qt)
    per_step = steps * float(p.exchanges)
    route_x = s.probe + s.wire
    route_x += s.compute + (p.merge_s + s.ret_extra if p.host_overhead else p.merge_s)
    attend = per_step * s.attend
    route = per_step * route_x
    fetch = s.pull + s.splice if s.gather is None else steps * s.gather     # one shape: dense or a selection
    fetch += attend
    local = s.prefill + attend
    if p.host_overhead:
        host_route, host_fetch = host_s(mq, p)
        route += steps * host_route
        fetch += steps * host_fetch
    return route, fetch, local


def decide_scalar(shape: Shape, p: CostParams) -> tuple[int, tuple[float, float, float]]:
    """`predicate.decide` for one shape: (index into PRIMITIVES, the three totals); ties go to route, then
    fetch (fewest moved bytes first)."""
    totals = totals_scalar(shape, p)
    route, fetch, local = totals
    if route <= fetch and route <= local:
        return ROUTE, totals
    return (FETCH if fetch <= local and not route <= fetch else LOCAL), totals
