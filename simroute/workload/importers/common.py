"""Shared pieces of the importers: options, batch checks with line numbers, a block registry."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable

import numpy as np

from simroute.errors import ConfigurationError
from simroute.registry import Registry, registry

if TYPE_CHECKING:
    from simroute.workload.writer import TraceWriter

BATCH_LINES = 65_536


@dataclasses.dataclass(frozen=True)
class ImportOptions:
    time_scale: float = 1.0
    load_scale: float = 1.0
    strict: bool = False
    block_tokens: int | None = None   # override the format's block size (Mooncake 512, agent 64)

    def arrivals(self, t_s: np.ndarray) -> np.ndarray:
        return np.asarray(t_s, dtype=np.float64) * self.time_scale / self.load_scale


def open_input(file: Path) -> BinaryIO:
    """Open an input trace for binary reading, or raise a ConfigurationError naming it."""
    from simroute.ioutil import check_input_file
    check_input_file(file, what="trace file")
    try:
        return file.open("rb")
    except OSError as exc:
        raise ConfigurationError(f"cannot read: {exc.strerror}", file=file) from None


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
        raise ConfigurationError(f"{name} {values[i]} is too large (at most {hi})", file=file, line=int(lines[i]),
                                 field=name)


class BlockRegistry:
    """Per-block tables (tokens, offset first cached at) for integer block ids of any size in [0, 2^63).

    Ids are kept sorted in numpy arrays and looked up with a binary search, so memory follows the number of
    distinct blocks, never the largest id (one line with id 2^62 costs 20 bytes, not a table up to 2^62), and
    tens of millions of blocks cost 20 bytes each and no Python object per block.
    """

    MAX_ID = 2**63 - 1

    def __init__(self) -> None:
        self.ids = np.zeros(0, dtype=np.int64)      # sorted, distinct
        self.tokens = np.zeros(0, dtype=np.int32)
        self.offset = np.zeros(0, dtype=np.int64)
        self.conflicts = 0
        self.first_conflict_line: int | None = None

    def _index(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in the sorted tables, whether the id is there) for every id."""
        idx = np.searchsorted(self.ids, ids)
        if len(self.ids) == 0:
            return idx, np.zeros(len(ids), dtype=bool)
        return idx, self.ids[np.minimum(idx, len(self.ids) - 1)] == ids

    def tokens_of(self, ids: np.ndarray) -> np.ndarray:
        """Block tokens of registered ids (every id must have been registered)."""
        return self.tokens[self._index(ids)[0]]

    def register(self, ids: np.ndarray, tokens: np.ndarray, offsets: np.ndarray,
                 lines: np.ndarray, file: Path) -> np.ndarray:
        """Record first sightings (in order); return at_cached_offset for every occurrence."""
        if len(ids) == 0:
            return np.zeros(0, dtype=bool)
        if ids.min() < 0:
            i = int(np.flatnonzero(ids < 0)[0])
            raise ConfigurationError(f"hash id {ids[i]} is negative (ids are in [0, 2^63))", file=file,
                                     line=int(lines[i]), field="hash_ids")
        idx, found = self._index(ids)
        if not np.all(found):
            new = ~found
            uid, first = np.unique(ids[new], return_index=True)   # first sighting within this batch
            at = np.searchsorted(self.ids, uid)
            self.ids = np.insert(self.ids, at, uid)
            self.tokens = np.insert(self.tokens, at, tokens[new][first])
            self.offset = np.insert(self.offset, at, offsets[new][first])
            idx, _ = self._index(ids)
        clash = self.tokens[idx] != tokens
        if np.any(clash):
            self.conflicts += int(clash.sum())
            if self.first_conflict_line is None:
                self.first_conflict_line = int(lines[np.flatnonzero(clash)[0]])
        return self.offset[idx] == offsets

    def chunk_columns(self) -> dict[str, np.ndarray]:
        return {"chunk_id": self.ids.copy(), "tokens": self.tokens.copy(), "cached_offset": self.offset.copy()}


def row_positions(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For a CSR list with `counts` per row: (row index, position within row) of every element."""
    rows = np.repeat(np.arange(len(counts)), counts)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return rows, np.arange(int(counts.sum())) - np.repeat(starts, counts)


ImporterFn = Callable[["TraceWriter", list[Path], "ImportOptions"], None]
IMPORTERS_BY_NAME: Registry[ImporterFn] = registry("importer")    # the one registry of named variants
IMPORTER_REGISTRY: dict[str, ImporterFn] = IMPORTERS_BY_NAME.registered   # its dict, not loading it


def register_importer(name: str) -> Callable[[ImporterFn], ImporterFn]:
    """Register an importer under its format name: a new format is one module of `simroute/workload/importers/`
    with one decorated function (the registry imports the package's modules on first read)."""
    def decorate(fn: ImporterFn) -> ImporterFn:
        if name in IMPORTER_REGISTRY:
            raise ValueError(f"importer '{name}' registered twice")
        IMPORTERS_BY_NAME.add(name, fn)
        return fn
    return decorate
