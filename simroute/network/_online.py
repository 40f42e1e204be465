"""The compiled online core of the flow engine: one kernel call per engine step, state in three packed buffers.

At small scale an online step is a handful of microseconds of real work, so what costs is everything around
it: Python objects per group, a kernel call per stage (join, leave, solve, commit) and numba's dispatch,
which costs ~0.1 us plus ~0.15 us per array argument. Here all group, flow and link state lives in one
float64, one int64 and one int8 buffer (named fields at offsets kept in the int buffer's header), and
`core_step` does a whole step in one call: the starts of the instant (group found by a hash table on the
link set and cap, work clock advanced, link load and flow count moved, telemetry integrated), the
completions due (flows whose finish work is reached, groups emptied and compacted), the re-solve (the
incremental cascade, or from scratch past its limit) and its commit, and the next completion time. Python
keeps only the flow objects (their events and records) by flow slot.

Exactly the arithmetic of the engine's array mode (same cascade, same full solve, same commit rule and
telemetry integration), so the engine's exactness tests hold on it unchanged. Compiled only: without numba
the engine runs its object and array modes (whose NumPy solver is the reference).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from simroute.network._compiled import HAVE_NUMBA, cascade_into, commit_group, completion_time, fill_groups_numba, \
    finish_reached, instant_end, members_add, members_remove, njit, njit_inline
from simroute.network.flows import EPS

INF = math.inf

# int header: dimensions and counters, then the offsets of the fields of each buffer
H_NIDS, H_S, H_F, H_K, H_W, H_T, H_COUNT, H_FLOOR, H_TOMB = range(9)
H_INT, H_FLOAT, H_BYTE = 16, 48, 80
HEADER = 96
# float header
FH_LIMIT, FH_SAME, FH_FULL = range(3)
FLOAT_HEADER = 8

# (name, length as a function of the dimensions); the order is the order of the offsets in the header
INT_FIELDS = (("l_n", lambda d: d["n_ids"]), ("deg", lambda d: d["n_ids"]),
              ("member", lambda d: d["n_ids"] * d["W"]), ("g_links", lambda d: d["K"] * d["S"]),
              ("g_bn", lambda d: d["S"]), ("g_int", lambda d: 4 * d["S"]), ("g_head", lambda d: d["S"]),
              ("g_hash", lambda d: d["S"]), ("heap_int", lambda d: 2 * (2 * d["n_ids"] + d["S"])),
              ("stack", lambda d: 2 * d["n_ids"]), ("f_group", lambda d: d["F"]), ("f_next", lambda d: d["F"]),
              ("table", lambda d: d["T"]), ("out", lambda d: d["F"]),
              ("g_aux", lambda d: 3 * d["S"]), ("g_dirty", lambda d: d["K"] * d["S"]))
FLOAT_FIELDS = (("l_cap", lambda d: d["n_ids"]), ("l_load", lambda d: d["n_ids"]),
                ("l_bytes", lambda d: d["n_ids"]), ("l_sat", lambda d: d["n_ids"]), ("l_t", lambda d: d["n_ids"]),
                ("g_n", lambda d: d["S"]), ("g_cap", lambda d: d["S"]), ("g_rate", lambda d: d["S"]),
                ("g_work", lambda d: d["S"]), ("g_last", lambda d: d["S"]), ("g_next", lambda d: d["S"]),
                ("g_due", lambda d: d["S"]), ("g_new", lambda d: d["S"]),
                ("heap_key", lambda d: 2 * d["n_ids"] + d["S"]), ("f_fw", lambda d: d["F"]),
                ("pend", lambda d: d["P"] * (d["K"] + 3)), ("g_aux", lambda d: d["S"]),
                ("l_aux", lambda d: 2 * d["W"]))
BYTE_FIELDS = (("g_flag", lambda d: 2 * d["S"]), ("g_seed", lambda d: d["S"]), ("l_flag", lambda d: 3 * d["n_ids"]))
_INT = {name: i for i, (name, _length) in enumerate(INT_FIELDS)}
_FLOAT = {name: i for i, (name, _length) in enumerate(FLOAT_FIELDS)}
_BYTE = {name: i for i, (name, _length) in enumerate(BYTE_FIELDS)}

ST_GROW, ST_IDLE, ST_CASCADE, ST_ABORT = -1, 0, 1, 2     # core_step's status


# ---- small helpers (inlined) --------------------------------------------------------------------------
@njit_inline
def _touch(lid, now, l_load, l_cap, l_bytes, l_sat, l_t, full):
    """Integrate link `lid`'s bulk bytes up to now at its current load (Telemetry.touch's arithmetic)."""
    start = l_t[lid]
    if now > start:
        load = l_load[lid]
        if load > 0:
            l_bytes[lid] += load * (now - start)
            if load >= l_cap[lid] * full:
                l_sat[lid] += now - start
        l_t[lid] = now


@njit
def _table_rebuild(table, g_hash, count):
    """Rebuild the open-addressing table (-1 empty, -2 deleted, else a group slot) from the groups' hashes."""
    table[:] = -1
    mask = table.shape[0] - 1
    for g in range(count):
        i = g_hash[g] & mask
        while table[i] != -1:
            i = (i + 1) & mask
        table[i] = g


