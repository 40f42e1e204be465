"""A request's life as named steps (the request semantics of Move the Query, Not the Cache, §2 and §5):

1. `own_prefill`: its own prompt, on the requester or on a prefill instance and shipped (PD disaggregation);
2. `classify_chunks`: each chunk it attends is resident, being copied here, never prefilled (first touch),
   or remote;
3. `decide`: route / fetch / local per remote unit, by the run's `Policy` on one `DecisionContext`;
4. `first_pass`: the first token attends every chunk (TTFT);
5. `decode`: every further token attends them again (TPOT);
6. `finish`: records, unpins the copies it relied on, wakes closed-loop children.

`DenseRequest` attends whole chunks; `SelectionRequest` (selection.py) a sparse top-k selection over M
holders. Decode is simulated in macro-steps of S steps (`decode_steps_per_event`): one simulated exchange
stands for S x exchanges-per-step (L per-layer, or 1) back-to-back exchanges, its probe, bytes and holder
compute scaled by that weight. S = 1 is exact; larger S trades fidelity of queue dynamics for speed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import simpy

from simroute.sim.arrivals import RequestSpec
from simroute.sim.cluster import Instance
from simroute.sim.context import SimContext
from simroute.sim.policy import DecisionContext, LiveState, RequestShape
from simroute.sim.vocab import DropReason, Primitive

Steps = Iterator[simpy.Event]


def launch(ctx: SimContext, spec: RequestSpec) -> None:
    """Start one request: its requester from the router, its prefill instance from the trace's hint."""
    from simroute.sim.selection import SelectionRequest
    requester = ctx.router.pick(spec, ctx.cluster)
    instances = ctx.cluster.instances
    if requester is None or spec.prefill_hint >= len(instances):
        ctx.recorder.drop(spec.request_id, DropReason.REQUESTER_OUT_OF_RANGE)
        ctx.done_event(spec.request_id).succeed()
        return
    prefill = instances[spec.prefill_hint] if spec.prefill_hint >= 0 else None
    kind = SelectionRequest if spec.topk > 0 else DenseRequest
    ctx.env.process(kind(ctx, spec, requester, prefill).run())


def path_share_Bps(ctx: SimContext, src: Instance, dst: Instance) -> float:
    """Bytes/s a new transfer src -> dst would get now (the network engine's least link share over the path):
    live link state for policies that ask for it."""
    return ctx.network.path_share(src.gpu, dst.gpu)


def build_decision_context(ctx: SimContext, requester: Instance, holders: Sequence[Instance], shape: RequestShape,
                           copy_bytes: float, free_bytes: float) -> DecisionContext:
    """The one place a `DecisionContext` is made (dense chunks and sparse selections alike). Live state is
    measured only for a policy that reads it: the busiest holder's queue, the tightest holder -> requester
    path, whether `copy_bytes` fit in `free_bytes` of the requester's HBM."""
    live = None
    if ctx.policy.needs_live_state:
        per_query_s = ctx.compute.batch_s(1.0)
        live = LiveState(holder_wait_s=max(len(h.holder_server.queue) for h in holders) * per_query_s,
                         path_share_Bps=min(path_share_Bps(ctx, h, requester) for h in holders),
                         hbm_free=free_bytes > copy_bytes)
    return DecisionContext(shape=shape, live=live, params=ctx.params, model=ctx.model)


@dataclass
class RemoteChunk:
    """A chunk some other instance holds, and what was decided for it."""

    chunk: int
    holder: int
    cached: bool
    primitive: Primitive = Primitive.ROUTE


@dataclass
class ChunkPlan:
    """What `classify_chunks` found and `decide` settled, in the chunks' order."""

    prefill_here: list[int] = field(default_factory=list)   # joining a copy being made, or first touch
    resident_attend_s: float = 0.0                          # own attention over copies already held
    remote: list[RemoteChunk] = field(default_factory=list)


