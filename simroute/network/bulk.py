"""The bulk state every solver works on: per-link capacity, committed load and flow count, the groups of
identical flows (object and array mode) and their columns (array mode), the bulk version and the counters.

One `BulkState` per `FlowEngine` (`engine.bulk`). The solvers (simroute/network/solvers/) write it; the
message model reads it (`link_share`, `version`: a cache of link shares keys on the version) and telemetry
integrates `load`. `load` and `link_n` are rebound when the state changes representation (a list in object
mode, an array with a sentinel slot in array mode, views of the online core's buffers): read them through
this object, never keep them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from simroute.network.columns import GroupColumns
    from simroute.network.maxmin import Group

INF = math.inf


class BulkState:
    """Link state and group registry of the bulk flows (see module docstring)."""

    def __init__(self, capacity: list[float]) -> None:
        n_links = len(capacity)
        self.cap: list[float] = list(capacity)
        self.load: list[float] | np.ndarray = [0.0] * n_links    # committed bulk load per link (B/s)
        self.link_n: list[int] | np.ndarray = [0] * n_links      # active bulk flows per link
        self.link_groups: list[set[Group]] = [set() for _ in range(n_links)]
        self.groups: dict[tuple, Group] = {}                      # (links, cap) -> group (object and array mode)
        self.columns: GroupColumns | None = None                  # array mode's column store
        self.capacity_padded = np.array(self.cap + [INF])         # + the sentinel link of padded link columns
        # moves whenever bulk flows change (a start, a finish, a re-rating): a plain attribute, read per message
        self.version = 0
        self.n_active = 0
        self.rerates = 0                     # solver rounds (fill calls and full solves)
        self.rerated_groups = 0
        self.full_solves = 0
        self.steps = 0                       # engine steps (each: completions due + starts of one instant)
        self.flow_events = 0                 # flow starts + finishes handled in those steps
        self.max_rate_error = 0.0            # tolerance mode: largest relative rate deviation committed
        self.cascade_aborts = 0              # cascades that reached the cascade limit (full solve then)

    def link_share(self, link: int) -> float:
        """Bytes/s a new flow would get on one link now: what bulk flows leave, or a fair share among them."""
        cap = self.cap[link]
        flows = self.link_n[link]
        if not flows:
            return cap
        return max(cap - float(self.load[link]), cap / (flows + 1))
