"""The built-in routers: every module of this package is imported (`discover`) and registers its class in
`ROUTERS`; a new router is one new module here."""

from simroute.sim.registry import discover
from simroute.sim.routers.base import ROUTERS, ClusterView, InstanceRef, Router

discover(__name__, __path__)

__all__ = ["ROUTERS", "ClusterView", "InstanceRef", "Router"]
