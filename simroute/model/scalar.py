"""The cost model for one shape in plain Python floats: the simulator's per-request fast path.

A request attends a handful of chunks, so numpy's per-call overhead dominates there; this evaluates the
same arithmetic as `cost.costs` (a property test checks they agree) about 20x faster per shape.
"""

from __future__ import annotations

from bisect import bisect_right

from simroute.model.cost import CostParams


def _interp(x: float, xp: tuple[float, ...], fp: tuple[float, ...]) -> float:
    """np.interp clamped below, extended with the last slope above (as cost._interp_extrap)."""
    if x <= xp[0]:
        return fp[0]
    if x >= xp[-1]:
        if len(xp) < 2:
            return fp[-1]
        return fp[-1] + (x - xp[-1]) * (fp[-1] - fp[-2]) / (xp[-1] - xp[-2])
    i = bisect_right(xp, x) - 1
    return fp[i] + (x - xp[i]) * (fp[i + 1] - fp[i]) / (xp[i + 1] - xp[i])


class ScalarModel:
    """Per-step cost terms of one (chunk, request) shape; seconds."""

    def __init__(self, p: CostParams) -> None:
        self.p = p
        g = p.geometry
        self.L = float(g.layers)
        self.exch = float(p.exchanges)
        self.frac = g.token_fraction
        self.q, self.pb, self.qp, self.bkv = g.q_bytes, g.p_bytes, g.qp_bytes, g.b_kv
        self.probe = [f.t_probe_s + f.turnaround_s for f in p.fabrics]
        self.single = [f.single_block_Bps for f in p.fabrics]
        self.bulk = [f.bulk_Bps for f in p.fabrics]
        self.div = p.dispatch_batch if p.dispatcher_batching else 1

    def compute(self, rows: float, ct: float, topk: float = 0) -> float:
        """Holder (or local) partial attention of `rows` query rows, one exchange."""
        p = self.p
        attended = (topk if topk > 0 else ct) * self.frac
        n = max(rows / p.holder_heads_ref * attended / p.holder_ct_ref, 1e-9)
        t = _interp(n, p.holder_n, p.holder_s)
        if topk > 0:
            k = min(max(topk, p.sparse_k[0]), p.sparse_k[-1])
            t *= _interp(k, p.sparse_k, p.sparse_premium)
        return t

    def step(self, mq: float, ct: float, fabric: int, cached: bool, topk: int = 0, holders: int = 1,
             tp: int = 1) -> tuple[float, float, float, float, float]:
        """(route total, route without holder compute, fetch move, attend, local prefill) for one step."""
        p = self.p
        probe = self.probe[fabric]
        k_holder = max(topk / max(holders, 1), 1.0) if topk > 0 else 0   # each holder's share of a selection
        attend = self.exch * self.compute(mq, ct, topk)
        compute = self.compute(mq, ct, k_holder)
        if p.host_overhead and p.holder_amortisation:
            compute = self.compute(mq * p.dispatch_batch, ct, k_holder) / p.dispatch_batch
        ret_extra = 2.0 * probe if (p.host_overhead and not p.collapsed_response) else 0.0
        wire = mq * self.qp / self.single[fabric] / max(tp, 1)
        no_compute = self.exch * (probe + wire + ret_extra + p.merge_s)
        route = no_compute + self.exch * compute
        fetch_host = 0.0
        if p.host_overhead:
            route += (p.host_fixed_s + p.host_per_row_s * mq) / self.div
            fetch_host = p.host_fixed_s / self.div
        if topk > 0:
            move = self.L * (p.gather_base_s * topk / p.gather_k_ref + p.gather_per_holder_s * max(holders, 1))
        else:
            move = ct * self.frac * self.bkv * self.L / max(tp, 1) / self.bulk[fabric]
            if not cached:
                move += _interp(ct, p.splice_ct, p.splice_s)
        return route, no_compute, move + fetch_host, attend, ct * self.L * p.prefill_s_per_token_layer
