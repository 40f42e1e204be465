"""Flow-level network engine on SimPy: max-min fair bulk flows, cheap latency-bound messages.

Bulk flows with an identical link set and cap form a group (one rate). The engine runs in one of two modes,
switched by group count with hysteresis (`arrays_on` / `arrays_off`):
- object mode (few groups): groups are Python objects; a start or finish re-solves the changed groups and
  those bottlenecked on their links over what the others leave (`maxmin.fill`) and grows that set while an
  untouched group loses its bottleneck (SimGrid "lazy" style, refined). At the fixpoint every group has a valid bottleneck, which is
  exactly max-min fairness. Completions sit in one heap with version stamps.
- array mode (many groups): group state lives in columns (links, flows, cap, rate, bottleneck, work clock,
  last update, next finish work, completion time) and, compiled, which groups use each link; a re-rating is
  the compiled incremental re-solve (`_compiled.cascade_numba`: progressive filling in level order over
  the groups whose rate can move) or, once that involves more than `cascade_limit` of the groups, a
  from-scratch solve by the solver backend (`kernels`: numba, or the NumPy reference, which always solves
  in full); a kernel commits the groups whose rate moved and integrates their links' telemetry; the next
  completion is an array reduction. In a dense fabric one start can move a large share of the groups
  (tens of percent at 10k flows on the 1024-GPU fat-tree), which is where the full solve takes over.
Both modes give the max-min rates (tests compare them with the textbook reference). All events of one
timestamp are handled in one step: completions due now, then every start enqueued at that instant.

Tolerance mode (opt-in, `rate_tolerance` > 0): in array mode a group keeps its committed rate while the
exact rate is within that relative distance, so fewer groups are re-keyed; each flow's rate is then within
`rate_tolerance` of its max-min rate and a link may be over-subscribed by at most that fraction; the largest
deviation committed is reported by `tolerance_report()`. In object mode the cascade stops once every
violated bottleneck is within the slack (same bound, not measured).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import simpy
from simpy.events import NORMAL

from simroute.errors import UnknownNameError
from simroute.network.columns import GroupColumns
from simroute.network.hashing import SPORT_MAX, SPORT_MIN
from simroute.network.kernels import SolverBackend, compiled_available, solver_backend
from simroute.network.maxmin import Group, fill
from simroute.network.messages import MessageModel, MessageRoute
from simroute.network.paths import PathService
from simroute.network.routing import (ARK_ELEPHANT_BYTES, ARK_HASH_S, ARK_LOOKUP_S, ROUTING_STRATEGIES, ROUTINGS,
                                     ArkSettings)
from simroute.network.telemetry import FULL_LOAD, Telemetry
from simroute.network.topology import EngineTopology

INF = math.inf
_EPS = 1e-9
_CORE_ABORT = 2          # the online core's status for a cascade past its limit, then a full solve (_online.ST_ABORT)
_SAME = 1e-12            # a full re-solve keeps a group's rate when it moved by less (summation-order noise)

__all__ = ["ARK_HASH_S", "ARK_LOOKUP_S", "FlowEngine", "FlowRecord", "ROUTINGS"]


def _succeed_later(env: simpy.Environment, event: simpy.Event, value: Any, delay: float) -> None:
    """`event.succeed(value)` `delay` seconds from now as ONE queued event (a timeout whose callback
    succeeds it costs two). This is what `simpy.Timeout.__init__` does (simpy 4: `_ok`, `_value`, then
    `schedule`); the event reads as triggered from now on, as a timeout does."""
    event._ok = True
    event._value = value
    env.schedule(event, NORMAL, delay)


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


class _Flow:
    """An active bulk flow (engine-internal)."""

    __slots__ = ("fid", "src", "dst", "nbytes", "start", "links", "spine", "sport", "tag", "event",
                 "latency", "reserved", "cap", "finish_work", "delay", "slot")

    def __init__(self, fid: int, src: str, dst: str, nbytes: float, start: float, links: tuple[int, ...],
                 spine: str | None, sport: int, tag: Any, event: simpy.Event, latency: float,
                 reserved: tuple[int, ...] | None, cap: float) -> None:
        self.fid, self.src, self.dst, self.nbytes, self.start = fid, src, dst, nbytes, start
        self.links, self.spine, self.sport, self.tag, self.event = links, spine, sport, tag, event
        self.latency, self.reserved, self.cap = latency, reserved, cap
        self.finish_work = nbytes        # bytes to go when handed to the online core; the group's work clock at
        #                                  the last byte once in an object-mode group


class FlowEngine:
    """Bulk flows (`transfer`) and latency-bound messages (`message_delay`) over a topology.

    Contract for callers (the simulation layer): `transfer` returns a SimPy event that fires with a
    FlowRecord at the flow's last byte; `message_delay` returns a delay and schedules nothing;
    `path_share(src, dst)` is the rate a new flow would get now. Telemetry is at `engine.telemetry`.
    """

    # Array mode from `arrays_on` groups on, back to object mode below `arrays_off` (class attributes, so
    # tests and benches can move them). Compiled, the incremental re-solve makes array mode cheaper than
    # object mode from a few hundred groups (measured on the 1024-GPU fat-tree closed loop: 1k flows ~2x
    # the events/s, 300 flows even, 100 flows object mode ahead). With the NumPy backend every re-rating is
    # a full solve, so it starts much later.
    arrays_on = 512
    arrays_off = 256
    # Compiled, exact and without a link series, the engine moves from object mode into the online core
    # (`_online.OnlineCore`: one kernel call per step over packed buffers) once `core_on` groups are active,
    # and stays there (array mode is then never used). Below that, a run never imports numba (a small CLI
    # run does not pay ~0.5 s to load the kernels); the core is faster than object mode at every size
    # measured (bench_simgrid.py: 100 flows in flight ~2.5x).
    online_core = True
    core_on = 64
    numpy_arrays_on = 4096
    numpy_arrays_off = 2048
    # Array mode: an incremental re-solve involving more than this fraction of the groups (and more than
    # `cascade_floor`) gives way to a full solve, which costs less per group at that size (measured at 10k
    # flows on the 1024-GPU fat-tree: ~1.4 us per re-solved group against ~0.16 us per group solved in full).
    cascade_limit = 0.1
    cascade_floor = 64

    def __init__(self, env: simpy.Environment, topology: EngineTopology, routing: str = "ecmp", seed: int = 0, *,
                 ark_elephant_bytes: float = ARK_ELEPHANT_BYTES, ark_hash_s: float = ARK_HASH_S,
                 ark_lookup_s: float = ARK_LOOKUP_S, port_search: int = 16384,
                 record_series: bool = False, keep_records: bool = True, rate_tolerance: float = 0.0,
                 solver: str = "auto", telemetry_window_s: float = 1e-3,
                 message_model: MessageModel | None = None) -> None:
        if routing not in ROUTING_STRATEGIES:
            raise UnknownNameError("routing", routing, ROUTINGS)
        self.env, self.topology, self.routing, self.seed = env, topology, routing, int(seed)
        self.paths = PathService(topology, self.seed)     # paths, latency, ECMP, reservations (routing, messages)
        self.ark = ArkSettings(float(ark_elephant_bytes), ark_hash_s + ark_lookup_s, int(port_search))
        self.rate_tolerance = float(rate_tolerance)
        self._slack = max(self.rate_tolerance, _EPS)
        self.strategy = ROUTING_STRATEGIES[routing](self.paths, self.ark)
        self._spine_of = hasattr(topology, "spine_of")
        if solver not in ("auto", "numba", "numpy"):
            raise UnknownNameError("solver", solver, ("auto", "numba", "numpy"))
        self._solver = solver
        self._backend: SolverBackend | None = None
        if solver == "numba":
            self._backend = solver_backend("numba")          # fails now (not mid-run) without numba
        if solver == "numpy" or (solver == "auto" and not compiled_available()):
            self.arrays_on, self.arrays_off = self.numpy_arrays_on, self.numpy_arrays_off
        self._rng = np.random.default_rng(seed)
        self._ports: list[int] = []
        n_links = len(topology.links)
        self.cap: list[float] = [link.capacity_Bps for link in topology.links]
        self.load: list[float] | np.ndarray = [0.0] * n_links   # committed bulk load per link (B/s)
        self.link_n: list[int] = [0] * n_links                   # active bulk flows per link
        self._link_groups: list[set[Group]] = [set() for _ in range(n_links)]
        self._groups: dict[tuple, Group] = {}
        self._heap: list[tuple[float, int, int, Group]] = []
        self._seq = 0
        self._pending: list[_Flow] = []
        self._flush_queued = False
        self._flush = simpy.Event(env)
        self._flush._ok, self._flush._value = True, None
        self._wake_t = self._wake_at = INF
        self._wake_pool: list[simpy.Event] = []
        self._stamp = 0
        self._fid = 0
        # public, read-only to others: moves whenever bulk flows change (a start, a finish, a re-rating), so a
        # cache of link shares keys on it (the message model's routes); a plain attribute: read per message
        self.bulk_version = 0
        self.n_active = 0
        self.rerates = 0                     # solver rounds (fill calls and full solves)
        self.rerated_groups = 0
        self.full_solves = 0
        self.steps = 0                       # engine steps (each: completions due + starts of one instant)
        self.flow_events = 0                 # flow starts + finishes handled in those steps
        self.max_rate_error = 0.0            # tolerance mode: largest relative rate deviation committed
        self.cascade_aborts = 0              # array mode: cascades that reached cascade_limit (full solve then)
        self._columns: GroupColumns | None = None
        self._core: Any = None
        self._core_due = INF
        self._want_core = (self.online_core and solver != "numpy" and compiled_available()
                           and self.rate_tolerance == 0 and not record_series)
        self._capacity_padded = np.array(self.cap + [INF])
        self.telemetry = Telemetry(self, record_series=record_series, keep_records=keep_records,
                                   window_s=telemetry_window_s)
        self.messages = message_model or MessageModel()
        self.messages.attach(self)

    @property
    def backend(self) -> SolverBackend:
        """The solver kernels (resolved on first use: numba is imported only when array mode is reached)."""
        if self._backend is None:
            self._backend = solver_backend(self._solver)
        return self._backend

    @property
    def array_mode(self) -> bool:
        """True while group state lives in columns (array mode or the online core)."""
        return self._columns is not None or self._core is not None

    # ---- bulk flows ---------------------------------------------------------------------------
    def transfer(self, src: str, dst: str, nbytes: float, *, rate_cap_Bps: float | None = None, tag: Any = None,
                 path: Sequence[int] | None = None, path_index: int | None = None) -> simpy.Event:
        """Start a bulk flow now; the event fires at its last byte with a FlowRecord.

        The path is chosen by the routing strategy unless pinned: `path_index` picks one of the topology's
        equal-cost paths (spine choice, modulo their number), `path` gives the link ids outright (for
        comparisons with other simulators). A pinned flow reserves nothing and pays no controller delay.
        """
        topo, env = self.topology, self.env
        src_index, dst_index = topo.index(src), topo.index(dst)
        event = env.event()
        self._fid += 1
        nbytes = float(nbytes)
        sport = self._ports.pop() if self._ports else self._sport()
        reserved, delay = None, 0.0
        if path is not None:
            links = tuple(map(int, path))
            spine = topo.spine_of(links) if self._spine_of else None
        else:
            index = 0
            if path_index is not None:
                index = int(path_index)
            elif nbytes > 0 and topo.n_choices(src_index, dst_index) > 1:
                index, sport, reserved, delay = self.strategy.choose(src_index, dst_index, nbytes, sport)
            links, spine = topo.path_ids(src_index, dst_index, index)
        latency = self.paths.latency_s(links)
        flow = _Flow(self._fid, src, dst, nbytes, env.now, links, spine, sport, tag, event, latency, reserved,
                     INF if rate_cap_Bps is None else float(rate_cap_Bps))
        flow.delay = delay               # the routing controller's time before it enters the network
        if nbytes <= 0 or not links:
            self._complete(flow, env.now + delay)
        elif delay > 0:
            env.timeout(delay).callbacks.append(lambda _e, flow=flow: self._enqueue(flow))
        else:
            self._enqueue(flow)
        return event

    def _sport(self) -> int:
        if not self._ports:
            self._ports = self._rng.integers(SPORT_MIN, SPORT_MAX + 1, size=4096).tolist()
        return self._ports.pop()

    def _enqueue(self, flow: _Flow) -> None:
        self._pending.append(flow)
        if not self._flush_queued and self._wake_at != self.env.now:
            # one flush event per instant, reused (see `_on_flush`); none where a wake-up queued for this
            # instant will take the start anyway
            self._flush_queued = True
            flush = self._flush
            flush.callbacks = [self._on_flush]
            self.env.schedule(flush, NORMAL, 0)

    def _on_flush(self, _event: simpy.Event) -> None:
        """Handle the starts of this instant unless a completion at the same instant already took them. The
        flush is one event object, rescheduled while it is not queued (SimPy pops it, then runs its
        callbacks: it is free again from then on), which saves a Timeout per instant."""
        self._flush_queued = False
        if self._pending:
            self._on_wake()

    def _on_wake_event(self, event: simpy.Event) -> None:
        """A pooled wake-up fired. `_wake_at == env.now` must mean "a wake-up for this instant is still
        queued" (so a start may skip its flush): reset it as soon as one for this instant fires."""
        self._wake_pool.append(event)
        if self.env.now == self._wake_at:
            self._wake_at = INF
        self._on_wake()

    def _on_wake(self, _event: simpy.Event | None = None) -> None:
        now = self.env.now
        if now >= self._wake_t * (1 - 1e-15):
            self._wake_t = INF
        if now >= self.telemetry.window_end:
            self.telemetry.advance_to(now)
        if self._core is not None:
            if self._pending or self._core_due <= now + 1e-12 * max(1.0, now):
                self._step_core(now)
            elif self._core_due < INF:                   # a stale wake-up: nothing to do but wait again
                self._schedule_wake(self._core_due, now)
        elif self._columns is not None:
            self._step_arrays(now)
        else:
            self._step_objects(now)

    def _schedule_wake(self, next_t: float, now: float) -> None:
        """A wake-up at next_t unless one is queued before it. Wake-up events are reused from a pool (one
        event each, as a timeout, without building one per wake-up); `_wake_at` is when the earliest fires."""
        if next_t < self._wake_t:
            self._wake_t = next_t
            delay = max(0.0, next_t - now)
            self._wake_at = now + delay
            pool = self._wake_pool
            if pool:
                event = pool.pop()
            else:
                event = simpy.Event(self.env)
                event._ok, event._value = True, None
            event.callbacks = [self._on_wake_event]
            self.env.schedule(event, NORMAL, delay)

    # ---- shared bookkeeping of one group's membership ----------------------------------------
    def _group_for(self, flow: _Flow, now: float) -> Group:
        key = (flow.links, flow.cap)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = Group(key, flow.links, flow.cap)
            group.last_t = now
            for link in flow.links:
                self._link_groups[link].add(group)
            if self._columns is not None:
                self._columns.add(group)
        return group

    def _links_change(self, links: tuple[int, ...], flows: int, rate: float, now: float) -> None:
        """`flows` flows at `rate` join (or leave, when negative) these links."""
        telemetry = self.telemetry
        telemetry.touch_path(links, now)
        if flows > 0:
            telemetry.joined.update(links)
        load, link_n, delta = self.load, self.link_n, flows * rate
        for link in links:
            load[link] += delta
            link_n[link] += flows

    def _drop_group(self, group: Group) -> None:
        if self._columns is not None:
            self._columns.remove(group)
        del self._groups[group.key]
        for link in group.links:
            members = self._link_groups[link]
            members.discard(group)
            if not members:
                self.load[link] = 0.0
        group.version += 1

    def _pop_done(self, group: Group, work: float) -> list[_Flow]:
        """Flows of the group whose finish work is reached (within float noise of the work clock)."""
        flows = group.flows
        done = [heapq.heappop(flows)[2]]
        while flows and flows[0][0] - work <= _EPS * flows[0][0] + 1e-6:
            done.append(heapq.heappop(flows)[2])
        self.flow_events += len(done)
        return done

    # ---- object mode --------------------------------------------------------------------------
    def _step_objects(self, now: float) -> None:
        """Handle every completion due now and every pending start, then re-rate once."""
        heap, seeds, dirty = self._heap, set(), set()
        limit = now + 1e-12 * max(1.0, now)
        while heap and heap[0][0] <= limit:
            _t, version, _seq, group = heapq.heappop(heap)
            if version != group.version or group.n == 0:
                continue
            self._advance(group, now)
            done = self._pop_done(group, group.work)
            self._links_change(group.links, -len(done), group.rate, now)
            group.n -= len(done)
            self.n_active -= len(done)
            if group.n == 0:
                self._drop_group(group)
                dirty.update(group.links)
                seeds.discard(group)
            else:
                seeds.add(group)
            for flow in done:
                self._complete(flow, now + flow.latency)
        for flow in self._take_pending():
            group = self._group_for(flow, now)
            self._advance(group, now)
            self._join(group, flow, now)
            seeds.add(group)
        if self._want_core and len(self._groups) >= self.core_on:
            self._core_enter(now)
            return
        if len(self._groups) >= self.arrays_on:            # many groups: array mode, starting with a full solve
            self._arrays_build(now)
            self._full_solve(now)
            self._schedule_wake(float(self._columns.due[:len(self._columns.groups)].min()), now)
            return
        if seeds or dirty:
            self._rerate(seeds, dirty, now)
        while heap and heap[0][1] != heap[0][3].version:
            heapq.heappop(heap)
        if len(heap) > 3 * len(self._groups) + 1024:     # drop stale entries
            heap[:] = [entry for entry in heap if entry[1] == entry[3].version]
            heapq.heapify(heap)
        if heap:
            self._schedule_wake(heap[0][0], now)

    def _take_pending(self) -> list[_Flow]:
        pending = self._pending
        self.steps += 1
        self.flow_events += len(pending)
        self._pending = []
        return pending

    def _join(self, group: Group, flow: _Flow, now: float) -> None:
        """Add a started flow to its group (work clock already advanced to now)."""
        flow.finish_work = group.work + flow.nbytes
        group.seq += 1
        heapq.heappush(group.flows, (flow.finish_work, group.seq, flow))
        group.n += 1
        self.n_active += 1
        self._links_change(group.links, 1, group.rate, now)
        if flow.spine is not None:
            self.telemetry.spine_change(flow.spine, 1, now)

    @staticmethod
    def _advance(group: Group, now: float) -> None:
        if now > group.last_t:
            group.work += group.rate * (now - group.last_t)
            group.last_t = now

    def _rerate(self, seeds: set[Group], dirty: set[int], now: float) -> None:
        """Re-solve the changed groups; grow the set while an untouched group loses its bottleneck.

        One loop (solve, then check the links whose share moved) kept together: splitting it would pass
        the tentative state between functions on every round.
        """
        self._stamp += 1
        stamp = self._stamp
        self.bulk_version += 1
        solving = [group for group in seeds if group.n > 0]
        check = set(dirty)
        for group in solving:
            group.mark = stamp
            group.tent_rate, group.tent_bn = group.rate, group.bn
            check.update(group.links)
        cap, link_groups, slack = self.cap, self._link_groups, self._slack
        # Groups bottlenecked on a link a seed or a dropped group uses are the likeliest to move: solving them
        # in the first round saves a fill round most of the time (solving more groups is always exact).
        for link in check:
            for group in link_groups[link]:
                if group.bn == link and group.mark != stamp:
                    group.mark = stamp
                    group.tent_rate, group.tent_bn = group.rate, group.bn
                    solving.append(group)
        while True:
            level = fill(solving, cap, self.load) if solving else {}
            self.rerates += 1
            for group in solving:
                if group.tent_rate != group.new_rate or group.tent_bn != group.new_bn:
                    group.tent_rate, group.tent_bn = group.new_rate, group.new_bn
                    check.update(group.links)
            grow: list[Group] = []
            for link in check:
                members = link_groups[link]
                if not members:
                    continue
                total = top = 0.0
                for group in members:
                    rate = group.new_rate if group.mark == stamp else group.rate
                    total += rate * group.n
                    if rate > top:
                        top = rate
                full = total >= cap[link] * (1 - slack)
                link_level = level.get(link)
                for group in members:
                    if group.mark == stamp:
                        continue
                    if (group.bn == link and (not full or group.rate < top * (1 - slack))) or \
                            (full and link_level is not None and group.rate > link_level * (1 + slack) + 1e-6):
                        group.mark = stamp
                        grow.append(group)
            if not grow:
                break
            check = set()
            for group in grow:
                group.tent_rate, group.tent_bn = group.rate, group.bn
            solving.extend(grow)
        self._commit_objects(solving, seeds, now)

    def _commit_objects(self, solved: list[Group], seeds: set[Group], now: float) -> None:
        self.rerated_groups += len(solved)
        touch_path, heap, load = self.telemetry.touch_path, self._heap, self.load
        for group in solved:
            fresh = group.new_rate
            group.bn = group.new_bn
            changed = fresh != group.rate
            if changed:
                self._advance(group, now)
                delta = (fresh - group.rate) * group.n
                touch_path(group.links, now)
                for link in group.links:
                    load[link] += delta
                group.rate = fresh
            if group.flows and (changed or group in seeds):
                group.version += 1
                self._seq += 1
                if fresh > 0:
                    heapq.heappush(heap, (now + (group.flows[0][0] - group.work) / fresh, group.version,
                                          self._seq, group))

    # ---- the online core -----------------------------------------------------------------------
    def _core_enter(self, now: float) -> None:
        """Move from object mode into the online core: links integrated up to now, every active flow handed
        to the core with its bytes to go, then one step solves them all (from scratch). Link load, flow
        counts and the telemetry clocks become views of the core's buffers."""
        from simroute.network._online import OnlineCore
        self.telemetry.flush(now)
        flows = []
        for group in self._groups.values():
            self._advance(group, now)
            for finish_work, _seq, flow in sorted(group.flows):
                flow.finish_work = max(finish_work - group.work, 0.0)
                flows.append(flow)
        self._groups.clear()
        for members in self._link_groups:
            members.clear()
        self._heap.clear()
        self._wake_t = INF
        self._core = OnlineCore(self.cap, cascade_limit=self.cascade_limit, cascade_floor=self.cascade_floor,
                                same=_SAME, full=FULL_LOAD, on_relayout=self._core_views)
        self._core_views()
        self._core_run(now, flows)

    def _core_views(self) -> None:
        """Take the views of the core's link fields (again after it grew its buffers)."""
        core, n_links = self._core, len(self.cap)
        self.load = core.field("float", "l_load")                  # + the sentinel's slot (never read)
        self.link_n = core.field("int", "l_n")[:n_links]
        self.telemetry.bind_arrays(core.field("float", "l_bytes")[:n_links], core.field("float", "l_sat")[:n_links],
                                   core.field("float", "l_t")[:n_links])

    def _step_core(self, now: float) -> None:
        """Starts of this instant and completions due, in one kernel call; then the finished flows' events."""
        pending = self._pending
        self.steps += 1
        if pending:
            self._pending = []
            self.flow_events += len(pending)
            self.n_active += len(pending)
            spine_change = self.telemetry.spine_change
            for flow in pending:
                if flow.spine is not None:
                    spine_change(flow.spine, 1, now)
        self._core_run(now, pending)

    def _core_run(self, now: float, starts: list[_Flow]) -> None:
        status, done, next_due, solved = self._core.run(now, starts)
        self._core_due = next_due
        if status > 0:
            self.rerates += 1
            self.bulk_version += 1
            self.rerated_groups += solved
            if status == _CORE_ABORT:
                self.cascade_aborts += 1
                self.full_solves += 1
        if done:
            self.flow_events += len(done)
            self.n_active -= len(done)
            for flow in done:
                self._complete(flow, now + flow.latency)
        if next_due < INF:
            self._schedule_wake(next_due, now)

    # ---- array mode ---------------------------------------------------------------------------
    def _step_arrays(self, now: float) -> None:
        """Completions due now (array reduction), pending starts, one full solve, commit by kernel."""
        columns = self._columns
        assert columns is not None
        limit = now + 1e-12 * max(1.0, now)
        count = len(columns.groups)
        due = columns.due[:count]
        finishing = count > 0 and due.min() <= limit
        if not finishing and not self._pending:          # a stale wake-up: nothing changed, nothing to solve
            if count:
                self._schedule_wake(float(due.min()), now)
            return
        seeds: list[Group] = []
        dirty: list[int] = []
        if finishing:
            for slot in sorted(np.flatnonzero(due <= limit).tolist(), reverse=True):
                group = columns.groups[slot]
                self._finish_slot(group, now)
                if group.n:
                    seeds.append(group)
                else:
                    dirty.extend(group.links)
        for flow in self._take_pending():
            group = self._group_for(flow, now)
            self._advance_slot(group.slot, now)
            group.work = float(columns.work[group.slot])
            group.rate = float(columns.rate[group.slot])
            self._join(group, flow, now)
            self._refresh_slot(group, now)
            seeds.append(group)
        if len(self._groups) < self.arrays_off:
            self._arrays_drop(now)
            if self._groups:
                self._rerate(set(self._groups.values()), set(), now)
                self._reschedule_all(now)
            return
        if not self._cascade(now, seeds, dirty):
            self._full_solve(now)
        count = len(columns.groups)
        if count:
            self._schedule_wake(float(columns.due[:count].min()), now)

    def _advance_slot(self, slot: int, now: float) -> None:
        columns = self._columns
        elapsed = now - columns.last_t[slot]
        if elapsed > 0:
            columns.work[slot] += columns.rate[slot] * elapsed
            columns.last_t[slot] = now

    def _refresh_slot(self, group: Group, now: float) -> None:
        """Keep a group's flow count, next finish and completion time in its column after a change."""
        columns, slot = self._columns, group.slot
        columns.flows[slot] = group.n
        columns.next_work[slot] = next_work = group.flows[0][0]
        rate = columns.rate[slot]
        columns.due[slot] = now + (next_work - columns.work[slot]) / rate if rate > 0 else INF

    def _finish_slot(self, group: Group, now: float) -> None:
        columns, slot = self._columns, group.slot
        self._advance_slot(slot, now)
        done = self._pop_done(group, float(columns.work[slot]))
        rate = float(columns.rate[slot])
        self._links_change(group.links, -len(done), rate, now)
        group.n -= len(done)
        self.n_active -= len(done)
        if group.n == 0:
            self._drop_group(group)
        else:
            self._refresh_slot(group, now)
        for flow in done:
            self._complete(flow, now + flow.latency)

    def _cascade(self, now: float, seeds: list[Group], dirty: list[int]) -> bool:
        """Re-solve incrementally (the backend's cascade: only groups whose rate can move); False when there
        is no cascade kernel, in tolerance mode, or when it reaches `cascade_limit` of the groups."""
        columns = self._columns
        backend = self.backend
        count = len(columns.groups)
        if backend.cascade is None or self.rate_tolerance > 0 or count == 0:
            return False
        slots = np.array([group.slot for group in seeds if group.slot >= 0], dtype=np.int64)
        limit = max(self.cascade_floor, int(self.cascade_limit * count))
        ok, solved, rate, bn = backend.cascade(
            slots, np.array(dirty, dtype=np.int64), columns.links[:, :count], columns.flows[:count],
            columns.cap[:count], columns.rate[:count], columns.bn[:count], self._capacity_padded, self.load,
            columns.member, columns.deg, limit, _SAME, *columns.cascade_scratch())
        if not ok:
            self.cascade_aborts += 1
            return False
        self.rerates += 1
        self.bulk_version += 1
        self.rerated_groups += len(solved)
        self._commit_slots(now, solved, rate, bn, _SAME)
        return True

    def _full_solve(self, now: float) -> None:
        columns = self._columns
        count = len(columns.groups)
        self.rerates += 1
        self.full_solves += 1
        self.rerated_groups += count
        self.bulk_version += 1
        if count == 0:
            return
        rate, bn = self.backend.fill_groups(columns.links[:, :count], columns.flows[:count], columns.cap[:count],
                                           self._capacity_padded)
        self._commit_slots(now, np.arange(count, dtype=np.int64), rate, bn, max(_SAME, self.rate_tolerance))
        if self.rate_tolerance > 0:
            with np.errstate(divide="ignore", invalid="ignore"):
                error = np.abs(columns.rate[:count] - rate) / rate
            worst = float(np.nanmax(error, initial=0.0))
            self.max_rate_error = max(self.max_rate_error, worst)

    def _commit_slots(self, now: float, slots: np.ndarray, rate: np.ndarray, bn: np.ndarray, same: float) -> None:
        """Commit re-solved groups by kernel: work clocks, rates, completion times, link load, and the
        telemetry of the links whose load moves (integrated in the same pass, in its arrays)."""
        columns, telemetry = self._columns, self.telemetry
        touched, starts, loads = self.backend.commit_slots(
            now, slots, rate, bn, columns.links, columns.flows, columns.rate, columns.bn, columns.work,
            columns.last_t, columns.next_work, columns.due, self.load, telemetry._cap, telemetry._bytes,
            telemetry._saturated, telemetry._link_t, same, FULL_LOAD)
        if telemetry.record_series and touched.size:
            telemetry.record_intervals(touched, starts, loads, now)

    def _arrays_build(self, now: float) -> None:
        """Enter array mode: group state moves into columns, the heap is dropped."""
        groups = list(self._groups.values())
        width = max([len(group.links) for group in groups] + [1])
        columns = GroupColumns(len(self.cap), max(1024, 2 * len(groups)), width, self.backend)
        for group in groups:
            self._advance(group, now)
            columns.add(group)
        self._columns = columns
        self.load = np.array(list(self.load) + [0.0])      # + the sentinel's slot (never read)
        self.telemetry.set_array_mode(True)
        self._heap.clear()
        self._wake_t = INF

    def _arrays_drop(self, now: float) -> None:
        """Back to object mode: columns written into the group objects, the load becomes a list again."""
        columns = self._columns
        for slot in range(len(columns.groups)):
            self._advance_slot(slot, now)
        columns.write_back()
        self._columns = None
        self.load = self.load[:-1].tolist()
        self.telemetry.set_array_mode(False)

    def _reschedule_all(self, now: float) -> None:
        heap = self._heap
        heap.clear()
        for group in self._groups.values():
            group.version += 1
            self._seq += 1
            if group.rate > 0 and group.flows:
                heap.append((now + (group.flows[0][0] - group.work) / group.rate, group.version, self._seq, group))
        heapq.heapify(heap)
        self._wake_t = INF
        if heap:
            self._schedule_wake(heap[0][0], now)

    def _complete(self, flow: _Flow, at: float) -> None:
        if flow.reserved is not None:
            self.paths.release(flow.reserved)
        if flow.spine is not None and flow.links and flow.nbytes > 0:
            self.telemetry.spine_change(flow.spine, -1, self.env.now)
        record = FlowRecord(flow.fid, flow.src, flow.dst, flow.nbytes, flow.start, at, flow.links, flow.spine,
                            flow.sport, flow.tag, flow.cap, flow.delay)
        self.telemetry.flow_done(record)
        delay = at - self.env.now
        if delay > 0:
            _succeed_later(self.env, flow.event, record, delay)
        else:
            flow.event.succeed(record)

    # ---- inspection ---------------------------------------------------------------------------
    def flow_rates(self) -> dict[int, float]:
        """Current rate of every active flow (fid -> B/s)."""
        columns = self._columns
        out: dict[int, float] = {}
        if self._core is not None:
            rates, owner = self._core.field("float", "g_rate"), self._core.field("int", "f_group")
            return {flow.fid: float(rates[owner[flow.slot]]) for flow in self._core.flows if flow is not None}
        for group in self._groups.values():
            rate = group.rate if columns is None else float(columns.rate[group.slot])
            for _work, _seq, flow in group.flows:
                out[flow.fid] = rate
        return out

    def active_flows(self) -> list[tuple[int, tuple[int, ...], float]]:
        """(fid, link ids, cap) of every active flow: enough to recompute max-min from scratch."""
        if self._core is not None:
            return [(flow.fid, flow.links, flow.cap) for flow in self._core.flows if flow is not None]
        return [(flow.fid, group.links, group.cap) for group in self._groups.values()
                for _work, _seq, flow in group.flows]

    def spine_counts(self) -> dict[str, int]:
        return dict(self.telemetry.spine_active)

    def tolerance_report(self) -> dict[str, float]:
        """The tolerance mode's bound and the largest relative rate deviation it committed (array mode)."""
        return {"rate_tolerance": self.rate_tolerance, "max_rate_error": self.max_rate_error}

    def link_share(self, link: int) -> float:
        """Bytes/s a new flow would get on one link now: what bulk flows leave, or a fair share among them."""
        cap = self.cap[link]
        flows = self.link_n[link]
        if not flows:
            return cap
        return max(cap - float(self.load[link]), cap / (flows + 1))

    def path_share(self, src: str, dst: str, path_index: int = 0) -> float:
        """Bytes/s a new flow src -> dst would get now on its `path_index`-th equal-cost path: the least
        `link_share` over its links (inf for a path with no link). Live link state for adaptive policies."""
        topo = self.topology
        links, _spine = topo.path_ids(topo.index(src), topo.index(dst), path_index)
        share = INF
        for link in links:
            value = self.link_share(link)
            if value < share:
                share = value
        return share

    # ---- latency-bound messages ---------------------------------------------------------------
    def message_route(self, src: str, dst: str) -> MessageRoute:
        """The cached message route src -> dst (one ECMP path per pair, hashed once); pass it to
        `send_message` to skip the per-message lookup."""
        return self.messages.route(src, dst)

    def message_delay(self, src: str, dst: str, nbytes: float, *, t_probe_s: float, single_block_Bps: float,
                      now: float | None = None, include_latency: bool = True) -> float:
        """Delay of a routed ~KB message: probe + NIC queueing + bytes over min(single block, fair share).

        No re-rating and no event: the caller yields env.timeout(delay). See `MessageModel`.
        """
        return self.messages.delay(src, dst, nbytes, t_probe_s, single_block_Bps,
                                   self.env.now if now is None else now, include_latency)

    def send_message(self, route: MessageRoute, nbytes: float, *, t_probe_s: float, single_block_Bps: float,
                     now: float | None = None, include_latency: bool = True) -> float:
        """`message_delay` over a route from `message_route` (the cheapest call per message)."""
        return self.messages.send(route, nbytes, t_probe_s, single_block_Bps,
                                  self.env.now if now is None else now, include_latency)

    @property
    def message_bytes(self) -> float:
        """Bytes of every latency-bound message sent so far."""
        return self.messages.total_bytes()

    @property
    def reserved(self) -> tuple[int, ...]:
        """Routing reservations per link (`paths.reservations`)."""
        return self.paths.reservations
