"""The path service: which links a flow or message takes between two GPUs, how long those links take to cross,
and the routing strategies' reservation table.

One object per `FlowEngine` (`engine.paths`), shared by the engine's bulk flows, the routing strategies
(simroute/network/routing.py) and the message model (simroute/network/messages.py) through this interface;
none of them reads another's internals. It knows the topology and the run's seed, nothing of the solver.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from simroute.network.hashing import SPORT_MAX, SPORT_MIN, flow_key, mix64

if TYPE_CHECKING:      # a type only: routing (which the CLI's help lists) stays as light as hashing
    from simroute.network.topology import EngineTopology


class PathService:
    """Equal-cost paths, their latency, ECMP hashing, message paths and the reservation table of one topology.

    `reserve_middle` counts a flow on its path's middle (switch) links and `release` uncounts it; a strategy
    reads the counts through `middle_scores` (the table itself stays here).
    """

    def __init__(self, topology: EngineTopology, seed: int = 0) -> None:
        self.topology = topology
        self.seed = int(seed)
        self._latency = [link.latency_s for link in topology.links]
        self._reserved = [0] * len(topology.links)

    # ---- paths -----------------------------------------------------------------------------------------
    def choices(self, src_index: int, dst_index: int) -> int:
        """Equal-cost paths between two GPU indices."""
        return self.topology.n_choices(src_index, dst_index)

    def path(self, src_index: int, dst_index: int, path_index: int) -> tuple[tuple[int, ...], str | None]:
        """(link ids, spine or None) of the `path_index`-th equal-cost path."""
        return self.topology.path_ids(src_index, dst_index, path_index)

    def latency_s(self, links: Iterable[int]) -> float:
        """Summed link latency of a path."""
        table = self._latency
        total = 0.0
        for link in links:
            total += table[link]
        return total

    def ecmp(self, src_index: int, dst_index: int, sport: int) -> int:
        """The path index the switches' ECMP hash of the flow's 5-tuple picks."""
        return self.topology.ecmp_choice(src_index, dst_index, flow_key(src_index, dst_index, sport), self.seed)

    # ---- messages -------------------------------------------------------------------------------------
    def message_sport(self, src_index: int, dst_index: int) -> int:
        """The fixed source port of a pair's message queue pair (messages of a pair share one path)."""
        return SPORT_MIN + mix64(self.seed ^ (src_index << 20) ^ dst_index) % (SPORT_MAX - SPORT_MIN + 1)

    def message_links(self, src_index: int, dst_index: int) -> tuple[int, ...]:
        """The links a pair's messages take: the ECMP path of its queue pair's port."""
        choice = self.ecmp(src_index, dst_index, self.message_sport(src_index, dst_index))
        return self.path(src_index, dst_index, choice)[0]

    # ---- the reservation table -------------------------------------------------------------------------
    def reserve_middle(self, src_index: int, dst_index: int, path_index: int) -> tuple[int, ...]:
        """Count a flow on its path's middle (switch) links; returns them, for `release` when it ends."""
        topology, table = self.topology, self._reserved
        middle = topology.middle(topology.leaf_of(src_index), topology.leaf_of(dst_index))[path_index][0]
        for link in middle:
            table[link] += 1
        return tuple(middle)

    def release(self, links: Sequence[int]) -> None:
        table = self._reserved
        for link in links:
            table[link] -= 1

    def middle_scores(self, src_index: int, dst_index: int) -> list[tuple[int, int]]:
        """(max, sum) of reserved flows over each middle path's links: lower is emptier."""
        topology, table = self.topology, self._reserved
        middles = topology.middle(topology.leaf_of(src_index), topology.leaf_of(dst_index))
        return [(max(table[link] for link in links), sum(table[link] for link in links)) for links, _spine in middles]

    @property
    def reservations(self) -> tuple[int, ...]:
        """Reserved flows per link (a copy: tests check every reservation is released)."""
        return tuple(self._reserved)
