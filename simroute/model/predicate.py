"""The closed-form route / fetch / local predicate (paper §5.1): argmin of the three costs per (chunk, request).

`decide` is the function the simulator calls per decision batch: it sums `cost.step_parts` (the one cost
formula) into the three totals over the horizon without building the per-term dictionaries of `cost.costs`
(a property test checks both agree). `scalar.decide_scalar` is the same sum for one shape in plain floats
(`simroute predict`, no numpy); a property test pins the two bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simroute.model.cost import FETCH, LOCAL, PRIMITIVES, ROUTE, CostParams, Shape, _inputs, host_s, step_parts


@dataclass(frozen=True)
class Decision:
    """choice: int8 array of indices into PRIMITIVES; cost_s: (3, n) totals in seconds."""

    choice: np.ndarray
    cost_s: np.ndarray

    def names(self) -> np.ndarray:
        return np.asarray(PRIMITIVES)[self.choice]


def totals(shape: Shape, params: CostParams, out: np.ndarray | None = None) -> np.ndarray:
    """(3, n) array of route, fetch, local totals over the 1 + R step horizon (written into `out` if given).

    route pays every step's exchanges; a fetched dense copy is moved once and attended every step, a selection
    gathered every step; local re-prefills once and attends every step. A batch mixing dense and sparse shapes
    is evaluated as its two halves, so neither pays for the other's terms (measured in bench_predicate.py).
    """
    topk = np.asarray(shape.topk)
    if topk.ndim == 1 and topk.size >= MIN_SPLIT and all(np.ndim(column) <= 1 for column in vars(shape).values()):
        sparse = topk > 0
        n_sparse = int(np.count_nonzero(sparse))
        if 0 < n_sparse < topk.size:
            if out is None:
                out = np.empty((3, topk.size))
            # the dense half needs no selection fields, the sparse half no cached flag (nothing is spliced)
            for idx, fixed in ((np.flatnonzero(~sparse), {"topk": 0.0, "holders": 1.0}),
                               (np.flatnonzero(sparse), {"cached": False})):
                part = Shape(**{name: fixed[name] if name in fixed else (column[idx] if np.ndim(column) == 1 else column)
                                for name, column in vars(shape).items()})
                half = _totals(part, params)
                for row in range(3):     # row by row: ~25% cheaper than one 2-D fancy assignment
                    out[row, idx] = half[row]
            return out
    return _totals(shape, params, out)


MIN_SPLIT = 1024    # below this the split's fixed cost outweighs what it saves


def _totals(shape: Shape, params: CostParams, out: np.ndarray | None = None) -> np.ndarray:
    """`totals` without the dense / sparse split."""
    mq, ct, fabric, topk, holders, tp, cached, steps, query_tokens = _inputs(shape)
    parts = step_parts(mq, ct, fabric, topk, holders, tp, cached, params, query_tokens=query_tokens)
    per_step = steps * float(params.exchanges)
    route_x = parts.probe + parts.wire
    route_x += parts.compute + (params.merge_s + parts.ret_extra if params.host_overhead else params.merge_s)
    attend = per_step * parts.attend
    if out is None:
        out = np.empty((3,) + np.broadcast(route_x, attend, parts.pull, parts.prefill).shape)
    route, fetch, local = out[ROUTE:ROUTE + 1], out[FETCH:FETCH + 1], out[LOCAL:LOCAL + 1]   # views, also 0-d
    np.multiply(per_step, route_x, out=route)
    if parts.gather is None:
        np.add(parts.pull, parts.splice, out=fetch)
    elif parts.pull is None:
        np.multiply(steps, parts.gather, out=fetch)
    else:
        np.copyto(fetch, np.where(parts.sparse, steps * parts.gather, parts.pull + parts.splice))
    fetch += attend
    np.add(parts.prefill, attend, out=local)
    if params.host_overhead:
        host_route, host_fetch = host_s(mq, params)
        route += steps * host_route
        fetch += steps * host_fetch
    return out


def _argmin3(totals_s: np.ndarray) -> np.ndarray:
    """argmin over the 3 primitives (first wins ties) on bytes: 2 - 2 [route wins] - [fetch wins]; several
    times faster than np.argmin(axis=0) and than nested np.where over int64."""
    route, fetch, local = totals_s[ROUTE], totals_s[FETCH], totals_s[LOCAL]
    route_le_fetch = route <= fetch
    route_wins = route_le_fetch & (route <= local)
    fetch_wins = (fetch <= local) & ~route_le_fetch
    choice = np.full(route.shape, LOCAL, dtype=np.int8)
    choice -= route_wins.view(np.int8) << 1 if route.ndim else np.int8(2 * route_wins)
    choice -= fetch_wins.view(np.int8) if route.ndim else np.int8(fetch_wins)
    return choice


BLOCK = 1 << 16   # elementwise chains run ~1.6x faster on cache-sized blocks than on 1M-element arrays


def decide(shape: Shape, params: CostParams) -> Decision:
    """Pick the cheapest primitive per shape; ties go to route, then fetch (fewest moved bytes first).

    Large batches are evaluated in cache-sized blocks (measured in bench/bench_predicate.py).
    """
    fields = {name: np.asarray(value) for name, value in vars(shape).items()}
    count = int(np.prod(np.broadcast_shapes(*(column.shape for column in fields.values()))))
    if count <= BLOCK or any(column.ndim > 1 for column in fields.values()):
        totals_s = totals(shape, params)
        return Decision(choice=_argmin3(totals_s), cost_s=totals_s)
    full = fields
    cost = np.empty((3, count))
    choice = np.empty(count, dtype=np.int8)
    for start in range(0, count, BLOCK):
        part = Shape(**{name: (column[start:start + BLOCK] if column.ndim == 1 else column)
                        for name, column in full.items()})
        choice[start:start + BLOCK] = _argmin3(totals(part, params, out=cost[:, start:start + BLOCK]))
    return Decision(choice=choice, cost_s=cost)
