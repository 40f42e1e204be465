"""The compiled event loop of `simroute.network.replay` (numba; imported only by its `numba` backend).

State lives in arrays indexed by static group id (groups are known up front), so no slot moves: a group is
active while it has flows. Per group, its flows' finish work sits in an indexed min-heap segment sized by the
group's flow count over the whole replay (the engine's `_compiled.sift`). Per link, the incidences of its
active groups sit in a segment sized by the groups that ever use it, so a component search reads only
active ones. The max-min solve and the commit are the engine's kernels (`fill_groups_numba`,
`commit_rates_numba`), called on one component at a time with local link ids.
"""

from __future__ import annotations

import numpy as np

from simroute.network._compiled import (cascade_numba, commit_rates_numba, commit_slots_numba, completion_time,
                                        fill_groups_numba, finish_reached, instant_end, members_add, members_remove,
                                        njit, sift)


@njit
def _push_flow(heap_items, heap_key, heap_pos, base, size, flow, key):
    """Add a flow with finish work `key` to the group heap at heap_items[base:]; returns the new size."""
    items, keys = heap_items[base:], heap_key[base:]
    items[size] = flow
    sift(items, keys, heap_pos, size, size + 1, key)
    return size + 1


@njit
def _pop_flow(heap_items, heap_key, heap_pos, base, size):
    """Remove the group heap's first flow; returns (flow, new size)."""
    items, keys = heap_items[base:], heap_key[base:]
    top = items[0]
    size -= 1
    if size > 0:
        items[0] = items[size]
        sift(items, keys, heap_pos, 0, size, keys[size])
    return top, size


@njit
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


@njit
def _mark_links(first, n_groups, n_links, stamp, comp_groups, comp_links, link_stamp, local, link_ptr, links):
    """Add the unmarked links of comp_groups[first:n_groups] to comp_links, numbering them locally in visit
    order (local[link]); returns the new link count."""
    for c in range(first, n_groups):
        group = comp_groups[c]
        for e in range(link_ptr[group], link_ptr[group + 1]):
            link = links[e]
            if link_stamp[link] != stamp:
                link_stamp[link] = stamp
                local[link] = n_links
                comp_links[n_links] = link
                n_links += 1
    return n_links


@njit
def _component(n_groups, n_links, stamp, comp_groups, comp_links, group_stamp, link_stamp, local,
               link_ptr, links, inc_ptr, members, inc_group, size):
    """Grow the marked groups and links (comp_groups[:n_groups], comp_links[:n_links]) to their connected
    components. Returns (groups, links)."""
    head_group = head_link = 0
    while head_group < n_groups or head_link < n_links:
        n_links = _mark_links(head_group, n_groups, n_links, stamp, comp_groups, comp_links, link_stamp, local,
                              link_ptr, links)
        head_group = n_groups
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


@njit
def _all_active(n_groups, n_links, stamp, active, n_active, comp_groups, comp_links, group_stamp, link_stamp,
                local, link_ptr, links):
    """Mark every active group and its links (after a cascade gave up on a large set, where one component
    spans nearly everything: cheaper than growing the components link by link). Returns (groups, links)."""
    for j in range(n_active):
        group = active[j]
        if group_stamp[group] != stamp:
            group_stamp[group] = stamp
            comp_groups[n_groups] = group
            n_groups += 1
    return n_groups, _mark_links(0, n_groups, n_links, stamp, comp_groups, comp_links, link_stamp, local,
                                 link_ptr, links)


