"""Whole-flow-set max-min replay: a known set of flows with pinned paths, replayed in one compiled loop.

The online `FlowEngine` is driven by SimPy (one Python callback per event), which is what a simulation needs:
flows appear as the simulation decides. When the flow set is known up front (a trace, a comparison with
another simulator, a sweep over fabrics) the whole event loop can run compiled instead: arrivals in time
order, completions, re-solve and work clocks, with no interpreter work per event. `replay` does that and
returns each flow's finish time.

Semantics are the engine's (array mode), so the two agree to float noise (tests/network/test_replay.py):
- flows with an identical link tuple and rate cap form a group with one rate and one work clock (bytes
  delivered per flow since the group formed); a flow ends when the clock reaches its start value + bytes;
- each step handles every completion due at one instant, then every arrival at that instant, then re-solves;
- a re-solve covers the connected components (groups linked through shared links) of the groups that
  changed: max-min rates of disjoint components are independent, so this is the full solve, restricted.
  It calls the engine's own kernels (`_compiled.fill_groups_numba`, `commit_rates_numba`) on the component
  with local link ids, so its cost follows the component, not the fabric's 8k links;
- a flow's finish time is its last byte plus its path's propagation latency (zero-byte or linkless flows
  finish at their arrival, as in the engine).

Backends (`REPLAY_BACKENDS`): `numba` (the compiled loop above) and `engine` (the reference: `FlowEngine` on
a SimPy environment fed the same flows with `transfer(path=...)`); `auto` is numba where it can be imported
(and SIMROUTE_NO_NUMBA is unset), else the engine. To add one: subclass `ReplayBackend`, decorate with
`@register_replay_backend`.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np

from simroute.errors import ConfigurationError, UnknownNameError
from simroute.network.engine import FlowEngine
from simroute.network.flows import EPS, SAME   # the solvers' "finish together", "rate unchanged"
from simroute.network.kernels import compiled_available
from simroute.registry import registry

INF = math.inf


@dataclass(frozen=True)
class FlowSet:
    """Flows to replay: arrival time (s), bytes, path as link ids in CSR form, optional rate cap (B/s, inf = none).

    Flow i uses links `path_links[path_ptr[i]:path_ptr[i + 1]]` (in path order; the order only matters for
    grouping: flows group when their link tuples are equal). Build one with `from_paths`, or directly from
    arrays; `check(n_links)` validates it against a fabric.
    """

    arrival_s: np.ndarray
    nbytes: np.ndarray
    path_ptr: np.ndarray
    path_links: np.ndarray
    rate_cap_Bps: np.ndarray | None = None

    @classmethod
    def from_paths(cls, arrival_s: Sequence[float], nbytes: Sequence[float], paths: Sequence[Sequence[int]],
                   rate_cap_Bps: Sequence[float] | None = None) -> "FlowSet":
        lengths = np.fromiter((len(path) for path in paths), dtype=np.int64, count=len(paths))
        ptr = np.zeros(len(paths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=ptr[1:])
        links = np.fromiter((int(link) for path in paths for link in path), dtype=np.int64, count=int(ptr[-1]))
        caps = None if rate_cap_Bps is None else np.asarray(rate_cap_Bps, dtype=float)
        return cls(np.asarray(arrival_s, dtype=float), np.asarray(nbytes, dtype=float), ptr, links, caps)

    def __len__(self) -> int:
        return len(self.arrival_s)

    def path(self, i: int) -> tuple[int, ...]:
        return tuple(int(link) for link in self.path_links[self.path_ptr[i]:self.path_ptr[i + 1]])

    def check(self, n_links: int, *, source: str | None = None) -> None:
        """Raise ConfigurationError (naming the field and the first bad flow) unless the set is replayable."""
        n = len(self.arrival_s)

        def bad(field: str, mask: np.ndarray, problem: str) -> None:
            hit = np.flatnonzero(mask)
            if hit.size:
                raise ConfigurationError(f"flow {int(hit[0])}: {problem}", file=source, field=field)

        if self.nbytes.shape != (n,) or self.path_ptr.shape != (n + 1,):
            raise ConfigurationError(f"{n} arrivals but {self.nbytes.shape[0]} sizes / "
                                     f"{self.path_ptr.shape[0] - 1} paths", file=source, field="nbytes")
        bad("start_s", ~np.isfinite(self.arrival_s) | (self.arrival_s < 0), "must be finite and >= 0")
        bad("nbytes", ~np.isfinite(self.nbytes) | (self.nbytes < 0), "must be finite and >= 0")
        if self.path_ptr[0] != 0 or self.path_ptr[-1] != len(self.path_links):
            raise ConfigurationError("path offsets must start at 0 and end at the number of link ids",
                                     file=source, field="links")
        bad("links", np.diff(self.path_ptr) < 0, "path offsets must not decrease")
        if self.path_links.size:
            owner = np.repeat(np.arange(n), np.diff(self.path_ptr))
            outside = (self.path_links < 0) | (self.path_links >= n_links)
            if outside.any():
                first = int(np.flatnonzero(outside)[0])
                raise ConfigurationError(f"flow {int(owner[first])}: link id {int(self.path_links[first])} "
                                         f"outside 0..{n_links - 1}", file=source, field="links")
            pairs = owner * n_links + self.path_links          # a path crosses each directed link at most once
            order = np.argsort(pairs, kind="stable")
            again = np.flatnonzero(pairs[order][1:] == pairs[order][:-1])
            if again.size:
                first = int(order[again[0] + 1])
                raise ConfigurationError(f"flow {int(owner[first])}: link id {int(self.path_links[first])} twice "
                                         "in one path", file=source, field="links")
        if self.rate_cap_Bps is not None:
            if self.rate_cap_Bps.shape != (n,):
                raise ConfigurationError(f"{n} flows but {self.rate_cap_Bps.shape[0]} rate caps", file=source,
                                         field="rate_cap_Bps")
            bad("rate_cap_Bps", np.isnan(self.rate_cap_Bps) | (self.rate_cap_Bps <= 0), "must be > 0 (inf: none)")


@dataclass(frozen=True)
class ReplayResult:
    """Per-flow finish times (input order; inf where a flow can never finish) and what the replay did."""

    finish_s: np.ndarray
    arrival_s: np.ndarray
    events: int              # flow starts + finishes handled by the event loop
    steps: int               # instants handled (completions and arrivals of one time together)
    solves: int              # re-solves (one per step that changed something)
    solved_groups: int       # groups re-solved, summed over solves (the component sizes)
    wall_s: float
    backend: str

    @property
    def fct_s(self) -> np.ndarray:
        return self.finish_s - self.arrival_s


def check_fabric(capacity_Bps: np.ndarray, latency_s: np.ndarray | None, source: str | None = None) -> None:
    if capacity_Bps.ndim != 1 or not np.all(np.isfinite(capacity_Bps)) or np.any(capacity_Bps <= 0):
        raise ConfigurationError("link capacities must be finite and > 0", file=source, field="capacity_Bps")
    if latency_s is not None and (latency_s.shape != capacity_Bps.shape or not np.all(np.isfinite(latency_s))
                                  or np.any(latency_s < 0)):
        raise ConfigurationError("one finite latency >= 0 per link", file=source, field="latency_s")


class ReplayBackend(ABC):
    """One way to replay a FlowSet. Contract: `run` returns finish times in input order and its counters;
    flows are validated before it is called. Register subclasses with `@register_replay_backend`."""

    name: ClassVar[str]

    @abstractmethod
    def run(self, flows: FlowSet, capacity_Bps: np.ndarray, latency_s: np.ndarray) -> ReplayResult: ...


REPLAY = registry("replay")      # the one registry of named variants; REPLAY_BACKENDS is its own dict
REPLAY_BACKENDS: dict[str, type[ReplayBackend]] = REPLAY.classes


def register_replay_backend(cls: type[ReplayBackend]) -> type[ReplayBackend]:
    return REPLAY.register(cls.name)(cls)


def replay(flows: FlowSet, capacity_Bps: Sequence[float] | np.ndarray, *,
           latency_s: Sequence[float] | np.ndarray | None = None, backend: str = "auto") -> ReplayResult:
    """Replay `flows` over links of these capacities (B/s) and latencies (s, default 0) under max-min fairness.

    backend: `auto` (numba where available, else `engine`), `numba`, or `engine` (FlowEngine on SimPy, the
    reference). Raises ConfigurationError for a malformed flow set or fabric.
    """
    capacity = np.ascontiguousarray(capacity_Bps, dtype=float)
    latency = None if latency_s is None else np.ascontiguousarray(latency_s, dtype=float)
    check_fabric(capacity, latency)
    flows.check(len(capacity))
    if backend == "auto":
        backend = "numba" if compiled_available() else "engine"
    if backend not in REPLAY_BACKENDS:
        raise UnknownNameError("replay backend", backend, sorted(REPLAY_BACKENDS) + ["auto"])
    return REPLAY_BACKENDS[backend]().run(flows, capacity, np.zeros_like(capacity) if latency is None else latency)


# ---- the compiled backend ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Groups:
    """Static grouping of a flow set: group of each flow, each group's links (CSR) and cap, and the
    incidence lists the loop needs (group-link incidences per link, flows per group)."""

    of_flow: np.ndarray        # group id per flow (-1: zero bytes or no link, finishes at arrival)
    link_ptr: np.ndarray       # group g's links: links[link_ptr[g]:link_ptr[g + 1]]
    links: np.ndarray
    cap: np.ndarray
    flow_ptr: np.ndarray       # heap segment of group g's flows: [flow_ptr[g], flow_ptr[g + 1])
    inc_ptr: np.ndarray        # link l's incidence slots: [inc_ptr[l], inc_ptr[l + 1])
    width: int                 # longest path

    @classmethod
    def build(cls, flows: FlowSet, n_links: int) -> "_Groups":
        n = len(flows)
        lengths = np.diff(flows.path_ptr)
        live = (lengths > 0) & (flows.nbytes > 0)
        width = int(lengths.max(initial=0))
        rows = np.full((n, width + 1), -1, dtype=np.int64)   # the padded link tuple + the cap's bits, per flow
        column = np.arange(len(flows.path_links)) - np.repeat(flows.path_ptr[:-1], lengths)
        rows[np.repeat(np.arange(n), lengths), column] = flows.path_links
        caps = np.full(n, INF) if flows.rate_cap_Bps is None else flows.rate_cap_Bps.astype(float)
        rows[:, width] = caps.view(np.int64)
        live_ids = np.flatnonzero(live)
        keys = rows[live_ids]
        order = np.lexsort(keys.T[::-1]) if len(keys) else np.zeros(0, dtype=np.int64)
        fresh = np.ones(len(order), dtype=bool)               # first row of each run of equal keys
        fresh[1:] = np.any(keys[order[1:]] != keys[order[:-1]], axis=1)
        run = np.cumsum(fresh) - 1                            # run index of each sorted row
        first = np.minimum.reduceat(order, np.flatnonzero(fresh)) if len(order) else order
        # Number groups by first appearance (deterministic, independent of the sort).
        rank = np.empty(len(first), dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(first))
        of_flow = np.full(n, -1, dtype=np.int64)
        of_flow[live_ids[order]] = rank[run]
        unique = keys[np.sort(first)]
        group_len = (unique[:, :width] >= 0).sum(1)
        link_ptr = np.zeros(len(unique) + 1, dtype=np.int64)
        np.cumsum(group_len, out=link_ptr[1:])
        links = unique[:, :width][unique[:, :width] >= 0].astype(np.int64)   # row-major: path order kept
        flow_ptr = np.zeros(len(unique) + 1, dtype=np.int64)
        np.cumsum(np.bincount(of_flow[live], minlength=len(unique)), out=flow_ptr[1:])
        inc_ptr = np.zeros(n_links + 1, dtype=np.int64)
        np.cumsum(np.bincount(links, minlength=n_links), out=inc_ptr[1:])
        return cls(of_flow, link_ptr, links, unique[:, width].copy().view(float), flow_ptr, inc_ptr, max(width, 1))


@lru_cache(maxsize=None)
def _warm_up() -> None:
    """Load (or compile) the loop's machine code once per process on a one-flow set, so `wall_s` is the replay's."""
    flows = FlowSet.from_paths([0.0], [1.0], [(0,)])
    CompiledReplay._run(flows, np.ones(1), np.zeros(1))


@register_replay_backend
class CompiledReplay(ReplayBackend):
    """The whole event loop in numba (`_replay_loop.replay_loop`), calling the engine's solve and commit kernels."""

    name = "numba"
    cascade_from = 256                            # from this many active groups, the engine's cascade first
    cascade_limit = FlowEngine.cascade_limit      # ... which gives up past the engine's limits
    cascade_floor = FlowEngine.cascade_floor

    def run(self, flows: FlowSet, capacity_Bps: np.ndarray, latency_s: np.ndarray) -> ReplayResult:
        if not compiled_available():
            raise ConfigurationError("replay backend 'numba' needs numba (a core dependency; unset SIMROUTE_NO_NUMBA)",
                                     field="backend")
        _warm_up()
        return self._run(flows, capacity_Bps, latency_s)

    @classmethod
    def _run(cls, flows: FlowSet, capacity_Bps: np.ndarray, latency_s: np.ndarray) -> ReplayResult:
        from simroute.network._replay_loop import replay_loop
        t0 = time.perf_counter()
        groups = _Groups.build(flows, len(capacity_Bps))
        owner = np.repeat(np.arange(len(flows)), np.diff(flows.path_ptr))
        path_latency = np.bincount(owner, weights=latency_s[flows.path_links], minlength=len(flows))
        order = np.argsort(flows.arrival_s, kind="stable")
        finish = np.where(groups.of_flow >= 0, INF, flows.arrival_s)   # zero-byte / linkless: at arrival
        n_links = len(capacity_Bps)
        links_mat = np.full((groups.width, len(groups.cap)), n_links, dtype=np.int64)   # the cascade's layout
        lengths = np.diff(groups.link_ptr)
        links_mat[np.arange(len(groups.links)) - np.repeat(groups.link_ptr[:-1], lengths),
                  np.repeat(np.arange(len(groups.cap)), lengths)] = groups.links
        counters = replay_loop(order[groups.of_flow[order] >= 0], flows.arrival_s.astype(float),
                               flows.nbytes.astype(float), path_latency, groups.of_flow, groups.link_ptr,
                               groups.links, links_mat, groups.cap, groups.flow_ptr, groups.inc_ptr, groups.width,
                               capacity_Bps, finish, SAME, EPS, int(cls.cascade_from), float(cls.cascade_limit),
                               int(cls.cascade_floor))
        events, steps, solves, solved = (int(x) for x in counters)
        return ReplayResult(finish, flows.arrival_s, events, steps, solves, solved, time.perf_counter() - t0,
                            cls.name)


