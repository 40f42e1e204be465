"""The built-in routers. Each module registers its class in `ROUTERS` when imported."""

from simroute.sim.router import ROUTERS, Router

# The registry line: one module per router, registration order = CLI help order.
from simroute.sim.routers import affinity, hint, round_robin, least_loaded, locality, prefix_hash  # noqa: E402,F401  (imported to register)

__all__ = ["ROUTERS", "Router"]