@njit_inline
def _table_find(table, h, slot):
    """Index in the table of the entry holding `slot` (whose hash is h)."""
    mask = table.shape[0] - 1
    i = h & mask
    while table[i] != slot:
        i = (i + 1) & mask
    return i


@njit_inline
def _same_key(links, g, pend, base, gcap, cap):
    if gcap[g] != cap:
        return False
    for k in range(links.shape[0]):
        if links[k, g] != pend[base + 3 + k]:
            return False
    return True


# ---- the step ---------------------------------------------------------------------------------------------
@njit
def core_step(now, n_pend, fbuf, ibuf, bbuf):
    """One engine step at `now`: pending starts, completions due, re-solve, commit (see the module docstring).

    `n_pend` starts are in the `pend` field. Returns (status, finished, next_due, solved, groups): status
    ST_GROW (nothing done: a link's membership row could overflow; `solved` is then the width needed: widen
    and call again), ST_IDLE (no change), ST_CASCADE or ST_ABORT (a cascade past its limit, then a full
    solve); `finished` flow slots are in the `out` field, in finish
    order; next_due the earliest completion (inf with no group); solved the groups re-solved.
    One function on purpose: the stages share every view, and numba's calls would pass them all again.
    """
    n_ids, slots, width, count = ibuf[H_NIDS], ibuf[H_S], ibuf[H_K], ibuf[H_COUNT]
    n_links = n_ids - 1
    oi, of, ob = ibuf[H_INT:H_INT + 16], ibuf[H_FLOAT:H_FLOAT + 16], ibuf[H_BYTE:H_BYTE + 4]
    l_n, deg = ibuf[oi[0]:oi[0] + n_ids], ibuf[oi[1]:oi[1] + n_ids]
    member = ibuf[oi[2]:oi[2] + n_ids * ibuf[H_W]].reshape((n_ids, ibuf[H_W]))
    links = ibuf[oi[3]:oi[3] + width * slots].reshape((width, slots))
    g_bn, g_int = ibuf[oi[4]:oi[4] + slots], ibuf[oi[5]:oi[5] + 4 * slots].reshape((4, slots))
    g_head, g_hash = ibuf[oi[6]:oi[6] + slots], ibuf[oi[7]:oi[7] + slots]
    heap_int = ibuf[oi[8]:oi[8] + 2 * (2 * n_ids + slots)].reshape((2, 2 * n_ids + slots))
    stack = ibuf[oi[9]:oi[9] + 2 * n_ids]
    f_group, f_next = ibuf[oi[10]:oi[10] + ibuf[H_F]], ibuf[oi[11]:oi[11] + ibuf[H_F]]
    table, out = ibuf[oi[12]:oi[12] + ibuf[H_T]], ibuf[oi[13]:oi[13] + ibuf[H_F]]
    l_cap, l_load = fbuf[of[0]:of[0] + n_ids], fbuf[of[1]:of[1] + n_ids]
    l_bytes, l_sat, l_t = fbuf[of[2]:of[2] + n_ids], fbuf[of[3]:of[3] + n_ids], fbuf[of[4]:of[4] + n_ids]
    g_n, g_cap, g_rate = fbuf[of[5]:of[5] + slots], fbuf[of[6]:of[6] + slots], fbuf[of[7]:of[7] + slots]
    g_work, g_last, g_next = fbuf[of[8]:of[8] + slots], fbuf[of[9]:of[9] + slots], fbuf[of[10]:of[10] + slots]
    g_due, g_new = fbuf[of[11]:of[11] + slots], fbuf[of[12]:of[12] + slots]
    heap_key, f_fw = fbuf[of[13]:of[13] + 2 * n_ids + slots], fbuf[of[14]:of[14] + ibuf[H_F]]
    stride = width + 3                           # a start: flow slot, bytes, cap, links (ids held as floats)
    pend = fbuf[of[15]:of[15] + n_pend * stride]
    g_aux, g_dirty = ibuf[oi[14]:oi[14] + 3 * slots].reshape((3, slots)), ibuf[oi[15]:oi[15] + width * slots]
    g_auxf, l_aux = fbuf[of[16]:of[16] + slots], fbuf[of[17]:of[17] + 2 * ibuf[H_W]].reshape((2, ibuf[H_W]))
    g_flag = bbuf[ob[0]:ob[0] + 2 * slots].reshape((2, slots))
    g_seed, l_flag = bbuf[ob[1]:ob[1] + slots], bbuf[ob[2]:ob[2] + 3 * n_ids].reshape((3, n_ids))
    full, same = fbuf[FH_FULL], fbuf[FH_SAME]
    for p in range(n_pend):                      # starts must not overflow a membership row: widen first
        for k in range(width):                   # (stack is free scratch between cascades: count per link)
            stack[np.int64(pend[p * stride + 3 + k])] = 0
    for p in range(n_pend):
        for k in range(width):
            stack[np.int64(pend[p * stride + 3 + k])] += 1
    needed = 0
    for p in range(n_pend):
        for k in range(width):
            lid = np.int64(pend[p * stride + 3 + k])
            if lid < n_links and deg[lid] + stack[lid] > needed:
                needed = deg[lid] + stack[lid]
    if needed > member.shape[1]:
        return ST_GROW, 0, np.inf, needed, count
    mask = table.shape[0] - 1
    # starts: find or make the group, advance its work clock, add the flow, move its links' load
    for p in range(n_pend):
        base = p * stride
        fslot, nbytes, cap = np.int64(pend[base]), pend[base + 1], pend[base + 2]
        h = np.int64(1469598103934665603)
        for k in range(width):
            h = (h ^ np.int64(pend[base + 3 + k])) * np.int64(1099511628211)
        h = h ^ (np.int64(min(cap, 1e18)) if cap < np.inf else np.int64(-7))
        i = h & mask
        g = -1
        free_at = -1
        while table[i] != -1:
            slot = table[i]
            if slot == -2:
                if free_at < 0:
                    free_at = i
            elif g_hash[slot] == h and _same_key(links, slot, pend, base, g_cap, cap):
                g = slot
                break
            i = (i + 1) & mask
        if g < 0:
            g = count
            count += 1
            for k in range(width):
                links[k, g] = np.int64(pend[base + 3 + k])
            g_n[g], g_cap[g], g_rate[g], g_bn[g] = 0.0, cap, 0.0, -2
            g_work[g], g_last[g], g_next[g], g_due[g] = 0.0, now, np.inf, np.inf
            g_head[g], g_hash[g], g_seed[g] = -1, h, 0
            members_add(member, deg, links, g, n_links)
            if free_at >= 0:
                i = free_at
                ibuf[H_TOMB] -= 1
            table[i] = g
        if now > g_last[g]:
            g_work[g] += g_rate[g] * (now - g_last[g])
            g_last[g] = now
        work = g_work[g] + nbytes
        f_fw[fslot], f_group[fslot], f_next[fslot] = work, g, g_head[g]
        g_head[g] = fslot
        if work < g_next[g]:
            g_next[g] = work
        rate = g_rate[g]
        for k in range(width):
            lid = links[k, g]
            if lid < n_links:
                _touch(lid, now, l_load, l_cap, l_bytes, l_sat, l_t, full)
                l_load[lid] += rate
                l_n[lid] += 1
        g_n[g] += 1.0
        g_seed[g] = 1
        g_due[g] = completion_time(now, g_next[g], g_work[g], rate)
    # completions due: pop the flows whose finish work is reached (the earliest always)
    limit = instant_end(now)
    n_done = 0
    n_empty = 0
    for g in range(count):
        if g_due[g] > limit:
            continue
        if now > g_last[g]:
            g_work[g] += g_rate[g] * (now - g_last[g])
            g_last[g] = now
        work, first = g_work[g], n_done
        best, f = np.inf, g_head[g]
        while f >= 0:                            # the earliest finish is done whatever the float noise
            if f_fw[f] < best:
                best = f_fw[f]
            f = f_next[f]
        prev, f, rest = -1, g_head[g], np.inf
        while f >= 0:
            after = f_next[f]
            fw = f_fw[f]
            if fw == best or finish_reached(fw, work, EPS):
                if prev < 0:
                    g_head[g] = after
                else:
                    f_next[prev] = after
                j = n_done                       # insertion by finish work: records come in finish order
                while j > first and f_fw[out[j - 1]] > fw:
                    out[j] = out[j - 1]
                    j -= 1
                out[j] = f
                n_done += 1
            else:
                prev = f
                if fw < rest:
                    rest = fw
            f = after
        gone = n_done - first
        rate = g_rate[g]
        for k in range(width):
            lid = links[k, g]
            if lid < n_links:
                _touch(lid, now, l_load, l_cap, l_bytes, l_sat, l_t, full)
                l_load[lid] -= gone * rate
                l_n[lid] -= gone
        g_n[g] -= gone
        g_next[g] = rest
        if g_n[g] <= 0.5:
            g_seed[g] = 2                        # emptied: removed below
            n_empty += 1
            g_due[g] = np.inf
        else:
            g_seed[g] = 1
            g_due[g] = completion_time(now, rest, work, rate)
    # emptied groups leave, last column into the freed slot (highest slot first, so `last` is never emptied)
    dirty = g_dirty
    n_dirty = 0
    if n_empty:
        for g in range(count - 1, -1, -1):
            if g_seed[g] != 2:
                continue
            for k in range(width):
                if links[k, g] < n_links:
                    dirty[n_dirty] = links[k, g]
                    n_dirty += 1
            last = count - 1
            members_remove(member, deg, links, g, last, n_links)
            table[_table_find(table, g_hash[g], g)] = -2
            ibuf[H_TOMB] += 1
            if last != g:
                table[_table_find(table, g_hash[last], last)] = g
                for k in range(width):
                    links[k, g] = links[k, last]
                g_bn[g], g_head[g], g_hash[g], g_seed[g] = g_bn[last], g_head[last], g_hash[last], g_seed[last]
                g_n[g], g_cap[g], g_rate[g], g_work[g] = g_n[last], g_cap[last], g_rate[last], g_work[last]
                g_last[g], g_next[g], g_due[g] = g_last[last], g_next[last], g_due[last]
                f = g_head[g]
                while f >= 0:
                    f_group[f] = g
                    f = f_next[f]
            g_seed[last] = 0
            count -= 1
        for i in range(n_dirty):
            if deg[dirty[i]] == 0:
                l_load[dirty[i]] = 0.0           # no group left: no float residue either
        if 4 * ibuf[H_TOMB] > table.shape[0]:
            _table_rebuild(table, g_hash, count)
            ibuf[H_TOMB] = 0
    ibuf[H_COUNT] = count
    n_seeds = 0
    for g in range(count):
        if g_seed[g]:
            n_seeds += 1
    status, solved = ST_IDLE, 0
    if n_seeds or n_dirty:
        seeds = g_aux[0, :n_seeds]
        j = 0
        for g in range(count):
            if g_seed[g]:
                seeds[j] = g
                j += 1
                g_seed[g] = 0
        status, solved = _solve(now, seeds, dirty[:n_dirty], count, links, g_n, g_cap, g_rate, g_bn, g_work,
                                g_last, g_next, g_due, l_cap, l_load, l_bytes, l_sat, l_t, member, deg,
                                g_int, g_flag, g_new, l_flag, heap_int, heap_key, stack, g_aux[1], g_auxf, g_aux[2], l_aux,
                                max(ibuf[H_FLOOR], int(fbuf[FH_LIMIT] * count)), same, full)
    next_due = np.inf
    for g in range(count):
        if g_due[g] < next_due:
            next_due = g_due[g]
    return status, n_done, next_due, solved, count


