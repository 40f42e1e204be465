"""The topology kinds: every module of this package is imported (`discover`) and registers its kind in `KINDS`
(the one registry mechanism, kind "topology"); a topology file names its kind (`kind: rail-optimized`), and a
file without one is a fat-tree. A new kind is one new module here (see `base` and docs/NETWORK.md)."""

from simroute.network.kinds.base import KINDS, RankPlanes, TopologyKind
from simroute.registry import discover

discover(__name__, __path__)

__all__ = ["KINDS", "RankPlanes", "TopologyKind"]
