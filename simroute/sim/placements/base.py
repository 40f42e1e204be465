"""Where canonical chunks live: the `Placement` interface, its registry and the placing loop they share.

Placement is a pure function of the chunk table, the instances' HBM and the seed; capacity is respected
and what does not fit is reported as overflow (those chunks have no holder and are prefilled on first touch).
Non-canonical chunks are created on first prefill, not placed.

To add a placement: a module in `simroute/sim/placements/` with a `Placement` subclass decorated by
`@PLACEMENTS.register("name")` that yields each chunk's candidate instances in order (and, to replicate,
overrides `copies_wanted`); the package discovers its modules.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from simroute.network.hashing import mix64
from simroute.sim.registry import Registry, registry

if TYPE_CHECKING:
    from simroute.sim.config import RunConfig


def mix64_array(x: np.ndarray) -> np.ndarray:
    """`simroute.network.hashing.mix64` (SplitMix64) over a uint64 array (a test checks they agree)."""
    x = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@dataclass(frozen=True)
class ChunkTable:
    """What placement reads of the chunk table (per chunk index)."""

    ids: np.ndarray
    nbytes: np.ndarray
    canonical: np.ndarray
    holder_hint: np.ndarray       # instance the trace pins the chunk to first (-1 = none)


@dataclass
class PlacementResult:
    holders: list[list[int]]      # per chunk index: instance ids holding it (empty = overflow)
    used_bytes: np.ndarray        # per instance
    overflow_chunks: int
    overflow_bytes: float
    replicated_chunks: int


class Placement(ABC):
    """Decides which instances hold each canonical chunk.

    Contract: `candidates` yields instance ids in the order a chunk tries them (every instance at most once is
    not required: the loop skips repeats); the loop takes candidates with room until `copies_wanted` copies are
    placed. A placement that needs attendance counts sets `needs_popularity` (the cluster then reads the
    trace once before the run).
    """

    name: ClassVar[str]
    needs_popularity: ClassVar[bool] = False

    def __init__(self, *, seed: int, replicas: int = 1, hot_fraction: float = 0.01) -> None:
        self.seed, self.replicas, self.hot_fraction = seed, replicas, hot_fraction
        self.salt = mix64(seed)

    @classmethod
    def from_run(cls, config: RunConfig, rng: np.random.Generator) -> Placement:
        """The placement for one run: the run's seed salts the hashes (it draws nothing from `rng`)."""
        return cls(seed=config.seed, replicas=config.replicas, hot_fraction=config.hot_fraction)

    @abstractmethod
    def candidates(self, chunk_hash: int, n_instances: int) -> Iterator[int]: ...

    def prepare(self, n_instances: int) -> None:
        """Build per-run lookup structures (a hash ring, ...) before the loop."""

    def copies_wanted(self, chunks: ChunkTable, n_instances: int, popularity: np.ndarray | None) -> np.ndarray:
        """Copies each chunk should get (1 each unless a placement replicates; it then sets `replicated`)."""
        self.replicated = 0
        return np.ones(len(chunks.ids), dtype=np.int64)

    def place(self, chunks: ChunkTable, n_instances: int, capacity_bytes: float,
              popularity: np.ndarray | None = None) -> PlacementResult:
        """Place every canonical chunk: its hinted home first, then its candidates, while HBM has room."""
        n = len(chunks.ids)
        holders: list[list[int]] = [[] for _ in range(n)]
        used = np.zeros(n_instances)
        overflow_chunks, overflow_bytes = 0, 0.0
        hashes = mix64_array(np.asarray(chunks.ids, dtype=np.int64).view(np.uint64) ^ np.uint64(self.salt))
        self.prepare(n_instances)
        wanted = self.copies_wanted(chunks, n_instances, popularity)
        for ci in np.flatnonzero(chunks.canonical):
            size = float(chunks.nbytes[ci])
            hint = int(chunks.holder_hint[ci])
            order = self.candidates(int(hashes[ci]), n_instances)
            for inst in _chain(hint, order):
                if len(holders[ci]) >= wanted[ci]:
                    break
                if used[inst] + size <= capacity_bytes and inst not in holders[ci]:
                    holders[ci].append(inst)
                    used[inst] += size
            if not holders[ci]:
                overflow_chunks += 1
                overflow_bytes += size
        return PlacementResult(holders, used, overflow_chunks, overflow_bytes, self.replicated)


def _chain(hint: int, order: Iterator[int]) -> Iterator[int]:
    if hint >= 0:
        yield hint
    yield from order


PLACEMENTS: Registry[type[Placement]] = registry("placement")
