"""numba kernels of the flow engine (imported only when numba is installed; see kernels.py).

Module-level functions, so numba's on-disk cache (`cache=True`) keeps the machine code between runs.
"""

from __future__ import annotations

import numba
import numpy as np

njit = numba.njit(cache=True, nogil=True)



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
def commit_rates_numba(now, new_rate, new_bn, links, rate, bn, work, last_t, next_work, due, same, n_links):
    """Same contract as kernels.commit_rates_numpy: commit the groups whose rate moved, return their links."""
    groups = new_rate.shape[0]
    touched = np.zeros(n_links + 1, dtype=np.bool_)
    count = 0
    for g in range(groups):
        bn[g] = new_bn[g]
        fresh, old = new_rate[g], rate[g]
        if abs(fresh - old) <= same * old:
            continue
        if now > last_t[g]:
            work[g] += old * (now - last_t[g])
            last_t[g] = now
        rate[g] = fresh
        due[g] = now + (next_work[g] - work[g]) / fresh if fresh > 0 else np.inf
        for k in range(links.shape[0]):
            lid = links[k, g]
            if lid < n_links and not touched[lid]:
                touched[lid] = True
                count += 1
    out = np.empty(count, dtype=np.int64)
    j = 0
    for lid in range(n_links):
        if touched[lid]:
            out[j] = lid
            j += 1
    return out
