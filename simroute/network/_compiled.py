"""numba kernels of the flow engine (see kernels.py for which the engine uses and their NumPy twins).

Module-level functions, so numba's on-disk cache (`cache=True`) keeps the machine code between runs.
With SIMROUTE_NO_NUMBA=1 (or without numba) the same functions are plain Python: `kernels` then does not
use them, but tests still run the cascade's logic on small instances (`HAVE_NUMBA` says which).
"""

from __future__ import annotations

import os

import numpy as np

try:
    if os.environ.get("SIMROUTE_NO_NUMBA"):
        raise ImportError("SIMROUTE_NO_NUMBA is set")
    import numba
    njit = numba.njit(cache=True, nogil=True)
    # helpers called in inner loops: inlined into their callers (a call passes every array by reference
    # count, which costs more than these helpers' own work)
    njit_inline = numba.njit(cache=True, nogil=True, inline="always")
    HAVE_NUMBA = True
except ImportError:
    def njit(function):
        return function
    njit_inline = njit
    HAVE_NUMBA = False

from simroute.network import flows as _flows  # noqa: E402  (after numba's import, which SIMROUTE_NO_NUMBA gates)

# the solvers' shared formulas (flows.py), compiled into the kernels that use them: scalars only, so inlining
# them adds no reference counting (an inlined helper that takes arrays costs a count per array per call)
instant_end = njit_inline(_flows.instant_end)
finish_reached = njit_inline(_flows.finish_reached)
completion_time = njit_inline(_flows.completion_time)
rate_kept = njit_inline(_flows.rate_kept)


@njit
def sift(heap, heap_key, pos, i, size, key):
    """Place the item at heap[i], whose key is now `key`, in the indexed min-heap (keys stored inline, so
    a comparison reads one array; pos[item] is the item's index in heap)."""
    item = heap[i]
    while i > 0:
        parent = (i - 1) >> 1
        if heap_key[parent] <= key:
            break
        heap[i] = heap[parent]
        heap_key[i] = heap_key[parent]
        pos[heap[i]] = i
        i = parent
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and heap_key[child + 1] < heap_key[child]:
            child += 1
        if heap_key[child] >= key:
            break
        heap[i] = heap[child]
        heap_key[i] = heap_key[child]
        pos[heap[i]] = i
        i = child
    heap[i] = item
    heap_key[i] = key
    pos[item] = i


