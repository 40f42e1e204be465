"""GPU time of the work the simulation schedules, from the calibrated constants: one place for each formula.

Holder partial attention (dense or sparse), the requester's own attention over a resident copy, prefill,
splice. The holder's batching server charges `batch_s(sum of work) x max premium` for a batch; a query's
work is its size in reference requesters (rows / heads_ref x attended tokens / ct_ref), so the curve's
"flat to N ~ 8 requesters, then linear" shape (Move the Query, Not the Cache, §6.3 and Fig 4b) applies to
any mix of shapes.
"""

from __future__ import annotations

from typing import NamedTuple

from simroute.model.cost import (FLOATS, CostParams, holder_compute_s, holder_curve_s, holder_work, splice_s,
                                 sparse_premium)


class PartialWork(NamedTuple):
    """One routed query's load on a holder."""

    work: float        # in reference requesters (rows / heads_ref x attended tokens / ct_ref)
    premium: float     # kernel premium of a sparse selection (1.0 for dense)


class ComputeModel:
    """Seconds of GPU work, through the model's own holder-compute, splice and prefill formulas
    (`simroute.model.cost`): the simulator and the predicate charge the same numbers."""

    def __init__(self, params: CostParams) -> None:
        self.params = params
        g = params.geometry
        self.kv_bytes_per_token = g.kv_bytes_per_token
        self.prefill_s_per_token = g.layers * params.prefill_s_per_token_layer

    def partial_work(self, rows: float, ct: float, topk: int | float) -> PartialWork:
        """Work and premium of a partial over `ct` tokens (dense) or `topk` selected entries (sparse)."""
        p = self.params
        work = holder_work(rows, topk if topk > 0 else ct, p.geometry.token_fraction, p.holder_heads_ref,
                           p.holder_ct_ref)
        return PartialWork(work, sparse_premium(topk, p, FLOATS) if topk > 0 else 1.0)

    def batch_s(self, work: float) -> float:
        """One exchange of a batch of `work` reference requesters on a holder (the calibrated curve)."""
        return holder_curve_s(work, self.params.holder_n, self.params.holder_s, FLOATS)

    def attend_s(self, rows: float, ct: float, topk: int | float) -> float:
        """The requester's own attention over a resident copy, per step (all exchanges of the step)."""
        return holder_compute_s(rows, ct, topk, self.params, FLOATS) * self.params.exchanges

    def prefill_s(self, tokens: float) -> float:
        return tokens * self.prefill_s_per_token

    def splice_s(self, ct: float) -> float:
        """Re-rotating a fetched copy served at another offset (RoPE splice)."""
        return splice_s(ct, self.params, FLOATS)
