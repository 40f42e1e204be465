"""Max-min fair rates by progressive filling.

`maxmin_rates` is the plain textbook reference (used by tests to check the engine's incremental
solver). `fill` is the engine's solver: progressive filling of a subset of flow groups over the
capacity the other groups leave, with a lazy heap of link shares (a link's share never drops
while flows are fixed, so a popped key is a lower bound: re-queue it if it grew, fix its flows if not).
`fill_arrays` solves every group at once with NumPy, for large components (see its docstring).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

INF = math.inf
# A link id as the compiled solver keeps it (simroute.compiled): a Python int it never unboxes. Typed `int`, mypyc
# would unbox each id read from a path and box it again at every dict or list access (an allocation per id
# above 256); as `Any` the id object itself is passed on, as the interpreter does.
LinkId = Any


def maxmin_rates(paths: Sequence[Sequence[int]], capacity: Sequence[float],
                 caps: Sequence[float | None] | None = None) -> list[float]:
    """Reference max-min rates of flows over links (O(n^2), obvious on purpose).

    paths[i] are the link ids of flow i; caps[i] its own rate cap (a private link) or None.
    """
    n = len(paths)
    rate = [0.0] * n
    fixed = [False] * n
    rem = {l: float(capacity[l]) for p in paths for l in p}
    for i in range(n):
        if not paths[i] and (caps is None or caps[i] is None):
            rate[i], fixed[i] = INF, True
    while not all(fixed):
        best, who = INF, None
        for l, r in rem.items():
            users = [i for i in range(n) if not fixed[i] and l in paths[i]]
            if users and r / len(users) < best:
                best, who = r / len(users), users
        for i in range(n):
            c = None if caps is None else caps[i]
            if not fixed[i] and c is not None and c < best:
                best, who = c, [i]
        best = max(best, 0.0)
        assert who is not None      # some link or cap fixes a flow while one is left
        for i in who:
            rate[i], fixed[i] = best, True
            for l in paths[i]:
                rem[l] -= best
    return rate


class Group:
    """Flows with an identical link set and cap: they share one rate (m3 / flowSim grouping).

    Progress is a 'work' clock W (bytes delivered per flow since the group was made); a flow ends when
    W reaches its finish_work, so one heap per group gives every member's exact completion.
    """

    __slots__ = ("key", "links", "cap", "n", "rate", "work", "last_t", "flows", "version", "bn",
                 "new_rate", "new_bn", "mark", "seq", "slot",
                 "tent_rate", "tent_bn", "_hash")

    def __init__(self, key: tuple, links: tuple[int, ...], cap: float) -> None:
        self.key, self.cap = key, cap
        self.links: tuple[LinkId, ...] = links
        self._hash = hash(key)         # a tuple does not keep its hash: sets ask for it at every add and discard
        self.n = 0
        self.rate = 0.0
        self.work = 0.0
        self.last_t = 0.0
        self.flows: list = []          # heap of (finish_work, seq, flow)
        self.version = 0
        self.bn = -2                   # bottleneck: link id, -1 = own cap, -2 = none yet
        self.new_rate = 0.0
        self.new_bn = -2
        self.mark = 0
        self.seq = 0
        self.slot = -1                 # column in the engine's NumPy group arrays (-1 = none)
        self.tent_rate = 0.0           # the engine's cascade: rate / bottleneck of the previous round
        self.tent_bn = -2

    def __hash__(self) -> int:
        # Deterministic (the key holds ints and a float, whose hashes are not salted), so sets of groups
        # iterate in the same order on every run: ties between equal completion times break the same way.
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other


def fill(groups: list[Group], cap: Sequence[float], load: Sequence[float]) -> dict[LinkId, float]:
    """Progressive filling of `groups` over what the others leave; sets g.new_rate / g.new_bn.

    `load[l]` is the committed load of every group on link l (rate x flows); the groups' own committed
    share is added back. Returns each bottleneck link's level (the rate its bottlenecked groups got).
    One loop kept whole: it is the object-mode engine's innermost solver and runs per event.
    """
    rem: dict[LinkId, float] = {}
    cnt: dict[LinkId, int] = {}
    on: dict[LinkId, list[Group]] = {}
    heap: list[tuple[float, LinkId]] = []
    capped: list[Group] = []
    for g in groups:
        g.new_bn = -2
        own = g.n * g.rate
        for l in g.links:
            if l in rem:
                rem[l] += own
                cnt[l] += g.n
                on[l].append(g)
            else:
                rem[l] = cap[l] - load[l] + own
                cnt[l] = g.n
                on[l] = [g]
        if g.cap < INF:
            capped.append(g)
            heap.append((g.cap, -len(capped)))
    for l, c in cnt.items():
        heap.append((rem[l] / c, l))
    heapq.heapify(heap)
    level: dict[LinkId, float] = {}
    left = len(groups)
    pop, push = heapq.heappop, heapq.heappush
    while heap and left:
        share, key = pop(heap)
        if key >= 0:
            c = cnt[key]
            if c == 0:
                continue
            cur = rem[key] / c
            if cur != share:          # shares only grow as flows are fixed: re-queue the lower bound
                push(heap, (cur, key))
                continue
            if share < 0.0:
                share = 0.0
            level[key] = share
            fixing = [g for g in on[key] if g.new_bn == -2]
            bn = key
        else:
            g = capped[-1 - key]
            if g.new_bn != -2:
                continue
            fixing, bn = [g], -1
        for g in fixing:
            g.new_rate, g.new_bn = share, bn
            left -= 1
            moved = share * g.n
            for l in g.links:
                cnt[l] -= g.n
                rem[l] -= moved
    for g in groups:   # a group with no links and no cap (cannot happen for real paths)
        if g.new_bn == -2:
            g.new_rate, g.new_bn = INF, -1
    return level


def fill_arrays(links: np.ndarray, n: np.ndarray, gcap: np.ndarray, cap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Max-min rates of G groups from scratch, vectorised: parallel water-filling in rounds.

    links: (K, G) link ids of each group, padded with the sentinel id len(cap) - 1 (whose capacity must be inf);
    n: flows per group (float); gcap: each group's own rate cap (inf = none); cap: link capacities + sentinel.
    Returns (rate, bn): bn is the bottleneck link of each group, -1 where its own cap binds.

    Each round takes every link whose fair share s_l = rem_l / cnt_l is <= the smallest share m_g that any
    unfixed group g on it sees on its own links (or cap): no group on such a link can be fixed below s_l,
    so they all get exactly s_l, as sequential progressive filling would give them. Groups whose cap is
    <= all their link shares are fixed at the cap. Shares only grow as groups are fixed (a fixed group's
    rate is <= the share of each of its links), so the global minimum is always ready and every round
    fixes something; the rounds follow chains of bottleneck dependence (tens in a fat-tree), not levels.
    One function: it is the reference the compiled kernel is tested against, kept readable as one round loop.
    """
    K, G = links.shape
    S = len(cap)
    rate = np.full(G, INF)
    bn = np.full(G, -1, dtype=np.intp)
    if G == 0:
        return rate, bn
    capped = bool((gcap < INF).any())
    rem = np.array(cap, dtype=float)
    flat = links.ravel()
    cnt = np.bincount(flat, weights=np.tile(n, K), minlength=S)
    rows = np.arange(G)
    lm = np.empty(S)
    with np.errstate(divide="ignore", invalid="ignore"):
        while True:
            s = rem / cnt                       # links no unfixed group uses may be nan/inf: never read
            np.maximum(s, 0.0, out=s)
            gs = s.take(links)                  # (K, g): the share each group sees on each of its links
            ml = gs.min(0)
            m = np.minimum(ml, gcap) if capped else ml
            lm.fill(INF)
            np.minimum.at(lm, flat, np.tile(m, K))   # smallest m of the groups on each link (numpy 2.4
            #                                          reads garbage if `at` broadcasts m itself: tile it)
            ready = lm >= s
            ready[S - 1] = False
            rdy = ready.take(links)
            fx = rdy.any(0)
            if capped:
                bycap = gcap <= ml
                fx |= bycap
            f = np.flatnonzero(fx)
            if f.size == 0:                     # only groups without links or cap are left: unbounded
                break
            mf = m[f]
            rf = rows[f]
            rate[rf] = mf
            lf = links[:, f]
            b = lf[rdy[:, f].argmax(0), np.arange(f.size)]
            bn[rf] = np.where(bycap[f], -1, b) if capped else b
            if f.size == rows.size:
                break
            lfr, nf = lf.ravel(), n[f]
            np.subtract.at(rem, lfr, np.tile(mf * nf, K))
            np.subtract.at(cnt, lfr, np.tile(nf, K))
            keep = np.flatnonzero(~fx)
            rows, links, n = rows[keep], links.take(keep, axis=1), n[keep]
            flat = links.ravel()
            if capped:
                gcap = gcap[keep]
    return rate, bn
