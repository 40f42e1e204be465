"""The built-in policies: every module of this package is imported (`discover`) and registers its classes in
`POLICIES`; a new policy is one new module here."""

from simroute.sim.policies.base import POLICIES, DecisionContext, Policy
from simroute.sim.registry import discover

discover(__name__, __path__)

__all__ = ["POLICIES", "DecisionContext", "Policy"]
