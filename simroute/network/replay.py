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
from typing import ClassVar

import numpy as np

from simroute.errors import ConfigurationError, UnknownNameError
from simroute.network.kernels import compiled_available

INF = math.inf
_SAME = 1e-12        # the engine's bound for "rate unchanged" (summation-order noise), engine._SAME
_EPS = 1e-9          # flows of one group finishing together: the engine's _pop_done tolerance


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
            raise ConfigurationError(f"{n} arrivals but {self.nbytes.shape[0]} sizes / {self.path_ptr.shape[0] - 1} paths",
                                     file=source, field="nbytes")
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


REPLAY_BACKENDS: dict[str, type[ReplayBackend]] = {}


def register_replay_backend(cls: type[ReplayBackend]) -> type[ReplayBackend]:
    REPLAY_BACKENDS[cls.name] = cls
    return cls


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
        rows = np.full((n, width + 1), -1.0)        # the padded link tuple + the cap: one row per flow
        column = np.arange(len(flows.path_links)) - np.repeat(flows.path_ptr[:-1], lengths)
        rows[np.repeat(np.arange(n), lengths), column] = flows.path_links
        rows[:, width] = INF if flows.rate_cap_Bps is None else flows.rate_cap_Bps
        of_flow = np.full(n, -1, dtype=np.int64)
        unique, first, inverse = np.unique(rows[live], axis=0, return_index=True, return_inverse=True)
        # Number groups by first appearance (deterministic and independent of np.unique's sort order).
        order = np.argsort(first, kind="stable")
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        of_flow[live] = rank[inverse.ravel()]
        unique = unique[order]
        group_len = (unique[:, :width] >= 0).sum(1) if width else np.zeros(len(unique), dtype=np.int64)
        link_ptr = np.zeros(len(unique) + 1, dtype=np.int64)
        np.cumsum(group_len, out=link_ptr[1:])
        links = unique[:, :width][unique[:, :width] >= 0].astype(np.int64)   # row-major: path order kept
        flow_ptr = np.zeros(len(unique) + 1, dtype=np.int64)
        np.cumsum(np.bincount(of_flow[live], minlength=len(unique)), out=flow_ptr[1:])
        inc_ptr = np.zeros(n_links + 1, dtype=np.int64)
        np.cumsum(np.bincount(links, minlength=n_links), out=inc_ptr[1:])
        return cls(of_flow, link_ptr, links, unique[:, width].copy(), flow_ptr, inc_ptr, max(width, 1))


@register_replay_backend
class CompiledReplay(ReplayBackend):
    """The whole event loop in numba (`_replay_loop`), calling the engine's solve and commit kernels."""

    name = "numba"

    def run(self, flows: FlowSet, capacity_Bps: np.ndarray, latency_s: np.ndarray) -> ReplayResult:
        if not compiled_available() or _njit is None:
            raise ConfigurationError("replay backend 'numba' needs numba (a core dependency; unset SIMROUTE_NO_NUMBA)",
                                     field="backend")
        t0 = time.perf_counter()
        groups = _Groups.build(flows, len(capacity_Bps))
        owner = np.repeat(np.arange(len(flows)), np.diff(flows.path_ptr))
        path_latency = np.bincount(owner, weights=latency_s[flows.path_links], minlength=len(flows))
        order = np.argsort(flows.arrival_s, kind="stable")
        finish = np.where(groups.of_flow >= 0, INF, flows.arrival_s)   # zero-byte / linkless: at arrival
        counters = _replay_loop(order[groups.of_flow[order] >= 0], flows.arrival_s.astype(float),
                                                flows.nbytes.astype(float), path_latency, groups.of_flow,
                                                groups.link_ptr, groups.links, groups.cap, groups.flow_ptr,
                                                groups.inc_ptr, groups.width, capacity_Bps, finish, _SAME, _EPS)
        events, steps, solves, solved = (int(x) for x in counters)
        return ReplayResult(finish, flows.arrival_s, events, steps, solves, solved, time.perf_counter() - t0,
                            self.name)


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
    solver = "auto"

    def run(self, flows: FlowSet, capacity_Bps: np.ndarray, latency_s: np.ndarray) -> ReplayResult:
        import simpy

        from simroute.network.engine import FlowEngine
        env = simpy.Environment()
        engine = FlowEngine(env, _LinkTable(capacity_Bps, latency_s), keep_records=False, solver=self.solver)
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
        return ReplayResult(finish, flows.arrival_s, engine.flow_events, engine.steps, engine.rerates, engine.rerated_groups, wall, self.name)


