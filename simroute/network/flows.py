"""The flow value types every part of the network layer shares: `FlowRecord` (a finished flow, what callers and
telemetry see) and `ActiveFlow` (a flow in flight, what the solvers move), and the two float tolerances the
solvers and the replay agree on.

A leaf module: it imports nothing of simroute, so the engine, the solvers, the message model and telemetry
all import it and none of them imports another for a type.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import simpy

INF = math.inf
EPS = 1e-9      # relative float noise: flows of a group whose finish work is this close finish together
SAME = 1e-12    # a full re-solve keeps a group's rate when it moved by less (summation-order noise)
INSTANT = 1e-12     # relative: events due this close after `now` are taken at `now` (one step)


# ---- the solvers' shared arithmetic --------------------------------------------------------------------------
# One definition each for the Python solvers, the numba kernels (`_compiled` compiles these same functions,
# inlined) and, where it works on arrays as well, the NumPy twins (`kernels`).
def instant_end(now: float) -> float:
    """The end of the instant `now`: what is due up to here is taken in the step at `now` (float noise)."""
    return now + INSTANT * max(1.0, now)


def finish_reached(finish_work: float, work: float, eps: float) -> bool:
    """Whether a flow whose last byte is at `finish_work` on its group's work clock has finished at `work`:
    within `eps` relative plus 1e-6 bytes (float noise: such flows finish together)."""
    return finish_work - work <= eps * finish_work + 1e-6


def completion_time(now: float, next_work: float, work: float, rate: float) -> float:
    """When a group's next flow finishes: its work to go at the group's per-flow rate (inf at rate 0)."""
    return now + (next_work - work) / rate if rate > 0 else INF


def rate_kept(fresh: Any, old: Any, same: float) -> Any:
    """The commit rule: a re-solved group keeps its committed rate `old` while the fresh one is within `same`
    relative of it (summation-order noise, or the tolerance mode's bound). Scalars or NumPy arrays."""
    return abs(fresh - old) <= same * old


class FlowRecord(NamedTuple):
    """A finished flow. `start` is when transfer() was called, `end` when its last byte arrived; it entered
    the network `delay_s` after `start` (a routing controller's time) with rate cap `rate_cap_Bps` (inf: none),
    which is what a replay of it needs. A named tuple: one is built per flow on the hot path, about four
    times cheaper than a frozen dataclass."""

    fid: int
    src: str
    dst: str
    nbytes: float
    start: float
    end: float
    links: tuple[int, ...]
    spine: str | None
    sport: int
    tag: Any = None
    rate_cap_Bps: float = INF
    delay_s: float = 0.0

    @property
    def path(self) -> tuple[int, ...]:
        return self.links

    @property
    def fct(self) -> float:
        return self.end - self.start


class ActiveFlow:
    """A bulk flow in flight: what the engine hands a solver and the solver hands back when it finishes.

    `finish_work` is the solver's: bytes to go when handed to the online core, the group's work clock at the
    last byte once in an object- or array-mode group; `slot` is the online core's index of it."""

    __slots__ = ("fid", "src", "dst", "nbytes", "start", "links", "spine", "sport", "tag", "event",
                 "latency", "reserved", "cap", "finish_work", "delay", "slot")

    def __init__(self, fid: int, src: str, dst: str, nbytes: float, start: float, links: tuple[int, ...],
                 spine: str | None, sport: int, tag: Any, event: simpy.Event, latency: float,
                 reserved: tuple[int, ...] | None, cap: float) -> None:
        self.fid, self.src, self.dst, self.nbytes, self.start = fid, src, dst, nbytes, start
        self.links, self.spine, self.sport, self.tag, self.event = links, spine, sport, tag, event
        self.latency, self.reserved, self.cap = latency, reserved, cap
        self.finish_work = nbytes