class RequestProcess:
    """The steps every request shares; subclasses attend their chunks (`first_pass`, `decode`).

    Contract for a subclass: `first_pass` runs classification, decision and the first pass, records its
    decisions and adds its own share of the TTFT floor to `self.floor_chunks_s`; `decode` runs the remaining
    `output_tokens - 1` steps. Pins go through `pin` so `finish` releases them.
    """

    def __init__(self, ctx: SimContext, spec: RequestSpec, requester: Instance, prefill: Instance | None) -> None:
        self.ctx, self.spec, self.requester, self.prefill_instance = ctx, spec, requester, prefill
        self.pins: list[tuple[int, int]] = []     # (chunk, instance) copies relied on: not evicted meanwhile
        self.floor_pd_s = 0.0
        self.floor_chunks_s = 0.0
        self.heads = ctx.params.geometry.heads_q
        self.mq_first = self.heads * max(spec.prompt_tokens, 1)
        self.decode_steps = max(spec.output_tokens - 1, 0)
        self.step_base_s = ctx.config.decode_base_ms * 1e-3

    def run(self) -> Steps:
        ctx, spec, recorder = self.ctx, self.spec, self.ctx.recorder
        start = ctx.env.now
        self.begin(start)
        yield from self.own_prefill()
        yield from self.first_pass()
        recorder.ttft[spec.request_id] = ctx.env.now - start
        recorder.ttft_floor[spec.request_id] = (ctx.compute.prefill_s(spec.prompt_tokens) + self.floor_pd_s
                                                + self.floor_chunks_s)
        first_token = ctx.env.now
        yield from self.decode()
        recorder.tpot[spec.request_id] = (ctx.env.now - first_token) / (spec.output_tokens - 1) \
            if spec.output_tokens > 1 else 0.0
        recorder.e2e[spec.request_id] = ctx.env.now - start
        self.finish()

    def begin(self, now: float) -> None:
        recorder = self.ctx.recorder
        recorder.arrival[self.spec.request_id] = now
        recorder.requester[self.spec.request_id] = self.requester.id
        self.ctx.cluster.active[self.requester.id] += 1

    def own_prefill(self) -> Steps:
        """The prompt's own tokens: prefilled here, or on the prefill instance and its KV shipped here."""
        ctx, spec, requester, prefill = self.ctx, self.spec, self.requester, self.prefill_instance
        if prefill is None or prefill is requester:
            yield from self.prefill(requester, spec.prompt_tokens)
            return
        yield from self.prefill(prefill, spec.prompt_tokens)
        kv = spec.prompt_tokens * ctx.compute.kv_bytes_per_token
        fabric = ctx.cluster.fabric(prefill, requester)
        tp = ctx.config.tp
        yield ctx.network.transfer(prefill.gpu, requester.gpu, kv / tp, rate_cap_Bps=fabric.bulk_Bps, tag="pd")
        ctx.recorder.bytes_pd[spec.request_id] += kv
        self.floor_pd_s = kv / tp / fabric.bulk_Bps

    def first_pass(self) -> Steps:
        raise NotImplementedError

    def decode(self) -> Steps:
        raise NotImplementedError

    def finish(self) -> None:
        ctx = self.ctx
        for chunk, instance in self.pins:
            ctx.cluster.chunks.unpin(chunk, instance)
        ctx.recorder.complete(self.spec.request_id)
        ctx.cluster.active[self.requester.id] -= 1
        ctx.completed += 1
        ctx.done_event(self.spec.request_id).succeed()

    # ---- shared pieces -----------------------------------------------------------------------------------
    def prefill(self, inst: Instance, tokens: float) -> Steps:
        """Hold the instance's compute for a prefill of `tokens` tokens (own prompt or a re-prefill)."""
        if tokens <= 0:
            return
        yield from inst.compute.hold(self.ctx.compute.prefill_s(tokens))

    def pin(self, chunk: int, instance: int) -> None:
        self.ctx.cluster.chunks.pin(chunk, instance)
        self.pins.append((chunk, instance))

    def record(self, chunk: int, holder: int, primitive: Primitive) -> None:
        self.ctx.recorder.decision(self.spec.request_id, int(self.ctx.cluster.chunks.ids[chunk]), holder, primitive)

    def make_copy(self, chunk: int, make: Callable[[], Steps]) -> Steps:
        """Make a resident copy of `chunk` on the requester with the steps `make`, unless one is already being
        made there (then wait for it): two requests on one instance never move or prefill a chunk twice."""
        chunks, key = self.ctx.cluster.chunks, (chunk, self.requester.id)
        pending = chunks.pending.get(key)
        if pending is not None:
            yield pending
            return
        ready = self.ctx.env.event()
        chunks.pending[key] = ready
        try:
            yield from make()
            chunks.add_copy(chunk, self.requester)
        finally:
            del chunks.pending[key]
            ready.succeed()


