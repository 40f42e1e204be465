"""Routing strategies: how a bulk flow picks one of its equal-cost paths. One registered class per strategy.

A strategy sees the flow (GPU indices, bytes, the source port drawn for it), the engine's path service
(`PathService`: equal-cost paths, ECMP, the reservation table) and the ARK settings (`ArkSettings`), and
returns a `RouteChoice`: the path index among the topology's equal-cost paths, the source port actually used,
the links it reserved (released when the flow ends) and the set-up delay it charges.

Strategies are registered classes of the one registry mechanism (simroute/registry.py, kind "routing"): to add
one, subclass `RoutingStrategy` and decorate it with `@ROUTING.register("name")` (or give it a `name` and use
`@register_routing`); `FlowEngine(routing=name)`, `RunConfig.routing` and the CLI's listing pick it up.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from simroute.network.hashing import SPORT_MAX, SPORT_MIN
from simroute.network.paths import PathService
from simroute.registry import registry

ARK_HASH_S = 4.10e-6      # paper: ARK, Table 1 (controller hash computation)
ARK_LOOKUP_S = 0.87e-6    # paper: ARK, Table 1 (reservation-table lookup)
# Elephant threshold (documented in docs/NETWORK.md): a flow is worth a reservation when ARK's per-flow
# controller cost (hash + lookup, ARK Table 1) is at most 10% of its uncontended time on the fastest shipped
# NIC (50 GB/s): 10 x 4.97 us x 50 GB/s = 2.5 MB. The ARK paper's KV transfers (hundreds of ms to seconds,
# ARK abstract) sit far above it, and so do 15.9 MB chunk pulls (the old 16 MB threshold missed them).
ARK_AMORTISATION = 10.0
ARK_REFERENCE_NIC_BPS = 50e9
ARK_ELEPHANT_BYTES = ARK_AMORTISATION * (ARK_HASH_S + ARK_LOOKUP_S) * ARK_REFERENCE_NIC_BPS


class RouteChoice(NamedTuple):
    """Outcome of a routing decision."""

    path_index: int                  # which equal-cost path (topology.path_ids(..., path_index))
    sport: int                       # the UDP source port the flow uses
    reserved: tuple[int, ...] | None  # reservation-table links to release when the flow ends
    delay_s: float                   # controller time charged before the flow starts


@dataclass(frozen=True)
class ArkSettings:
    """ARK's knobs (the engine's constructor arguments): the elephant threshold, the controller's delay per
    elephant (hash + lookup) and how many source ports an elephant may try."""

    elephant_bytes: float = ARK_ELEPHANT_BYTES
    delay_s: float = ARK_HASH_S + ARK_LOOKUP_S
    port_search: int = 16384


class RoutingStrategy(ABC):
    """Picks an equal-cost path for a bulk flow with more than one choice (see module docstring)."""

    name: ClassVar[str]

    def __init__(self, paths: PathService, ark: ArkSettings) -> None:
        self.paths, self.ark = paths, ark

    @abstractmethod
    def choose(self, src_index: int, dst_index: int, nbytes: float, sport: int) -> RouteChoice:
        """Path for a flow between GPU indices with `nbytes` and a freshly drawn source port."""

    def ecmp(self, src_index: int, dst_index: int, sport: int) -> int:
        return self.paths.ecmp(src_index, dst_index, sport)

    def reserve(self, src_index: int, dst_index: int, path_index: int) -> tuple[int, ...]:
        """Count the flow on its middle (switch) links in the reservation table."""
        return self.paths.reserve_middle(src_index, dst_index, path_index)

    def middle_scores(self, src_index: int, dst_index: int) -> list[tuple[int, int]]:
        """(max, sum) of reserved flows over each middle path's links: lower is emptier."""
        return self.paths.middle_scores(src_index, dst_index)


ROUTING = registry("routing")


def register_routing(cls: type[RoutingStrategy]) -> type[RoutingStrategy]:
    """Register a strategy under its `name` attribute (`@ROUTING.register(name)` for a class without one)."""
    return ROUTING.register(cls.name)(cls)


@ROUTING.register("ecmp")
class EcmpRouting(RoutingStrategy):
    """Stateless hop-by-hop ECMP: the switches hash the RoCEv2 5-tuple (collisions follow balls-in-bins)."""

    def choose(self, src_index: int, dst_index: int, nbytes: float, sport: int) -> RouteChoice:
        return RouteChoice(self.ecmp(src_index, dst_index, sport), sport, None, 0.0)


@ROUTING.register("ark")
class ArkRouting(RoutingStrategy):
    """ARK (paper: ARK, section 3): an elephant searches source ports until its hash lands on a least-reserved
    spine path, reserves it, and pays the controller's hash + lookup; mice (below `ark_elephant_bytes`) use ECMP."""

    def choose(self, src_index: int, dst_index: int, nbytes: float, sport: int) -> RouteChoice:
        ark = self.ark
        if nbytes < ark.elephant_bytes:
            return RouteChoice(self.ecmp(src_index, dst_index, sport), sport, None, 0.0)
        scores = self.middle_scores(src_index, dst_index)
        best = min(scores)
        targets = {i for i, score in enumerate(scores) if score == best}
        span = SPORT_MAX - SPORT_MIN + 1
        choice = self.ecmp(src_index, dst_index, sport)
        for step in range(1, ark.port_search):
            if choice in targets:
                break
            port = SPORT_MIN + (sport - SPORT_MIN + step) % span
            choice = self.ecmp(src_index, dst_index, port)
            if choice in targets:
                sport = port
                break
        return RouteChoice(choice, sport, self.reserve(src_index, dst_index, choice), ark.delay_s)


@ROUTING.register("least-loaded")
class LeastLoadedRouting(RoutingStrategy):
    """Oracle baseline: every flow takes the middle path with the fewest routed, unfinished flows (no cost)."""

    def choose(self, src_index: int, dst_index: int, nbytes: float, sport: int) -> RouteChoice:
        scores = self.middle_scores(src_index, dst_index)
        choice = scores.index(min(scores))
        return RouteChoice(choice, sport, self.reserve(src_index, dst_index, choice), 0.0)


ROUTING_STRATEGIES: dict[str, type[RoutingStrategy]] = ROUTING.classes     # name -> class (the registry's own dict)
ROUTINGS: tuple[str, ...] = tuple(ROUTING_STRATEGIES)
