"""The cluster simulation: composes the model, the calibration profile, the network engine and a workload.

`Simulation`, `simulate` and `RunResult` load on first use, so that importing `simroute.sim.config` (the CLI
does, to build `simroute run`'s options) does not pull in the whole simulator; the registries (`POLICIES`,
`ROUTERS`, `PLACEMENTS`, `ROUTINGS`) load their plug-in packages (the network layer, for routings) on first
read.
"""

from typing import Any

from simroute.sim.config import POLICIES, PLACEMENTS, ROUTERS, ROUTINGS, RunConfig

__all__ = ["POLICIES", "PLACEMENTS", "ROUTERS", "ROUTINGS", "RunConfig", "RunResult", "Simulation", "simulate"]


def __getattr__(name: str) -> Any:
    if name in ("RunResult", "Simulation", "simulate"):
        from simroute.sim import runner
        return getattr(runner, name)
    raise AttributeError(f"module 'simroute.sim' has no attribute {name!r}")
