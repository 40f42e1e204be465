"""GPU time of the work the simulation charges outside the instance engines' iterations, from the calibrated
constants: one place for each formula.

The engines charge iterations and holder partial attention through the step-time model
(`simroute.model.steptime`); what is left here is the holder curve as the replica choice and the adaptive
policy read it (one reference requester's exchange, Move the Query, Not the Cache, §6.3 and Fig 4b), the
splice of a fetched copy, and the KV bytes per token.
"""

from __future__ import annotations

from simroute.model.cost import FLOATS, CostParams, holder_curve_s, splice_s


class ComputeModel:
    """Seconds of GPU work, through the model's own holder-curve and splice formulas (`simroute.model.cost`):
    the simulator and the predicate charge the same numbers."""

    def __init__(self, params: CostParams) -> None:
        self.params = params
        self.kv_bytes_per_token = params.geometry.kv_bytes_per_token

    def batch_s(self, work: float) -> float:
        """One exchange of `work` reference requesters on a holder (the calibrated curve)."""
        return holder_curve_s(work, self.params.holder_n, self.params.holder_s, FLOATS)

    def splice_s(self, ct: float) -> float:
        """Re-rotating a fetched copy served at another offset (RoPE splice)."""
        return splice_s(ct, self.params, FLOATS)
