"""The paper's predicate: the cheapest primitive over the request's horizon, on calibrated constants only."""

from __future__ import annotations

from simroute.sim.policies.base import POLICIES, DecisionContext, Policy
from simroute.sim.vocab import Primitive


@POLICIES.register("paper")
class PaperPolicy(Policy):
    """Closed-form predicate over the request's horizon (calibrated constants, no live state)."""

    def choose(self, ctx: DecisionContext) -> Primitive:
        return ctx.horizon().cheapest()