@njit
def _solve_component(now, n_groups, n_links, comp_groups, comp_links, local, link_ptr, links, capacity, gcap,
                     flows, rate, bn, work, last_t, next_work, due, buf_links, buf_f, buf_cap, same):
    """Max-min over one component with local link ids: the engine's fill and commit kernels on gathered
    columns, scattered back. buf_f rows: flows, cap, rate, work, last_t, next_work, due."""
    width = buf_links.shape[1]
    for c in range(n_groups):
        group = comp_groups[c]
        k = 0
        for e in range(link_ptr[group], link_ptr[group + 1]):
            buf_links[c, k] = local[links[e]]
            k += 1
        for pad in range(k, width):
            buf_links[c, pad] = n_links                     # the local sentinel
        buf_f[0, c], buf_f[1, c], buf_f[2, c] = flows[group], gcap[group], rate[group]
        buf_f[3, c], buf_f[4, c] = work[group], last_t[group]
        buf_f[5, c], buf_f[6, c] = next_work[group], due[group]
    for j in range(n_links):
        buf_cap[j] = capacity[comp_links[j]]
    buf_cap[n_links] = np.inf
    view = buf_links[:n_groups].T                     # (width, groups); a group's links adjacent
    new_rate, new_bn = fill_groups_numba(view, buf_f[0, :n_groups], buf_f[1, :n_groups], buf_cap[:n_links + 1])
    local_bn = np.empty(n_groups, dtype=np.int64)
    commit_rates_numba(now, new_rate, new_bn, view, buf_f[2], local_bn, buf_f[3], buf_f[4], buf_f[5], buf_f[6],
                       same, n_links)
    for c in range(n_groups):
        group = comp_groups[c]
        rate[group], work[group], last_t[group], due[group] = buf_f[2, c], buf_f[3, c], buf_f[4, c], buf_f[6, c]
        bn[group] = comp_links[local_bn[c]] if local_bn[c] >= 0 else local_bn[c]


@njit
def _widen(member):
    """The engine's link-membership rows (`_compiled.members_add`) twice as wide, contents kept."""
    wider = np.full((member.shape[0], 2 * member.shape[1]), -1, dtype=np.int64)
    wider[:, :member.shape[1]] = member
    return wider


@njit
def _cascade(now, seeds, dirty, n_active, limit_frac, floor, links_mat, flows, gcap, rate, bn, work, last_t,
             next_work, due, capacity, cap_padded, member, deg, load, telemetry, scratch, same):
    """The engine's incremental re-solve (`cascade_numba`) and slot commit over static group ids; False when
    it gives up (more than max(floor, limit_frac x active groups) would move): the caller solves the component.
    Returns (ok, groups re-solved)."""
    limit = max(floor, int(limit_frac * n_active))
    group_int, group_flag, new_rate, link_flag, heap_int, heap_key, stack = scratch
    # the committed-load argument is the capacity itself: every link reads as full, so the cascade skips nothing
    # (the replay's `load` is not kept as flows join and leave, which the skip would need)
    ok, slots, fresh, fresh_bn = cascade_numba(seeds, dirty, links_mat, flows, gcap, rate, bn, cap_padded,
                                               cap_padded, member, deg, limit, same, group_int, group_flag,
                                               new_rate, link_flag, heap_int, heap_key, stack)
    if not ok:
        return False, 0
    commit_slots_numba(now, slots, fresh, fresh_bn, links_mat, flows, rate, bn, work, last_t, next_work, due, load,
                       capacity, telemetry[0], telemetry[1], telemetry[2], same, 1.0)
    return True, slots.shape[0]


