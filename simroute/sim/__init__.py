"""The cluster simulation: composes the model, the calibration profile, the network engine and a workload."""

from simroute.network.routing import ROUTINGS
from simroute.sim.config import POLICIES, PLACEMENTS, ROUTERS, RunConfig
from simroute.sim.runner import RunResult, Simulation, simulate

__all__ = ["POLICIES", "PLACEMENTS", "ROUTERS", "ROUTINGS", "RunConfig", "RunResult", "Simulation", "simulate"]
