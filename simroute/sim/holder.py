"""The holder side: how loaded a holder looks to a requester (`HolderLoad`) and which replica of a chunk a
request uses (`ReplicaChoice`). A holder's routed partial attention runs on its instance engine
(`sim.engine.exchange.HolderPartials`); its staging pool of fetched chunks is `sim.staging.StagingPool`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from simroute.network.hashing import mix64

if TYPE_CHECKING:
    from simroute.sim.cluster import Instance
    from simroute.sim.context import SimContext


class HolderLoad(NamedTuple):
    """How loaded a holder looks to a requester now (lower is less loaded; compared field by field in this
    order). Requests already committed to routing there come first: their partials are demand its engine
    does not show yet while their sequences wait at their requesters (without it, requesters arriving close
    together all pick the replica that looks idle)."""

    routing: int         # dense requests that route to it and are not done
    wait_s: float        # expected wait of one routed query: behind the engine's queued partial-attention work
    #                      (M/D/1 at other requesters' demand) and, inline, its current layer
    sequences: int       # the engine's own running and waiting sequences


def holder_wait_s(ctx: SimContext, holder: Instance, requester: int = -1) -> float:
    """Expected wait of one routed query on `holder` now, `requester`'s own demand left out (-1: nobody's)."""
    engine = ctx.engines[holder.id]
    return engine.partials.wait_s(ctx.query_kernel_s, ctx.env.now, engine.busy, engine.layer_s, requester)


def holder_load(ctx: SimContext, holder: Instance, requester: int = -1) -> HolderLoad:
    """`holder`'s load as `requester` (an instance id; -1: nobody's demand left out) would see it."""
    engine = ctx.engines[holder.id]
    return HolderLoad(ctx.routing.get(holder.id, 0), holder_wait_s(ctx, holder, requester),
                      len(engine.running) + len(engine.waiting))


class ReplicaChoice:
    """Which holder of a chunk one request uses: the nearest (least path latency: a nearer copy is never
    slower to reach; a same-host replica, over NVLink, is the nearest on every shipped topology), then the
    least loaded holder (`HolderLoad`: requests routing there, its engine's partial-attention wait with the
    requester's own demand left out, since its queries share the holder's kernel calls, then the engine's
    own sequences); ties spread requesters over replicas by a hash rather than all onto the lowest id.

    Nearest first because a load-first choice picked idle far replicas over near busy ones, and its TTFT on
    the agent-replicas study rose from 4 to 8 replicas; an added replica is now taken only if it is nearer
    or, at equal distance, less loaded.

    Before distance, a holder this request already uses for another chunk: a routed request ships its query
    block once per distinct holder, so spreading its chunks over more holders costs it more messages (with
    nearest-only, 2 replicas of the agent-replicas study raised TTFT p99 by 3.9% over 1 replica; with this
    rule by 0.5%, docs/REVIEW.md finding P8).

    One per request: it classifies its chunks at one simulated instant, so each holder's load is read once.
    """

    __slots__ = ("ctx", "requester", "loads", "picked", "_latency", "_held_at", "_holders")

    def __init__(self, ctx: SimContext, requester: Instance) -> None:
        self.ctx, self.requester = ctx, requester
        self.loads: dict[int, HolderLoad] = {}
        self.picked: set[int] = set()               # holders this request's earlier chunks use
        self._latency: list[float] | None = None     # the requester's latency row, read on the first pick
        self._held_at = ctx.copies.held_at          # per instance, the chunks it holds now (read per chunk: bound once)
        self._holders = ctx.cluster.chunks.holders

    def pick(self, chunk: int) -> int | None:
        """The holder to use for `chunk`; None when nobody holds it."""
        holder = self.choose(chunk)
        if holder is not None:
            self.picked.add(holder)
        return holder

    def choose(self, chunk: int) -> int | None:
        """`pick` without noting the holder as used (the caller adds it to `picked`)."""
        holders = self._holders[chunk]
        if len(holders) <= 1:
            return holders[0] if holders else None
        picked = self.picked
        if picked:     # O(holders this request uses), not O(holders of a popular chunk)
            held_at = self._held_at
            if len(picked) == 1:        # most requests use one holder: no list built
                for only in picked:
                    if chunk in held_at[only]:
                        return only
            else:
                used = [h for h in picked if chunk in held_at[h]]
                if len(used) == 1:
                    return used[0]
                if used:
                    holders = sorted(used)
        row = self._latency
        if row is None:
            row = self._latency = self.ctx.latency_row(self.requester)
        latency = list(map(row.__getitem__, holders))     # popular chunks have hundreds of holders: kept in C
        nearest = min(latency)
        if latency.count(nearest) == 1:     # load is read only where distance ties
            return holders[latency.index(nearest)]
        tied = [h for h, lat in zip(holders, latency) if lat == nearest]
        loads = [self._load(h) for h in tied]
        least = min(loads)
        if loads.count(least) == 1:
            return tied[loads.index(least)]
        here = self.requester.id            # equally loaded too: the hash spreads requesters over them
        return min((h for h, load in zip(tied, loads) if load == least), key=lambda h: mix64(h * 1_000_003 + here))

    def _load(self, holder: int) -> HolderLoad:
        load = self.loads.get(holder)
        if load is None:
            load = self.loads[holder] = holder_load(self.ctx, self.ctx.cluster.instances[holder], self.requester.id)
        return load