@njit
def fill_groups_numba(links_by_slot, n, gcap, cap):
    """Max-min rates and bottlenecks of every group from scratch (same contract as maxmin.fill_arrays).

    Progressive filling with an indexed min-heap of link shares; see kernels.py. One function on purpose:
    numba compiles it as one loop nest, and splitting it would put calls in the inner loop.
    """
    n_slots, groups = links_by_slot.shape
    links = links_by_slot.T.copy().T             # (K, G) view of a group-major copy: a group's links adjacent
    n_ids = cap.shape[0]
    sentinel = n_ids - 1
    rate = np.full(groups, np.inf)
    bn = np.full(groups, -1, dtype=np.int64)
    rem = cap.copy()
    cnt = np.zeros(n_ids)
    start = np.zeros(n_ids + 1, dtype=np.int64)
    for g in range(groups):
        for k in range(n_slots):
            lid = links[k, g]
            if lid != sentinel:
                start[lid + 1] += 1
                cnt[lid] += n[g]
    for lid in range(n_ids):
        start[lid + 1] += start[lid]
    fill_at = start[:-1].copy()
    members = np.empty(start[-1], dtype=np.int64)
    for g in range(groups):
        for k in range(n_slots):
            lid = links[k, g]
            if lid != sentinel:
                members[fill_at[lid]] = g
                fill_at[lid] += 1
    share = np.full(n_ids, np.inf)
    heap = np.empty(n_ids, dtype=np.int64)
    heap_key = np.empty(n_ids)
    pos = np.full(n_ids, -1, dtype=np.int64)
    size = 0
    for lid in range(sentinel):
        if cnt[lid] > 0.5:
            share[lid] = rem[lid] / cnt[lid]
            heap[size] = lid
            pos[lid] = size
            size += 1
            sift(heap, heap_key, pos, size - 1, size, share[lid])     # insertion: sifts up only
    capped = np.flatnonzero(gcap < np.inf)
    capped = capped[np.argsort(gcap[capped], kind="mergesort")]
    n_capped = capped.shape[0]
    next_capped = 0
    fixed = np.zeros(groups, dtype=np.bool_)
    stale = np.zeros(n_ids, dtype=np.bool_)      # share[l] is a lower bound (it only grows): refresh at the top
    left = groups
    while left > 0:
        while next_capped < n_capped and fixed[capped[next_capped]]:
            next_capped += 1
        if size > 0:
            top = heap[0]
            if cnt[top] <= 0.5:                     # no unfixed group left on it: drop it
                size -= 1
                pos[top] = -1
                if size > 0:
                    heap[0] = heap[size]
                    pos[heap[0]] = 0
                    sift(heap, heap_key, pos, 0, size, heap_key[size])
                continue
            if stale[top]:
                stale[top] = False
                share[top] = rem[top] / cnt[top]
                sift(heap, heap_key, pos, 0, size, share[top])
                continue
        if size > 0 and (next_capped >= n_capped or heap_key[0] <= gcap[capped[next_capped]]):
            bottleneck = heap[0]
            level = max(heap_key[0], 0.0)
            first, last = start[bottleneck], start[bottleneck + 1]
        elif next_capped < n_capped:
            bottleneck = -1
            level = gcap[capped[next_capped]]
            first, last = 0, 1
        else:
            break                                   # only groups with no link and no cap: unbounded
        for j in range(first, last):
            g = members[j] if bottleneck >= 0 else capped[next_capped]
            if fixed[g]:
                continue
            fixed[g] = True
            rate[g] = level
            bn[g] = bottleneck
            left -= 1
            for k in range(n_slots):
                lid = links[k, g]
                if lid != sentinel:
                    rem[lid] -= level * n[g]
                    cnt[lid] -= n[g]
                    stale[lid] = True
                    where = pos[lid]
                    if cnt[lid] <= 0.5 and where >= 0:      # no unfixed group left: leave the heap now,
                        size -= 1                           # from where it sits (mostly near the bottom)
                        pos[lid] = -1
                        if where < size:
                            heap[where] = heap[size]
                            pos[heap[where]] = where
                            sift(heap, heap_key, pos, where, size, heap_key[size])
    return rate, bn

@njit
def mark_links(links, slot, n_links, seen, count):
    """Mark the real links of group `slot` in `seen`; returns `count` plus the ones not marked before."""
    for k in range(links.shape[0]):
        lid = links[k, slot]
        if lid < n_links and not seen[lid]:
            seen[lid] = True
            count += 1
    return count


@njit_inline
def commit_group(now, g, fresh, same, rate, work, last_t, next_work, due):
    """The commit rule of one re-solved group (every commit kernel's): it keeps its rate while `rate_kept`
    (returns -1.0); otherwise its work clock is advanced at the old rate, the rate replaced and its
    completion time recomputed, and the old rate is returned."""
    old = rate[g]
    if rate_kept(fresh, old, same):
        return -1.0
    if now > last_t[g]:
        work[g] += old * (now - last_t[g])
        last_t[g] = now
    rate[g] = fresh
    due[g] = completion_time(now, next_work[g], work[g], fresh)
    return old


@njit
def commit_rates_numba(now, new_rate, new_bn, links, rate, bn, work, last_t, next_work, due, same, n_links):
    """Same contract as kernels.commit_rates_numpy: commit the groups whose rate moved, return their links."""
    groups = new_rate.shape[0]
    touched = np.zeros(n_links + 1, dtype=np.bool_)
    count = 0
    for g in range(groups):
        bn[g] = new_bn[g]
        if commit_group(now, g, new_rate[g], same, rate, work, last_t, next_work, due) >= 0:
            count = mark_links(links, g, n_links, touched, count)
    out = np.empty(count, dtype=np.int64)
    j = 0
    for lid in range(n_links):
        if touched[lid]:
            out[j] = lid
            j += 1
    return out


# ---- link membership (which groups use each link), kept beside the group columns ----------------------
@njit
def members_build(links, count, n_links, width):
    """(member, deg): member[l, :deg[l]] are the slots of the first `count` groups using link l; rows are at
    least `width` wide, rounded up to a power of two (the sentinel row n_links stays empty)."""
    deg = np.zeros(n_links + 1, dtype=np.int64)
    for g in range(count):
        for k in range(links.shape[0]):
            lid = links[k, g]
            if lid < n_links:
                deg[lid] += 1
    need = max(width, 1)
    for lid in range(n_links):
        while deg[lid] > need:
            need *= 2
    member = np.full((n_links + 1, need), -1, dtype=np.int64)
    deg[:] = 0
    for g in range(count):
        for k in range(links.shape[0]):
            lid = links[k, g]
            if lid < n_links:
                member[lid, deg[lid]] = g
                deg[lid] += 1
    return member, deg


