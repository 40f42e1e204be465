"""The simulator's side of the one registry mechanism (simroute/registry.py): policies, routers, placements
and schedulers are registered classes there, each kind with its package of plug-in modules.

A run builds each variant through its registry, `create(name, config, rng)`: the class's `from_run`
takes what it needs from the run's config and the random stream the run hands that kind (`run_rng`, derived
from the run's seed), so a random variant is still a pure function of the run's inputs and seed. `RunConfig`
names kinds, not plug-in packages, so a plain value object stays below them. The registry's names are
re-exported here for the simulator's modules.
"""

from __future__ import annotations

import zlib

import numpy as np

from simroute.registry import PACKAGES, Registry, discover, registry

__all__ = ["PACKAGES", "Registry", "discover", "registry", "run_rng"]


def run_rng(seed: int, kind: str) -> np.random.Generator:
    """The random stream a run hands the variants of one kind: its own per kind (drawing in a router does
    not shift a placement's draws), all derived from the run's seed."""
    return np.random.default_rng([seed, zlib.crc32(kind.encode())])
