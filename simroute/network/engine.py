"""Flow-level network engine on SimPy: max-min fair bulk flows, cheap latency-bound messages.

Bulk flows are re-rated incrementally (SimGrid "lazy" style, refined): on a start or finish only the
changed groups are re-solved over what the others leave, and the solution is grown only while some
untouched flow loses its bottleneck (its link is no longer full, or a re-solved flow on its bottleneck
got less than it has). At the fixpoint every flow has a valid bottleneck, which is exactly max-min
fairness, so results equal a full recomputation (tests check this) at a fraction of the cost.
In a dense fabric with many flows one change cascades through a large share of the groups (at 10k flows
on the 1024-GPU fat-tree ~11% of the groups change rate per event): once the grown set passes a budget
(a fraction of all groups) the engine abandons the cascade and re-solves every group from scratch with
`fill_arrays` (NumPy, parallel water-filling) over column arrays of the groups it keeps while there are
many, then commits only the groups whose rate moved. Both paths give the max-min rates.
Completions sit in one heap with version stamps; all events of one timestamp are handled together.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from simroute.errors import UnknownNameError
from simroute.network.hashing import SPORT_MAX, SPORT_MIN, flow_key, mix64
from simroute.network.maxmin import Group, fill, fill_arrays
from simroute.network.telemetry import Telemetry
from simroute.network.topology import Topology

INF = math.inf
ROUTINGS = ("ecmp", "ark", "least-loaded")
ARK_HASH_S = 4.10e-6     # ARK Table 1: controller hash computation
ARK_LOOKUP_S = 0.87e-6   # ARK Table 1: reservation-table lookup
_EPS = 1e-9
_SAME = 1e-12            # a full re-solve keeps a group's rate when it moved by less (summation-order noise)


@dataclass(frozen=True, slots=True)
class FlowRecord:
    """A finished flow. `start` is when transfer() was called, `end` when its last byte arrived."""

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

    @property
    def path(self) -> tuple[int, ...]:
        return self.links

    @property
    def fct(self) -> float:
        return self.end - self.start


class _Flow:
    __slots__ = ("fid", "src", "dst", "nbytes", "start", "links", "spine", "sport", "tag", "event",
                 "latency", "reserved", "cap", "finish_work")

    def __init__(self, **kw: Any) -> None:
        for k, v in kw.items():
            setattr(self, k, v)


class FlowEngine:
    """Bulk flows (transfer) and latency-bound messages (message_delay) over a Topology."""

    # Full vectorised re-solve: group arrays are kept from `arrays_on` groups (dropped below `arrays_off`);
    # an incremental re-rating that grows past `budget_base + groups / budget_div` groups is abandoned for a
    # full solve, and the next `backoff` re-ratings go straight to it. Class attributes, so tests can lower them.
    arrays_on = 1024
    arrays_off = 256
    budget_base = 48
    budget_div = 24
    backoff = 15

    def __init__(self, env: simpy.Environment, topology: Topology, routing: str = "ecmp", seed: int = 0, *,
                 elephant_bytes: float = 16e6, ark_hash_s: float = ARK_HASH_S, ark_lookup_s: float = ARK_LOOKUP_S,
                 port_search: int = 16384, record_series: bool = False, keep_records: bool = True,
                 rate_tolerance: float = 0.0) -> None:
        if routing not in ROUTINGS:
            raise UnknownNameError("routing", routing, ROUTINGS)
        self.env, self.topology, self.routing, self.seed = env, topology, routing, int(seed)
        self.elephant_bytes = float(elephant_bytes)
        self.ark_delay_s = ark_hash_s + ark_lookup_s
        self.port_search = int(port_search)
        self.rate_tolerance = max(float(rate_tolerance), _EPS)
        self._rng = np.random.default_rng(seed)
        self._ports: list[int] = []
        n = len(topology.links)
        self.cap = [l.capacity_Bps for l in topology.links]
        self._lat = [l.latency_s for l in topology.links]
        self.load = [0.0] * n                      # committed bulk load per link (B/s)
        self.link_n = [0] * n                      # active bulk flows per link
        self._lgroups: list[set[Group]] = [set() for _ in range(n)]
        self._groups: dict[tuple, Group] = {}
        self._heap: list[tuple[float, int, int, Group]] = []
        self._seq = 0
        self._pending: list[_Flow] = []
        self._flush_scheduled = False
        self._wake_t = INF
        self._stamp = 0
        self._fid = 0
        self._reserved = [0] * n                   # ARK reservation table (per middle link)
        self._busy = [0.0] * n                     # message virtual clocks (FIFO serialisation)
        self._mcache: dict[tuple[str, str], list] = {}
        self._ver = 0                              # bumps on every bulk change (message share cache)
        self.n_active = 0
        self.rerates = 0                           # solver rounds (fill / fill_arrays calls)
        self.rerated_groups = 0
        self.full_solves = 0
        self._skip_inc = 0                         # re-ratings left that go straight to a full solve
        self._arr = False                          # column arrays of the groups are kept (many groups)
        self._capl = np.array(self.cap + [INF])    # link capacities + the padding sentinel (id n)
        self._slot_g: list[Group] = []
        self.telemetry = Telemetry(self, record_series=record_series, keep_records=keep_records)

    # ---- bulk flows ---------------------------------------------------------------------------
    def transfer(self, src: str, dst: str, nbytes: float, *, rate_cap_Bps: float | None = None,
                 tag: Any = None) -> simpy.Event:
        """Start a bulk flow now; the event fires at its last byte with a FlowRecord."""
        topo, env = self.topology, self.env
        ia, ib = topo.index(src), topo.index(dst)
        ev = env.event()
        self._fid += 1
        nbytes = float(nbytes)
        n_choices = topo.n_choices(ia, ib)
        sport = self._sport()
        delay, reserved, idx = 0.0, None, 0
        if n_choices > 1 and nbytes > 0:
            idx, sport, reserved, delay = self._route(ia, ib, nbytes, sport)
        links, spine = topo.path_ids(ia, ib, idx)
        f = _Flow(fid=self._fid, src=src, dst=dst, nbytes=nbytes, start=env.now, links=links, spine=spine,
                  sport=sport, tag=tag, event=ev, latency=sum(self._lat[l] for l in links), reserved=reserved,
                  cap=INF if rate_cap_Bps is None else float(rate_cap_Bps), finish_work=0.0)
        if nbytes <= 0 or not links:
            self._complete(f, env.now + delay)
        elif delay > 0:
            env.timeout(delay).callbacks.append(lambda _e, f=f: self._enqueue(f))
        else:
            self._enqueue(f)
        return ev

    def _sport(self) -> int:
        if not self._ports:
            self._ports = self._rng.integers(SPORT_MIN, SPORT_MAX + 1, size=4096).tolist()
        return self._ports.pop()

    def _route(self, ia: int, ib: int, nbytes: float, sport: int) -> tuple[int, int, Any, float]:
        topo = self.topology
        if self.routing == "ecmp" or (self.routing == "ark" and nbytes < self.elephant_bytes):
            return topo.ecmp_choice(ia, ib, flow_key(ia, ib, sport), self.seed), sport, None, 0.0
        mids = [m for m, _ in topo.middle(topo.leaf_of(ia), topo.leaf_of(ib))]
        table = self._reserved          # ARK: reserved elephants; least-loaded: every routed, unfinished flow
        scores = [(max(table[l] for l in m), sum(table[l] for l in m)) for m in mids]
        best = min(scores)
        if self.routing == "least-loaded":
            idx = scores.index(best)
            for l in mids[idx]:
                table[l] += 1
            return idx, sport, mids[idx], 0.0
        targets = {i for i, s in enumerate(scores) if s == best}
        span = SPORT_MAX - SPORT_MIN + 1
        idx = topo.ecmp_choice(ia, ib, flow_key(ia, ib, sport), self.seed)
        for k in range(1, self.port_search):
            if idx in targets:
                break
            p = SPORT_MIN + (sport - SPORT_MIN + k) % span
            idx = topo.ecmp_choice(ia, ib, flow_key(ia, ib, p), self.seed)
            if idx in targets:
                sport = p
                break
        for l in mids[idx]:
            self._reserved[l] += 1
        return idx, sport, mids[idx], self.ark_delay_s

    def _enqueue(self, f: _Flow) -> None:
        self._pending.append(f)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.env.timeout(0).callbacks.append(self._on_wake)

    def _on_wake(self, _ev: simpy.Event | None = None) -> None:
        now = self.env.now
        if now >= self._wake_t * (1 - 1e-15):
            self._wake_t = INF
        self._step(now)

    def _step(self, now: float) -> None:
        """Handle every completion due now and every pending start, then re-rate once."""
        heap, seeds, dirty = self._heap, set(), set()
        limit = now + 1e-12 * max(1.0, now)
        tel = self.telemetry
        while heap and heap[0][0] <= limit:
            _t, ver, _s, g = heapq.heappop(heap)
            if ver != g.version or g.n == 0:
                continue
            self._advance(g, now)
            done = [heapq.heappop(g.flows)[2]]
            while g.flows and g.flows[0][0] - g.work <= _EPS * g.flows[0][0] + 1e-6:
                done.append(heapq.heappop(g.flows)[2])
            k = len(done)
            for l in g.links:
                tel.touch(l, now)
                self.load[l] -= k * g.rate
                self.link_n[l] -= k
            g.n -= k
            self.n_active -= k
            if self._arr:
                self._a_n[g.slot] = g.n
            if g.n == 0:
                if self._arr:
                    self._slot_del(g)
                del self._groups[g.key]
                for l in g.links:
                    s = self._lgroups[l]
                    s.discard(g)
                    if not s:
                        self.load[l] = 0.0
                dirty.update(g.links)
                g.version += 1
                seeds.discard(g)
            else:
                seeds.add(g)
            for f in done:
                self._complete(f, now + f.latency)
        if self._pending:
            for f in self._pending:
                key = (f.links, f.cap)
                g = self._groups.get(key)
                if g is None:
                    g = self._groups[key] = Group(key, f.links, f.cap)
                    g.last_t = now
                    for l in f.links:
                        self._lgroups[l].add(g)
                    if self._arr:
                        self._slot_add(g)
                self._advance(g, now)
                f.finish_work = g.work + f.nbytes
                g.seq += 1
                heapq.heappush(g.flows, (f.finish_work, g.seq, f))
                g.n += 1
                if self._arr:
                    self._a_n[g.slot] = g.n
                for l in f.links:
                    tel.touch(l, now)
                    self.load[l] += g.rate
                    self.link_n[l] += 1
                seeds.add(g)
                self.n_active += 1
                if f.spine is not None:
                    tel.spine_change(f.spine, 1, now)
            self._pending.clear()
            self._flush_scheduled = False
        if seeds or dirty:
            self._rerate(seeds, dirty, now)
        while heap and heap[0][1] != heap[0][3].version:
            heapq.heappop(heap)
        if len(heap) > 3 * len(self._groups) + 1024:     # drop stale entries (a full solve re-keys many groups)
            heap[:] = [e for e in heap if e[1] == e[3].version]
            heapq.heapify(heap)
        if heap and heap[0][0] < self._wake_t:
            self._wake_t = heap[0][0]
            self.env.timeout(max(0.0, heap[0][0] - now)).callbacks.append(self._on_wake)

    @staticmethod
    def _advance(g: Group, now: float) -> None:
        if now > g.last_t:
            g.work += g.rate * (now - g.last_t)
            g.last_t = now

    def _rerate(self, seeds: set[Group], dirty: set[int], now: float) -> None:
        """Re-solve the changed groups; grow the set while an untouched group loses its bottleneck."""
        self._stamp += 1
        st = self._stamp
        self._ver += 1
        ng = len(self._groups)
        budget = INF
        if self._arr:
            if ng < self.arrays_off:
                self._arrays_drop()
        elif ng >= self.arrays_on:
            self._arrays_build()
        if self._arr:
            if self._skip_inc > 0:
                self._skip_inc -= 1
                self._full(seeds, now)
                return
            budget = self.budget_base + ng // self.budget_div
        A = [g for g in seeds if g.n > 0]
        if len(A) > budget:
            self._full(seeds, now)
            return
        tent: dict[Group, tuple[float, int]] = {}
        check = set(dirty)
        for g in A:
            g.mark = st
            tent[g] = (g.rate, g.bn)
            check.update(g.links)
        cap, load, lgroups, tol = self.cap, self.load, self._lgroups, self.rate_tolerance
        while True:
            level = fill(A, cap, load) if A else {}
            self.rerates += 1
            for g in A:
                t = (g.new_rate, g.new_bn)
                if tent.get(g) != t:
                    tent[g] = t
                    check.update(g.links)
            grow: list[Group] = []
            for l in check:
                gs = lgroups[l]
                if not gs:
                    continue
                tot = mx = 0.0
                for g in gs:
                    r = g.new_rate if g.mark == st else g.rate
                    tot += r * g.n
                    if r > mx:
                        mx = r
                sat = tot >= cap[l] * (1 - tol)
                lv = level.get(l)
                for g in gs:
                    if g.mark == st:
                        continue
                    if (g.bn == l and (not sat or g.rate < mx * (1 - tol))) or \
                            (sat and lv is not None and g.rate > lv * (1 + tol) + 1e-6):
                        g.mark = st
                        grow.append(g)
            if not grow:
                break
            if len(A) + len(grow) > budget:         # a large cascade: cheaper to re-solve everything at once
                self._skip_inc = self.backoff
                self._full(seeds, now)
                return
            check = set()
            for g in grow:
                tent[g] = (g.rate, g.bn)
            A.extend(grow)
        self.rerated_groups += len(A)
        tel, heap = self.telemetry, self._heap
        arr = self._arr
        for g in A:
            nr = g.new_rate
            g.bn = g.new_bn
            if arr:
                self._a_rate[g.slot] = nr
                self._a_bn[g.slot] = g.bn
            changed = nr != g.rate
            if changed:
                self._advance(g, now)
                d = (nr - g.rate) * g.n
                for l in g.links:
                    tel.touch(l, now)
                    load[l] += d
                g.rate = nr
            if g.flows and (changed or g in seeds):
                g.version += 1
                self._seq += 1
                if nr > 0:
                    heapq.heappush(heap, (now + (g.flows[0][0] - g.work) / nr, g.version, self._seq, g))

    # ---- full vectorised re-solve ------------------------------------------------------------
    def _full(self, seeds: set[Group], now: float) -> None:
        """Re-solve every group with fill_arrays; commit (advance, load, heap) only the groups that moved."""
        self.rerates += 1
        self.full_solves += 1
        gl = self._slot_g
        G = len(gl)
        self.rerated_groups += G
        if G == 0:
            return
        L = len(self.cap)
        links, n = self._a_links[:, :G], self._a_n[:G]
        rate, bn = fill_arrays(links, n, self._a_cap[:G], self._capl)
        old = self._a_rate[:G]
        moved = ~(np.abs(rate - old) <= _SAME * old)
        ch = np.flatnonzero(moved)
        abn = self._a_bn[:G]
        db = np.flatnonzero(bn != abn)
        if db.size:
            for i, b in zip(db.tolist(), bn[db].tolist()):
                gl[i].bn = b
            abn[db] = bn[db]
        heap, seq, push = self._heap, self._seq, heapq.heappush
        if ch.size:
            newr = rate[ch]
            old[ch] = newr                                   # self._a_rate now holds the committed rates
            lk = np.unique(links[:, ch])
            if lk[-1] == L:
                lk = lk[:-1]
            nl = np.bincount(links.ravel(), weights=np.tile(old * n, links.shape[0]), minlength=L + 1)
            tel, load = self.telemetry, self.load
            for l, v in zip(lk.tolist(), nl[lk].tolist()):
                tel.touch(l, now)
                load[l] = v
            for i, r in zip(ch.tolist(), newr.tolist()):
                g = gl[i]
                if now > g.last_t:
                    g.work += g.rate * (now - g.last_t)
                    g.last_t = now
                g.rate = r
                g.version += 1
                seq += 1
                if r > 0:
                    push(heap, (now + (g.flows[0][0] - g.work) / r, g.version, seq, g))
        for g in seeds:                                      # new or finished flows, same rate: re-key
            if g.n > 0 and not moved[g.slot]:
                g.version += 1
                seq += 1
                if g.rate > 0:
                    push(heap, (now + (g.flows[0][0] - g.work) / g.rate, g.version, seq, g))
        self._seq = seq

    def _arrays_build(self) -> None:
        gl = list(self._groups.values())
        L = len(self.cap)
        K = max([len(g.links) for g in gl] + [1])
        size = max(1024, 2 * len(gl))
        self._a_links = np.full((K, size), L, dtype=np.intp)
        if gl:
            self._a_links[:, :len(gl)] = np.array([g.links + (L,) * (K - len(g.links)) for g in gl]).T
        self._a_n = np.zeros(size)
        self._a_cap = np.full(size, INF)
        self._a_rate = np.zeros(size)
        self._a_bn = np.full(size, -2, dtype=np.intp)
        for name, attr in (("_a_n", "n"), ("_a_cap", "cap"), ("_a_rate", "rate"), ("_a_bn", "bn")):
            getattr(self, name)[:len(gl)] = [getattr(g, attr) for g in gl]
        for i, g in enumerate(gl):
            g.slot = i
        self._slot_g = gl
        self._arr = True
        self._skip_inc = 0

    def _arrays_drop(self) -> None:
        for g in self._slot_g:
            g.slot = -1
        self._slot_g = []
        self._a_links = self._a_n = self._a_cap = self._a_rate = self._a_bn = None
        self._arr = False

    def _slot_add(self, g: Group) -> None:
        i, k = len(self._slot_g), len(g.links)
        K, size = self._a_links.shape
        if i == size or k > K:
            L, grow = len(self.cap), (size if i == size else 0)
            a = np.full((max(k, K), size + grow), L, dtype=np.intp)
            a[:K, :size] = self._a_links
            self._a_links = a
            if grow:
                self._a_n = np.concatenate([self._a_n, np.zeros(grow)])
                self._a_cap = np.concatenate([self._a_cap, np.full(grow, INF)])
                self._a_rate = np.concatenate([self._a_rate, np.zeros(grow)])
                self._a_bn = np.concatenate([self._a_bn, np.full(grow, -2, dtype=np.intp)])
        col = self._a_links[:, i]
        col[:k] = g.links
        col[k:] = len(self.cap)
        self._a_n[i] = g.n
        self._a_cap[i] = g.cap
        self._a_rate[i] = g.rate
        self._a_bn[i] = g.bn
        g.slot = i
        self._slot_g.append(g)

    def _slot_del(self, g: Group) -> None:
        i, j = g.slot, len(self._slot_g) - 1
        if i != j:
            h = self._slot_g[j]
            self._slot_g[i] = h
            h.slot = i
            self._a_links[:, i] = self._a_links[:, j]
            for a in (self._a_n, self._a_cap, self._a_rate, self._a_bn):
                a[i] = a[j]
        self._slot_g.pop()
        g.slot = -1

    def _complete(self, f: _Flow, at: float) -> None:
        if f.reserved is not None:
            for l in f.reserved:
                self._reserved[l] -= 1
        if f.spine is not None and f.links and f.nbytes > 0:
            self.telemetry.spine_change(f.spine, -1, self.env.now)
        rec = FlowRecord(f.fid, f.src, f.dst, f.nbytes, f.start, at, f.links, f.spine, f.sport, f.tag)
        self.telemetry.flow_done(rec)
        delay = at - self.env.now
        if delay > 0:
            self.env.timeout(delay).callbacks.append(lambda _e, ev=f.event, r=rec: ev.succeed(r))
        else:
            f.event.succeed(rec)

    # ---- inspection ---------------------------------------------------------------------------
    def flow_rates(self) -> dict[int, float]:
        """Current rate of every active flow (fid -> B/s)."""
        return {f.fid: g.rate for g in self._groups.values() for _w, _s, f in g.flows}

    def active_flows(self) -> list[tuple[int, tuple[int, ...], float]]:
        """(fid, link ids, cap) of every active flow: enough to recompute max-min from scratch."""
        return [(f.fid, g.links, g.cap) for g in self._groups.values() for _w, _s, f in g.flows]

    def spine_counts(self) -> dict[str, int]:
        return dict(self.telemetry.spine_active)

    # ---- latency-bound messages ---------------------------------------------------------------
    def message_delay(self, src: str, dst: str, nbytes: float, *, t_probe_s: float, single_block_Bps: float,
                      now: float | None = None, include_latency: bool = True) -> float:
        """Delay of a routed ~KB message: probe + FIFO queueing + bytes over min(single block, fair share).

        No re-rating and no event: the caller yields env.timeout(delay). Each directed link keeps a
        virtual clock (busy_until) of message serialisation at the share bulk flows leave it.
        """
        if now is None:
            now = self.env.now
        c = self._mcache.get((src, dst))
        if c is None:
            c = self._message_path(src, dst)
        if c[2] != self._ver or c[5] != single_block_Bps:
            self._message_shares(c, single_block_Bps)
        busy = self._busy
        start = now
        for l in c[0]:
            b = busy[l]
            if b > start:
                start = b
        for l, inv in zip(c[0], c[3]):
            busy[l] = start + nbytes * inv
        c[6] += nbytes
        c[7] += 1
        # A measured probe (a signal round trip) already holds the path's propagation: callers that pass one
        # can leave the links' latency out rather than count it twice.
        return start - now + t_probe_s + nbytes / c[4] + (c[1] if include_latency else 0.0)

    def _message_path(self, src: str, dst: str) -> list:
        topo = self.topology
        ia, ib = topo.index(src), topo.index(dst)
        sport = SPORT_MIN + mix64(self.seed ^ (ia << 20) ^ ib) % (SPORT_MAX - SPORT_MIN + 1)
        choice = topo.ecmp_choice(ia, ib, flow_key(ia, ib, sport), self.seed)
        links, _spine = topo.path_ids(ia, ib, choice)
        c = [links, sum(self._lat[l] for l in links), -1, (), INF, None, 0.0, 0]
        self._mcache[(src, dst)] = c
        return c

    def _message_shares(self, c: list, single_block_Bps: float) -> None:
        invs, rate = [], float(single_block_Bps)
        for l in c[0]:
            share = self.cap[l] - self.load[l]
            n = self.link_n[l]
            if n:
                share = max(share, self.cap[l] / (n + 1))
            invs.append(1.0 / share)
            if share < rate:
                rate = share
        c[2], c[3], c[4], c[5] = self._ver, tuple(invs), rate, single_block_Bps
