"""The built-in placements: every module of this package is imported (`discover`) and registers its class in
`PLACEMENTS`; a new placement is one new module here."""

from simroute.sim.placements.base import PLACEMENTS, ChunkTable, Placement, PlacementResult
from simroute.sim.registry import discover

discover(__name__, __path__)

__all__ = ["PLACEMENTS", "ChunkTable", "Placement", "PlacementResult"]
