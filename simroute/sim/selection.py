"""Sparse selection (DSA / NSA, paper §5.4): each step's top-k entries are spread over M holders.

route sends the query to each of the M holders in parallel and merges M partials (the step waits for the
slowest); fetch gathers the k entries from the M holders serially (no splice) and, since the selection is
re-chosen every step, does so every step; local re-prefills the attended chunks once.
"""

from __future__ import annotations

import numpy as np

from simroute.model.predicate import FETCH, LOCAL, ROUTE
from simroute.sim.policy import choose
from simroute.sim.request import FIRST_TOUCH


class SelectionFlow:
    """Selection behaviour; a mixin of Simulation like RequestFlow."""

    def _selection_holders(self, r: int, req_inst, chunk_idx: list[int], M: int) -> list[int]:
        hs: list[int] = []
        for ci in chunk_idx:
            h = self._pick_holder(ci, req_inst)
            if h is None:
                self._decision(r, ci, req_inst.id, FIRST_TOUCH)
            elif h not in hs:
                hs.append(h)
        n = len(self.instances)
        j = 0
        while M > 0 and len(hs) < min(M, n) and j < 4 * n:   # the trace says the selection spans M holders
            cand = (r * 7919 + j * 104729) % n
            if cand not in hs and cand != req_inst.id:   # M remote holders, as the trace says
                hs.append(cand)
            j += 1
        return hs[:M] if M > 0 else hs

    def _gather(self, r: int, req_inst, holders: list[int], topk: int, steps: float):
        """Serial per-holder gather of k/M entries over all layers, `steps` times (host-copy bound, §5.4)."""
        p = self.params
        L = p.geometry.layers
        M = max(len(holders), 1)
        entries = topk / M
        per_holder_s = L * (p.gather_base_s * topk / p.gather_k_ref / M + p.gather_per_holder_s) * steps
        for h in holders:
            holder = self.instances[h]
            nbytes = entries * self.kv_bytes_per_token * steps
            if holder is req_inst:
                continue
            yield self.net.transfer(holder.gpu, req_inst.gpu, nbytes, rate_cap_Bps=nbytes / per_holder_s,
                                    tag="gather")
            self.rec.bytes_fetch[r] += nbytes

    def _route_fanout(self, r: int, req_inst, holders: list[int], rows: float, topk: int, weight: float):
        M = max(len(holders), 1)
        waits = []
        for h in holders:
            if h == req_inst.id:
                continue
            done, nbytes = self._exchange(req_inst, self.instances[h], rows, 0.0, max(topk / M, 1.0), weight)
            waits.append(done)
            self.rec.bytes_route[r] += nbytes
        if waits:
            yield self.env.all_of(waits)
        yield self.env.timeout(self.params.merge_s * weight)

    def _selection_first(self, r: int, req_inst, chunk_idx: list[int], prompt: int, output: int, topk: int,
                         M: int):
        p = self.params
        heads = p.geometry.heads_q
        holders = self._selection_holders(r, req_inst, chunk_idx, M)
        remote = [h for h in holders if h != req_inst.id]
        if not remote:
            return (LOCAL, holders, float(self.chunks.tokens[chunk_idx].sum()) if chunk_idx else 0.0)
        tokens = float(self.chunks.tokens[chunk_idx].sum())
        fabs = np.array([self.fabric_id(req_inst, self.instances[remote[0]])])
        c = int(choose(self.cfg.policy, p, mq_first=heads * max(prompt, 1), mq_step=heads,
                       steps=max(output - 1, 0), ct=np.array([tokens]), fabric=fabs, cached=np.array([True]),
                       topk=topk, holders=len(remote))[0])
        for ci in chunk_idx:
            hs = self.chunks.holders[ci]
            if hs:
                self._decision(r, ci, hs[0], c)
        if c == ROUTE:
            yield from self._route_fanout(r, req_inst, remote, heads * max(prompt, 1), topk, p.exchanges)
        elif c == FETCH:
            yield from self._gather(r, req_inst, remote, topk, 1.0)
        else:
            yield from self._prefill(req_inst, tokens)
        return (c, remote, tokens)

    def _selection_decode(self, r: int, req_inst, sel, steps_left: int, topk: int, base: float):
        c, holders, tokens = sel
        p = self.params
        heads = p.geometry.heads_q
        attend = self._attend_s(heads, 0.0, topk)
        S = self.cfg.decode_steps_per_event
        while steps_left > 0:
            s = min(S, steps_left)
            if c == ROUTE:
                yield from self._route_fanout(r, req_inst, holders, heads, topk, s * p.exchanges)
                yield self.env.timeout(s * base)
            elif c == FETCH:
                yield from self._gather(r, req_inst, holders, topk, float(s))
                yield self.env.timeout(s * (base + attend))
            else:
                yield self.env.timeout(s * (base + attend))
            steps_left -= s
