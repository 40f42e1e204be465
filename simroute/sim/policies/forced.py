"""Baselines: one primitive wherever the unit is remote (what a system without the predicate does)."""

from __future__ import annotations

from typing import ClassVar

from simroute.sim.policies.base import POLICIES, DecisionContext, Policy
from simroute.sim.vocab import Primitive


class ForcedPolicy(Policy):
    """Always the primitive a subclass names."""

    primitive: ClassVar[Primitive]

    def choose(self, ctx: DecisionContext) -> Primitive:
        return self.primitive


@POLICIES.register("always-route")
class AlwaysRoute(ForcedPolicy):
    """Route every remote unit (baseline)."""

    primitive = Primitive.ROUTE


@POLICIES.register("always-fetch")
class AlwaysFetch(ForcedPolicy):
    """Fetch every remote unit (baseline: move the cache)."""

    primitive = Primitive.FETCH


@POLICIES.register("always-local")
class AlwaysLocal(ForcedPolicy):
    """Re-prefill every remote unit on the requester (baseline)."""

    primitive = Primitive.LOCAL