# ---- the reference backend --------------------------------------------------------------------------------

class _LinkTable:
    """The smallest EngineTopology: links with capacities and latencies, one endpoint, paths always pinned."""

    def __init__(self, capacity_Bps: np.ndarray, latency_s: np.ndarray) -> None:
        from simroute.network.topology import Link
        self.links = [Link(i, f"n{i}", f"n{i}'", float(cap), float(lat), "replay", "replay")
                      for i, (cap, lat) in enumerate(zip(capacity_Bps, latency_s))]
        self.gpus = ["endpoint"]

    def index(self, name: str) -> int:
        return 0

    def n_choices(self, src_index: int, dst_index: int) -> int:
        return 1

    def path_ids(self, src_index: int, dst_index: int, choice: int = 0) -> tuple[tuple[int, ...], None]:
        return (), None

    def ecmp_choice(self, src_index: int, dst_index: int, flow_key: int, seed: int) -> int:
        return 0


@register_replay_backend
class EngineReplay(ReplayBackend):
    """The reference: the online FlowEngine on a SimPy environment, one `transfer(path=...)` per arrival."""

    name = "engine"
    engine_backend = "auto"

    def run(self, flows: FlowSet, capacity_Bps: np.ndarray, latency_s: np.ndarray) -> ReplayResult:
        import simpy
        env = simpy.Environment()
        engine = FlowEngine(env, _LinkTable(capacity_Bps, latency_s), keep_records=False, backend=self.engine_backend)
        finish = np.full(len(flows), INF)
        arrival = flows.arrival_s.astype(float)
        caps = flows.rate_cap_Bps
        order = np.argsort(arrival, kind="stable").tolist()
        paths = [flows.path(i) for i in range(len(flows))]

        def done(event) -> None:
            record = event.value
            finish[record.tag] = record.end

        def driver():
            for i in order:
                if arrival[i] > env.now:
                    yield env.timeout(arrival[i] - env.now)
                cap = None if caps is None or caps[i] == INF else float(caps[i])
                engine.transfer("endpoint", "endpoint", float(flows.nbytes[i]), path=paths[i], tag=i,
                                rate_cap_Bps=cap).callbacks.append(done)

        env.process(driver())
        t0 = time.perf_counter()
        env.run()
        wall = time.perf_counter() - t0
        return ReplayResult(finish, flows.arrival_s, engine.flow_events, engine.steps, engine.rerates,
                            engine.rerated_groups, wall, self.name)


@register_replay_backend
class EngineNumpyReplay(EngineReplay):
    """The reference engine with its NumPy backend (no numba anywhere)."""

    name = "engine-numpy"
    engine_backend = "numpy"
