"""What one request does (DESIGN §2): prefill its own tokens, attend every chunk by route / fetch / local
(TTFT), then decode, each step attending the chunks again (TPOT). A mixin of `Simulation` (runner.py).

Decode is simulated in macro-steps of S steps (`decode_steps_per_event`): one simulated exchange stands
for S x exchanges-per-step (L per-layer, or 1) back-to-back exchanges, its probe, bytes and holder
compute scaled by that weight. S = 1 is exact; larger S trades fidelity of queue dynamics for speed.
"""

from __future__ import annotations

from simroute.model.predicate import FETCH, ROUTE
from simroute.model.scalar import _interp
from simroute.sim.placement import mix64
from simroute.sim.policy import choose_scalar

RESIDENT, FIRST_TOUCH = 3, 4     # decision codes beside ROUTE / FETCH / LOCAL


class RequestFlow:
    """Request behaviour; expects the attributes that Simulation.__init__ sets."""

    # ---- helpers ------------------------------------------------------------------------------
    def _prefill(self, inst, tokens: float):
        """Hold the instance's compute for a prefill of `tokens` tokens (own prompt or a re-prefill)."""
        if tokens <= 0:
            return
        yield from inst.compute.hold(tokens * self.prefill_s_per_token)

    def _work(self, rows: float, ct: float, topk: int) -> tuple[float, float]:
        """(work in reference requesters, sparse premium) of a partial over ct tokens / top-k entries."""
        p = self.params
        attended = (topk if topk > 0 else ct) * p.geometry.token_fraction
        work = rows / p.holder_heads_ref * attended / p.holder_ct_ref
        prem = _interp(min(max(topk, p.sparse_k[0]), p.sparse_k[-1]), p.sparse_k, p.sparse_premium) if topk > 0 \
            else 1.0
        return work, prem

    def _exchange(self, req_inst, holder, rows: float, ct: float, topk: int, weight: float):
        """One routed exchange (x weight) through the requester's dispatcher: query out, batched partial on the
        holder, partial back. Returns (event that fires when the partial is back, this request's wire bytes)."""
        g = self.params.geometry
        ev = self.dispatchers.submit(req_inst, holder, rows, ct, topk, weight)
        return ev, rows * g.qp_bytes * weight

    def _attend_s(self, rows: float, ct: float, topk: int) -> float:
        """The requester's own attention over a resident copy, per step (all exchanges of the step)."""
        work, prem = self._work(rows, ct, topk)
        return self.holder_curve(work) * prem * self.params.exchanges

    def _pick_holder(self, ci: int, req_inst) -> int | None:
        hs = self.chunks.holders[ci]
        if not hs:
            return None
        if len(hs) == 1:
            return hs[0]
        same_host = [h for h in hs if self.instances[h].host == req_inst.host]
        pool = same_host or hs
        # Least-queued replica; ties spread requesters over replicas by a hash (not all onto the lowest id).
        return min(pool, key=lambda h: (len(self.instances[h].holder.queue), mix64(h * 1_000_003 + req_inst.id)))

    # ---- primitives at TTFT ------------------------------------------------------------------------
    def _copy(self, ci: int, req_inst, make):
        """Make a resident copy of chunk `ci` on `req_inst` with the generator `make`, unless one is already
        being made there (then wait for it): two requests on one instance never move or prefill a chunk twice."""
        key = (ci, req_inst.id)
        pending = self.chunks.pending.get(key)
        if pending is not None:
            yield pending
            return
        ev = self.env.event()
        self.chunks.pending[key] = ev
        try:
            yield from make()
            self.chunks.add_copy(ci, req_inst)
        finally:
            del self.chunks.pending[key]
            ev.succeed()

    def _fetch(self, r: int, ci: int, req_inst, holder, cached: bool, attend_s: float):
        nbytes = float(self.chunks.bytes[ci])

        def make():
            yield from holder.staging.stage(nbytes)
            fab = self.fabric(req_inst, holder)
            # Tensor-parallel rank pairs each move 1/tp of the latent in parallel (on their own NICs).
            yield self.net.transfer(holder.gpu, req_inst.gpu, nbytes / self.cfg.tp, rate_cap_Bps=fab.bulk_Bps,
                                    tag="fetch")
            self.rec.bytes_fetch[r] += nbytes
            if not cached:
                yield from req_inst.compute.hold(self.splice_s(float(self.chunks.tokens[ci])))
        yield from self._copy(ci, req_inst, make)
        yield self.env.timeout(attend_s)       # the first token's attention over the copy, on the requester

    def _local(self, ci: int, req_inst, attend_s: float):
        yield from self._copy(ci, req_inst, lambda: self._prefill(req_inst, float(self.chunks.tokens[ci])))
        yield self.env.timeout(attend_s)

    def _route_first(self, r: int, ci: int, req_inst, holder, rows: float):
        done, nbytes = self._exchange(req_inst, holder, rows, float(self.chunks.tokens[ci]), 0,
                                      self.params.exchanges)
        yield done
        yield self.env.timeout(self.params.merge_s * self.params.exchanges)
        self.rec.bytes_route[r] += nbytes

    def _pin(self, pins: list, ci: int, inst: int) -> None:
        self.chunks.pin(ci, inst)
        pins.append((ci, inst))

    # ---- the request ---------------------------------------------------------------------------------
    def request(self, r: int, req_inst, prefill_inst, prompt: int, output: int, chunk_idx: list[int],
                cached: list[bool], topk: int, holders_spanned: int):
        env, rec, p = self.env, self.rec, self.params
        t0 = env.now
        rec.arrival[r] = t0
        rec.requester[r] = req_inst.id
        req_inst.active += 1
        self.active[req_inst.id] += 1
        heads = p.geometry.heads_q
        tp = self.cfg.tp
        # 1. Own prompt: prefilled locally, or on the prefill instance and shipped (PD disaggregation).
        lb_pd = 0.0
        if prefill_inst is not None and prefill_inst is not req_inst:
            yield from self._prefill(prefill_inst, prompt)
            kv = prompt * self.kv_bytes_per_token
            fab = self.fabric(prefill_inst, req_inst)
            yield self.net.transfer(prefill_inst.gpu, req_inst.gpu, kv / tp, rate_cap_Bps=fab.bulk_Bps, tag="pd")
            rec.bytes_pd[r] += kv
            lb_pd = kv / tp / fab.bulk_Bps
        else:
            yield from self._prefill(req_inst, prompt)
        lb_chunks = 0.0
        routed: list[tuple[int, int]] = []       # (chunk index, holder) attended by route every step
        resident: list[int] = []
        pins: list[tuple[int, int]] = []         # copies this request relies on: not evicted while it runs
        mq_first = heads * max(prompt, 1)
        if topk > 0:
            sel = yield from self._selection_first(r, req_inst, chunk_idx, prompt, output, topk, holders_spanned)
        else:
            sel = None
            ops = []
            resident_attend = 0.0                # the requester's own attention over copies it already holds
            remote, remote_holder, remote_cached = [], [], []
            for ci, cf in zip(chunk_idx, cached):
                ct = float(self.chunks.tokens[ci])
                a1 = self._attend_s(mq_first, ct, 0)
                if self.chunks.resident_on(ci, req_inst.id) or (ci, req_inst.id) in self.chunks.pending:
                    joining = (ci, req_inst.id) in self.chunks.pending
                    self.chunks.touch(ci, req_inst)
                    self._pin(pins, ci, req_inst.id)
                    resident.append(ci)
                    self._decision(r, ci, req_inst.id, RESIDENT)
                    if joining:
                        ops.append(env.process(self._local(ci, req_inst, a1)))
                    else:
                        resident_attend += a1
                    lb_chunks = max(lb_chunks, a1)
                    continue
                h = self._pick_holder(ci, req_inst)
                if h is None:                       # nobody holds it: prefill it here (first touch)
                    self._pin(pins, ci, req_inst.id)
                    ops.append(env.process(self._local(ci, req_inst, a1)))
                    resident.append(ci)
                    self._decision(r, ci, req_inst.id, FIRST_TOUCH)
                    lb_chunks = max(lb_chunks, ct * self.prefill_s_per_token + a1)
                    continue
                remote.append(ci)
                remote_holder.append(h)
                remote_cached.append(cf)
            if remote:
                free = req_inst.free_bytes
                adaptive = self.cfg.policy == "adaptive"
                for ci, h, cf in zip(remote, remote_holder, remote_cached):
                    holder = self.instances[h]
                    ct = float(self.chunks.tokens[ci])
                    fab = self.fabric_id(req_inst, holder)
                    c = choose_scalar(self.cfg.policy, self.scalar, mq_first=mq_first, mq_step=heads,
                                      steps=max(output - 1, 0), ct=ct, fabric=fab, cached=cf, tp=tp,
                                      # per exchange, if the holder's current queue persists
                                      holder_wait_s=len(holder.holder.queue) * self.holder_curve(1.0),
                                      hbm_free=free > float(self.chunks.bytes[ci]),
                                      path_share_Bps=self.path_share(holder, req_inst) if adaptive else None)
                    r1, _, m1, a1, pre = self.floor_model.step(mq_first, ct, fab, cf, tp=tp)
                    lb_chunks = max(lb_chunks, min(r1, m1 + a1, pre + a1))
                    self._decision(r, ci, h, c)
                    if c == ROUTE:
                        self._pin(pins, ci, h)
                        ops.append(env.process(self._route_first(r, ci, req_inst, holder, mq_first)))
                        routed.append((ci, h))
                    else:
                        self._pin(pins, ci, req_inst.id)
                        resident.append(ci)
                        if c == FETCH:
                            ops.append(env.process(self._fetch(r, ci, req_inst, holder, cf, a1)))
                            free -= float(self.chunks.bytes[ci])
                        else:
                            ops.append(env.process(self._local(ci, req_inst, a1)))
            if resident_attend > 0:   # one kernel sequence on the requester's GPU: the copies' attends add up
                ops.append(env.timeout(resident_attend))
            if ops:
                yield env.all_of(ops)
        rec.ttft[r] = env.now - t0
        rec.ttft_floor[r] = prompt * self.prefill_s_per_token + lb_pd + lb_chunks
        # 2. Decode: every step attends every chunk again.
        t1 = env.now
        steps_left = max(output - 1, 0)
        attend = sum(self._attend_s(heads, float(self.chunks.tokens[ci]), 0) for ci in resident)
        base = self.cfg.decode_base_ms * 1e-3
        S = self.cfg.decode_steps_per_event
        if sel is not None:
            yield from self._selection_decode(r, req_inst, sel, steps_left, topk, base)
        elif not routed:
            if steps_left:
                yield env.timeout(steps_left * (base + attend))
        else:
            while steps_left > 0:
                s = min(S, steps_left)
                w = s * p.exchanges
                # The requester attends its resident copies while the routed partials are on their way.
                waits = [env.timeout(s * attend)] if attend > 0 else []
                for ci, h in routed:
                    done, nbytes = self._exchange(req_inst, self.instances[h], heads,
                                                  float(self.chunks.tokens[ci]), 0, w)
                    waits.append(done)
                    rec.bytes_route[r] += nbytes
                yield env.all_of(waits)
                yield env.timeout(p.merge_s * w + s * base)
                steps_left -= s
        rec.tpot[r] = (env.now - t1) / (output - 1) if output > 1 else 0.0
        rec.e2e[r] = env.now - t0
        for ci, inst in pins:
            self.chunks.unpin(ci, inst)
        rec.status[r] = 1
        req_inst.active -= 1
        self.active[req_inst.id] -= 1
        self.completed += 1
        self.done_event(r).succeed()
