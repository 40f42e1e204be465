"""Latency-bound messages (routed queries and partials): a delay per message, no event of their own.

A message src -> dst costs: the wait for its links, the probe (a signal round trip, measured per fabric), its
bytes over min(single-block dispatch rate, the share bulk flows leave each link) and the path's propagation. A
message re-rates nothing when it is sent; its bytes are counted per link and window, and telemetry charges each
window's message rate against the links' capacity for bulk flows at its end (`BulkState.charge_messages`).

The wait (how a message queues behind others, "Move the Query, Not the Cache", section 8, Fig. 7). Each
directed link keeps a work-conserving clock (when the bytes already sent on it drain at its capacity: a byte
holds the wire for 1 / capacity, `wire_occupancy` = 1) and the ends of the messages still draining. A NIC
serves its queue pairs' send queues in turn, a packet at a time, not a whole message at a time, so a new
message waits, on each link, min(r_i, w) for every message i still draining (r_i its bytes left, w its own
wire time): round-robin interleaving. Equal messages queue as in a FIFO; a probe-sized message slips between
the packets of a long one instead of waiting for all of it (the paper's probe stays at 14.5 us through K = 2
while K route flows move data on the same uplink).

NIC queue-pair contexts: every NIC keeps the contexts of its most recently used queue pairs (one per
requester-holder pair, both directions) in an on-chip cache (LRU). While a NIC serves at most
`nic_context_slots` pairs in rotation every message hits; one pair more and a cyclic access pattern misses on
every message (LRU's cyclic pathology), so each message fetches its context (`nic_miss_s`) and its work
requests are re-read at a lower rate (`nic_miss_rate_factor`). No published figure gives a ConnectX-7's
capacity or miss cost: the defaults leave the cache unbound at the queue-pair counts of the shipped scenarios,
and the `nic-qp-sweep` probe of `simroute calibrate` measures both (a profile's NIC fabric then carries them:
`MessageModelParams.from_profile`). See docs/NETWORK.md.

Per message (the hot path, `MessageModel.send`): two short loops over the path's links (a link with a backlog
also walks the ends still draining there: the messages in flight on it), two LRU touches and the byte counts.
By name (`MessageModel.delay`), the route comes from a table indexed by source then destination name (filled
once per pair, so a message builds no key), then `send`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from simroute.network.bulk import BulkState
    from simroute.network.paths import PathService
    from simroute.network.telemetry import Telemetry
    from simroute.network.topology import EngineTopology

INF = math.inf


# profile constants `MessageModelParams.from_profile` reads (the nic-qp-sweep probe writes the first two)
NIC_CONSTANTS = ("nic_qp_contexts", "nic_context_miss_us", "nic_context_window_us", "nic_miss_rate_factor")


@dataclass(frozen=True)
class MessageModelParams:
    """Constants of the message model (docs/NETWORK.md, "Messages and NIC congestion").

    `wire_occupancy` is physics (a byte holds a link for 1 / its capacity; a single-block put that dispatches
    below the link's rate leaves the rest to others); the NIC context cache's four are defaults until the
    `nic-qp-sweep` probe measures them on a GPU box: no published figure gives them for a ConnectX-7, and the
    paper's Fig. 7, which the model predicts, is not used to set them."""

    nic_context_slots: int = 64          # default: queue pairs a NIC keeps hot; unbound at the shipped scenarios'
    nic_active_window_s: float = 200e-6  # default: a pair stays in the working set this long after its last use
    nic_miss_s: float = 2e-6             # default: a context fetch over PCIe (one host-memory read round trip)
    nic_miss_rate_factor: float = 1.0    # default: work requests re-read at the full rate after the fetch
    wire_occupancy: float = 1.0          # physics: a byte holds the wire for 1 / capacity
    nic_contexts: bool = True            # False: no context cache at all

    @classmethod
    def from_profile(cls, constants: dict[str, float]) -> MessageModelParams:
        """Params with a profile's measured NIC constants (`nic_qp_contexts`, `nic_context_miss_us`,
        `nic_context_window_us`, `nic_miss_rate_factor`, the `nic-qp-sweep` probe's outputs) over the defaults;
        names it does not know are ignored (a profile may carry others)."""
        default = cls()
        get = constants.get
        slots, miss_us = get("nic_qp_contexts"), get("nic_context_miss_us")
        window_us, factor = get("nic_context_window_us"), get("nic_miss_rate_factor")
        return cls(nic_context_slots=default.nic_context_slots if slots is None else max(1, int(round(slots))),
                   nic_active_window_s=default.nic_active_window_s if window_us is None else float(window_us) * 1e-6,
                   nic_miss_s=default.nic_miss_s if miss_us is None else float(miss_us) * 1e-6,
                   nic_miss_rate_factor=default.nic_miss_rate_factor if factor is None else float(factor),
                   wire_occupancy=default.wire_occupancy, nic_contexts=default.nic_contexts)


class MessageHost(Protocol):
    """What the message model reads of its engine: the topology, the path service (a pair's path and its
    latency), the bulk state (link shares and the version they key on) and telemetry (message bytes)."""

    topology: EngineTopology
    paths: PathService
    bulk: BulkState
    telemetry: Telemetry


class MessageRoute:
    """A cached message path src -> dst: links, propagation, shares at the last bulk change, NIC ports."""

    __slots__ = ("src", "dst", "links", "latency_s", "version", "link_wire", "rate_Bps", "single_block_Bps",
                 "sent_bytes", "sent_count", "window", "window_bytes", "pair", "src_nic", "dst_nic", "spine",
                 "contexts", "contexts_key", "mirror")

    def __init__(self, src: str, dst: str, links: tuple[int, ...], latency_s: float, pair: int,
                 src_nic: int, dst_nic: int, spine: str | None) -> None:
        self.src, self.dst, self.links, self.latency_s = src, dst, links, latency_s
        self.version = -1
        self.link_wire: tuple[tuple[int, float], ...] = ()   # (link, wire seconds per byte) at the last refresh
        self.rate_Bps = INF
        self.single_block_Bps = -1.0
        self.sent_bytes = 0.0
        self.sent_count = 0
        self.window = -1
        self.window_bytes = 0.0
        self.pair = pair                   # queue-pair id (both directions of a requester-holder pair share it)
        self.src_nic, self.dst_nic = src_nic, dst_nic     # NIC context caches touched (-1 = none: intra-host)
        self.spine = spine
        # the (pairs, times) lists of both NICs' context caches, bound once (empty: no context check)
        self.contexts: tuple[tuple[list[int], list[float]], ...] = ()
        # the NICs touched, as a set (which the reverse route's `mirror` is when both touch the same ones)
        self.contexts_key: frozenset[int] = frozenset()
        self.mirror: frozenset[int] | None = None


@mypyc_attr(allow_interpreted_subclasses=True)
class MessageModel:
    """Message delays over an engine's links (see module docstring). Swap it by passing
    `FlowEngine(message_model=...)`; a subclass overrides `send` and keeps its signature (compiled or not:
    `simroute.compiled`)."""

    def __init__(self, params: MessageModelParams | None = None) -> None:
        self.params = params or MessageModelParams()
        self.routes: dict[tuple[str, str], MessageRoute] = {}
        self._table: dict[str, dict[str, MessageRoute]] = {}   # source -> destination -> route (by-name path)
        self.misses = 0
        self.sends = 0          # messages whose delay `send` computed (each `account`ed one stands for others)

    def attach(self, engine: MessageHost) -> None:
        self.engine = engine
        self.bulk = engine.bulk
        self.telemetry = engine.telemetry
        params = self.params
        self._contexts_on, self._miss_s, self._miss_factor = (params.nic_contexts, params.nic_miss_s,
                                                              params.nic_miss_rate_factor)
        self._slots, self._window_s = params.nic_context_slots, params.nic_active_window_s
        self.busy = [0.0] * len(engine.bulk.cap)             # per link: when the bytes sent on it drain
        # per link: the drain times of the messages still on it, in send order (only read while busy > now)
        self.ends: list[list[float]] = [[] for _ in engine.bulk.cap]
        self._nic_ids: dict[str, int] = {}
        self.contexts: list[list[int]] = []             # per NIC: most recent distinct queue pairs, oldest first
        self._context_times: list[list[float]] = []     # their last use
        self._pair_ids: dict[tuple[str, str], int] = {}
        self._pair_fast = type(self).send is MessageModel.send   # `send_pair` may inline `send`

    def _nic(self, name: str) -> int:
        nic = self._nic_ids.get(name)
        if nic is None:
            nic = self._nic_ids[name] = len(self.contexts)
            self.contexts.append([])
            self._context_times.append([])
        return nic

    def route(self, src: str, dst: str) -> MessageRoute:
        """The pair's route (built on first use, then kept: one ECMP path per pair)."""
        route = self.routes.get((src, dst))
        if route is None:
            route = self.routes[(src, dst)] = self._build(src, dst)
            self._table.setdefault(src, {})[dst] = route
        return route

    def delay(self, src: str, dst: str, nbytes: float, t_probe_s: float, single_block_Bps: float, now: float,
              include_latency: bool = True) -> float:
        """`send` by name: the route from the source -> destination table (no key built per message)."""
        try:
            route = self._table[src][dst]
        except KeyError:
            route = self.route(src, dst)
        return self.send(route, nbytes, t_probe_s, single_block_Bps, now, include_latency)

    def _build(self, src: str, dst: str) -> MessageRoute:
        engine = self.engine
        topo = engine.topology
        src_index, dst_index = topo.index(src), topo.index(dst)
        paths = engine.paths
        links = paths.message_links(src_index, dst_index)
        all_links = topo.links
        nic_hops = [link for link in links if all_links[link].tier == "nic-leaf"]
        src_nic = self._nic(all_links[nic_hops[0]].src) if nic_hops else -1
        dst_nic = self._nic(all_links[nic_hops[-1]].dst) if nic_hops else -1
        spine = topo.spine_of(links) if hasattr(topo, "spine_of") else None
        pair = (src, dst) if src <= dst else (dst, src)
        pair_id = self._pair_ids.setdefault(pair, len(self._pair_ids))
        route = MessageRoute(src, dst, links, paths.latency_s(links), pair_id, src_nic,
                             dst_nic, spine)
        if src_nic >= 0 and self._contexts_on:
            route.contexts = tuple((self.contexts[nic], self._context_times[nic]) for nic in (src_nic, dst_nic))
            route.contexts_key = frozenset((src_nic, dst_nic))
            reverse = self.routes.get((dst, src))
            if reverse is not None and reverse.pair == pair_id and reverse.contexts_key == route.contexts_key:
                route.mirror, reverse.mirror = reverse.contexts_key, route.contexts_key
        return route

    def _refresh(self, route: MessageRoute, single_block_Bps: float) -> None:
        """Shares and wire time per byte on each link, at the engine's current bulk state."""
        bulk, occupancy = self.bulk, self.params.wire_occupancy
        rate = float(single_block_Bps)
        wire = []
        for link in route.links:
            share = bulk.link_share(link)
            wire.append((link, occupancy / share))
            if share < rate:
                rate = share
        route.link_wire = tuple(wire)
        route.rate_Bps = rate
        route.version = bulk.version
        route.single_block_Bps = single_block_Bps

    def _pair_misses(self, route: MessageRoute, now: float) -> bool:
        """Touch the route's queue pair at both NICs; True when either NIC's working set (pairs that used it
        within the last `nic_active_window_s`) exceeds its context cache, so a cyclic rotation misses on
        every message.

        Exact with O(slots) state: each NIC keeps its `nic_context_slots + 1` most recently used distinct
        pairs (oldest first) and their last use; the working set exceeds the cache exactly when the oldest
        of those was used within the window. A pair already a NIC's most recent one (a reply, a loop's next
        message) only refreshes its time. One loop for both NICs: it runs on every message."""
        pair, slots, horizon, missed = route.pair, self._slots, now - self._window_s, False
        for pairs, times in route.contexts:
            if pairs and pairs[-1] == pair:
                times[-1] = now
            else:
                if pair in pairs:
                    index = pairs.index(pair)
                    del pairs[index]
                    del times[index]
                pairs.append(pair)
                times.append(now)
                if len(pairs) > slots + 1:
                    del pairs[0]
                    del times[0]
            if len(pairs) > slots and times[0] >= horizon:
                missed = True
        return missed

    def send(self, route: MessageRoute, nbytes: float, t_probe_s: float, single_block_Bps: float, now: float,
             include_latency: bool = True) -> float:
        """Delay of one message sent at `now` (see module docstring). A measured probe already holds the
        path's propagation: callers passing one can leave the links' latency out (`include_latency=False`)."""
        if route.version != self.bulk.version or route.single_block_Bps != single_block_Bps:
            self._refresh(route, single_block_Bps)
        missed = bool(route.contexts) and self._pair_misses(route, now)
        delay = self._occupy(route, nbytes, t_probe_s, missed, now)
        self.sends += 1
        self.account(route, nbytes, 1, now)
        return delay + (route.latency_s if include_latency else 0.0)

    def _occupy(self, route: MessageRoute, nbytes: float, t_probe_s: float, missed: bool, now: float) -> float:
        """One message's wait for its links, its hold of their clocks, and its delay without propagation
        (`send`'s body, after the NIC context check said whether it `missed`).

        On each link the message holds the wire for w = its bytes x wire time per byte and waits, under the
        NIC's round-robin over queue pairs, min(r_i, w) for each message i still draining there (r_i what is
        left of it: the gap between consecutive drain times); the message waits for its slowest link. The link's
        clock moves by w from when it frees (work conserving)."""
        busy, ends = self.busy, self.ends
        rate = route.rate_Bps
        hold = nbytes
        extra = 0.0
        if missed:
            self.misses += 1
            extra = self._miss_s
            rate *= self._miss_factor
            hold = nbytes / self._miss_factor
        wait = 0.0
        for link, wire in route.link_wire:
            mine = hold * wire
            if busy[link] > now:
                queue = ends[link]
                gone = 0
                while queue[gone] <= now:          # the last end is busy[link] > now: the loop stops there
                    gone += 1
                if gone:
                    del queue[:gone]
                waited = 0.0
                previous = now
                for end in queue:
                    left = end - previous
                    waited += left if left < mine else mine
                    previous = end
                if waited > wait:
                    wait = waited
                busy[link] += mine
                queue.append(busy[link])
            else:
                busy[link] = now + mine
                queue = ends[link]
                queue.clear()
                queue.append(busy[link])
        return wait + extra + t_probe_s + nbytes / rate

    def send_pair(self, out: MessageRoute, out_bytes: float, out_probe_s: float, back: MessageRoute,
                  back_bytes: float, back_probe_s: float, single_block_Bps: float, now: float) -> tuple[float, float]:
        """(`send` of `out`, then `send` of `back`) at `now`, without latency, in one call: a query and its
        partial (`send_legs` of one leg)."""
        return self.send_legs(((out, out_bytes, out_probe_s, back, back_bytes, back_probe_s, single_block_Bps),),
                              ((out, out_bytes), (back, back_bytes)), now)[0]

    def send_legs(self, legs: Sequence[tuple[MessageRoute, float, float, MessageRoute, float, float, float]],
                  messages: Sequence[tuple[MessageRoute, float]], now: float) -> list[tuple[float, float]]:
        """Each leg's (query s, partial s) at `now`, without latency, leg after leg: a requester event's routed
        legs in one call (once per routed event). A leg is (query route, bytes, probe s, partial route, bytes,
        probe s, single-block rate); `messages` are its messages' (route, bytes) in the same order, accounted
        once in one pass at the end (`account_messages`: nothing between reads the counts). Per leg the same
        arithmetic in the same order as two `send`s; the partial's NIC context check is the query's answer when
        both touch the same NICs for one queue pair (the query left that pair the most recent at both at `now`,
        so the partial's touches change nothing and it sees the state the query's check saw). A subclass that
        overrides `send` gets two `send`s per leg (each accounted by itself)."""
        if not self._pair_fast:
            send = self.send
            return [(send(out, out_bytes, out_probe_s, single_block_Bps, now, False),
                     send(back, back_bytes, back_probe_s, single_block_Bps, now, False))
                    for out, out_bytes, out_probe_s, back, back_bytes, back_probe_s, single_block_Bps in legs]
        bulk_version, refresh, pair_misses, occupy = self.bulk.version, self._refresh, self._pair_misses, self._occupy
        delays = []
        for out, out_bytes, out_probe_s, back, back_bytes, back_probe_s, single_block_Bps in legs:
            if out.version != bulk_version or out.single_block_Bps != single_block_Bps:
                refresh(out, single_block_Bps)
            if back.version != bulk_version or back.single_block_Bps != single_block_Bps:
                refresh(back, single_block_Bps)
            missed = bool(out.contexts) and pair_misses(out, now)
            if not back.contexts:
                back_missed = False
            elif back.pair == out.pair and back.mirror is out.contexts_key:
                back_missed = missed
            else:
                back_missed = pair_misses(back, now)
            delays.append((occupy(out, out_bytes, out_probe_s, missed, now),       # the query, then the partial
                           occupy(back, back_bytes, back_probe_s, back_missed, now)))
        self.sends += 2 * len(legs)
        self.account_messages(messages, 1, now)
        return delays

    def account_pair(self, out: MessageRoute, out_bytes: float, back: MessageRoute, back_bytes: float, count: int,
                     now: float) -> None:
        """`account` of `out`, then of `back`, in one call (a routed leg's query and partial)."""
        self.account_messages(((out, out_bytes), (back, back_bytes)), count, now)

    def account(self, route: MessageRoute, nbytes: float, count: int, now: float) -> None:
        """Count the bytes of `count` messages of `nbytes` on `route` at `now` (totals and the telemetry's
        link windows). `send` accounts its own message; a caller whose one sent message stands for several
        identical ones (an engine event of several exchanges) accounts the others here."""
        self.account_messages(((route, nbytes),), count, now)

    def account_messages(self, messages: Sequence[tuple[MessageRoute, float]], count: int, now: float) -> None:
        """`account` of each (route, bytes) in order, `count` messages each, in one pass (a requester event's
        routed legs: the telemetry's window is checked once)."""
        if count <= 0:
            return
        telemetry = self.telemetry
        if now >= telemetry.window_end:
            telemetry.advance_to(now)
        window = telemetry.window_index
        for route, nbytes in messages:
            total = nbytes * count
            route.sent_bytes += total
            route.sent_count += count
            if route.window != window:
                route.window = window
                if not telemetry.message_routes:
                    telemetry.first_message()          # the window's message rate is charged at its end
                telemetry.message_routes.append(route)
            route.window_bytes += total

    def total_bytes(self) -> float:
        return sum(route.sent_bytes for route in self.routes.values())

    def total_count(self) -> int:
        """Messages carried so far: those `send` computed and those `account`ed beside them."""
        return sum(route.sent_count for route in self.routes.values())