@njit
def _solve(now, seeds, dirty, count, links, g_n, g_cap, g_rate, g_bn, g_work, g_last, g_next, g_due, l_cap,
           l_load, l_bytes, l_sat, l_t, member, deg, g_int, g_flag, g_new, l_flag, heap_int, heap_key, stack,
           out_slot, out_rate, out_bn, l_aux, limit, same, full):
    """Re-solve after a change (cascade, or from scratch past its limit) and commit; (status, groups solved).
    The cascade writes its result into the caller's out_slot / out_rate / out_bn."""
    ok, n_solved = cascade_into(seeds, dirty, links[:, :count], g_n[:count], g_cap[:count], g_rate[:count],
                                g_bn[:count], l_cap, l_load, member, deg, limit, same, g_int, g_flag, g_new, l_flag,
                                heap_int, heap_key, stack, out_slot, out_rate, out_bn, l_aux[0], l_aux[1])
    solved, rates, bns = out_slot[:n_solved], out_rate[:n_solved], out_bn[:n_solved]
    status = ST_CASCADE
    if not ok:
        rates, bns = fill_groups_numba(links[:, :count], g_n[:count], g_cap[:count], l_cap)
        solved = np.arange(count)
        status = ST_ABORT
    n_links = l_cap.shape[0] - 1
    for i in range(solved.shape[0]):
        g = solved[i]
        g_bn[g] = bns[i]
        old = commit_group(now, g, rates[i], same, g_rate, g_work, g_last, g_next, g_due)
        if old < 0:
            continue
        delta = (rates[i] - old) * g_n[g]
        for k in range(links.shape[0]):
            lid = links[k, g]
            if lid < n_links:
                _touch(lid, now, l_load, l_cap, l_bytes, l_sat, l_t, full)     # at the old load, once per now
                l_load[lid] += delta
    return status, solved.shape[0]


