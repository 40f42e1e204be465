"""What the routed-exchange model (exchange.py) reads of an instance engine, requester or holder, and what it
hands back (`EventLegs`): a leaf module, so that the exchange names the engine's interface without importing the
engine that uses it. Plain Python: exchange.py may run compiled (mypyc, `simroute.compiled`), whose classes
cannot subclass `list`."""

from __future__ import annotations

from typing import Any, Protocol


class ExchangePeer(Protocol):
    """An instance engine as the exchange sees it (`InstanceEngine` satisfies it)."""

    eid: int                # instance id: the exchange's per-pair caches are keyed by it
    gpu: Any                # network endpoint of the instance
    env: Any                # the run's simpy.Environment (its clock)
    step: Any               # the step-time model: `holder_partial_s` prices a holder's partial work
    partials: Any           # the holder's `exchange.HolderPartials`: the partial work it does for others
    busy: bool              # an event is under way
    layer_s: float          # GPU-busy time per layer of the event under way

    def absorb(self, entry: Any, now: float) -> None:     # entry: exchange.DemandEntry
        """A requester's partial work began during this engine's event: the event runs its share now."""
        ...


class EventLegs(list):
    """A requester event's routed legs, (holder, kernel share, queries, demand entry, wait, sharing) each, as
    `RouteExchange.iteration` hands them to `settle` / `retract`; `messages` are their messages' (route, bytes)
    (the event's groups' own list, shared while the groups hold)."""

    __slots__ = ("messages",)
    messages: list