@register_replay_backend
class EngineNumpyReplay(EngineReplay):
    """The reference engine with its NumPy solver (no numba anywhere)."""

    name = "engine-numpy"
    solver = "numpy"


# ---- the compiled event loop (numba; defined only where numba imports) -------------------------------------
# State lives in arrays indexed by static group id (groups are known up front), so no slot moves: a group is
# active while it has flows. Per group, its flows' finish work sits in an indexed min-heap segment sized by
# the group's flow count over the whole replay (`_compiled.sift`). Per link, the incidences of its active
# groups sit in a segment sized by the groups that ever use it, so a component search reads only active ones.

try:
    from simroute.network._compiled import commit_rates_numba, fill_groups_numba, sift
    from simroute.network._compiled import njit as _njit
except ImportError:            # no numba: only the engine backends
    _njit = None

if _njit is not None:

    @_njit
    def _push_flow(heap_items, heap_key, heap_pos, base, size, flow, key):
        """Add a flow with finish work `key` to the group heap at heap_items[base:]; returns the new size."""
        items, keys = heap_items[base:], heap_key[base:]
        items[size] = flow
        sift(items, keys, heap_pos, size, size + 1, key)
        return size + 1

    @_njit
    def _pop_flow(heap_items, heap_key, heap_pos, base, size):
        """Remove the group heap's first flow; returns (flow, new size)."""
        items, keys = heap_items[base:], heap_key[base:]
        top = items[0]
        size -= 1
        if size > 0:
            items[0] = items[size]
            sift(items, keys, heap_pos, 0, size, keys[size])
        return top, size

    @_njit
    def _link_incidences(group, on, link_ptr, links, inc_ptr, members, where, size):
        """Add (on=True) or remove a group's incidences in its links' active lists (swap-remove: O(1) each)."""
        for e in range(link_ptr[group], link_ptr[group + 1]):
            link = links[e]
            if on:
                slot = inc_ptr[link] + size[link]
                members[slot] = e
                where[e] = slot
                size[link] += 1
            else:
                last = inc_ptr[link] + size[link] - 1
                moved = members[last]
                members[where[e]] = moved
                where[moved] = where[e]
                size[link] -= 1

    @_njit
    def _component(n_groups, n_links, stamp, comp_groups, comp_links, group_stamp, link_stamp, local,
                   link_ptr, links, inc_ptr, members, inc_group, size):
        """Grow the marked groups and links (comp_groups[:n_groups], comp_links[:n_links]) to their connected
        components; local[link] numbers the links in visit order. Returns (groups, links)."""
        head_group = head_link = 0
        while head_group < n_groups or head_link < n_links:
            while head_group < n_groups:
                group = comp_groups[head_group]
                head_group += 1
                for e in range(link_ptr[group], link_ptr[group + 1]):
                    link = links[e]
                    if link_stamp[link] != stamp:
                        link_stamp[link] = stamp
                        local[link] = n_links
                        comp_links[n_links] = link
                        n_links += 1
            while head_link < n_links:
                link = comp_links[head_link]
                head_link += 1
                for slot in range(inc_ptr[link], inc_ptr[link] + size[link]):
                    group = inc_group[members[slot]]
                    if group_stamp[group] != stamp:
                        group_stamp[group] = stamp
                        comp_groups[n_groups] = group
                        n_groups += 1
        return n_groups, n_links

    @_njit
    def _solve_component(now, n_groups, n_links, comp_groups, comp_links, local, link_ptr, links, capacity, gcap,
                         flows, rate, bn, work, last_t, next_work, due, buf_links, buf_f, buf_cap, same):
        """Max-min over one component with local link ids: the engine's fill and commit kernels on gathered
        columns, scattered back. buf_f rows: flows, cap, rate, work, last_t, next_work, due."""
        width = buf_links.shape[0]
        for c in range(n_groups):
            group = comp_groups[c]
            k = 0
            for e in range(link_ptr[group], link_ptr[group + 1]):
                buf_links[k, c] = local[links[e]]
                k += 1
            for pad in range(k, width):
                buf_links[pad, c] = n_links                     # the local sentinel
            buf_f[0, c], buf_f[1, c], buf_f[2, c] = flows[group], gcap[group], rate[group]
            buf_f[3, c], buf_f[4, c] = work[group], last_t[group]
            buf_f[5, c], buf_f[6, c] = next_work[group], due[group]
        for j in range(n_links):
            buf_cap[j] = capacity[comp_links[j]]
        buf_cap[n_links] = np.inf
        view = buf_links[:, :n_groups]
        new_rate, new_bn = fill_groups_numba(view, buf_f[0, :n_groups], buf_f[1, :n_groups], buf_cap[:n_links + 1])
        local_bn = np.empty(n_groups, dtype=np.int64)
        commit_rates_numba(now, new_rate, new_bn, view, buf_f[2], local_bn, buf_f[3], buf_f[4], buf_f[5], buf_f[6],
                           same, n_links)
        for c in range(n_groups):
            group = comp_groups[c]
            rate[group], work[group], last_t[group], due[group] = buf_f[2, c], buf_f[3, c], buf_f[4, c], buf_f[6, c]
            bn[group] = comp_links[local_bn[c]] if local_bn[c] >= 0 else local_bn[c]

    @_njit
    def _replay_loop(order, arrival, nbytes, path_latency, of_flow, link_ptr, links, gcap, flow_ptr, inc_ptr,
                     width, capacity, finish, same, eps):
        """The event loop: per instant, completions due, arrivals, then a re-solve of the touched components.

        Kept as one loop over steps (what it does per step is in the helpers above). Returns
        [events, steps, solves, solved groups]; writes finish[flow] (last byte + path latency).
        """
        n_groups, n_links = gcap.shape[0], capacity.shape[0]
        flows = np.zeros(n_groups)
        rate, work, last_t = np.zeros(n_groups), np.zeros(n_groups), np.zeros(n_groups)
        next_work, due = np.full(n_groups, np.inf), np.full(n_groups, np.inf)
        bn = np.full(n_groups, -2, dtype=np.int64)
        heap_items = np.empty(flow_ptr[-1], dtype=np.int64)
        heap_key = np.empty(flow_ptr[-1])
        heap_size = np.zeros(n_groups, dtype=np.int64)
        heap_pos = np.empty(arrival.shape[0], dtype=np.int64)
        active = np.empty(n_groups, dtype=np.int64)
        active_at = np.full(n_groups, -1, dtype=np.int64)
        n_active = 0
        inc_group = np.empty(links.shape[0], dtype=np.int64)
        for group in range(n_groups):
            inc_group[link_ptr[group]:link_ptr[group + 1]] = group
        members = np.empty(links.shape[0], dtype=np.int64)
        where = np.empty(links.shape[0], dtype=np.int64)
        size = np.zeros(n_links, dtype=np.int64)
        group_stamp = np.zeros(n_groups, dtype=np.int64)
        link_stamp = np.zeros(n_links, dtype=np.int64)
        local = np.empty(n_links, dtype=np.int64)
        comp_groups = np.empty(n_groups, dtype=np.int64)
        comp_links = np.empty(n_links, dtype=np.int64)
        due_now = np.empty(n_groups, dtype=np.int64)
        buf_links = np.empty((width, n_groups), dtype=np.int64)
        buf_f = np.empty((7, n_groups))
        buf_cap = np.empty(n_links + 1)
        events = steps = solves = solved = 0
        nxt, n_flows = 0, order.shape[0]
        while True:
            t_due = np.inf
            for j in range(n_active):
                if due[active[j]] < t_due:
                    t_due = due[active[j]]
            t_arrive = arrival[order[nxt]] if nxt < n_flows else np.inf
            now = min(t_due, t_arrive)
            if now == np.inf:
                break
            steps += 1
            stamp = steps
            limit = now + 1e-12 * max(1.0, now)
            n_comp = n_comp_links = n_due = 0
            for j in range(n_active):
                if due[active[j]] <= limit:
                    due_now[n_due] = active[j]
                    n_due += 1
            for j in range(n_due):                                    # completions due now
                group = due_now[j]
                if now > last_t[group]:
                    work[group] += rate[group] * (now - last_t[group])
                    last_t[group] = now
                base = flow_ptr[group]
                done = 0
                while heap_size[group] > 0:
                    key = heap_key[base]
                    if done > 0 and key - work[group] > eps * key + 1e-6:
                        break
                    flow, heap_size[group] = _pop_flow(heap_items, heap_key, heap_pos, base, heap_size[group])
                    finish[flow] = now + path_latency[flow]
                    done += 1
                events += done
                flows[group] -= done
                if heap_size[group] == 0:                             # the group is gone: its links seed
                    _link_incidences(group, False, link_ptr, links, inc_ptr, members, where, size)
                    moved = active[n_active - 1]
                    active[active_at[group]] = moved
                    active_at[moved] = active_at[group]
                    active_at[group] = -1
                    n_active -= 1
                    rate[group], work[group], next_work[group], due[group], bn[group] = 0.0, 0.0, np.inf, np.inf, -2
                    for e in range(link_ptr[group], link_ptr[group + 1]):
                        if link_stamp[links[e]] != stamp:
                            link_stamp[links[e]] = stamp
                            local[links[e]] = n_comp_links
                            comp_links[n_comp_links] = links[e]
                            n_comp_links += 1
                else:
                    next_work[group] = heap_key[base]
                    due[group] = now + (next_work[group] - work[group]) / rate[group] if rate[group] > 0 else np.inf
                    group_stamp[group] = stamp
                    comp_groups[n_comp] = group
                    n_comp += 1
            while nxt < n_flows and arrival[order[nxt]] <= now:       # arrivals now
                flow = order[nxt]
                nxt += 1
                group = of_flow[flow]
                if active_at[group] < 0:
                    active[n_active] = group
                    active_at[group] = n_active
                    n_active += 1
                    last_t[group] = now
                    _link_incidences(group, True, link_ptr, links, inc_ptr, members, where, size)
                elif now > last_t[group]:
                    work[group] += rate[group] * (now - last_t[group])
                    last_t[group] = now
                heap_size[group] = _push_flow(heap_items, heap_key, heap_pos, flow_ptr[group], heap_size[group], flow,
                                              work[group] + nbytes[flow])
                flows[group] += 1
                events += 1
                next_work[group] = heap_key[flow_ptr[group]]
                due[group] = now + (next_work[group] - work[group]) / rate[group] if rate[group] > 0 else np.inf
                if group_stamp[group] != stamp:
                    group_stamp[group] = stamp
                    comp_groups[n_comp] = group
                    n_comp += 1
            n_comp, n_comp_links = _component(n_comp, n_comp_links, stamp, comp_groups, comp_links, group_stamp,
                                              link_stamp, local, link_ptr, links, inc_ptr, members, inc_group, size)
            if n_comp:
                solves += 1
                solved += n_comp
                _solve_component(now, n_comp, n_comp_links, comp_groups, comp_links, local, link_ptr, links,
                                 capacity, gcap, flows, rate, bn, work, last_t, next_work, due, buf_links, buf_f,
                                 buf_cap, same)
        return np.array([events, steps, solves, solved], dtype=np.int64)
