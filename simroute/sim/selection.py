"""Sparse selection (DSA / NSA; Move the Query, Not the Cache, §5.4): each step's top-k entries are spread
over M holders.

route sends the query to each of the M holders in parallel and merges M partials (the step waits for the
slowest); fetch gathers the k entries from the M holders serially (no splice) and, since the selection is
re-chosen every step, does so every step; local re-prefills the attended chunks once.
"""

from __future__ import annotations

from simroute.sim.cluster import Instance
from simroute.sim.holder import ReplicaChoice
from simroute.sim.policy import RequestShape
from simroute.sim.request import RequestProcess, Steps, build_decision_context
from simroute.sim.vocab import Primitive


class SelectionRequest(RequestProcess):
    """A request whose attention is a top-k selection over the chunks of M holders (one decision for all)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.primitive = Primitive.LOCAL
        self.remote: list[int] = []      # the remote holders the selection spans

    def first_pass(self) -> Steps:
        ctx, spec = self.ctx, self.spec
        chunks = ctx.cluster.chunks
        holders = self.classify_chunks()
        self.remote = [h for h in holders if h != self.requester.id]
        tokens = float(chunks.tokens[spec.chunk_indices].sum()) if spec.chunk_indices else 0.0
        if not self.remote:
            return
        self.primitive = self.decide(tokens)
        for chunk in spec.chunk_indices:
            if chunks.holders[chunk]:
                self.record(chunk, chunks.holders[chunk][0], self.primitive)
        if self.primitive == Primitive.ROUTE:
            yield from self.route_fanout(self.mq_first, ctx.params.exchanges)
        elif self.primitive == Primitive.FETCH:
            yield from self.gather(1.0)
        else:
            yield from self.prefill(self.requester, tokens)

    def classify_chunks(self) -> list[int]:
        """The holders the selection spans: each chunk's holder (a chunk nobody holds is a first touch), filled
        up to the trace's `holders_spanned` with other instances."""
        ctx, spec, requester = self.ctx, self.spec, self.requester
        wanted = spec.holders_spanned
        holders: list[int] = []
        replicas = ReplicaChoice(ctx, requester)
        for chunk in spec.chunk_indices:
            holder = replicas.pick(chunk)
            if holder is None:
                self.record(chunk, requester.id, Primitive.FIRST_TOUCH)
            elif holder not in holders:
                holders.append(holder)
        n = len(ctx.cluster.instances)
        probe = 0
        while wanted > 0 and len(holders) < min(wanted, n) and probe < 4 * n:
            candidate = (spec.request_id * 7919 + probe * 104729) % n   # deterministic spread, no RNG state
            if candidate not in holders and candidate != requester.id:   # M remote holders, as the trace says
                holders.append(candidate)
            probe += 1
        return holders[:wanted] if wanted > 0 else holders

    def decide(self, tokens: float) -> Primitive:
        ctx, requester, spec = self.ctx, self.requester, self.spec
        instances = ctx.cluster.instances
        holders = [instances[h] for h in self.remote]
        shape = RequestShape(mq_first=self.mq_first, mq_step=self.heads, steps=self.decode_steps, tokens=tokens,
                             fabric=ctx.cluster.fabric_id(requester, holders[0]), cached=True, topk=spec.topk,
                             holders=len(holders), tp=ctx.config.tp)
        copy_bytes = tokens * ctx.compute.kv_bytes_per_token     # what local's re-prefill would keep resident
        return ctx.policy.choose(build_decision_context(ctx, requester, holders, shape, copy_bytes,
                                                        ctx.engines[requester.id].hbm.free_bytes))

    def route_fanout(self, rows: float, weight: float) -> Steps:
        """The query to every holder in parallel, each attending its k/M share; then the M-way merge."""
        ctx = self.ctx
        share = max(self.spec.topk / max(len(self.remote), 1), 1.0)
        waits = []
        for holder in self.remote:
            waits.append(ctx.exchanges.exchange(self.requester, ctx.cluster.instances[holder], rows, 0.0, share,
                                                weight))
            ctx.recorder.bytes_route[self.spec.request_id] += ctx.exchanges.wire_bytes(rows, weight)
        if waits:
            yield ctx.env.all_of(waits)
        yield ctx.env.timeout(ctx.params.merge_s * weight)

    def gather(self, steps: float) -> Steps:
        """Serial per-holder gather of k/M entries over all layers, `steps` times (host-copy bound)."""
        ctx, p = self.ctx, self.ctx.params
        layers = p.geometry.layers
        spanned = max(len(self.remote), 1)
        entries = self.spec.topk / spanned
        per_holder_s = layers * (p.gather_base_s * self.spec.topk / p.gather_k_ref / spanned
                                 + p.gather_per_holder_s) * steps
        for h in self.remote:
            holder: Instance = ctx.cluster.instances[h]
            nbytes = entries * ctx.compute.kv_bytes_per_token * steps
            yield ctx.network.transfer(holder.gpu, self.requester.gpu, nbytes, rate_cap_Bps=nbytes / per_holder_s,
                                       tag="gather")
            ctx.recorder.bytes_fetch[self.spec.request_id] += nbytes

    def decode(self) -> Steps:
        ctx, env = self.ctx, self.ctx.env
        attend = ctx.compute.attend_s(self.heads, 0.0, self.spec.topk)
        base, steps_left = self.step_base_s, self.decode_steps
        per_event = ctx.config.decode_steps_per_event
        while steps_left > 0:
            steps = min(per_event, steps_left)
            if self.primitive == Primitive.ROUTE:
                yield from self.route_fanout(self.heads, steps * ctx.params.exchanges)
                yield env.timeout(steps * base)
            elif self.primitive == Primitive.FETCH:
                yield from self.gather(float(steps))
                yield env.timeout(steps * (base + attend))
            else:
                yield env.timeout(steps * (base + attend))
            steps_left -= steps
