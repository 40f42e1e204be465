"""Flow-level network engine on SimPy: max-min fair bulk flows, cheap latency-bound messages.

This module is the event-facing side: `transfer` (path choice through the routing strategy and the path
service, the controller's delay), the queue of starts, one step per instant (all completions due now, then
every start enqueued at that instant), the wake-up events, and a flow's completion (its `FlowRecord`, its event,
its reservation released). How rates stay max-min fair between steps is a solver's (simroute/network/solvers/):
bulk flows with an identical link set and cap form a group (one rate), and the engine runs
- object mode (`SolverMode.OBJECTS`, few groups: incremental progressive filling over group objects),
- array mode (`SolverMode.ARRAYS`, from `arrays_on` groups on, back below `arrays_off`: group columns re-solved
  by the backend's kernels, numba or the NumPy reference),
- or, compiled, exact and without a link series, the online core (`SolverMode.ONLINE`, from `core_on` groups
  on, for good).
A solver asks for the hand-over; `mode=` pins one solver for the whole run. All modes give the max-min rates
(tests compare them with the textbook reference). The solvers share `engine.bulk` (`BulkState`: per-link load
and flow counts, the groups, the bulk version the message model keys on, the counters).

Tolerance mode (opt-in, `rate_tolerance` > 0): in array mode a group keeps its committed rate while the
exact rate is within that relative distance, so fewer groups are re-keyed; each flow's rate is then within
`rate_tolerance` of its max-min rate and a link may be over-subscribed by at most that fraction; the largest
deviation committed is reported by `tolerance_report()`. In object mode the cascade stops once every
violated bottleneck is within the slack (same bound, not measured).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any, ClassVar

import numpy as np
import simpy
from simpy.events import NORMAL

from simroute.errors import ConfigurationError, UnknownNameError
from simroute.network.bulk import BulkState
from simroute.network.flows import EPS, INF, ActiveFlow, FlowRecord
from simroute.network.hashing import SPORT_MAX, SPORT_MIN
from simroute.network.kernels import SolverBackend, compiled_available, solver_backend
from simroute.network.messages import MessageModel, MessageRoute
from simroute.network.paths import PathService
from simroute.network.routing import (ARK_ELEPHANT_BYTES, ARK_HASH_S, ARK_LOOKUP_S, ROUTING_STRATEGIES, ROUTINGS,
                                     ArkSettings)
from simroute.network.solvers import SOLVERS, Solver, SolverMode, SolverSettings, solver_class
from simroute.network.telemetry import Telemetry
from simroute.network.topology import EngineTopology

BACKENDS = ("auto", "numba", "numpy")

__all__ = ["ARK_HASH_S", "ARK_LOOKUP_S", "BACKENDS", "FlowEngine", "FlowRecord", "ROUTINGS", "SolverMode"]


def _succeed_later(env: simpy.Environment, event: simpy.Event, value: Any, delay: float) -> None:
    """`event.succeed(value)` `delay` seconds from now as ONE queued event (a timeout whose callback
    succeeds it costs two). This is what `simpy.Timeout.__init__` does (simpy 4: `_ok`, `_value`, then
    `schedule`); the event reads as triggered from now on, as a timeout does."""
    event._ok = True
    event._value = value
    env.schedule(event, NORMAL, delay)


class FlowEngine:
    """Bulk flows (`transfer`) and latency-bound messages (`message_delay`) over a topology.

    Contract for callers (the simulation layer): `transfer` returns a SimPy event that fires with a
    FlowRecord at the flow's last byte; `message_delay` returns a delay and schedules nothing;
    `path_share(src, dst)` is the rate a new flow would get now. Telemetry is at `engine.telemetry`.
    `backend` picks the solver kernels ("auto": numba where installed; "numba"; "numpy": the reference);
    `mode` pins one solver (`SolverMode` or its value) instead of switching by group count.
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
    # Message bytes charged against the links' capacity for bulk flows (docs/NETWORK.md, "Messages share the
    # links with bulk flows"). False: messages ride what bulk flows leave and never slow them (the engine
    # before the charge; an ablation for benches and tests).
    message_charge = True
    core_on = 64
    numpy_arrays_on = 4096
    numpy_arrays_off = 2048
    # Array mode: an incremental re-solve involving more than this fraction of the groups (and more than
    # `cascade_floor`) gives way to a full solve, which costs less per group at that size (measured at 10k
    # flows on the 1024-GPU fat-tree: ~1.4 us per re-solved group against ~0.16 us per group solved in full).
    cascade_limit = 0.1
    cascade_floor = 64
    # The solver of each mode (a subclass may swap one, e.g. to check it in a test).
    solvers: ClassVar[Mapping[Enum, type[Solver]]] = SOLVERS

    def __init__(self, env: simpy.Environment, topology: EngineTopology, routing: str = "ecmp", seed: int = 0, *,
                 ark_elephant_bytes: float = ARK_ELEPHANT_BYTES, ark_hash_s: float = ARK_HASH_S,
                 ark_lookup_s: float = ARK_LOOKUP_S, port_search: int = 16384,
                 record_series: bool = False, keep_records: bool = True, rate_tolerance: float = 0.0,
                 backend: str = "auto", mode: Enum | str | None = None, telemetry_window_s: float = 1e-3,
                 message_model: MessageModel | None = None) -> None:
        if routing not in ROUTING_STRATEGIES:
            raise UnknownNameError("routing", routing, ROUTINGS)
        if backend not in BACKENDS:
            raise UnknownNameError("backend", backend, BACKENDS)
        self.env, self.topology, self.routing, self.seed = env, topology, routing, int(seed)
        self.paths = PathService(topology, self.seed)     # paths, latency, ECMP, reservations (routing, messages)
        self.ark = ArkSettings(float(ark_elephant_bytes), ark_hash_s + ark_lookup_s, int(port_search))
        self.rate_tolerance = float(rate_tolerance)
        self.strategy = ROUTING_STRATEGIES[routing](self.paths, self.ark)
        self._spine_of = hasattr(topology, "spine_of")
        self._backend_name = backend
        self._backend: SolverBackend | None = None
        if backend == "numba":
            self._backend = solver_backend("numba")          # fails now (not mid-run) without numba
        if backend == "numpy" or (backend == "auto" and not compiled_available()):
            self.arrays_on, self.arrays_off = self.numpy_arrays_on, self.numpy_arrays_off
        self._rng = np.random.default_rng(seed)
        self._ports: list[int] = []
        self.bulk = BulkState([link.capacity_Bps for link in topology.links])
        self._pending: list[ActiveFlow] = []
        self._flush_queued = False
        self._flush = simpy.Event(env)
        self._flush._ok, self._flush._value = True, None
        self._wake_t = self._wake_at = INF
        self._wake_pool: list[simpy.Event] = []
        self._fid = 0
        want_core = (self.online_core and backend != "numpy" and compiled_available()
                     and self.rate_tolerance == 0 and not record_series)
        self.settings = self._settings(mode, want_core, record_series)
        self.telemetry = Telemetry(self.bulk, env, topology, record_series=record_series, keep_records=keep_records,
                                   window_s=telemetry_window_s)
        # message charges (docs/NETWORK.md, "Messages share the links with bulk flows"): a charge that moves
        # outside a step asks for one at this instant; while messages ride beside bulk flows, a step at the end
        # of each telemetry window charges it
        if self.message_charge:
            self.bulk.on_recapacity = self._request_step
            self.telemetry.on_boundary = self._boundary_wake
        else:
            self.telemetry.charging = False
        self.messages = message_model or MessageModel()
        self.messages.attach(self)
        self._solvers: dict[Enum, Solver] = {}
        self.solver = self._solver(SolverMode.OBJECTS if mode is None else mode)
        if mode is not None:
            self.solver.enter(float(env.now), None)

    def _settings(self, mode: Enum | str | None, want_core: bool, record_series: bool) -> SolverSettings:
        """The solvers' knobs; a pinned mode never hands over (and the online core only where it can run)."""
        slack = max(self.rate_tolerance, EPS)
        if mode is None:
            return SolverSettings(self.arrays_on, self.arrays_off, self.core_on, want_core, self.cascade_limit,
                                  self.cascade_floor, self.rate_tolerance, slack)
        if self._mode_key(mode) is SolverMode.ONLINE and (self._backend_name == "numpy" or record_series
                                                            or self.rate_tolerance > 0):
            raise ConfigurationError("solver mode 'online' is compiled, exact and records no link series: "
                                     "not with backend 'numpy', rate_tolerance > 0 or record_series", field="mode")
        return SolverSettings(INF, 0, INF, False, self.cascade_limit, self.cascade_floor, self.rate_tolerance, slack)

    def _mode_key(self, mode: Enum | str) -> Enum:
        if isinstance(mode, Enum) and mode in self.solvers:
            return mode
        return solver_class(mode).mode             # a value ("arrays"), or an unknown mode refused by name

    def _solver(self, mode: Enum | str) -> Solver:
        """The solver of a mode, made once (it keeps its own state, e.g. object mode's stamps, across visits)."""
        key = self._mode_key(mode)
        solver = self._solvers.get(key)
        if solver is None:
            solver = self._solvers[key] = self.solvers[key](self)
        return solver

    @property
    def backend(self) -> SolverBackend:
        """The solver kernels (resolved on first use: numba is imported only when array mode is reached)."""
        if self._backend is None:
            self._backend = solver_backend(self._backend_name)
        return self._backend

    @property
    def mode(self) -> Enum:
        """The mode of the solver now in charge."""
        return self.solver.mode

    @property
    def array_mode(self) -> bool:
        """True while group state lives in columns (array mode or the online core)."""
        return self.solver.mode is not SolverMode.OBJECTS

    # Read-only views of the bulk state (`engine.bulk`, documented there): the link capacities, load and flow
    # counts, the bulk version, and the counters that benches and tests read.
    BULK_VIEWS: ClassVar[dict[str, str]] = {
        "cap": "cap", "load": "load", "link_n": "link_n", "bulk_version": "version", "n_active": "n_active",
        "rerates": "rerates", "rerated_groups": "rerated_groups", "full_solves": "full_solves", "steps": "steps",
        "flow_events": "flow_events", "max_rate_error": "max_rate_error", "cascade_aborts": "cascade_aborts"}

    def __getattr__(self, name: str) -> Any:
        """Only for names not found otherwise: the `BULK_VIEWS`."""
        field = FlowEngine.BULK_VIEWS.get(name)
        if field is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(self.bulk, field)

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
        flow = ActiveFlow(self._fid, src, dst, nbytes, env.now, links, spine, sport, tag, event, latency, reserved,
                     INF if rate_cap_Bps is None else float(rate_cap_Bps))
        flow.delay = delay               # the routing controller's time before it enters the network
        if nbytes <= 0 or not links:
            self.complete(flow, env.now + delay)
        elif delay > 0:
            env.timeout(delay).callbacks.append(lambda _e, flow=flow: self._enqueue(flow))
        else:
            self._enqueue(flow)
        return event

    def _sport(self) -> int:
        if not self._ports:
            self._ports = self._rng.integers(SPORT_MIN, SPORT_MAX + 1, size=4096).tolist()
        return self._ports.pop()

    def _enqueue(self, flow: ActiveFlow) -> None:
        self._pending.append(flow)
        self._request_step()

    def _request_step(self) -> None:
        """A step at this instant (for the starts enqueued, or a message charge that moved)."""
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
        if self._pending or self.bulk.recapped:
            self._on_wake()

    def _on_wake_event(self, event: simpy.Event) -> None:
        """A pooled wake-up fired. `_wake_at == env.now` must mean "a wake-up for this instant is still
        queued" (so a start may skip its flush): reset it as soon as one for this instant fires."""
        self._wake_pool.append(event)
        if self.env.now == self._wake_at:
            self._wake_at = INF
        self._on_wake()

    def _on_wake(self, _event: simpy.Event | None = None) -> None:
        """One engine step: the solver takes the completions due now and this instant's starts; it may hand
        over to the solver of another mode, which takes the flows in flight and solves them."""
        now = float(self.env.now)      # SimPy's clock starts at int 0: one numba specialisation, not two
        if now >= self._wake_t * (1 - 1e-15):
            self._wake_t = INF
        if now >= self.telemetry.window_end:
            self.telemetry.advance_to(now)
        starts = self._pending
        if starts:
            self._pending = []
            if not self.bulk.n_active:            # the first flow after none: the waiting message charge applies
                self.telemetry.charge_deferred(now)
        handover = self.solver.step(now, starts)
        if handover is not None:
            previous = self.solver
            previous.leave(now)
            self.solver = self._solver(handover)
            self.solver.enter(now, previous)
        bulk = self.bulk
        if bulk.charged and bulk.n_active:        # a charge stands while bulk flows run: re-charge at the boundary
            self.schedule_wake(self.telemetry.window_end, now)

    def _boundary_wake(self, at: float) -> None:
        """A step at `at` (a telemetry window's end: its message rate is charged then)."""
        self.schedule_wake(at, self.env.now)

    def schedule_wake(self, next_t: float, now: float) -> None:
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

    def reset_wake(self) -> None:
        """Forget the earliest queued wake-up (a solver dropped the completions it was for)."""
        self._wake_t = INF

    def complete(self, flow: ActiveFlow, at: float) -> None:
        """A flow's last byte arrives at `at`: its reservation released, its spine uncounted, its record kept and
        its event fired then (called by the solvers)."""
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
        return self.solver.flow_rates()

    def active_flows(self) -> list[tuple[int, tuple[int, ...], float]]:
        """(fid, link ids, cap) of every active flow: enough to recompute max-min from scratch."""
        return self.solver.active_flows()

    def spine_counts(self) -> dict[str, int]:
        return dict(self.telemetry.spine_active)

    def tolerance_report(self) -> dict[str, float]:
        """The tolerance mode's bound and the largest relative rate deviation it committed (array mode)."""
        return {"rate_tolerance": self.rate_tolerance, "max_rate_error": self.bulk.max_rate_error}

    def link_share(self, link: int) -> float:
        """Bytes/s a new flow would get on one link now: what bulk flows leave, or a fair share among them."""
        return self.bulk.link_share(link)

    def path_share(self, src: str, dst: str, path_index: int = 0) -> float:
        """Bytes/s a new flow src -> dst would get now on its `path_index`-th equal-cost path: the least
        `link_share` over its links (inf for a path with no link). Live link state for adaptive policies."""
        topo, link_share = self.topology, self.bulk.link_share
        links, _spine = topo.path_ids(topo.index(src), topo.index(dst), path_index)
        share = INF
        for link in links:
            value = link_share(link)
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