class DenseRequest(RequestProcess):
    """Attends whole chunks: each remote chunk is routed, fetched or re-prefilled; copies are kept."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.routed: list[tuple[int, int]] = []    # (chunk, holder) attended by route every step
        self.resident: list[int] = []              # chunks attended from a copy on the requester

    def first_pass(self) -> Steps:
        plan = self.classify_chunks()
        self.decide(plan.remote)
        ops = self.start_first_pass(plan)
        if ops:
            yield self.ctx.env.all_of(ops)

    def classify_chunks(self) -> ChunkPlan:
        """Resident (or being copied here), first touch (nobody holds it: prefill here), or remote."""
        ctx, requester, spec = self.ctx, self.requester, self.spec
        chunks = ctx.cluster.chunks
        plan = ChunkPlan()
        for chunk, cached in zip(spec.chunk_indices, spec.cached):
            attend_s = ctx.compute.attend_s(self.mq_first, float(chunks.tokens[chunk]), 0)
            joining = (chunk, requester.id) in chunks.pending
            if joining or chunks.resident_on(chunk, requester.id):
                chunks.touch(chunk, requester)
                self.pin(chunk, requester.id)
                self.resident.append(chunk)
                self.record(chunk, requester.id, Primitive.RESIDENT)
                if joining:
                    plan.prefill_here.append(chunk)
                else:
                    plan.resident_attend_s += attend_s
                self.floor_chunks_s = max(self.floor_chunks_s, attend_s)
                continue
            holder = ctx.cluster.pick_holder(chunk, requester)
            if holder is None:
                self.pin(chunk, requester.id)
                plan.prefill_here.append(chunk)
                self.resident.append(chunk)
                self.record(chunk, requester.id, Primitive.FIRST_TOUCH)
                self.floor_chunks_s = max(self.floor_chunks_s,
                                          ctx.compute.prefill_s(float(chunks.tokens[chunk])) + attend_s)
                continue
            plan.remote.append(RemoteChunk(chunk, holder, cached))
        return plan

    def decide(self, remote: list[RemoteChunk]) -> None:
        """The policy's choice per remote chunk; the uncongested floor of the cheapest primitive."""
        ctx, requester = self.ctx, self.requester
        chunks, tp = ctx.cluster.chunks, ctx.config.tp
        free = requester.free_bytes
        for item in remote:
            holder = ctx.cluster.instances[item.holder]
            tokens = float(chunks.tokens[item.chunk])
            fabric = ctx.cluster.fabric_id(requester, holder)
            shape = RequestShape(mq_first=self.mq_first, mq_step=self.heads, steps=self.decode_steps, tokens=tokens,
                                 fabric=fabric, cached=item.cached, tp=tp)
            copy_bytes = float(chunks.bytes[item.chunk])
            item.primitive = ctx.policy.choose(build_decision_context(ctx, requester, [holder], shape, copy_bytes,
                                                                      free))
            route, _, move, attend, prefill = ctx.floor_model.step(self.mq_first, tokens, fabric, item.cached, tp=tp)
            self.floor_chunks_s = max(self.floor_chunks_s, min(route, move + attend, prefill + attend))
            self.record(item.chunk, item.holder, item.primitive)
            if item.primitive == Primitive.ROUTE:
                self.pin(item.chunk, item.holder)
                self.routed.append((item.chunk, item.holder))
            else:
                self.pin(item.chunk, requester.id)
                self.resident.append(item.chunk)
                if item.primitive == Primitive.FETCH:
                    free -= copy_bytes

    def start_first_pass(self, plan: ChunkPlan) -> list[simpy.Event]:
        """One process per chunk that needs work (in the chunks' order), plus the resident copies' attention."""
        ctx = self.ctx
        chunks, env = ctx.cluster.chunks, ctx.env
        attend = lambda chunk: ctx.compute.attend_s(self.mq_first, float(chunks.tokens[chunk]), 0)
        ops = [env.process(self.local(chunk, attend(chunk))) for chunk in plan.prefill_here]
        for item in plan.remote:
            holder = ctx.cluster.instances[item.holder]
            if item.primitive == Primitive.ROUTE:
                ops.append(env.process(self.route_first(item.chunk, holder)))
            elif item.primitive == Primitive.FETCH:
                ops.append(env.process(self.fetch(item.chunk, holder, item.cached, attend(item.chunk))))
            else:
                ops.append(env.process(self.local(item.chunk, attend(item.chunk))))
        if plan.resident_attend_s > 0:   # one kernel sequence on the requester's GPU: the copies' attends add up
            ops.append(env.timeout(plan.resident_attend_s))
        return ops

    # ---- the three primitives at the first token --------------------------------------------------------
    def fetch(self, chunk: int, holder: Instance, cached: bool, attend_s: float) -> Steps:
        ctx, requester = self.ctx, self.requester
        nbytes = float(ctx.cluster.chunks.bytes[chunk])

        def make() -> Steps:
            yield from holder.staging.stage(nbytes)
            fabric = ctx.cluster.fabric(requester, holder)
            # Tensor-parallel rank pairs each move 1/tp of the latent in parallel (on their own NICs).
            yield ctx.network.transfer(holder.gpu, requester.gpu, nbytes / ctx.config.tp,
                                       rate_cap_Bps=fabric.bulk_Bps, tag="fetch")
            ctx.recorder.bytes_fetch[self.spec.request_id] += nbytes
            if not cached:
                yield from requester.compute.hold(ctx.compute.splice_s(float(ctx.cluster.chunks.tokens[chunk])))
        yield from self.make_copy(chunk, make)
        yield ctx.env.timeout(attend_s)       # the first token's attention over the copy, on the requester

    def local(self, chunk: int, attend_s: float) -> Steps:
        tokens = float(self.ctx.cluster.chunks.tokens[chunk])
        yield from self.make_copy(chunk, lambda: self.prefill(self.requester, tokens))
        yield self.ctx.env.timeout(attend_s)

    def route_first(self, chunk: int, holder: Instance) -> Steps:
        ctx = self.ctx
        exchanges = ctx.params.exchanges
        done = ctx.exchanges.exchange(self.requester, holder, self.mq_first, float(ctx.cluster.chunks.tokens[chunk]),
                                      0, exchanges)
        yield done
        yield ctx.env.timeout(ctx.params.merge_s * exchanges)
        ctx.recorder.bytes_route[self.spec.request_id] += ctx.exchanges.wire_bytes(self.mq_first, exchanges)

    # ---- decode --------------------------------------------------------------------------------------
    def decode(self) -> Steps:
        """Every step attends every chunk again: resident copies on the requester while the routed partials
        travel (overlap, not sequence), then the merge and the step's non-attention time."""
        ctx, env = self.ctx, self.ctx.env
        chunks = ctx.cluster.chunks
        steps_left = self.decode_steps
        attend = sum(ctx.compute.attend_s(self.heads, float(chunks.tokens[c]), 0) for c in self.resident)
        base = self.step_base_s
        if not self.routed:
            if steps_left:
                yield env.timeout(steps_left * (base + attend))
            return
        per_event = ctx.config.decode_steps_per_event
        while steps_left > 0:
            steps = min(per_event, steps_left)
            weight = steps * ctx.params.exchanges
            waits = [env.timeout(steps * attend)] if attend > 0 else []
            for chunk, holder in self.routed:
                waits.append(ctx.exchanges.exchange(self.requester, ctx.cluster.instances[holder], self.heads,
                                                    float(chunks.tokens[chunk]), 0, weight))
                ctx.recorder.bytes_route[self.spec.request_id] += ctx.exchanges.wire_bytes(self.heads, weight)
            yield env.all_of(waits)
            yield env.timeout(ctx.params.merge_s * weight + steps * base)
            steps_left -= steps
