"""The holder side: how loaded a holder looks to a requester (`HolderLoad`) and which replica of a chunk a
request uses (`ReplicaChoice`). A holder's routed partial attention runs on its instance engine
(`sim.engine.exchange.HolderPartials`); its staging pool of fetched chunks is `sim.staging.StagingPool`.
"""

from __future__ import annotations

from itertools import compress, filterfalse, repeat
from operator import attrgetter
from typing import TYPE_CHECKING, NamedTuple

from simroute.network.hashing import mix64

if TYPE_CHECKING:
    from simroute.sim.cluster import Instance
    from simroute.sim.engine.engine import LoadBoard
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


_new_load = tuple.__new__          # a HolderLoad without its Python-level __new__ (most of a C loop's time)


def holder_wait_s(ctx: SimContext, holder: Instance, requester: int = -1) -> float:
    """Expected wait of one routed query on `holder` now, `requester`'s own demand left out (-1: nobody's)."""
    engine = ctx.engines[holder.id]
    return engine.partials.wait_s(ctx.query_kernel_s, ctx.env.now, engine.busy, engine.layer_s, requester)


def holder_load(ctx: SimContext, holder: Instance, requester: int = -1) -> HolderLoad:
    """`holder`'s load as `requester` (an instance id; -1: nobody's demand left out) would see it."""
    return holder_loads(ctx, [holder.id], requester)[0]


_DEMAND = attrgetter("demand")


def holder_loads(ctx: SimContext, holders: list[int], requester: int = -1) -> list[HolderLoad]:
    """`holder_load` of each holder (instance ids): the replica choice reads every candidate of a chunk on one
    fabric, often hundreds on a corpus. Read from the run's `LoadBoard` (flat lists the engines keep current, in
    C loops) unless one of them has requesters routing to it, whose wait is read from its engine
    (`read_holder_loads`, the same values)."""
    board = ctx.engines.board
    if board is None or any(map(_DEMAND, map(board.partials.__getitem__, holders))):
        return read_holder_loads(ctx, holders, requester)
    routing = ctx.routing
    return list(map(_new_load, repeat(HolderLoad),
                    zip(map(routing.get, holders, repeat(0)) if routing else repeat(0),
                        map(board.layer_wait_s.__getitem__, holders), map(board.sequences.__getitem__, holders))))


def read_holder_loads(ctx: SimContext, holders: list[int], requester: int = -1) -> list[HolderLoad]:
    """`holder_loads` read from each holder's engine, one by one (a run without a board: DP groups; a holder
    that requesters route to: its M/D/1 wait at their demand, less `requester`'s)."""
    engines, routing, kernel_s, now = ctx.engines.engines, ctx.routing, ctx.query_kernel_s, ctx.env.now
    new = _new_load             # bound locally: read once per loop iteration
    loads = []
    append = loads.append
    routed = routing.get if routing else None     # nobody routes anywhere (most runs' choices): 0 for all
    for holder in holders:
        engine = engines[holder]
        partials = engine.partials
        if partials.demand:     # somebody routes here: the M/D/1 wait at their utilisation
            wait = partials.wait_s(kernel_s, now, engine.busy, engine.layer_s, requester)
        elif engine.busy and partials._waits_for_layer:   # nobody does (most holders): `queue_wait_s` at
            wait = 0.0 + engine.layer_s / 2                 # utilisation 0, spelt out (no call per holder)
        else:
            wait = 0.0
        append(new(HolderLoad, (0 if routed is None else routed(holder, 0), wait,
                                len(engine.running) + len(engine.waiting))))
    return loads


def _demand(board: LoadBoard, holders: list[int]) -> bool:
    """Whether requesters route to one of `holders` (its partials' `demand` is not empty), reading only the ones
    flagged on the board; a flagged holder whose demand is empty is lowered (only `add` raises it again)."""
    asked, partials = board.asked, board.partials
    for holder in list(compress(holders, map(asked.__getitem__, holders))):
        if partials[holder].demand:
            return True
        asked[holder] = False
    return False


