"""The bulk state every solver works on: per-link capacity, committed load and flow count, the groups of
identical flows (object and array mode) and their columns (array mode), the bulk version and the counters.

One `BulkState` per `FlowEngine` (`engine.bulk`). The solvers (simroute/network/solvers/) write it; the
message model reads it (`link_share`, `version`: a cache of link shares keys on the version) and telemetry
integrates `load`. `load` and `link_n` are rebound when the state changes representation (a list in object
mode, an array with a sentinel slot in array mode, views of the online core's buffers): read them through
this object, never keep them.

Message charge (docs/NETWORK.md, "Messages share the links with bulk flows"): latency-bound messages are no flows,
but their bytes hold the wire. Telemetry measures each link's message byte rate over its window and charges it
here (`charge_messages`); the solvers fill `residual` (capacity less the charge), not `cap`, so bulk flows are
exact max-min on what messages leave and a link never carries more than its capacity in total. Messages read
`link_share` on the physical capacity: their own queueing behind each other is the message model's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from simroute.network.columns import GroupColumns
    from simroute.network.maxmin import Group

INF = math.inf

# A link's message charge moves only when the measured rate moves by more than this fraction of the link's
# capacity (a re-rating of the bulk flows on it costs a solve): at most 0.1% of a link is over- or under-given
# between two re-ratings. Chosen, not fitted (tests/network/test_message_charge.py pins the arithmetic).
CHARGE_STEP = 1e-3
# The charge is at most this fraction of a link: with a bulk flow on the link, max-min fairness between it and
# the message stream gives the stream at most half (a window's burst may exceed the wire: it drains later).
CHARGE_MAX = 0.5


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
        self.charge: list[float] = [0.0] * n_links               # message bytes/s charged per link (B/s)
        self.residual: list[float] = list(capacity)               # cap - charge: what the solvers fill
        self.capacity_padded = np.array(self.residual + [INF])    # + the sentinel link of padded link columns
        self.recapped: list[int] = []        # links whose residual moved since the solver's last step
        self.charged: set[int] = set()       # links with a charge now
        self.recharges = 0                   # charge changes applied (each re-rates the flows on the link)
        self.on_recapacity: Callable[[], None] | None = None    # the engine's: a step at this instant
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

    def charge_messages(self, window_bytes: dict[int, float], duration_s: float) -> list[int]:
        """Charge each link the message bytes of a window over its duration (links absent: no messages, charge
        0); a link's charge moves only by more than `CHARGE_STEP` of its capacity (or back to 0), at most
        `CHARGE_MAX` of it. Returns the links whose residual moved (the solver in charge re-rates their flows at
        its next step)."""
        charge, residual, cap, charged = self.charge, self.residual, self.cap, self.charged
        moved: list[int] = []
        for link in sorted(charged.union(window_bytes)) if charged else sorted(window_bytes):
            old, full = charge[link], cap[link]
            new = min(window_bytes.get(link, 0.0) / duration_s, full * CHARGE_MAX)
            if new == old or (new > 0 and abs(new - old) <= full * CHARGE_STEP):
                continue
            if new > 0:
                charged.add(link)
            else:
                charged.discard(link)
            charge[link] = new
            residual[link] = full - new
            self.capacity_padded[link] = full - new
            moved.append(link)
        if moved:
            self.recharges += len(moved)
            self.recapped.extend(moved)
            if self.on_recapacity is not None:
                self.on_recapacity()
        return moved