@njit
def replay_loop(order, arrival, nbytes, path_latency, of_flow, link_ptr, links, links_mat, gcap, flow_ptr, inc_ptr,
                width, capacity, finish, same, eps, cascade_from, cascade_limit, cascade_floor):
    """The event loop: per instant, completions due, arrivals, then a re-solve of the touched components.

    Kept as one loop over steps (what it does per step is in the helpers above). Returns
    [events, steps, solves, solved groups]; writes finish[flow] (last byte + path latency). The
    same-instant window (`flows.instant_end`) and the finish-together test (`flows.finish_reached`) are the
    engine's (`solvers.arrays.ArraySolver.step`, `solvers.groups.pop_done`), so both end the same flows at the same
    step.
    The re-solve is the engine's: from `cascade_from` active groups on, its cascade (which gives up past
    max(cascade_floor, cascade_limit x active groups), and then every active group is solved from scratch);
    else the touched components from scratch
    (with few groups the components are small, and a fill of them costs less than the cascade's fixed
    O(links) work per call). `links_mat`: the (width, groups) link ids padded with n_links, for the cascade.
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
    buf_links = np.empty((n_groups, width), dtype=np.int64)
    buf_f = np.empty((7, n_groups))
    buf_cap = np.empty(n_links + 1)
    n_ids = n_links + 1                                   # the cascade's arrays: links + the sentinel
    cap_padded = np.full(n_ids, np.inf)
    cap_padded[:n_links] = capacity
    member = np.full((n_ids, 8), -1, dtype=np.int64)
    deg = np.zeros(n_ids, dtype=np.int64)
    load = np.zeros(n_ids)
    telemetry = np.zeros((3, n_links))                    # the slot commit integrates link bytes: unread here
    heap_int = np.empty((2, 2 * n_ids + n_groups), dtype=np.int64)
    heap_int[1] = -1
    scratch = (np.zeros((4, n_groups), dtype=np.int64), np.zeros((2, n_groups), dtype=np.int8), np.zeros(n_groups),
               np.zeros((3, n_ids), dtype=np.int8), heap_int, np.empty(2 * n_ids + n_groups),
               np.empty(2 * n_ids, dtype=np.int64))
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
        limit = instant_end(now)
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
                if done > 0 and not finish_reached(key, work[group], eps):
                    break
                flow, heap_size[group] = _pop_flow(heap_items, heap_key, heap_pos, base, heap_size[group])
                finish[flow] = now + path_latency[flow]
                done += 1
            events += done
            flows[group] -= done
            if heap_size[group] == 0:                             # the group is gone: its links seed
                _link_incidences(group, False, link_ptr, links, inc_ptr, members, where, size)
                members_remove(member, deg, links_mat, group, group, n_links)
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
                due[group] = completion_time(now, next_work[group], work[group], rate[group])
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
                while not members_add(member, deg, links_mat, group, n_links):
                    member = _widen(member)
            elif now > last_t[group]:
                work[group] += rate[group] * (now - last_t[group])
                last_t[group] = now
            heap_size[group] = _push_flow(heap_items, heap_key, heap_pos, flow_ptr[group], heap_size[group], flow,
                                          work[group] + nbytes[flow])
            flows[group] += 1
            events += 1
            next_work[group] = heap_key[flow_ptr[group]]
            due[group] = completion_time(now, next_work[group], work[group], rate[group])
            if group_stamp[group] != stamp:
                group_stamp[group] = stamp
                comp_groups[n_comp] = group
                n_comp += 1
        if n_active >= cascade_from and cascade_limit > 0 and (n_comp or n_comp_links):
            ok, moved = _cascade(now, comp_groups[:n_comp], comp_links[:n_comp_links], n_active, cascade_limit,
                                 cascade_floor, links_mat, flows, gcap, rate, bn, work, last_t, next_work, due,
                                 capacity, cap_padded, member, deg, load, telemetry, scratch, same)
            if ok:
                solves += 1
                solved += moved
                continue
            n_comp, n_comp_links = _all_active(n_comp, n_comp_links, stamp, active, n_active, comp_groups,
                                               comp_links, group_stamp, link_stamp, local, link_ptr, links)
        else:
            n_comp, n_comp_links = _component(n_comp, n_comp_links, stamp, comp_groups, comp_links, group_stamp,
                                              link_stamp, local, link_ptr, links, inc_ptr, members, inc_group,
                                              size)
        if n_comp:
            solves += 1
            solved += n_comp
            _solve_component(now, n_comp, n_comp_links, comp_groups, comp_links, local, link_ptr, links,
                             capacity, gcap, flows, rate, bn, work, last_t, next_work, due, buf_links, buf_f,
                             buf_cap, same)
    return np.array([events, steps, solves, solved], dtype=np.int64)
