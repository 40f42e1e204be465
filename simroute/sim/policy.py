"""Choosing route / fetch / local per (chunk, request).

`paper` evaluates the closed-form predicate on the calibrated constants over the request's whole horizon:
the first pass (its own prompt's query rows attend the chunk) plus R = output_tokens - 1 decode steps (one
query row per head). `adaptive` adds live state: the holder's queue and the requester's free HBM.
Baselines force one primitive wherever the chunk is remote.
"""

from __future__ import annotations

import numpy as np

from simroute.model.cost import CostParams, Shape, costs
from simroute.model.predicate import FETCH, LOCAL, ROUTE
from simroute.model.scalar import ScalarModel

FORCED = {"always-route": ROUTE, "always-fetch": FETCH, "always-local": LOCAL}


def horizon_costs(p: CostParams, *, mq_first: float, mq_step: float, steps: int, ct: np.ndarray,
                  fabric: np.ndarray, cached: np.ndarray, topk: int = 0, holders: int = 1) -> np.ndarray:
    """(3, n) total costs: first pass at mq_first, then `steps` decode steps at mq_step."""
    first = costs(Shape(mq=mq_first, ct=ct, fabric=fabric, cached=cached, topk=topk, holders=holders), p)
    step = costs(Shape(mq=mq_step, ct=ct, fabric=fabric, cached=True, topk=topk, holders=holders), p)
    out = np.empty((3,) + np.shape(first["route"]["total"]))
    out[ROUTE] = first["route"]["total"] + steps * step["route"]["total"]
    if topk > 0:   # a selection is re-chosen every step: the gather does not amortise
        out[FETCH] = first["fetch"]["total"] + steps * step["fetch"]["total"]
    else:          # a fetched copy is attended locally afterwards
        out[FETCH] = first["fetch"]["total"] + steps * step["fetch"]["attend"]
    out[LOCAL] = first["local"]["total"] + steps * step["local"]["attend"]
    return out


def horizon_costs_scalar(m: ScalarModel, *, mq_first: float, mq_step: float, steps: int, ct: float,
                         fabric: int, cached: bool, topk: int = 0, holders: int = 1,
                         tp: int = 1) -> tuple[float, float, float]:
    """`horizon_costs` for one chunk, in plain floats (the simulator's per-request path)."""
    r1, _, m1, a1, pre = m.step(mq_first, ct, fabric, cached, topk, holders, tp)
    rs, _, ms, as_, _ = m.step(mq_step, ct, fabric, True, topk, holders, tp)
    route = r1 + steps * rs
    fetch = m1 + a1 + steps * ((ms + as_) if topk > 0 else as_)
    local = pre + a1 + steps * as_
    return route, fetch, local


def choose(policy: str, p: CostParams, *, mq_first: float, mq_step: float, steps: int, ct: np.ndarray,
           fabric: np.ndarray, cached: np.ndarray, topk: int = 0, holders: int = 1,
           holder_wait_s: np.ndarray | None = None, hbm_free: bool = True) -> np.ndarray:
    """Primitive index per chunk (ROUTE / FETCH / LOCAL)."""
    n = len(ct)
    if policy in FORCED:
        return np.full(n, FORCED[policy], dtype=np.int8)
    c = horizon_costs(p, mq_first=mq_first, mq_step=mq_step, steps=steps, ct=ct, fabric=fabric, cached=cached,
                      topk=topk, holders=holders)
    if policy == "adaptive":
        if holder_wait_s is not None:   # every routed exchange would wait this long behind the holder's queue
            c[ROUTE] = c[ROUTE] + holder_wait_s * (1 + steps) * p.exchanges
        if not hbm_free:                # a copy that cannot stay resident must be re-made every step
            c[FETCH] = c[FETCH] * (1 + steps) if topk == 0 else c[FETCH]
            c[LOCAL] = c[LOCAL] * (1 + steps)
    return np.argmin(c, axis=0).astype(np.int8)


def choose_scalar(policy: str, m: ScalarModel, *, mq_first: float, mq_step: float, steps: int, ct: float,
                  fabric: int, cached: bool, holder_wait_s: float = 0.0, hbm_free: bool = True,
                  path_share_Bps: float | None = None, tp: int = 1) -> int:
    """`choose` for one dense chunk (the simulator's per-request path).

    `adaptive` adds live state: the holder's queue (every routed exchange waits behind it), the path's
    current share of its bottleneck link (slows route's messages below the single-block rate and fetch's
    pull below the link peak) and whether a copy would fit in the requester's HBM.
    """
    forced = FORCED.get(policy)
    if forced is not None:
        return forced
    route, fetch, local = horizon_costs_scalar(m, mq_first=mq_first, mq_step=mq_step, steps=steps, ct=ct,
                                               fabric=fabric, cached=cached, tp=tp)
    if policy == "adaptive":
        route += holder_wait_s * (1 + steps) * m.exch
        if path_share_Bps is not None and path_share_Bps > 0:
            single, bulk = m.single[fabric], m.bulk[fabric]
            route += m.exch * (mq_first + steps * mq_step) * m.qp * (1 / min(single, path_share_Bps) - 1 / single)
            fetch += ct * m.frac * m.bkv * m.L * (1 / min(bulk, path_share_Bps) - 1 / bulk)
        if not hbm_free:
            fetch *= 1 + steps
            local *= 1 + steps
    return ROUTE if route <= fetch and route <= local else (FETCH if fetch <= local else LOCAL)
