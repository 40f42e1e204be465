"""The built-in policies. Each module registers its classes in `POLICIES` when imported.

Adding a policy: a new module here (or anywhere importable) plus its name on the import line below.
"""

from simroute.sim.policy import POLICIES, DecisionContext, Policy

# The registry line: one module per policy family, registration order = CLI help order.
from simroute.sim.policies import paper, forced, adaptive  # noqa: E402,F401  (imported to register)

__all__ = ["POLICIES", "DecisionContext", "Policy"]
