"""The built-in placements. Each module registers its class in `PLACEMENTS` when imported."""

from simroute.sim.placement import PLACEMENTS, Placement

# The registry line: one module per placement, registration order = CLI help order.
from simroute.sim.placements import hashed, consistent_hash, popularity  # noqa: E402,F401  (imported to register)

__all__ = ["PLACEMENTS", "Placement"]
