"""The message model on arrays with numba kernels: `MessageModel`'s arithmetic, the same values to the bit.

`MessageModel` keeps its state in Python objects (a list of link clocks, per-NIC lists, per-route attributes):
cheap for one message, but a routed requester event sends ~5 legs (10 messages) through two loops over each
path's links, two LRU touches and the byte counts, and that Python was the largest single cost of a routed
simulation (issue 24: ~15% of an always-route run's CPU). `CompiledMessageModel` holds the same state in arrays
(link clocks; per route its links, wire time per byte, rate, counts; per NIC its context cache) and runs a whole
event's legs (`send_batch`) and their accounting (`account_batch`) in one compiled call each. Per message the
same operations in the same order as `MessageModel.send` (IEEE doubles, no fast-math: numba does not reorder
them), so every delay, clock and byte count equals the reference's (tests/network/test_compiled_messages.py
runs both side by side). What stays in Python: building a route and refreshing its shares when the bulk state
moved (`_refresh`, rare), and appending the routes that start a telemetry window to `Telemetry.message_routes`.

A route's counters live in the model's arrays; `CompiledRoute` reads and writes them through properties, so
telemetry (and anything that reads a route) sees one state. The model is the default wherever the flow
engine's numba kernels are (`default_message_model`); SIMROUTE_NO_NUMBA=1 gives the reference.

Extending: subclass `MessageModel` (the reference) to change the model; this class is its compiled twin and
should change only together with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from simroute.network._compiled import njit, njit_inline
from simroute.network.messages import MessageModel, MessageModelParams, MessageRoute

# columns of the per-route float array
RATE, BLOCK_RATE, SENT_BYTES, WINDOW_BYTES, LATENCY = range(5)
# columns of the per-route int array
VERSION, SENT_COUNT, WINDOW, PAIR, SRC_NIC, DST_NIC, MIRROR, N_LINKS = range(8)
# the counters array
MISSES, SENDS = range(2)
# columns of a packed leg (`pack_legs`): query route, bytes, probe s, partial route, bytes, probe s, block rate
LEG_COLUMNS = 7


@njit_inline
def _touch_contexts(rid, route_int, context_pairs, context_times, context_len, slots, horizon, now):
    """`MessageModel._pair_misses` on arrays: touch the route's queue pair at its source then its destination
    NIC (each NIC's pairs oldest first, at most slots + 1 kept); True when either's working set exceeds it."""
    pair = route_int[rid, PAIR]
    missed = False
    for side in range(2):
        nic = route_int[rid, SRC_NIC + side]
        size = context_len[nic]
        if size > 0 and context_pairs[nic, size - 1] == pair:
            context_times[nic, size - 1] = now
        else:
            found = -1
            for index in range(size):
                if context_pairs[nic, index] == pair:
                    found = index
                    break
            if found >= 0:
                for index in range(found, size - 1):
                    context_pairs[nic, index] = context_pairs[nic, index + 1]
                    context_times[nic, index] = context_times[nic, index + 1]
                size -= 1
            context_pairs[nic, size] = pair
            context_times[nic, size] = now
            size += 1
            if size > slots + 1:
                for index in range(size - 1):
                    context_pairs[nic, index] = context_pairs[nic, index + 1]
                    context_times[nic, index] = context_times[nic, index + 1]
                size -= 1
            context_len[nic] = size
        if size > slots and context_times[nic, 0] >= horizon:
            missed = True
    return missed


@njit_inline
def _occupy(rid, nbytes, probe_s, missed, busy, route_links, route_wire, route_float, route_int, counters,
            miss_s, miss_factor, now):
    """`MessageModel._occupy` on arrays: wait for the path's link clocks, hold them, the delay."""
    n_links = route_int[rid, N_LINKS]
    start = now
    for index in range(n_links):
        clock = busy[route_links[rid, index]]
        if clock > start:
            start = clock
    rate = route_float[rid, RATE]
    hold = nbytes
    extra = 0.0
    if missed:
        counters[MISSES] += 1
        extra = miss_s
        rate *= miss_factor
        hold = nbytes / miss_factor
    for index in range(n_links):
        busy[route_links[rid, index]] = start + hold * route_wire[rid, index]
    return start - now + extra + probe_s + nbytes / rate


@njit_inline
def _account(rid, nbytes, count, window, route_float, route_int, new_routes, n_new):
    """`MessageModel.account_messages`'s body for one message: totals, and the window's bytes; a route
    starting this window goes to `new_routes` (telemetry lists it). Returns the new count of those."""
    total = nbytes * count
    route_float[rid, SENT_BYTES] += total
    route_int[rid, SENT_COUNT] += count
    if route_int[rid, WINDOW] != window:
        route_int[rid, WINDOW] = window
        new_routes[n_new] = rid
        n_new += 1
    route_float[rid, WINDOW_BYTES] += total
    return n_new


@njit
def send_legs_kernel(legs, delays, new_routes, busy, route_links, route_wire, route_float, route_int,
                     context_pairs, context_times, context_len, counters, bulk_version, slots, window_s, miss_s,
                     miss_factor, window, now):
    """`MessageModel.send_batch` on arrays: each leg's query then partial delay into `delays` (flat), then
    every message accounted once. Returns -1 and changes nothing when a route's shares are stale (the caller
    refreshes them and calls again), else how many routes started the telemetry window (in `new_routes`)."""
    n_legs = legs.shape[0]
    for leg in range(n_legs):
        block_rate = legs[leg, 6]
        for column in (0, 3):
            rid = np.int64(legs[leg, column])
            if route_int[rid, VERSION] != bulk_version or route_float[rid, BLOCK_RATE] != block_rate:
                return -1
    horizon = now - window_s
    for leg in range(n_legs):
        out = np.int64(legs[leg, 0])
        back = np.int64(legs[leg, 3])
        missed = False
        if route_int[out, SRC_NIC] >= 0:
            missed = _touch_contexts(out, route_int, context_pairs, context_times, context_len, slots, horizon, now)
        if route_int[back, SRC_NIC] < 0:
            back_missed = False
        elif route_int[back, PAIR] == route_int[out, PAIR] and route_int[back, MIRROR] == out:
            back_missed = missed
        else:
            back_missed = _touch_contexts(back, route_int, context_pairs, context_times, context_len, slots,
                                          horizon, now)
        delays[2 * leg] = _occupy(out, legs[leg, 1], legs[leg, 2], missed, busy, route_links, route_wire,
                                  route_float, route_int, counters, miss_s, miss_factor, now)
        delays[2 * leg + 1] = _occupy(back, legs[leg, 4], legs[leg, 5], back_missed, busy, route_links, route_wire,
                                      route_float, route_int, counters, miss_s, miss_factor, now)
    counters[SENDS] += 2 * n_legs
    n_new = 0
    for leg in range(n_legs):
        n_new = _account(np.int64(legs[leg, 0]), legs[leg, 1], 1, window, route_float, route_int, new_routes, n_new)
        n_new = _account(np.int64(legs[leg, 3]), legs[leg, 4], 1, window, route_float, route_int, new_routes, n_new)
    return n_new


@njit
def account_legs_kernel(legs, count, window, new_routes, route_float, route_int):
    """`MessageModel.account_batch` on arrays: each leg's query then partial, `count` messages each."""
    n_new = 0
    for leg in range(legs.shape[0]):
        n_new = _account(np.int64(legs[leg, 0]), legs[leg, 1], count, window, route_float, route_int, new_routes,
                         n_new)
        n_new = _account(np.int64(legs[leg, 3]), legs[leg, 4], count, window, route_float, route_int, new_routes,
                         n_new)
    return n_new


@njit
def account_one_kernel(rid, nbytes, count, window, new_routes, route_float, route_int):
    """`MessageModel.account` on arrays: 1 when the route started the telemetry window, else 0."""
    return _account(rid, nbytes, count, window, route_float, route_int, new_routes, 0)


@njit
def send_one_kernel(rid, nbytes, probe_s, block_rate, new_routes, busy, route_links, route_wire, route_float,
                    route_int, context_pairs, context_times, context_len, counters, bulk_version, slots, window_s,
                    miss_s, miss_factor, window, now):
    """`MessageModel.send` (without latency) on arrays: (-1, 0) when the route's shares are stale, else (the
    delay, whether the route started the telemetry window)."""
    if route_int[rid, VERSION] != bulk_version or route_float[rid, BLOCK_RATE] != block_rate:
        return -1.0, 0
    missed = False
    if route_int[rid, SRC_NIC] >= 0:
        missed = _touch_contexts(rid, route_int, context_pairs, context_times, context_len, slots, now - window_s,
                                 now)
    delay = _occupy(rid, nbytes, probe_s, missed, busy, route_links, route_wire, route_float, route_int, counters,
                    miss_s, miss_factor, now)
    counters[SENDS] += 1
    return delay, _account(rid, nbytes, 1, window, route_float, route_int, new_routes, 0)


class CompiledRoute(MessageRoute):
    """A `MessageRoute` whose refreshed shares and counters live in its model's arrays (row `rid`)."""

    __slots__ = ("model", "rid")

    def _get(self, column: int, integer: bool = False) -> Any:
        array = self.model.route_int if integer else self.model.route_float
        value = array[self.rid, column]
        return int(value) if integer else float(value)

    def _set(self, column: int, value: float, integer: bool = False) -> None:
        (self.model.route_int if integer else self.model.route_float)[self.rid, column] = value

    # what telemetry and callers read and reset: the arrays' values (MessageRoute's slots go unused)
    sent_bytes = property(lambda self: self._get(SENT_BYTES), lambda self, value: self._set(SENT_BYTES, value))
    window_bytes = property(lambda self: self._get(WINDOW_BYTES), lambda self, value: self._set(WINDOW_BYTES, value))
    sent_count = property(lambda self: self._get(SENT_COUNT, True), lambda self, value: self._set(SENT_COUNT, value, True))
    window = property(lambda self: self._get(WINDOW, True), lambda self, value: self._set(WINDOW, value, True))
    version = property(lambda self: self._get(VERSION, True))
    rate_Bps = property(lambda self: self._get(RATE))
    single_block_Bps = property(lambda self: self._get(BLOCK_RATE))

    @property
    def link_wire(self) -> tuple[tuple[int, float], ...]:
        wire = self.model.route_wire[self.rid]
        return tuple((link, float(wire[index])) for index, link in enumerate(self.links))


class LegBatch:
    """A requester event's legs as `CompiledMessageModel.send_batch` takes them (`pack_legs`): one row per leg
    and the scratch arrays the kernel writes (reused: the batch is kept while the event's groups hold)."""

    __slots__ = ("legs", "delays", "new_routes")

    def __init__(self, legs: np.ndarray) -> None:
        self.legs = legs
        self.delays = np.empty(2 * len(legs))
        self.new_routes = np.empty(2 * len(legs), dtype=np.int64)


class CompiledMessageModel(MessageModel):
    """`MessageModel` with its state in arrays and its per-message work in numba kernels (module docstring).

    Contract: every public method returns what `MessageModel`'s does, to the bit, and leaves the same state
    (link clocks `busy`, NIC contexts, each route's counters and telemetry windows)."""

    def __init__(self, params: MessageModelParams | None = None) -> None:
        self.counters = np.zeros(2, dtype=np.int64)
        self.route_list: list[CompiledRoute] = []
        super().__init__(params)
        width = 8
        self.route_links = np.zeros((16, width), dtype=np.int64)
        self.route_wire = np.zeros((16, width))
        self.route_float = np.zeros((16, 5))
        self.route_int = np.zeros((16, 8), dtype=np.int64)
        slots = self.params.nic_context_slots
        self.context_pairs = np.zeros((4, slots + 2), dtype=np.int64)
        self.context_times = np.zeros((4, slots + 2))
        self.context_len = np.zeros(4, dtype=np.int64)
        self._scratch = np.empty(1, dtype=np.int64)

    # counters and link clocks as `MessageModel` exposes them
    misses = property(lambda self: int(self.counters[MISSES]),
                      lambda self, value: self.counters.__setitem__(MISSES, value))
    sends = property(lambda self: int(self.counters[SENDS]),
                     lambda self, value: self.counters.__setitem__(SENDS, value))

    @property
    def busy(self) -> list[float]:
        """Per link: when its message FIFO drains (a copy of the clocks)."""
        return self.link_clocks.tolist()

    @busy.setter
    def busy(self, clocks: Sequence[float]) -> None:
        self.link_clocks = np.array(clocks, dtype=float)

    def attach(self, engine: Any) -> None:
        super().attach(engine)
        self.telemetry.route_windows = self     # its routes' window bytes are read and reset here, in one go
        self._slots_i, self._window_f = int(self.params.nic_context_slots), float(self.params.nic_active_window_s)
        self._miss_f, self._factor_f = float(self.params.nic_miss_s), float(self.params.nic_miss_rate_factor)

    def _nic(self, name: str) -> int:
        nic = super()._nic(name)
        if nic >= len(self.context_len):
            grow = len(self.context_len)
            self.context_pairs = np.concatenate([self.context_pairs, np.zeros_like(self.context_pairs[:grow])])
            self.context_times = np.concatenate([self.context_times, np.zeros_like(self.context_times[:grow])])
            self.context_len = np.concatenate([self.context_len, np.zeros(grow, dtype=np.int64)])
        return nic

    def _build(self, src: str, dst: str) -> CompiledRoute:
        plain = super()._build(src, dst)
        route = CompiledRoute.__new__(CompiledRoute)
        route.model, route.rid = self, len(self.route_list)
        for name in ("src", "dst", "links", "latency_s", "pair", "src_nic", "dst_nic", "spine", "contexts",
                     "contexts_key", "mirror"):
            setattr(route, name, getattr(plain, name))
        self._grow(route)
        self.route_list.append(route)
        row_int = self.route_int[route.rid]
        row_int[VERSION], row_int[WINDOW], row_int[PAIR], row_int[N_LINKS] = -1, -1, route.pair, len(route.links)
        has_contexts = bool(route.contexts)
        row_int[SRC_NIC] = route.src_nic if has_contexts else -1
        row_int[DST_NIC] = route.dst_nic if has_contexts else -1
        row_int[MIRROR] = -1
        if route.mirror is not None:        # the reverse route touches the same NICs for the same queue pair
            reverse = self.routes[(dst, src)]
            row_int[MIRROR] = reverse.rid
            self.route_int[reverse.rid, MIRROR] = route.rid
            reverse.mirror = route.contexts_key
        self.route_links[route.rid, :len(route.links)] = route.links
        self.route_float[route.rid] = (np.inf, -1.0, 0.0, 0.0, route.latency_s)
        return route

    def _grow(self, route: CompiledRoute) -> None:
        """Room for one more route, as wide as its path."""
        rows, width = self.route_links.shape
        if route.rid >= rows:
            self.route_links = np.concatenate([self.route_links, np.zeros_like(self.route_links)])
            self.route_wire = np.concatenate([self.route_wire, np.zeros_like(self.route_wire)])
            self.route_float = np.concatenate([self.route_float, np.zeros_like(self.route_float)])
            self.route_int = np.concatenate([self.route_int, np.zeros_like(self.route_int)])
        if len(route.links) > width:
            extra = len(route.links) - width
            self.route_links = np.pad(self.route_links, ((0, 0), (0, extra)))
            self.route_wire = np.pad(self.route_wire, ((0, 0), (0, extra)))

    def _refresh(self, route: CompiledRoute, single_block_Bps: float) -> None:   # type: ignore[override]
        """`MessageModel._refresh` into the route's rows."""
        bulk, occupancy = self.bulk, self.params.wire_occupancy
        rate = float(single_block_Bps)
        wire = self.route_wire[route.rid]
        for index, link in enumerate(route.links):
            share = bulk.link_share(link)
            wire[index] = occupancy / share
            if share < rate:
                rate = share
        self.route_float[route.rid, RATE] = rate
        self.route_float[route.rid, BLOCK_RATE] = single_block_Bps
        self.route_int[route.rid, VERSION] = bulk.version

    def window_bytes(self, routes: list[CompiledRoute]) -> list[float]:
        """`RouteWindows.window_bytes`: the routes' bytes in the open telemetry window."""
        return self.route_float[[route.rid for route in routes], WINDOW_BYTES].tolist()

    def reset(self, routes: list[CompiledRoute]) -> None:
        """`RouteWindows.reset`: the routes leave the window (their bytes there start over)."""
        rows = [route.rid for route in routes]
        self.route_float[rows, WINDOW_BYTES] = 0.0
        self.route_int[rows, WINDOW] = -1

    def _window(self, now: float) -> int:
        """The telemetry window a message sent at `now` counts in (windows that ended are closed first)."""
        telemetry = self.telemetry
        if now >= telemetry.window_end:
            telemetry.advance_to(now)
        return telemetry.window_index

    def _listed(self, new_routes: np.ndarray, n_new: int) -> None:
        """Routes that started the window, in the order their messages counted (telemetry sums them in it)."""
        routes = self.route_list
        self.telemetry.message_routes.extend([routes[rid] for rid in new_routes[:n_new].tolist()])

    def send(self, route: CompiledRoute, nbytes: float, t_probe_s: float, single_block_Bps: float,  # type: ignore[override]
             now: float, include_latency: bool = True) -> float:
        window = self._window(now)
        while True:
            delay, started = send_one_kernel(
                route.rid, float(nbytes), float(t_probe_s), float(single_block_Bps), self._scratch, self.link_clocks,
                self.route_links, self.route_wire, self.route_float, self.route_int, self.context_pairs,
                self.context_times, self.context_len, self.counters, self.bulk.version, self._slots_i, self._window_f,
                self._miss_f, self._factor_f, window, float(now))
            if delay >= 0:
                break
            self._refresh(route, single_block_Bps)
        if started:
            self.telemetry.message_routes.append(route)
        return delay + (route.latency_s if include_latency else 0.0)

    def pack_legs(self, legs: Sequence[tuple[Any, float, float, Any, float, float, float]],
                  messages: Sequence[tuple[Any, float]]) -> LegBatch:
        """An event's legs (`send_legs`' form) as one array; `messages` are implied (each leg's two)."""
        rows = [(out.rid, out_bytes, out_probe_s, back.rid, back_bytes, back_probe_s, single_block_Bps)
                for out, out_bytes, out_probe_s, back, back_bytes, back_probe_s, single_block_Bps in legs]
        return LegBatch(np.array(rows, dtype=float).reshape(len(rows), LEG_COLUMNS))

    def send_batch(self, batch: LegBatch, now: float) -> list[float]:
        """`MessageModel.send_batch`: the legs' (query, partial) delays, flat, in one compiled call."""
        window = self._window(now)
        while True:
            n_new = send_legs_kernel(
                batch.legs, batch.delays, batch.new_routes, self.link_clocks, self.route_links, self.route_wire,
                self.route_float, self.route_int, self.context_pairs, self.context_times, self.context_len,
                self.counters, self.bulk.version, self._slots_i, self._window_f, self._miss_f, self._factor_f, window,
                float(now))
            if n_new >= 0:
                break
            self._refresh_stale(batch)
        if n_new:
            self._listed(batch.new_routes, n_new)
        return batch.delays.tolist()

    def _refresh_stale(self, batch: LegBatch) -> None:
        routes, version = self.route_list, self.bulk.version
        for row in batch.legs.tolist():
            for column in (0, 3):
                route = routes[int(row[column])]
                if self.route_int[route.rid, VERSION] != version or self.route_float[route.rid, BLOCK_RATE] != row[6]:
                    self._refresh(route, row[6])

    def account_batch(self, batch: LegBatch, count: int, now: float) -> None:
        """`MessageModel.account_batch`: each leg's two messages, `count` each, in one compiled call."""
        if count <= 0:
            return
        n_new = account_legs_kernel(batch.legs, int(count), self._window(now), batch.new_routes, self.route_float,
                                    self.route_int)
        if n_new:
            self._listed(batch.new_routes, n_new)

    def send_legs(self, legs: Sequence[tuple[Any, float, float, Any, float, float, float]],
                  messages: Sequence[tuple[Any, float]], now: float) -> list[tuple[float, float]]:
        flat = self.send_batch(self.pack_legs(legs, messages), now)
        return list(zip(flat[0::2], flat[1::2]))

    def account_messages(self, messages: Sequence[tuple[Any, float]], count: int, now: float) -> None:
        if count <= 0:
            return
        window = self._window(now)
        for route, nbytes in messages:
            if account_one_kernel(route.rid, float(nbytes), int(count), window, self._scratch, self.route_float,
                                  self.route_int):
                self.telemetry.message_routes.append(route)