@njit
def members_add(member, deg, links, slot, n_links):
    """Add group `slot` to its links' rows; False (nothing changed) when a row is full (rebuild wider)."""
    width = member.shape[1]
    for k in range(links.shape[0]):
        lid = links[k, slot]
        if lid < n_links and deg[lid] >= width:
            return False
    for k in range(links.shape[0]):
        lid = links[k, slot]
        if lid < n_links:
            member[lid, deg[lid]] = slot
            deg[lid] += 1
    return True


@njit
def members_remove(member, deg, links, slot, last, n_links):
    """Remove group `slot` from its links' rows, then rename group `last` to `slot` (the engine moves the
    last column into the freed slot right after)."""
    for k in range(links.shape[0]):
        lid = links[k, slot]
        if lid < n_links:
            top = deg[lid] - 1
            for j in range(top + 1):
                if member[lid, j] == slot:
                    member[lid, j] = member[lid, top]
                    break
            member[lid, top] = -1
            deg[lid] = top
    if last != slot:
        for k in range(links.shape[0]):
            lid = links[k, last]
            if lid < n_links:
                for j in range(deg[lid]):
                    if member[lid, j] == last:
                        member[lid, j] = slot
                        break


# ---- the incremental re-solve (cascade) -----------------------------------------------------------
_KEEP, _FREE, _FIXED = 0, 1, 2          # group status in a cascade: old rate assumed, unfixed, fixed anew
_CLEAN, _DIRTY, _DONE = 0, 1, 2         # link status in a cascade


@njit_inline
def heap_set(heap, heap_key, pos, size, item, key):
    """Insert `item` with `key` in the indexed min-heap, or move it to `key`; returns the new size."""
    where = pos[item]
    if where < 0:
        heap[size] = item
        pos[item] = size
        sift(heap, heap_key, pos, size, size + 1, key)
        return size + 1
    sift(heap, heap_key, pos, where, size, key)
    return size


@njit_inline
def heap_drop(heap, heap_key, pos, size, item):
    """Remove `item` (if queued) from the indexed min-heap; returns the new size."""
    where = pos[item]
    if where < 0:
        return size
    pos[item] = -1
    size -= 1
    if where < size:
        heap[where] = heap[size]
        pos[heap[where]] = where
        sift(heap, heap_key, pos, where, size, heap_key[size])
    return size


@njit_inline
def link_level(lid, level, cap, member, deg, n, rate, status, new_rate, scratch_rate, scratch_n):
    """The level >= `level` at which link `lid` fills under progressive filling, given its members' status:
    a fixed group adds n x its new rate, an unfixed one n x the level, a kept one n x min(old rate, level);
    inf when nothing on it is unfixed above `level`. Water-filling on one link: the kept groups above the
    level, sorted by rate (insertion sort: a link carries tens of groups), leave the unfixed set one by
    one while their rate lies below the candidate level."""
    const = 0.0
    slope = 0.0
    count = 0
    for j in range(deg[lid]):
        g = member[lid, j]
        state = status[g]
        if state == _FIXED:
            const += n[g] * new_rate[g]
        elif state == _FREE:
            slope += n[g]
        elif rate[g] <= level:
            const += n[g] * rate[g]
        else:
            r, w = rate[g], n[g]
            i = count
            while i > 0 and scratch_rate[i - 1] > r:
                scratch_rate[i] = scratch_rate[i - 1]
                scratch_n[i] = scratch_n[i - 1]
                i -= 1
            scratch_rate[i] = r
            scratch_n[i] = w
            count += 1
            slope += w
    for i in range(count):
        if slope <= 0.0:
            return np.inf
        candidate = (cap[lid] - const) / slope
        if candidate <= scratch_rate[i]:
            return candidate if candidate > level else level
        const += scratch_n[i] * scratch_rate[i]
        slope -= scratch_n[i]
    if slope <= 0.0:
        return np.inf
    candidate = (cap[lid] - const) / slope
    return candidate if candidate > level else level