class ReplicaChoice:
    """Which holder of a chunk one request uses: among the holders on the fabric of the nearest one (a
    same-host replica, over NVLink, is the nearest on every shipped topology), the least loaded (`HolderLoad`:
    requests routing there, its engine's partial-attention wait with the requester's own demand left out,
    since its queries share the holder's kernel calls, then the engine's own sequences), then the nearest;
    ties spread requesters over replicas by a hash rather than all onto the lowest id.

    Load before distance within a fabric: a routed exchange's cost does not see the distance (the probe is
    measured over the path, flat across a spine: "Move the Query, Not the Cache", section 8) and a pull runs
    at the fabric's rate on a non-blocking tree, while a busy holder makes every query wait. Nearest-first
    sent requester 31 of the six-agent fan-in to a busy copy on its own leaf over an idle one across a spine
    (TTFT p99 3.53 -> 4.29 ms from 2 to 4 copies, docs/REVIEW.md finding P8); over seeds 0-5 of the default
    run it gave a TTFT mean of 56.1 ms on average (71.2 at seed 1) against 52.1 with this rule.

    Distance before load across fabrics: ranking fabrics by the closed form's uncongested cost sends
    same-host requests over the NICs (NVLink's measured single-block rate is a hair below IBGDA's, finding
    P4), where they queue: the agent-replicas study's TTFT mean then rose with every added replica (12.74 ->
    12.94 ms from 1 to 8); with this rule it falls (12.74 -> 12.61 ms).

    Before all of it, a holder this request already uses for another chunk: a routed request ships its query
    block once per distinct holder, so spreading its chunks over more holders costs it more messages (with
    nearest-only, 2 replicas of the agent-replicas study raised TTFT p99 by 3.9% over 1 replica; with this
    rule by 0.5%, docs/REVIEW.md finding P8).

    One per request: it classifies its chunks at one simulated instant, reading the holders' loads off the run's
    `LoadBoard` (a holder that requesters route to: from its engine, once per request).
    Extending: a subclass overrides `choose` (the request calls it once per chunk with more than one holder
    it does not already use); `pick` notes the answer.
    """

    __slots__ = ("ctx", "requester", "loads", "picked", "_latency", "_fabrics", "_near", "_held_at", "_holders",
                 "_board")

    def __init__(self, ctx: SimContext, requester: Instance) -> None:
        self.ctx, self.requester = ctx, requester
        self.loads: dict[int, HolderLoad] = {}     # holders' loads read one by one (`_loads`), once each
        self.picked: set[int] = set()               # holders this request's earlier chunks use
        self._latency: list[float] | None = None     # the requester's latency row, read on the first pick
        self._fabrics: list[int] | None = None       # and its fabric row (`Cluster.fabric_row`)
        self._held_at = ctx.copies.held_at          # per instance, the chunks it holds now (read per chunk: bound once)
        self._holders = ctx.cluster.chunks.holders
        self._board = ctx.engines.board

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
        row, fabrics = self._latency, self._fabrics
        if row is None:
            row = self._latency = self.ctx.latency_row(self.requester)
            fabrics = self._fabrics = self.ctx.cluster.fabric_row(self.requester)
            self._near = self.ctx.cluster.near_view(self.requester, row)
        peers, far_fabric, far_latency = self._near
        near = None
        if len(peers) < len(holders) and chunk not in self._held_at[self.requester.id]:
            # The nearest fabric from the requester's own domain (a few instances) rather than the whole holder
            # list: no holder there, and every holder is on the one fabric across domains; one there nearer than
            # any instance outside, and its fabric's holders are all in the domain. Else the general rule below.
            held_at = self._held_at
            near = [peer for peer in peers if chunk in held_at[peer]]
            if near:
                nearest = min(map(row.__getitem__, near))
                fabric = {fabrics[peer] for peer in near if row[peer] == nearest}
                if nearest < far_latency and len(fabric) == 1 and far_fabric not in fabric:
                    nearest_fabric = fabric.pop()
                    holders = [peer for peer in near if fabrics[peer] == nearest_fabric]
                else:
                    near = None
        if near is None:
            latency = list(map(row.__getitem__, holders))     # popular chunks have hundreds of holders: in C
            on = list(map(fabrics.__getitem__, holders))
            nearest_fabric = on[latency.index(min(latency))]
            if on.count(nearest_fabric) < len(on):          # holders on other fabrics: the nearest one's only
                holders = list(compress(holders, map(nearest_fabric.__eq__, on)))
        if len(holders) == 1:
            return holders[0]
        routing = self.ctx.routing
        if routing:         # `HolderLoad` compares requests routing there first: only the fewest read the rest
            counts = [routing.get(h, 0) for h in holders]
            fewest = min(counts)
            if counts.count(fewest) < len(counts):
                holders = [holder for holder, count in zip(holders, counts) if count == fewest]
                if len(holders) == 1:
                    return holders[0]
        tied = self._least_loaded(holders)
        if len(tied) == 1:
            return tied[0]
        # the tie-breaks below see the tied set, not its order (ids are distinct; mix64 is a bijection)
        nearest = min(map(row.__getitem__, tied))
        tied = list(compress(tied, map(nearest.__eq__, map(row.__getitem__, tied))))
        if len(tied) == 1:
            return tied[0]
        here = self.requester.id            # equally loaded and near too: the hash spreads requesters over them
        return min(tied, key=lambda h: mix64(h * 1_000_003 + here))

    def _least_loaded(self, holders: list[int]) -> list[int]:
        """The holders of least `HolderLoad`, in the holders' order. Their routing counts are equal (`choose`
        kept the fewest): from the run's `LoadBoard`, the least wait, then the fewest sequences, compared in C
        loops without a load per holder, unless one of them has requesters routing to it (`_loads`)."""
        board = self._board
        if board is None or (any(map(board.asked.__getitem__, holders)) and _demand(board, holders)):
            loads = self._loads(holders)
            least = min(loads)
            if loads.count(least) == 1:
                return [holders[loads.index(least)]]
            return list(compress(holders, map(least.__eq__, loads)))
        waits = list(map(board.layer_wait_s.__getitem__, holders))
        wait = min(waits)
        if waits.count(wait) < len(waits):
            holders = list(compress(holders, map(wait.__eq__, waits)))
            if len(holders) == 1:
                return holders
        sequences = list(map(board.sequences.__getitem__, holders))
        fewest = min(sequences)
        if sequences.count(fewest) < len(sequences):
            holders = list(compress(holders, map(fewest.__eq__, sequences)))
        return holders

    def _loads(self, holders: list[int]) -> list[HolderLoad]:
        """The holders' loads, each read once per request (`loads`)."""
        known = self.loads
        unread = list(filterfalse(known.__contains__, holders))
        if unread:
            known.update(zip(unread, holder_loads(self.ctx, unread, self.requester.id)))
        return list(map(known.__getitem__, holders))