@njit
def core_rehash(ibuf):
    """Rebuild the group table after the buffers were re-laid out (Python copies the fields, this the table)."""
    oi = ibuf[H_INT:H_INT + 16]
    table = ibuf[oi[12]:oi[12] + ibuf[H_T]]
    _table_rebuild(table, ibuf[oi[7]:oi[7] + ibuf[H_S]], ibuf[H_COUNT])
    ibuf[H_TOMB] = 0


class OnlineCore:
    """The packed buffers, their layout and growth, and the Python side of a step (flow objects by slot).

    Contract: `run(now, flows)` hands the kernel the starts of this instant and returns what finished. Every
    field is a view of the buffers, which growth replaces: `on_relayout` is called then, for the owner to
    take its views again.
    """

    def __init__(self, capacity: list[float], *, cascade_limit: float, cascade_floor: int, same: float,
                 full: float, on_relayout: Callable[[], None] = lambda: None, width: int = 8,
                 slots: int = 256) -> None:
        self.on_relayout = on_relayout
        n_ids = len(capacity) + 1
        self.dims = {"n_ids": n_ids, "S": slots, "F": slots, "K": width, "W": 4, "T": 4 * slots, "P": 64}
        self.ibuf, self.fbuf, self.bbuf = self._allocate(self.dims)
        self.fbuf[self._offset("float", "l_cap"):][:n_ids] = list(capacity) + [INF]
        self.ibuf[H_FLOOR] = cascade_floor
        self.fbuf[FH_LIMIT], self.fbuf[FH_SAME], self.fbuf[FH_FULL] = cascade_limit, same, full
        self.flows: list = [None] * slots
        self._free = list(range(slots - 1, -1, -1))
        self._pad = [n_ids - 1] * width
        self._out, self._pend = self._offset("int", "out"), self._offset("float", "pend")
        self._count, self._slots, self._width, self._room = 0, slots, width, self.dims["P"]

    # ---- layout -----------------------------------------------------------------------------------------
    def _allocate(self, dims: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ibuf = np.zeros(HEADER + sum(length(dims) for _name, length in INT_FIELDS) + 1, dtype=np.int64)
        fbuf = np.zeros(FLOAT_HEADER + sum(length(dims) for _name, length in FLOAT_FIELDS) + 1)
        bbuf = np.zeros(sum(length(dims) for _name, length in BYTE_FIELDS) + 1, dtype=np.int8)
        ibuf[H_NIDS], ibuf[H_S], ibuf[H_F], ibuf[H_K] = dims["n_ids"], dims["S"], dims["F"], dims["K"]
        ibuf[H_W], ibuf[H_T] = dims["W"], dims["T"]
        for first, header, fields in ((HEADER, H_INT, INT_FIELDS), (FLOAT_HEADER, H_FLOAT, FLOAT_FIELDS),
                                      (0, H_BYTE, BYTE_FIELDS)):
            at = first
            for i, (_name, length) in enumerate(fields):
                ibuf[header + i] = at
                at += length(dims)
        self.ibuf, self.fbuf, self.bbuf = ibuf, fbuf, bbuf
        self.field("int", "heap_int")[:] = -1          # the cascade's heap positions rest at -1
        self.field("int", "table")[:] = -1
        self.field("int", "member")[:] = -1
        self.field("int", "g_links")[:] = dims["n_ids"] - 1
        return ibuf, fbuf, bbuf

    def _offset(self, kind: str, name: str) -> int:
        header, index = {"int": (H_INT, _INT), "float": (H_FLOAT, _FLOAT), "byte": (H_BYTE, _BYTE)}[kind]
        return int(self.ibuf[header + index[name]])

    def field(self, kind: str, name: str) -> np.ndarray:
        """A view of one field (2-D for the link columns and membership)."""
        fields, buf = {"int": (INT_FIELDS, self.ibuf), "float": (FLOAT_FIELDS, self.fbuf),
                       "byte": (BYTE_FIELDS, self.bbuf)}[kind]
        length = dict(fields)[name](self.dims)
        at = self._offset(kind, name)
        view = buf[at:at + length]
        if name == "g_links":
            return view.reshape(self.dims["K"], self.dims["S"])
        if name == "member":
            return view.reshape(self.dims["n_ids"], self.dims["W"])
        return view

    def _grow(self, **dims: int) -> None:
        """Re-lay the buffers out with larger dimensions, copying what they hold (scratch is left at rest)."""
        old_dims, old = dict(self.dims), (self.ibuf, self.fbuf, self.bbuf)
        old_views = {(kind, name): self.field(kind, name).copy() for kind, fields in
                     (("int", INT_FIELDS), ("float", FLOAT_FIELDS)) for name, _length in fields
                     if name in ("l_n", "deg", "member", "g_links", "g_bn", "g_head", "g_hash", "f_group", "f_next",
                                 "l_cap", "l_load", "l_bytes", "l_sat", "l_t", "g_n", "g_cap", "g_rate", "g_work",
                                 "g_last", "g_next", "g_due", "f_fw")
                     or (name == "pend" and dims.get("K", self.dims["K"]) == self.dims["K"])}  # staged starts
        #                                            survive a widening of the membership rows between stage and step
        new_dims = dict(old_dims, **dims)
        new_dims["T"] = 4 * new_dims["S"]
        self.dims = new_dims
        self._allocate(new_dims)
        for index in (H_FLOOR, H_COUNT):
            self.ibuf[index] = old[0][index]
        self.fbuf[:FLOAT_HEADER] = old[1][:FLOAT_HEADER]
        for (kind, name), values in old_views.items():
            view = self.field(kind, name)
            if values.ndim == 2:
                view[:values.shape[0], :values.shape[1]] = values
            else:
                view[:values.shape[0]] = values
        core_rehash(self.ibuf)
        if new_dims["F"] > old_dims["F"]:
            self.flows.extend([None] * (new_dims["F"] - old_dims["F"]))
            self._free.extend(range(new_dims["F"] - 1, old_dims["F"] - 1, -1))
        self._pad = [new_dims["n_ids"] - 1] * new_dims["K"]
        self._out, self._pend = self._offset("int", "out"), self._offset("float", "pend")
        self._slots, self._width, self._room = new_dims["S"], new_dims["K"], new_dims["P"]
        self.on_relayout()

    # ---- a step -----------------------------------------------------------------------------------------
    def run(self, now: float, flows: list) -> tuple[int, list, float, int]:
        """One step at `now` with the flows starting now (each with `links`, `finish_work` (its bytes to go) and
        `cap`; it gets a `slot`):
        (status, finished flows in finish order, next completion, groups re-solved)."""
        if flows:
            self._stage(flows)
        while True:
            status, finished, next_due, solved, self._count = core_step(now, len(flows), self.fbuf, self.ibuf,
                                                                        self.bbuf)
            if status != ST_GROW:
                break
            width = 2 * self.dims["W"]
            while width < solved:            # on ST_GROW, `solved` is the membership width the starts need
                width *= 2
            self._grow(W=width)
        done: list = []
        if finished:
            at = self._out
            objects, free = self.flows, self._free
            for slot in self.ibuf[at:at + finished].tolist():
                done.append(objects[slot])
                objects[slot] = None
                free.append(slot)
        return status, done, next_due, solved

    def set_capacity(self, links: list[int], values: list[float]) -> None:
        """New capacities for some links (a message charge moved); the groups on them re-solve at the next
        `run` (seeds of its cascade). The caller integrated the links' telemetry up to now first."""
        l_cap, member, deg = self.field("float", "l_cap"), self.field("int", "member"), self.field("int", "deg")
        seed = self.field("byte", "g_seed")
        for link, value in zip(links, values):
            l_cap[link] = value
            for g in member[link, :deg[link]].tolist():
                if seed[g] == 0:
                    seed[g] = 1

    def _stage(self, flows: list) -> None:
        """Write the starts into the pending field: slot, bytes, cap, links padded to the column width."""
        needed = len(flows)
        widest = max([len(flow.links) for flow in flows]) if needed > 1 else len(flows[0].links)
        if (self._count + needed > self._slots or len(self._free) < needed or widest > self._width
                or needed > self._room):
            dims, count = self.dims, self._count
            grow_to = dims["S"]
            while count + needed > grow_to or dims["F"] - len(self._free) + needed > grow_to:
                grow_to *= 2
            self._grow(S=grow_to, F=max(grow_to, dims["F"]), K=max(widest, dims["K"]), P=max(2 * needed, dims["P"]))
        values: list[float] = []
        pad, width, free, objects = self._pad, self._width, self._free, self.flows
        for flow in flows:
            slot = free.pop()
            objects[slot] = flow
            flow.slot = slot
            values += (slot, flow.finish_work, flow.cap)
            values += flow.links
            values += pad[:width - len(flow.links)]
        self.fbuf[self._pend:self._pend + len(values)] = values

    # ---- inspection -------------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        """Groups in use."""
        return self._count


__all__ = ["HAVE_NUMBA", "OnlineCore", "core_step"]
