"""Array mode's group state (`GroupColumns`): one column per group of identical flows, the links padded with a
sentinel id, and, with a backend that re-solves incrementally, which groups use each link. The flow engine
moves its groups here from `arrays_on` groups on (simroute/network/solvers/arrays.py) and back below `arrays_off`; the
solver kernels (simroute/network/kernels.py) read and write these columns."""

from __future__ import annotations

import math

import numpy as np

from simroute.network.kernels import SolverBackend
from simroute.network.maxmin import Group

INF = math.inf


class GroupColumns:
    """Array-mode group state, one column per group (slot); links padded with the sentinel id n_links.

    With a backend that has the incremental re-solve, also which groups use each link (`member[l, :deg[l]]`,
    kept by the backend's membership kernels as groups come and go)."""

    def __init__(self, n_links: int, slots: int, width: int, backend: SolverBackend | None = None) -> None:
        self.n_links = n_links
        self.backend = backend if backend is not None and backend.cascade is not None else None
        self.member = np.full((n_links + 1, 1), -1, dtype=np.int64)
        self.deg = np.zeros(n_links + 1, dtype=np.int64)
        self._scratch: tuple[np.ndarray, ...] | None = None
        self.links = np.full((width, slots), n_links, dtype=np.int64)
        self.flows = np.zeros(slots)
        self.cap = np.full(slots, INF)
        self.rate = np.zeros(slots)
        self.bn = np.full(slots, -2, dtype=np.int64)
        self.work = np.zeros(slots)
        self.last_t = np.zeros(slots)
        self.next_work = np.full(slots, INF)
        self.due = np.full(slots, INF)
        self.groups: list[Group] = []

    _FIELDS = (("flows", 0.0), ("cap", INF), ("rate", 0.0), ("bn", -2), ("work", 0.0), ("last_t", 0.0),
               ("next_work", INF), ("due", INF))

    def grow(self, width: int) -> None:
        """Room for twice the slots (or wider link columns)."""
        slots = self.links.shape[1]
        extra = slots if len(self.groups) == slots else 0
        links = np.full((max(width, self.links.shape[0]), slots + extra), self.n_links, dtype=np.int64)
        links[:self.links.shape[0], :slots] = self.links
        self.links = links
        if extra:
            for name, fill_value in self._FIELDS:
                old = getattr(self, name)
                setattr(self, name, np.concatenate([old, np.full(extra, fill_value, dtype=old.dtype)]))

    def add(self, group: Group) -> None:
        slot, width = len(self.groups), len(group.links)
        if slot == self.links.shape[1] or width > self.links.shape[0]:
            self.grow(width)
        column = self.links[:, slot]
        column[:width] = group.links
        column[width:] = self.n_links
        self.flows[slot], self.cap[slot], self.rate[slot], self.bn[slot] = group.n, group.cap, group.rate, group.bn
        self.work[slot], self.last_t[slot] = group.work, group.last_t
        self.next_work[slot] = group.flows[0][0] if group.flows else INF
        rate = group.rate
        self.due[slot] = (group.last_t + (self.next_work[slot] - group.work) / rate) if rate > 0 and group.flows \
            else INF
        group.slot = slot
        self.groups.append(group)
        backend = self.backend
        if backend is not None and not backend.members_add(self.member, self.deg, self.links, slot, self.n_links):
            self.member, self.deg = backend.members_build(self.links, slot + 1, self.n_links, 2 * self.member.shape[1])

    def remove(self, group: Group) -> None:
        """Free a group's slot by moving the last column into it."""
        slot, last = group.slot, len(self.groups) - 1
        if self.backend is not None:
            self.backend.members_remove(self.member, self.deg, self.links, slot, last, self.n_links)
        if slot != last:
            moved = self.groups[last]
            self.groups[slot] = moved
            moved.slot = slot
            self.links[:, slot] = self.links[:, last]
            for name, _fill in self._FIELDS:
                column = getattr(self, name)
                column[slot] = column[last]
        self.groups.pop()
        self.due[last] = INF
        group.slot = -1

    def cascade_scratch(self) -> tuple[np.ndarray, ...]:
        """The cascade kernel's scratch arrays (see `cascade_numba`), sized for the current slots; the kernel
        leaves them as it found them, so they are allocated once per size."""
        slots, ids = self.links.shape[1], self.n_links + 1
        scratch = self._scratch
        if scratch is None or scratch[0].shape[1] < slots:
            heap_int = np.empty((2, 2 * ids + slots), dtype=np.int64)
            heap_int[1] = -1
            scratch = self._scratch = (np.zeros((4, slots), dtype=np.int64), np.zeros((2, slots), dtype=np.int8),
                                       np.zeros(slots), np.zeros((3, ids), dtype=np.int8), heap_int,
                                       np.empty(2 * ids + slots), np.empty(2 * ids, dtype=np.int64))
        return scratch

    def write_back(self) -> None:
        """Copy the column state into the group objects (when leaving array mode)."""
        for group in self.groups:
            slot = group.slot
            group.rate, group.bn = float(self.rate[slot]), int(self.bn[slot])
            group.work, group.last_t = float(self.work[slot]), float(self.last_t[slot])
            group.slot = -1