@njit
def cascade_numba(seeds, dirty, links, n, gcap, rate, bn, cap, load, member, deg, limit, eps, group_int,
                  group_flag, new_rate, link_flag, heap_int, heap_key, stack):
    """`cascade_into` with its outputs allocated: returns (ok, slots, rate, bn) of the groups re-solved."""
    groups = rate.shape[0]
    out = np.empty(groups, dtype=np.int64)
    rates = np.empty(groups)
    bns = np.empty(groups, dtype=np.int64)
    width = member.shape[1]
    ok, count = cascade_into(seeds, dirty, links, n, gcap, rate, bn, cap, load, member, deg, limit, eps, group_int,
                             group_flag, new_rate, link_flag, heap_int, heap_key, stack, out, rates, bns,
                             np.empty(width), np.empty(width))
    return ok, out[:count], rates[:count], bns[:count]


@njit
def cascade_into(seeds, dirty, links, n, gcap, rate, bn, cap, load, member, deg, limit, eps, group_int,
                 group_flag, new_rate, link_flag, heap_int, heap_key, stack, out, rates, bns, scratch_rate, scratch_n):
    """Incremental max-min after a change: progressive filling that touches only what can move.

    seeds: slots of groups whose flow count changed (or new groups); dirty: links that lost a group; load:
    the committed load per link (what a link no member of which has changed status still carries).
    Every other group is assumed to keep its committed rate (status KEEP): below that rate it is unfixed,
    at it it is fixed on its committed bottleneck `bn`. Events run in level order from one indexed heap
    (item l: dirty link l fills; n_ids + l: a RELEASE check of link l; 2 n_ids + g: group g's cap):
    - a dirty link fills: its unfixed groups, and kept groups whose rate lies above the level, are fixed
      at the level on it;
    - an unfixed group reaches its cap;
    - RELEASE: a kept group's bottleneck is dirty; if that link no longer fills at the group's rate, the
      group takes another of its links that does (or its cap) at the same rate, else it becomes unfixed.
    A group whose status changes makes its links dirty, so the work follows the groups whose rate can
    change. Writes the slots, rates and bottlenecks of the groups re-solved (rate unchanged where only the
    bottleneck moved) into out / rates / bns (room for every group) and returns (ok, how many); ok is
    False once more than `limit` groups left KEEP (the caller solves from scratch). Exact: everything skipped
    behaves as in the previous solution's progressive filling.
    Scratch arrays come from the caller (`cascade_scratch`) and are left as found: group_int (4, slots),
    group_flag (2, slots) int8 zeros, new_rate (slots), link_flag (3, n_ids) int8 zeros, heap_int (2, items)
    whose second row is -1, heap_key (items), stack (2 n_ids), items = 2 n_ids + slots; scratch_rate and
    scratch_n as wide as `member`.
    One function on purpose: every event kind shares the statuses and the heap.
    """
    n_ids = cap.shape[0]
    n_links = n_ids - 1
    n_slots = links.shape[0]
    new_bn, touched, changed, rebound = group_int[0], group_int[1], group_int[2], group_int[3]
    status, listed = group_flag[0], group_flag[1]     # listed: a kept group whose bottleneck moved (new_bn)
    lstate, queued, stale = link_flag[0], link_flag[1], link_flag[2]
    heap, pos = heap_int[0], heap_int[1]
    n_touched = 0
    n_rebound = 0
    n_dirty = 0                                        # links that left CLEAN, listed from stack[n_ids] on
    aborted = False
    size = 0
    top = 0
    for i in range(seeds.shape[0]):
        g = seeds[i]
        if status[g] != _KEEP:
            continue
        status[g] = _FREE
        touched[n_touched] = g
        n_touched += 1
        if gcap[g] < np.inf:
            size = heap_set(heap, heap_key, pos, size, 2 * n_ids + g, gcap[g])
        for k in range(n_slots):
            lid = links[k, g]
            if lid < n_links and not queued[lid]:
                queued[lid] = True
                stack[top] = lid
                top += 1
    for i in range(dirty.shape[0]):
        lid = dirty[i]
        if lid < n_links and not queued[lid]:
            queued[lid] = True
            stack[top] = lid
            top += 1
    level = 0.0
    while True:
        # re-examine the links whose members changed status: new fill level, first RELEASE check
        while top > 0:
            top -= 1
            lid = stack[top]
            queued[lid] = False
            stale[lid] = False
            if lstate[lid] == _DONE:
                continue
            if lstate[lid] == _CLEAN:
                lstate[lid] = _DIRTY
                stack[n_ids + n_dirty] = lid
                n_dirty += 1
                lowest = np.inf
                for j in range(deg[lid]):
                    g = member[lid, j]
                    if status[g] == _KEEP and (new_bn[g] if listed[g] else bn[g]) == lid and rate[g] < lowest:
                        lowest = rate[g]
                if lowest < np.inf:
                    size = heap_set(heap, heap_key, pos, size, n_ids + lid, lowest)
            fill_at = link_level(lid, level, cap, member, deg, n, rate, status, new_rate, scratch_rate, scratch_n)
            if fill_at < np.inf:
                size = heap_set(heap, heap_key, pos, size, lid, fill_at)
            else:
                size = heap_drop(heap, heap_key, pos, size, lid)
        if size == 0:
            break
        item, at = heap[0], heap_key[0]
        size = heap_drop(heap, heap_key, pos, size, item)
        if at > level:
            level = at
        n_changed = 0
        if item >= 2 * n_ids:                       # a cap
            who = item - 2 * n_ids
            if status[who] != _FREE:
                continue
            status[who] = _FIXED
            new_rate[who] = gcap[who]
            new_bn[who] = -1
            changed[0] = who
            n_changed = 1
        elif item < n_ids:                          # a link fills
            who = item
            if stale[who]:                          # its key is a lower bound: refresh it first
                stale[who] = False
                fill_at = link_level(who, level, cap, member, deg, n, rate, status, new_rate, scratch_rate,
                                     scratch_n)
                if fill_at > at:
                    if fill_at < np.inf:
                        size = heap_set(heap, heap_key, pos, size, who, fill_at)
                    continue
            lstate[who] = _DONE
            size = heap_drop(heap, heap_key, pos, size, n_ids + who)
            for j in range(deg[who]):
                g = member[who, j]
                if status[g] == _FREE or (status[g] == _KEEP and rate[g] > level * (1.0 + eps)):
                    if status[g] == _KEEP:
                        touched[n_touched] = g
                        n_touched += 1
                    else:
                        size = heap_drop(heap, heap_key, pos, size, 2 * n_ids + g)
                    status[g] = _FIXED
                    new_rate[g] = level
                    new_bn[g] = who
                    changed[n_changed] = g
                    n_changed += 1
        else:                                       # RELEASE
            who = item - n_ids
            if link_level(who, level, cap, member, deg, n, rate, status, new_rate, scratch_rate,
                          scratch_n) > at * (1.0 + eps):
                for j in range(deg[who]):
                    g = member[who, j]
                    if status[g] != _KEEP or (new_bn[g] if listed[g] else bn[g]) != who or \
                            rate[g] > at * (1.0 + eps):
                        continue
                    other = -2
                    if gcap[g] <= rate[g] * (1.0 + eps):
                        other = -1
                    else:
                        for k in range(n_slots):
                            lid = links[k, g]
                            if lid >= n_links or lid == who:
                                continue
                            if lstate[lid] == _CLEAN and load[lid] < cap[lid] * (1.0 - eps):
                                continue                # as committed, and not full: not a bottleneck
                            if lstate[lid] == _DONE or link_level(lid, level, cap, member, deg, n, rate, status,
                                                                  new_rate, scratch_rate, scratch_n) \
                                    <= rate[g] * (1.0 + eps):
                                other = lid
                                break
                    if other >= -1:                # same rate, another bottleneck
                        new_bn[g] = other
                        if not listed[g]:
                            listed[g] = True
                            rebound[n_rebound] = g
                            n_rebound += 1
                        if other >= 0 and lstate[other] == _DIRTY:
                            where = pos[n_ids + other]
                            if where < 0 or heap_key[where] > rate[g]:
                                size = heap_set(heap, heap_key, pos, size, n_ids + other, rate[g])
                        continue
                    touched[n_touched] = g
                    n_touched += 1
                    changed[n_changed] = g
                    n_changed += 1
                    status[g] = _FREE
                    if gcap[g] < np.inf:
                        size = heap_set(heap, heap_key, pos, size, 2 * n_ids + g, gcap[g])
            lowest = np.inf                        # kept groups bottlenecked here at a higher rate (rare)
            for j in range(deg[who]):
                g = member[who, j]
                if status[g] == _KEEP and (new_bn[g] if listed[g] else bn[g]) == who and \
                        at * (1.0 + eps) < rate[g] < lowest:
                    lowest = rate[g]
            if lowest < np.inf:
                size = heap_set(heap, heap_key, pos, size, n_ids + who, lowest)
        if n_touched > limit:
            aborted = True
            break
        # every group whose status changed makes its links dirty. A fixed group only lowers its links' load
        # above the level, so a queued fill level stays a lower bound (marked stale, refreshed when it
        # reaches the top), and a clean link that is not full needs nothing (no kept group is bottlenecked
        # on it and none can be fixed on it before an unfixed group joins). An unfixed group raises the
        # load: its links are re-examined now.
        for i in range(n_changed):
            g = changed[i]
            lazy = status[g] == _FIXED
            for k in range(n_slots):
                lid = links[k, g]
                if lid < n_links and lstate[lid] != _DONE and not queued[lid]:
                    if lazy and lstate[lid] == _DIRTY:
                        stale[lid] = True
                    elif lazy and load[lid] < cap[lid] * (1.0 - eps):
                        pass        # clean and not full: it fills later still, above every kept rate on it
                    else:
                        queued[lid] = True
                        stack[top] = lid
                        top += 1
    ok = not aborted
    for i in range(size):                              # an abandoned cascade leaves items queued
        pos[heap[i]] = -1
    while top > 0:
        top -= 1
        queued[stack[top]] = False
    for i in range(n_dirty):
        lstate[stack[n_ids + i]] = _CLEAN
        stale[stack[n_ids + i]] = False
    extra = 0
    for i in range(n_rebound):
        if status[rebound[i]] == _KEEP:
            extra += 1
    count = n_touched + extra if ok else 0
    j = 0
    for i in range(n_touched):
        g = touched[i]
        if ok:
            out[j] = g
            if status[g] == _FREE:             # no link and no cap (cannot happen on a real path)
                rates[j] = np.inf
                bns[j] = -1
            else:
                rates[j] = new_rate[g]
                bns[j] = new_bn[g]
            j += 1
        status[g] = _KEEP
        listed[g] = False
    for i in range(n_rebound):
        g = rebound[i]
        if ok and status[g] == _KEEP and listed[g]:
            out[j] = g
            rates[j] = rate[g]
            bns[j] = new_bn[g]
            j += 1
        status[g] = _KEEP
        listed[g] = False
    return ok, count


