"""The built-in iteration schedulers: every module of this package is imported (`discover`) and registers its
class in `SCHEDULERS`; a new scheduler is one new module here."""

from simroute.sim.registry import discover
from simroute.sim.schedulers.base import SCHEDULERS, EngineView, Plan, Scheduler, get_scheduler

discover(__name__, __path__)

__all__ = ["SCHEDULERS", "EngineView", "Plan", "Scheduler", "get_scheduler"]
