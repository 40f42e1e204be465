"""A request's life as named steps (the request semantics of Move the Query, Not the Cache, §2 and §5):

1. `own_prefill`: its own prompt, on the requester or on a prefill instance and shipped (PD disaggregation);
2. `classify_chunks`: each chunk it attends is resident, being copied here, never prefilled (first touch),
   or remote;
3. `decide`: route / fetch / local per remote unit, by the run's `Policy` on one `DecisionContext`;
4. `first_pass`: the first token attends every chunk (TTFT);
5. `decode`: every further token attends them again (TPOT);
6. `finish`: records, unpins the copies it relied on, wakes closed-loop children.

`DenseRequest` attends whole chunks and runs on the instance engines (simroute/sim/engine): its prompt's
prefill iterations attend every resident chunk and route the rest (TTFT), then it decodes in the engine's
continuous batches (TPOT); copies take blocks of the requester's HBM budget. `SelectionRequest`
(selection.py) is a `DenseRequest` whose remote chunks are one sparse top-k selection over M holders.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from itertools import groupby, repeat

import simpy

from simroute.sim.cluster import Instance
from simroute.sim.context import SimContext
from simroute.sim.engine.sequence import THRASHED, Sequence as EngineSequence
from simroute.sim.engine.serving import serve, ttft_parts
from simroute.sim.holder import ReplicaChoice, holder_wait_s
from simroute.sim.policies.base import DecisionContext, LiveState, RequestShape, engine_reprefill_s
from simroute.sim.request_spec import RequestSpec
from simroute.sim.vocab import DropReason, Primitive

Steps = Iterator[simpy.Event]


def path_share_Bps(ctx: SimContext, src: Instance, dst: Instance) -> float:
    """Bytes/s a new transfer src -> dst would get now (the network engine's least link share over the path):
    live link state for policies that ask for it."""
    return ctx.network.path_share(src.gpu, dst.gpu)


def reprefill_price(ctx: SimContext, requester: Instance) -> Callable[[float], float]:
    """Local's re-prefill of some tokens as the requester's engine charges it (`engine_reprefill_s`), so the
    policies decide on what the run will charge rather than on the closed form's `ct L c`."""
    engine = ctx.engines[requester.id]
    return partial(engine_reprefill_s, ctx.engines.step, engine.scheduler.prefill_chunk(engine.options))


def fanout_price(ctx: SimContext) -> Callable[[float], float] | None:
    """A fetched copy's in-host fan-out by its tokens, as the run charges it (`StepTimeModel.fanout_s`), or None
    where nothing fans out (tp 1, the tpla layout, GQA)."""
    step, kv_per_token = ctx.engines.step, ctx.compute.kv_bytes_per_token
    if step.fanout_s(kv_per_token) <= 0:
        return None
    return lambda tokens: step.fanout_s(tokens * kv_per_token)


def decision_prices(ctx: SimContext, requester: Instance) -> tuple[Callable[[float], float],
                                                                   Callable[[float], float] | None]:
    """`reprefill_price` and `fanout_price` for `requester`, made once per requester and kept on the context
    (both read only the run's fixed engine settings; every request would otherwise build them again)."""
    prices = ctx._prices.get(requester.id)
    if prices is None:
        prices = ctx._prices[requester.id] = (reprefill_price(ctx, requester), fanout_price(ctx))
    return prices


def build_decision_context(ctx: SimContext, requester: Instance, holders: Sequence[Instance], shape: RequestShape,
                           copy_bytes: float, free_bytes: float) -> DecisionContext:
    """The one place a `DecisionContext` is made (dense chunks and sparse selections alike). Live state is
    measured only for a policy that reads it: the busiest holder's queue, the tightest holder -> requester
    path, whether `copy_bytes` fit in `free_bytes` of the requester's HBM."""
    live = None
    if ctx.policy.needs_live_state:
        live = LiveState(holder_wait_s=max(holder_wait_s(ctx, h) for h in holders),
                         path_share_Bps=min(path_share_Bps(ctx, h, requester) for h in holders),
                         hbm_free=free_bytes > copy_bytes)
    reprefill_s, fanout_s = decision_prices(ctx, requester)
    return DecisionContext(shape=shape, live=live, params=ctx.params, model=ctx.model,
                           reprefill_s=reprefill_s, fanout_s=fanout_s)


class RequestDecisions:
    """One dense request's decisions, one per holder block (see `holder_blocks`): made once per distinct
    (block shape, live state) rather than once per block, with the holders' live state measured once per
    holder.

    Exact, not an approximation: the memo key holds everything the `build_decision_context` decision reads.
    A request decides all its blocks at one simulated instant in one process step, so holder engines'
    partials and layers and link shares cannot change between its blocks; the requester's HBM room does
    (each fetch reserves blocks), so whether a block's copies fit is asked per block (`ChunkCopies.fits_blocks`,
    which stops at the first unpinned copies that suffice). Without live state a choice depends on the
    block's shape only, so blocks of one size on one fabric share it.
    """

    __slots__ = ("ctx", "requester", "shape_of", "live", "holders", "chosen", "reprefill_s", "fanout_s")

    def __init__(self, ctx: SimContext, requester: Instance,
                 shape_of: Callable[[int, float, bool], RequestShape]) -> None:
        self.ctx, self.requester, self.shape_of = ctx, requester, shape_of
        self.live = ctx.policy.needs_live_state
        self.reprefill_s, self.fanout_s = decision_prices(ctx, requester)
        self.holders: dict[int, tuple[float, float]] = {}      # holder -> (wait per query, path share)
        self.chosen: dict[tuple, Primitive] = {}

    def choose(self, chunk_list: Sequence[int], holder: Instance, fabric: int, tokens: float, cached: bool,
               copy_bytes: float) -> Primitive:
        """The run's policy's choice for one holder block of this request: `chunk_list` on `holder`, `tokens`
        in all, `copy_bytes` to copy them."""
        ctx = self.ctx
        if not self.live:
            key: tuple = (fabric, tokens, cached)
            primitive = self.chosen.get(key)
            if primitive is None:
                primitive = self.chosen[key] = ctx.policy.choose(build_decision_context(
                    ctx, self.requester, [holder], self.shape_of(fabric, tokens, cached), copy_bytes, 0.0))
            return primitive
        state = self.holders.get(holder.id)
        if state is None:
            state = self.holders[holder.id] = (holder_wait_s(ctx, holder),
                                               path_share_Bps(ctx, holder, self.requester))
        copies = ctx.copies
        hbm_free = copy_bytes > 0 and copies.fits_blocks(sum(copies.blocks(c) for c in chunk_list),
                                                         self.requester.id)
        key = (fabric, tokens, cached, state, hbm_free)
        primitive = self.chosen.get(key)
        if primitive is None:
            live = LiveState(holder_wait_s=state[0], path_share_Bps=state[1], hbm_free=hbm_free)
            primitive = self.chosen[key] = ctx.policy.choose(DecisionContext(
                shape=self.shape_of(fabric, tokens, cached), live=live, params=ctx.params, model=ctx.model,
                reprefill_s=self.reprefill_s, fanout_s=self.fanout_s))
        return primitive


class RemoteChunks:
    """The chunks a request attends that other instances hold, in the chunks' order, as columns: each one's
    holder, whether it is served at its cached offset, and the primitive decided for it (route until `decide`
    says otherwise). Columns rather than an object per chunk: a request of a long conversation attends
    hundreds to thousands of chunks, and making an object for each cost more than deciding them.

    Build one with `from_columns`; read it by position (`chunks[i]`, `holders[i]`, ...) or by holder block
    (`holder_blocks`).
    """

    __slots__ = ("chunks", "holders", "cached", "primitives")

    def __init__(self) -> None:
        self.chunks: list[int] = []
        self.holders: list[int] = []
        self.cached: list[bool] = []
        self.primitives: list[Primitive] = []

    @classmethod
    def from_columns(cls, chunks: list[int], holders: list[int], cached: list[bool]) -> "RemoteChunks":
        """The remote chunks `chunks`, held by `holders`, at their cached offsets where `cached` (one entry
        each, in the chunks' order), every one routed until decided."""
        if not len(chunks) == len(holders) == len(cached):
            raise ValueError(f"remote chunk columns differ in length: {len(chunks)}, {len(holders)}, {len(cached)}")
        remote = cls()
        remote.chunks, remote.holders, remote.cached = chunks, holders, cached
        remote.primitives = [Primitive.ROUTE] * len(chunks)
        return remote

    def __len__(self) -> int:
        return len(self.chunks)

    def only(self, primitive: Primitive) -> "RemoteChunks":
        """The remote chunks decided `primitive`, in order."""
        kept = [i for i, decided in enumerate(self.primitives) if decided == primitive]
        remote = RemoteChunks.from_columns([self.chunks[i] for i in kept], [self.holders[i] for i in kept],
                                           [self.cached[i] for i in kept])
        remote.primitives = [primitive] * len(kept)
        return remote


def holder_blocks(remote: RemoteChunks) -> dict[tuple[int, bool], list[tuple[int, int]]]:
    """The decision unit of a dense request: its remote chunks per (holder, cached offset), in the order of
    their first chunk, each block as its runs of consecutive positions [start, end) in chunk order. The engine
    charges route per holder (one query per layer covers every chunk there) and fetch per holder (one pull), so
    a decision priced per chunk would charge each chunk its own exchanges and holder-kernel floor, and the same
    tokens would route or fetch depending on how they were cut. Runs, not positions: a conversation's chunks
    come in long runs from one holder (`groupby` finds them without a Python step per chunk)."""
    blocks: dict[tuple[int, bool], list[tuple[int, int]]] = {}
    start = 0
    for key, run in groupby(zip(remote.holders, remote.cached)):
        end = start + len(list(run))
        runs = blocks.get(key)
        if runs is None:
            blocks[key] = [(start, end)]
        else:
            runs.append((start, end))
        start = end
    return blocks


class SpliceBatch:
    """One request's splice: the chunks it fetched to serve at another offset are re-rotated and scattered
    together, one launch per layer over their summed tokens, once the last of their pulls has landed (as a
    batched engine splices; the measured curve is launch-bound, so one splice per chunk would make the same
    tokens cost more the finer they are cut). A single chunk costs the measured per-chunk splice."""

    def __init__(self, env: simpy.Environment, pulls: int, splice_s: Callable[[float], float]) -> None:
        self.env, self.pulls, self.splice_s = env, pulls, splice_s
        self.tokens = 0.0
        self.done = env.event()

    def landed(self, tokens: float) -> simpy.Event:
        """One pull's `tokens` to splice have arrived; the event fires when the request's splice is done."""
        self.tokens += tokens
        self.pulls -= 1
        if self.pulls == 0:
            self.env.timeout(self.splice_s(self.tokens)).callbacks.append(lambda _event: self.done.succeed())
        return self.done


class ChunkPlan:
    """What `classify_chunks` found and `decide` settled, in the chunks' order (one per request: a plain class
    made with its columns, not a dataclass that builds empty defaults first)."""

    __slots__ = ("prefill_here", "remote", "joining")

    def __init__(self, prefill_here: list[int] | None = None, remote: RemoteChunks | None = None,
                 joining: list[simpy.Event] | None = None) -> None:
        self.prefill_here: list[int] = [] if prefill_here is None else prefill_here   # first touch: prefilled here
        self.remote: RemoteChunks = RemoteChunks() if remote is None else remote
        self.joining: list[simpy.Event] = [] if joining is None else joining   # copies being made here, waited for


def _decision_columns() -> tuple[array, array, array]:
    """A request's noted decisions (chunk index, holder, primitive) in the recorder's column types, so that
    `Recorder.decisions` copies each column in one go."""
    return array("q"), array("i"), array("b")


class RequestProcess:
    """The steps every request shares; subclasses attend their chunks (`first_pass`, `decode`).

    Contract for a subclass: `own_prefill` prefills the prompt (or ships it from a prefill instance) and
    `prefill_floor_s` is that prefill's uncongested floor; `first_pass` runs classification, decision and the
    first pass, records its decisions and adds its own share of the TTFT floor to `self.floor_chunks_s`;
    `decode` runs the remaining `output_tokens - 1` steps. Pins go through `pin` so `finish` releases them.
    """

    def __init__(self, ctx: SimContext, spec: RequestSpec, requester: Instance, prefill: Instance | None) -> None:
        self.ctx, self.spec, self.requester, self.prefill_instance = ctx, spec, requester, prefill
        # instance -> the chunks whose copies there it relies on (not evicted meanwhile), in the order pinned
        self.pins: dict[int, list[int]] = {}
        # its decisions (chunk index, holder, primitive) until `flush_decisions` hands them to the recorder
        self.decided = _decision_columns()       # chunk index, holder, primitive: the recorder's column types
        self.floor_pd_s = 0.0
        self.floor_chunks_s = 0.0
        self.t_engine = 0.0         # when it reached the scheduler (its arrival plus the preset's ingress)
        self.heads = ctx.params.geometry.heads_q
        self.mq_first = self.heads * max(spec.prompt_tokens, 1)
        self.decode_steps = max(spec.output_tokens - 1, 0)

    def run(self) -> Steps:
        """The request's life. Outside the GPU, its path through the serving framework (the engine preset's,
        docs/ENGINES.md): `ingress_s` from its arrival to the scheduler (API server, tokenisation, a hop), then
        `egress_s` from the scheduler to the client for every token (hops, detokenisation, the stream): TTFT and
        E2E pay both, TPOT neither (every token pays the same egress), and a closed-loop child waits for its
        parent's last token to reach the client."""
        ctx, spec, recorder = self.ctx, self.spec, self.ctx.recorder
        start = ctx.env.now
        self.begin(start)
        ingress, egress = ctx.engines.ingress_s, ctx.engines.egress_s
        if ingress > 0:
            yield ctx.env.timeout(ingress)
        self.t_engine = ctx.env.now
        yield from self.own_prefill()
        yield from self.first_pass()
        rid = spec.request_id
        first_token = ctx.env.now
        recorder.ttft[rid] = first_token + egress - start
        recorder.ttft_frontend[rid] = ingress + egress
        recorder.ttft_floor[rid] = (self.prefill_floor_s() + self.floor_pd_s + self.floor_chunks_s
                                    + ingress + egress)
        yield from self.decode()
        recorder.tpot[rid] = (ctx.env.now - first_token) / (spec.output_tokens - 1) if spec.output_tokens > 1 else 0.0
        recorder.e2e[rid] = ctx.env.now + egress - start
        self.finish(egress)

    def prefill_floor_s(self) -> float:
        """The uncongested floor of the prompt's own prefill."""
        raise NotImplementedError

    def begin(self, now: float) -> None:
        recorder = self.ctx.recorder
        recorder.arrival[self.spec.request_id] = now
        recorder.requester[self.spec.request_id] = self.requester.id
        self.ctx.cluster.request_began(self.requester.id)

    def own_prefill(self) -> Steps:
        """The prompt's own tokens: prefilled here, or on the prefill instance and its KV shipped here."""
        raise NotImplementedError

    def ship_prompt_kv(self, prefill: Instance) -> Steps:
        """PD disaggregation: the prompt's KV from the prefill instance to the requester, every rank's flow as
        the frameworks map the ranks (`Cluster.pd_transfer`); the bytes recorded are the fabric's, all ranks."""
        ctx, spec, requester = self.ctx, self.spec, self.requester
        kv = spec.prompt_tokens * ctx.compute.kv_bytes_per_token
        fabric = ctx.cluster.fabric(prefill, requester)
        step = ctx.engines.step            # the decode side's: whether each of its ranks holds the whole latent
        replicated = step.geometry.is_mla and step.kv_shards == 1
        done, wire, largest = ctx.cluster.pd_transfer(ctx.network, prefill, requester, kv, replicated=replicated,
                                                      rate_cap_Bps=fabric.bulk_Bps)
        yield done
        ctx.recorder.bytes_pd[spec.request_id] += wire
        self.floor_pd_s = largest / fabric.bulk_Bps

    def first_pass(self) -> Steps:
        raise NotImplementedError

    def decode(self) -> Steps:
        raise NotImplementedError

    def finish(self, egress_s: float = 0.0) -> None:
        """Record it, release the copies it relied on, and wake its closed-loop children once its last token has
        reached the client (`egress_s` after the engine is done with it)."""
        ctx = self.ctx
        self.flush_decisions()
        pinned = ctx.cluster.chunks.pinned      # ChunkStore.unpin, inlined (one per chunk of every request)
        for instance, chunk_list in self.pins.items():
            pins = pinned[instance]
            for chunk in chunk_list:
                left = pins[chunk] - 1
                if left:
                    pins[chunk] = left
                else:
                    del pins[chunk]
        ctx.recorder.complete(self.spec.request_id)
        ctx.cluster.request_ended(self.requester.id)
        ctx.completed += 1
        done = ctx.done_event(self.spec.request_id)
        if egress_s > 0:
            ctx.env.timeout(egress_s).callbacks.append(lambda _event: done.succeed())
        else:
            done.succeed()

    # ---- shared pieces -----------------------------------------------------------------------------------
    def pin(self, chunk: int, instance: int) -> None:
        self.ctx.cluster.chunks.pin(chunk, instance)
        pinned = self.pins.get(instance)
        if pinned is None:
            pinned = self.pins[instance] = []
        pinned.append(chunk)

    def record(self, chunk: int, holder: int, primitive: Primitive) -> None:
        """Note one chunk's decision; `flush_decisions` records them (in this order) before anything else runs."""
        chunks, holders, primitives = self.decided
        chunks.append(chunk)
        holders.append(holder)
        primitives.append(primitive)

    def flush_decisions(self) -> None:
        """Hand the noted decisions to the recorder: a request decides all its chunks in one process step, so
        no other request's decisions come between them."""
        chunks, holders, primitives = self.decided
        if primitives:       # by chunk index: the recorder maps them to ids once, when its table is built
            self.ctx.recorder.decisions(self.spec.request_id, chunks, holders, primitives)
            self.decided = _decision_columns()


class DenseRequest(RequestProcess):
    """Attends whole chunks on the instance engines: each remote chunk is routed, fetched or re-prefilled;
    copies are kept in the requester's HBM budget; the request's sequence prefills and decodes in its
    engine's iterations (routed chunks on each iteration's critical path)."""

    def __init__(self, ctx: SimContext, spec: RequestSpec, requester: Instance, prefill: Instance | None) -> None:
        super().__init__(ctx, spec, requester, prefill)
        self.routes: dict[int, float] = {}         # holder -> key tokens routed there (one query covers them)
        self.resident_tokens = 0.0                 # tokens of the resident copies the sequence attends
        self.sequence: EngineSequence | None = None
        self.prefill_sequence: EngineSequence | None = None     # PD: the prompt's sequence on the prefill instance
        self.done: simpy.Event | None = None
        self.route_premium = 1.0                   # holder kernel over a dense one (a sparse selection's: selection.py)
        self.step_wait: Callable[[int], float] | None = None   # per-iteration wait of its own (a selection's gather)

    def prefill_floor_s(self) -> float:
        """One iteration of the whole prompt alone (chunking it or batching it only adds), on the engine that
        prefills it (a prefill-pool instance has a step model of its own TP)."""
        prefill = self.prefill_instance
        if prefill is not None and prefill is not self.requester:
            return engine_reprefill_s(self.ctx.engines[prefill.id].step, float("inf"), self.spec.prompt_tokens)
        return self._prefill_alone_s(self.spec.prompt_tokens)

    def own_prefill(self) -> Steps:
        """PD disaggregation: the prompt prefilled by the prefill instance's engine, its KV shipped here. Without
        PD the prompt is prefilled in `first_pass`, attending the chunks in the same iterations."""
        ctx, spec, requester, prefill = self.ctx, self.spec, self.requester, self.prefill_instance
        if prefill is None or prefill is requester:
            return
        # the prefill instance keeps the prompt's KV until it has been sent (SGLang's prefill server frees a
        # request's KV once its sender reports the transfer done)
        sequence, _, done = serve(ctx.engines, prefill.id, spec.request_id, prompt=spec.prompt_tokens, output=1,
                                  keep_kv=True)
        self.prefill_sequence = sequence
        yield done
        pool = ctx.prefill_pool
        if pool is not None:
            pool.done(prefill, spec.prompt_tokens)
        if sequence.refused:            # its KV was released with the refusal; `finish` drops the request
            return
        try:
            yield from self.ship_prompt_kv(prefill)
        finally:
            engine = ctx.engines[prefill.id]
            engine.hbm.release_kv(sequence.blocks)
            sequence.blocks = 0
            engine.poke()

    def first_pass(self) -> Steps:
        ctx, spec = self.ctx, self.spec
        start = self.t_engine         # the TTFT parts below are the scheduler's side; `frontend` is the rest
        plan = self.classify_chunks()
        self.decide(plan.remote)
        self.flush_decisions()
        for holder in self.routes:
            ctx.routing[holder] = ctx.routing.get(holder, 0) + 1
        ops = self.start_first_pass(plan)
        if ops:
            yield ctx.env.all_of(ops)
        p = self.prefill_sequence
        sequence, first, self.done = serve(
            ctx.engines, self.requester.id, spec.request_id, prompt=spec.prompt_tokens, output=spec.output_tokens,
            resident_tokens=self.resident_tokens, routes=self.routes, prefilled=p is not None,
            route_premium=self.route_premium, step_wait=self.step_wait)
        self.sequence = sequence
        yield first
        parts = ttft_parts(sequence, start)
        if p is not None:
            parts = parts._replace(prefill_compute=p.prefill_compute_s, transfer=sequence.t_submit - p.t_done,
                                   queueing=max(0.0, p.t_first_token - start - p.prefill_compute_s))
        ctx.recorder.ttft_parts(spec.request_id, parts)

    def classify_chunks(self) -> ChunkPlan:
        """Resident (or being copied here: wait for it), first touch (nobody holds it: prefill here), or remote."""
        ctx, requester, spec = self.ctx, self.requester, self.spec
        chunks, copies = ctx.cluster.chunks, ctx.copies
        prefill_here: list[int] = []
        joining: list[simpy.Event] = []
        here = requester.id
        replicas = ReplicaChoice(ctx, requester)
        # per chunk of every request (hot): `pin`, `record`, `ChunkCopies.holds` and a lone holder's
        # `ReplicaChoice.pick` inlined, the same steps in the same order
        pending_here, held_here = chunks.pending_at(here), copies.held_at[here]
        holders_of, tokens_of = chunks.holders, chunks.token_list
        pins_here, pinned_here = chunks.pins_at(here), []     # pinned here: added to `self.pins` after the loop
        decided = self.decided
        noted_chunk, noted_holder, noted = decided[0].append, decided[1].append, decided[2].append
        picked, choose = replicas.picked, replicas.choose
        remote_chunks, remote_holders, remote_cached = [], [], []      # the RemoteChunks columns
        last_picked = None
        touch = copies.budget(here).touch
        resident, first_touch = Primitive.RESIDENT, Primitive.FIRST_TOUCH
        resident_tokens = self.resident_tokens      # summed here in chunk order, stored once
        for chunk, cached in zip(spec.chunk_indices, spec.cached):
            if chunk in held_here or chunk in pending_here:
                pending = pending_here.get(chunk)
                touch(chunk)
                pins_here[chunk] = pins_here.get(chunk, 0) + 1
                pinned_here.append(chunk)
                resident_tokens += float(tokens_of[chunk])
                noted_chunk(chunk), noted_holder(here), noted(resident)
                if pending is not None and pending not in joining:
                    joining.append(pending)
                continue
            holders = holders_of[chunk]
            holder = holders[0] if len(holders) == 1 else choose(chunk)
            if holder is None:
                pins_here[chunk] = pins_here.get(chunk, 0) + 1
                pinned_here.append(chunk)
                prefill_here.append(chunk)
                resident_tokens += float(tokens_of[chunk])
                noted_chunk(chunk), noted_holder(here), noted(first_touch)
                continue
            if holder != last_picked:       # a run of chunks on one holder adds it once
                picked.add(holder)
                last_picked = holder
            remote_chunks.append(chunk)
            remote_holders.append(holder)
            remote_cached.append(cached)
        plan = ChunkPlan(prefill_here, RemoteChunks.from_columns(remote_chunks, remote_holders, remote_cached),
                         joining)
        if pinned_here:
            self.pins.setdefault(here, []).extend(pinned_here)
        self.resident_tokens = resident_tokens
        if plan.prefill_here:
            tokens = float(chunks.tokens[plan.prefill_here].sum())
            self.floor_chunks_s = max(self.floor_chunks_s, self._prefill_alone_s(tokens))
        return plan

    def _prefill_alone_s(self, tokens: float) -> float:
        """One iteration over the whole prompt, alone (a floor: no chunking, no batch)."""
        return self.ctx.prefill_alone_s(tokens)

    def decide(self, remote: RemoteChunks) -> None:
        """The policy's choice per holder block (`holder_blocks`), priced on the block's summed tokens. A fetch
        takes each chunk's copy blocks in the requester's HBM now; a chunk whose blocks cannot be had (running
        sequences' KV and pinned copies fill it) is routed instead. The floor: the cheapest primitive of the
        largest remote chunk per fabric, uncongested."""
        ctx, requester = self.ctx, self.requester
        chunks, copies = ctx.cluster.chunks, ctx.copies
        own_kv = self.spec.prompt_tokens + self.spec.output_tokens
        decisions = RequestDecisions(ctx, requester, self._shape)
        tokens_of, pins_at, my_pins = chunks.token_list, chunks.pins_at, self.pins
        kv_bytes_per_token = chunks.kv_bytes_per_token
        fabric_of: dict[int, int] = {}       # holder -> fabric id (Cluster.fabric_id, asked once per holder)
        route, fetch, here = Primitive.ROUTE, Primitive.FETCH, requester.id
        reserve = copies.reserver(here, own_kv)
        largest: dict[int, float] = {}          # fabric -> its largest remote chunk's tokens
        routes = self.routes
        resident_tokens = self.resident_tokens
        fell_back = False
        # the tokens are whole numbers: summed per block, the routes' and the resident tokens' sums are exact,
        # the same as summed per chunk in the chunks' order; the routes' holders come in the order of their first
        # routed chunk (a routed block's first chunk, as blocks come in the order of their first chunk)
        remote_chunks, remote_holders, primitives = remote.chunks, remote.holders, remote.primitives
        for (holder_id, cached), runs in holder_blocks(remote).items():
            holder = ctx.cluster.instances[holder_id]
            if len(runs) == 1:
                chunk_list = remote_chunks[runs[0][0]:runs[0][1]]
            else:
                chunk_list = [chunk for start, end in runs for chunk in remote_chunks[start:end]]
            fabric = fabric_of.get(holder_id)
            if fabric is None:
                fabric = fabric_of[holder_id] = ctx.cluster.fabric_id(requester, holder)
            block_tokens = list(map(tokens_of.__getitem__, chunk_list))
            tokens = float(max(block_tokens))
            if tokens > largest.get(fabric, 0.0):
                largest[fabric] = tokens
            block_sum = float(sum(block_tokens))
            # the chunks' bytes up to rounding (`ChunkStore.bytes` summed): `choose` reads only whether it is > 0
            copy_bytes = block_sum * kv_bytes_per_token
            primitive = decisions.choose(chunk_list, holder, fabric, block_sum, cached, copy_bytes)
            if primitive != fetch:      # the whole block pinned where it is served (`pin`, inlined)
                if primitive != route:
                    for start, end in runs:
                        primitives[start:end] = repeat(primitive, end - start)
                at = holder_id if primitive == route else here
                pins = pins_at(at)
                for chunk in chunk_list:
                    pins[chunk] = pins.get(chunk, 0) + 1
                pinned = my_pins.get(at)
                if pinned is None:
                    my_pins[at] = chunk_list        # a list of its own (a slice or built above)
                else:
                    pinned.extend(chunk_list)
                if primitive == route:
                    routes[holder_id] = routes.get(holder_id, 0.0) + block_sum
                else:
                    resident_tokens += block_sum
                continue
            pins_here, pins_holder = pins_at(here), pins_at(holder_id)
            for start, end in runs:
                for position in range(start, end):
                    # pinned at once (`pin`, inlined): a later reservation must not evict this copy
                    chunk = remote_chunks[position]
                    if reserve(chunk):
                        primitives[position] = fetch
                        at, pins = here, pins_here
                        resident_tokens += float(tokens_of[chunk])
                    else:
                        copies.fell_back += 1
                        fell_back = True
                        at, pins = holder_id, pins_holder
                    pins[chunk] = pins.get(chunk, 0) + 1
                    pinned = my_pins.get(at)
                    if pinned is None:
                        my_pins[at] = [chunk]
                    else:
                        pinned.append(chunk)
        self.resident_tokens = resident_tokens
        if fell_back:       # a fetched block's chunk routed: the holders in the order of their first routed chunk
            routes.clear()
            for chunk, holder_id, primitive in zip(remote_chunks, remote_holders, primitives):
                if primitive == route:
                    routes[holder_id] = routes.get(holder_id, 0.0) + float(tokens_of[chunk])
        noted_chunks, noted_holders, noted = self.decided      # `record`, per column in one go
        noted_chunks.extend(remote_chunks)
        noted_holders.extend(remote_holders)
        noted.extend(primitives)
        for fabric, tokens in largest.items():
            self.floor_chunks_s = max(self.floor_chunks_s, ctx.chunk_floor_s(self.mq_first, self.heads, tokens, fabric))

    def _shape(self, fabric: int, tokens: float, cached: bool) -> RequestShape:
        return RequestShape(mq_first=self.mq_first, mq_step=self.heads, steps=self.decode_steps, tokens=tokens,
                            fabric=fabric, cached=cached, tp=self.ctx.config.instance_gpus)

    def start_first_pass(self, plan: ChunkPlan) -> list[simpy.Event]:
        """The copies to make before the sequence starts: fetches (one process each), the re-prefills (one
        engine sequence for all of them), and copies other requests are making here. Each copy is marked
        pending here, before any process runs, so a request arriving at the same instant joins it."""
        ctx = self.ctx
        chunks, here = ctx.cluster.chunks, self.requester.id
        ops: list[simpy.Event] = list(plan.joining)
        prefill_here = list(plan.prefill_here)
        fetches: dict[int, tuple[list[int], list[bool]]] = {}   # one pull per holder: its chunks together
        remote = plan.remote
        if remote.primitives.count(Primitive.ROUTE) < len(remote):     # something to copy here
            fetch, local = Primitive.FETCH, Primitive.LOCAL
            for chunk, holder, cached, primitive in zip(remote.chunks, remote.holders, remote.cached,
                                                        remote.primitives):
                if primitive == fetch:
                    pull = fetches.get(holder)
                    if pull is None:
                        pull = fetches[holder] = ([], [])
                    pull[0].append(chunk)
                    pull[1].append(cached)
                elif primitive == local:
                    prefill_here.append(chunk)
        spliced = [holder for holder, (_, at_offsets) in fetches.items() if not all(at_offsets)]
        splice = SpliceBatch(ctx.env, len(spliced), ctx.compute.splice_s) if spliced else None
        pending_here = chunks.pending_at(here)
        for holder, (chunk_list, at_offsets) in fetches.items():
            ready = ctx.env.event()
            for chunk in chunk_list:
                pending_here[chunk] = ready
            ops.append(ctx.env.process(self.fetch(chunk_list, at_offsets, ctx.cluster.instances[holder], ready,
                                                  splice if holder in spliced else None)))
        if prefill_here:
            ready = ctx.env.event()
            for chunk in prefill_here:
                pending_here[chunk] = ready
            ops.append(ctx.env.process(self.reprefill(prefill_here, ready)))
        return ops

    # ---- copies ---------------------------------------------------------------------------------------
    def fetch(self, chunk_list: list[int], cached: list[bool], holder: Instance, ready: simpy.Event,
              splice: SpliceBatch | None) -> Steps:
        """The chunks fetched from one holder (each served at its cached offset or not), as one multi-block
        pull: staged on the holder's copy engines, one bulk flow, then (if some are served at another offset)
        the request's one splice; their blocks were reserved."""
        ctx, requester = self.ctx, self.requester
        chunks = ctx.cluster.chunks
        nbytes, bytes_of = 0.0, chunks.byte_list
        for chunk in chunk_list:          # added in order, as a sum over the numpy column did
            nbytes += bytes_of[chunk]
        try:
            yield from holder.staging.stage(nbytes / ctx.config.instance_gpus)    # each rank stages its share, in parallel
            fabric = ctx.cluster.fabric(requester, holder)
            # Tensor-parallel rank pairs each move 1/tp of the latent in parallel (on their own NICs); under the
            # replicated MLA layout every rank then needs the whole copy: the host all-gathers it over NVLink.
            yield ctx.cluster.bulk_transfer(ctx.network, holder, requester, nbytes, rate_cap_Bps=fabric.bulk_Bps,
                                            tag="fetch")
            ctx.recorder.bytes_fetch[self.spec.request_id] += nbytes
            step = ctx.engines.step
            fanout = step.fanout_s(nbytes)
            if fanout > 0:
                yield ctx.env.timeout(fanout)
                ctx.recorder.bytes_fanout[self.spec.request_id] += step.fanout_bytes(nbytes)
            if splice is not None:
                token_list = chunks.token_list
                yield splice.landed(float(sum([token_list[chunk] for chunk, at_offset in zip(chunk_list, cached)
                                               if not at_offset])))
            ctx.copies.arrived_all(chunk_list, requester.id)
        finally:
            pending_here = chunks.pending_at(requester.id)
            for chunk in chunk_list:
                del pending_here[chunk]
            ready.succeed()

    def reprefill(self, chunk_list: list[int], ready: simpy.Event) -> Steps:
        """First-touch and `local` chunks prefilled on the requester's engine as one sequence; their KV becomes
        copies. Other requests on this instance wait for them rather than prefill them again."""
        ctx, here = self.ctx, self.requester.id
        chunks = ctx.cluster.chunks
        try:
            yield ctx.copies.reprefill(chunk_list, here, self.spec.request_id)
        finally:
            pending_here = chunks.pending_at(here)
            for chunk in chunk_list:
                del pending_here[chunk]
            ready.succeed()

    # ---- decode --------------------------------------------------------------------------------------
    def decode(self) -> Steps:
        """The sequence decodes in its engine's batches; routed bytes = rows x (q+p) x exchanges per holder."""
        ctx, rid = self.ctx, self.spec.request_id
        yield self.done
        seq = self.sequence
        assert seq is not None          # made by `first_pass`, which ran before
        ctx.recorder.bytes_route[rid] += seq.routed_rows * ctx.params.geometry.qp_bytes * ctx.params.exchanges
        ctx.recorder.preemptions[rid] = seq.preemptions

    def finish(self, egress_s: float = 0.0) -> None:
        super().finish(egress_s)
        routing = self.ctx.routing
        for holder in self.routes:
            routing[holder] -= 1
        refused = [seq.refused for seq in (self.prefill_sequence, self.sequence) if seq is not None and seq.refused]
        if refused:
            self.ctx.recorder.drop(self.spec.request_id,
                                   DropReason.THRASHED if THRASHED in refused else DropReason.KV_NEVER_FITS)
        # the instances its pins are on, in the order the old per-pin set comprehension iterated them: a set
        # built element by element (`set(dict)` presizes its table, and ids >= 16 then iterate in another order)
        for instance in {instance for instance in self.pins}:
            self.ctx.engines[instance].poke()
