"""Shared pieces of the importers: options, batch checks with line numbers, a block registry."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from simroute.errors import ConfigurationError

BATCH_LINES = 65_536


@dataclasses.dataclass(frozen=True)
class ImportOptions:
    time_scale: float = 1.0
    load_scale: float = 1.0
    strict: bool = False
    block_tokens: int | None = None   # override the format's block size (Mooncake 512, agent 64)

    def arrivals(self, t_s: np.ndarray) -> np.ndarray:
        return np.asarray(t_s, dtype=np.float64) * self.time_scale / self.load_scale


def check_nonneg(values: np.ndarray, name: str, file: Path, lines: np.ndarray) -> None:
    """Negative (or non-finite) lengths name the first offending line."""
    values = np.asarray(values)
    bad = ~np.isfinite(values) | (values < 0) if values.dtype.kind == "f" else values < 0
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise ConfigurationError(f"negative or invalid {name} ({values[i]})", file=file,
                                 line=int(lines[i]), field=name)


def check_int_range(values: np.ndarray, name: str, file: Path, lines: np.ndarray,
                    hi: int = 2**31 - 1) -> None:
    check_nonneg(values, name, file, lines)
    if np.any(values > hi):
        i = int(np.flatnonzero(values > hi)[0])
        raise ConfigurationError(f"{name} {values[i]} is too large", file=file, line=int(lines[i]), field=name)


class BlockRegistry:
    """Dense per-id tables (block tokens, offset first cached at) for integer block ids.

    Ids index numpy arrays grown geometrically, so tens of millions of blocks cost 12 bytes each
    and no Python object per block.
    """

    MAX_ID = 2**31 - 1

    def __init__(self) -> None:
        self.tokens = np.zeros(0, dtype=np.int32)   # 0 = never seen
        self.offset = np.zeros(0, dtype=np.int64)
        self.conflicts = 0
        self.first_conflict_line: int | None = None

    def _grow(self, max_id: int) -> None:
        if max_id >= len(self.tokens):
            size = max(max_id + 1, 2 * len(self.tokens), 1024)
            self.tokens = np.concatenate([self.tokens, np.zeros(size - len(self.tokens), np.int32)])
            self.offset = np.concatenate([self.offset, np.zeros(size - len(self.offset), np.int64)])

    def register(self, ids: np.ndarray, tokens: np.ndarray, offsets: np.ndarray,
                 lines: np.ndarray, file: Path) -> np.ndarray:
        """Record first sightings (in order); return at_cached_offset for every occurrence."""
        if len(ids) == 0:
            return np.zeros(0, dtype=bool)
        if ids.min() < 0 or ids.max() > self.MAX_ID:
            i = int(np.flatnonzero((ids < 0) | (ids > self.MAX_ID))[0])
            raise ConfigurationError(f"hash id {ids[i]} outside [0, 2^31)", file=file, line=int(lines[i]),
                                     field="hash_ids")
        self._grow(int(ids.max()))
        new = self.tokens[ids] == 0
        if np.any(new):
            uid, first = np.unique(ids[new], return_index=True)
            self.tokens[uid] = tokens[new][first]
            self.offset[uid] = offsets[new][first]
        clash = self.tokens[ids] != tokens
        if np.any(clash):
            self.conflicts += int(clash.sum())
            if self.first_conflict_line is None:
                self.first_conflict_line = int(lines[np.flatnonzero(clash)[0]])
        return self.offset[ids] == offsets

    def chunk_columns(self) -> dict[str, np.ndarray]:
        ids = np.flatnonzero(self.tokens).astype(np.int64)
        return {"chunk_id": ids, "tokens": self.tokens[ids], "cached_offset": self.offset[ids]}


def row_positions(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For a CSR list with `counts` per row: (row index, position within row) of every element."""
    rows = np.repeat(np.arange(len(counts)), counts)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return rows, np.arange(int(counts.sum())) - np.repeat(starts, counts)
