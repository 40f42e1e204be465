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


def totals(shape: Shape, p: CostParams, out: np.ndarray | None = None) -> np.ndarray:
    """(3, n) array of route, fetch, local totals over the 1 + R step horizon (written into `out` if given).

    route pays every step's exchanges; a fetched dense copy is moved once and attended every step, a selection
    gathered every step; local re-prefills once and attends every step. A batch mixing dense and sparse shapes
    is evaluated as its two halves, so neither pays for the other's terms (measured in bench_predicate.py).
    """
    topk = np.asarray(shape.topk)
    if topk.ndim == 1 and topk.size >= MIN_SPLIT and all(np.ndim(a) <= 1 for a in vars(shape).values()):
        sparse = topk > 0
        n_sparse = int(np.count_nonzero(sparse))
        if 0 < n_sparse < topk.size:
            if out is None:
                out = np.empty((3, topk.size))
            # the dense half needs no selection fields, the sparse half no cached flag (nothing is spliced)
            for idx, fixed in ((np.flatnonzero(~sparse), {"topk": 0.0, "holders": 1.0}),
                               (np.flatnonzero(sparse), {"cached": False})):
                part = Shape(**{k: fixed[k] if k in fixed else (a[idx] if np.ndim(a) == 1 else a)
                                for k, a in vars(shape).items()})
                half = _totals(part, p)
                for row in range(3):     # row by row: ~25% cheaper than one 2-D fancy assignment
                    out[row, idx] = half[row]
            return out
    return _totals(shape, p, out)


MIN_SPLIT = 1024    # below this the split's fixed cost outweighs what it saves


def _totals(shape: Shape, p: CostParams, out: np.ndarray | None = None) -> np.ndarray:
    """`totals` without the dense / sparse split."""
    mq, ct, fabric, topk, holders, tp, cached, steps, qt = _inputs(shape)
    s = step_parts(mq, ct, fabric, topk, holders, tp, cached, p, qt=qt)
    per_step = steps * float(p.exchanges)
    route_x = s.probe + s.wire
    route_x += s.compute + (p.merge_s + s.ret_extra if p.host_overhead else p.merge_s)
    attend = per_step * s.attend
    if out is None:
        out = np.empty((3,) + np.broadcast(route_x, attend, s.pull, s.prefill).shape)
    route, fetch, local = out[ROUTE:ROUTE + 1], out[FETCH:FETCH + 1], out[LOCAL:LOCAL + 1]   # views, also 0-d
    np.multiply(per_step, route_x, out=route)
    if s.gather is None:
        np.add(s.pull, s.splice, out=fetch)
    elif s.pull is None:
        np.multiply(steps, s.gather, out=fetch)
    else:
        np.copyto(fetch, np.where(s.sparse, steps * s.gather, s.pull + s.splice))
    fetch += attend
    np.add(s.prefill, attend, out=local)
    if p.host_overhead:
        host_route, host_fetch = host_s(mq, p)
        route += steps * host_route
        fetch += steps * host_fetch
    return out


def _argmin3(t: np.ndarray) -> np.ndarray:
    """argmin over the 3 primitives (first wins ties) on bytes: 2 - 2 [route wins] - [fetch wins]; several
    times faster than np.argmin(axis=0) and than nested np.where over int64."""
    r, f, l = t[ROUTE], t[FETCH], t[LOCAL]
    route_le_fetch = r <= f
    route_wins = route_le_fetch & (r <= l)
    fetch_wins = (f <= l) & ~route_le_fetch
    choice = np.full(r.shape, LOCAL, dtype=np.int8)
    choice -= route_wins.view(np.int8) << 1 if r.ndim else np.int8(2 * route_wins)
    choice -= fetch_wins.view(np.int8) if r.ndim else np.int8(fetch_wins)
    return choice


BLOCK = 1 << 16   # elementwise chains run ~1.6x faster on cache-sized blocks than on 1M-element arrays


def decide(shape: Shape, p: CostParams) -> Decision:
    """Pick the cheapest primitive per shape; ties go to route, then fetch (fewest moved bytes first).

    Large batches are evaluated in cache-sized blocks (measured in bench/bench_predicate.py).
    """
    fields = {k: np.asarray(v) for k, v in vars(shape).items()}
    n = int(np.prod(np.broadcast_shapes(*(a.shape for a in fields.values()))))
    if n <= BLOCK or any(a.ndim > 1 for a in fields.values()):
        t = totals(shape, p)
        return Decision(choice=_argmin3(t), cost_s=t)
    full = fields
    cost = np.empty((3, n))
    choice = np.empty(n, dtype=np.int8)
    for i in range(0, n, BLOCK):
        part = Shape(**{k: (a[i:i + BLOCK] if a.ndim == 1 else a) for k, a in full.items()})
        choice[i:i + BLOCK] = _argmin3(totals(part, p, out=cost[:, i:i + BLOCK]))
    return Decision(choice=choice, cost_s=cost)
