"""An example policy, the whole of it: the cheaper of route and fetch by the paper's predicate, never local.

Adding it to simroute is this file in simroute/sim/policies/ (the package discovers its modules); the test
imports it instead, which runs the same decorator.
"""

from __future__ import annotations

from simroute.sim.policies.base import POLICIES, DecisionContext, Policy
from simroute.sim.vocab import Primitive


@POLICIES.register("never-local")
class NeverLocal(Policy):
    """Route or fetch, whichever the predicate finds cheaper; never re-prefill."""

    def choose(self, ctx: DecisionContext) -> Primitive:
        costs = ctx.horizon()
        return Primitive.ROUTE if costs.route <= costs.fetch else Primitive.FETCH