@njit
def commit_slots_numba(now, slots, new_rate, new_bn, links, flows, rate, bn, work, last_t, next_work, due, load,
                       cap, link_bytes, link_saturated, link_t, same, full):
    """Same contract as kernels.commit_slots_numpy: commit the re-solved groups `slots` whose rate moved,
    integrate the telemetry of their links up to now at the old load, then move the load."""
    n_links = cap.shape[0]
    seen = np.zeros(n_links + 1, dtype=np.bool_)
    moved = np.empty(slots.shape[0], dtype=np.int64)
    n_moved = 0
    count = 0
    for i in range(slots.shape[0]):
        g = slots[i]
        bn[g] = new_bn[i]
        if rate_kept(new_rate[i], rate[g], same):
            continue
        moved[n_moved] = i
        n_moved += 1
        count = mark_links(links, g, n_links, seen, count)
    touched = np.empty(count, dtype=np.int64)
    starts = np.empty(count)
    loads = np.empty(count)
    j = 0
    for lid in range(n_links):
        if seen[lid]:
            touched[j] = lid
            start = link_t[lid]
            starts[j] = start
            loads[j] = load[lid]
            if now > start:
                if load[lid] > 0:
                    link_bytes[lid] += load[lid] * (now - start)
                    if load[lid] >= cap[lid] * full:
                        link_saturated[lid] += now - start
                link_t[lid] = now
            j += 1
    for m in range(n_moved):
        i = moved[m]
        g = slots[i]
        old = commit_group(now, g, new_rate[i], 0.0, rate, work, last_t, next_work, due)   # moved: kept out above
        delta = (new_rate[i] - old) * flows[g]
        for k in range(links.shape[0]):
            lid = links[k, g]
            if lid < n_links:
                load[lid] += delta
    return touched, starts, loads
