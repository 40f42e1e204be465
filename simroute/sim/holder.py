"""The holder side: how loaded a holder looks to a requester (`HolderLoad`) and which replica of a chunk a
request uses (`ReplicaChoice`); the pre-engine batching server for routed queries (nothing submits to it
since sparse selections run on the instance engines) and the K-stream staging pool.

Routed queries that reach a holder within its batching window (`batch_window_us`) form one batch; its time follows
the calibrated compute curve (flat to N ~ 8 requesters, then linear: Move the Query, Not the Cache, §6.3).
Callback-driven rather than one SimPy process per query, so millions of exchanges stay cheap.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import simpy

from simroute.model.staging import STAGING_OVERSUBSCRIPTION_LOSS
from simroute.network.hashing import mix64

if TYPE_CHECKING:
    from simroute.sim.cluster import Instance
    from simroute.sim.context import SimContext


class HolderLoad(NamedTuple):
    """How loaded a holder looks to a requester now (lower is less loaded; compared field by field in this
    order). Requests already committed to routing there come first: their partials are demand its engine
    does not show yet while their sequences wait at their requesters (without it, requesters arriving close
    together all pick the replica that looks idle)."""

    routing: int         # dense requests that route to it and are not done
    wait_s: float        # expected wait of one routed query: behind the engine's queued partial-attention work
    #                      (M/D/1 at other requesters' demand) and, inline, its current layer
    sequences: int       # the engine's own running and waiting sequences


def holder_load(ctx: SimContext, holder: Instance, requester: int = -1) -> HolderLoad:
    """`holder`'s load as `requester` (an instance id; -1: nobody's demand left out) would see it."""
    per_query_s = ctx.compute.batch_s(1.0)
    engine = ctx.engines[holder.id]
    wait = engine.partials.wait_s(per_query_s, ctx.env.now, engine.busy, engine.layer_s, requester)
    return HolderLoad(ctx.routing.get(holder.id, 0), wait, len(engine.running) + len(engine.waiting))


class ReplicaChoice:
    """Which holder of a chunk one request uses: the nearest (least path latency: a nearer copy is never
    slower to reach; a same-host replica, over NVLink, is the nearest on every shipped topology), then the
    least loaded holder (`HolderLoad`: requests routing there, its engine's partial-attention wait with the
    requester's own demand left out, since its queries share the holder's kernel calls, then the engine's
    own sequences); ties spread requesters over replicas by a hash rather than all onto the lowest id.

    Nearest first because a load-first choice picked idle far replicas over near busy ones, and its TTFT on
    the agent-replicas study rose from 4 to 8 replicas; an added replica is now taken only if it is nearer
    or, at equal distance, less loaded.

    One per request: it classifies its chunks at one simulated instant, so each holder's load is read once.
    """

    __slots__ = ("ctx", "requester", "loads")

    def __init__(self, ctx: SimContext, requester: Instance) -> None:
        self.ctx, self.requester = ctx, requester
        self.loads: dict[int, HolderLoad] = {}

    def pick(self, chunk: int) -> int | None:
        """The holder to use for `chunk`; None when nobody holds it."""
        holders = self.ctx.cluster.chunks.holders[chunk]
        if len(holders) <= 1:
            return holders[0] if holders else None
        ctx, here = self.ctx, self.requester
        instances = ctx.cluster.instances
        latency = [ctx.path_latency_s(here, instances[h]) for h in holders]
        nearest = min(latency)
        tied = [h for h, lat in zip(holders, latency) if lat == nearest]
        if len(tied) == 1:          # load is read only where distance ties (most picks on a large fabric)
            return tied[0]
        return min(tied, key=lambda h: (self._load(h), mix64(h * 1_000_003 + here.id)))

    def _load(self, holder: int) -> HolderLoad:
        load = self.loads.get(holder)
        if load is None:
            load = self.loads[holder] = holder_load(self.ctx, self.ctx.cluster.instances[holder], self.requester.id)
        return load


class QueuedQuery(NamedTuple):
    """A routed query waiting on a holder."""

    work: float          # reference requesters (rows / heads_ref x attended tokens / ct_ref)
    premium: float       # sparse kernel premium (1.0 dense)
    weight: float        # exchanges the simulated query stands for
    done: simpy.Event    # fires when its partial is computed


class HolderServer:
    """Batches routed queries; `submit` returns an event that fires when the query's partial is computed.

    A query carries `work` (its size in reference requesters: rows/16 x ct/2048), a kernel `premium`
    (sparse selection) and a `weight` (how many exchanges the simulated one stands for: layers x steps).
    """

    __slots__ = ("env", "instance", "curve", "window", "streams", "queue", "busy", "armed", "deadline", "generation",
                 "batches", "queries", "max_queue", "samples", "record")

    def __init__(self, env: simpy.Environment, instance: int, curve: Callable[[float], float], window_s: float,
                 streams: int, record: bool = True) -> None:
        self.env, self.instance, self.curve = env, instance, curve
        self.window, self.streams = window_s, streams
        self.queue: list[QueuedQuery] = []
        self.busy = 0
        self.armed = False
        self.deadline = 0.0
        self.generation = 0               # of the armed window timer (older ones are ignored)
        self.batches = 0
        self.queries = 0
        self.max_queue = 0
        self.record = record
        # time, queue length, batch size (0 = an arrival), batch duration (0 for an arrival)
        self.samples = (array("d"), array("i"), array("i"), array("d"))

    def submit(self, work: float, premium: float, weight: float, delay_s: float = 0.0) -> simpy.Event:
        """Queue a routed query arriving after `delay_s` (its outbound message)."""
        done = self.env.event()
        if delay_s > 0:
            self.env.timeout(delay_s).callbacks.append(lambda _e: self._arrive(work, premium, weight, done))
        else:
            self._arrive(work, premium, weight, done)
        return done

    def _arrive(self, work: float, premium: float, weight: float, done: simpy.Event) -> None:
        self.queue.append(QueuedQuery(work, premium, weight, done))
        self.queries += 1
        if len(self.queue) > self.max_queue:
            self.max_queue = len(self.queue)
        if self.record:
            self._sample(0)
        if self.busy < self.streams:
            # A weighted query stands for `weight` exchanges in dilated time: the window dilates with it, and
            # the lightest query queued sets it (a first pass is not held back by a decode macro-step's window).
            deadline = self.env.now + self.window * weight
            if not self.armed or deadline < self.deadline:
                self.armed, self.deadline = True, deadline
                self.generation += 1
                generation = self.generation
                self.env.timeout(deadline - self.env.now).callbacks.append(lambda _e: self._dispatch(generation))

    def _dispatch(self, generation: int | None = None) -> None:
        if generation is not None and generation != self.generation:
            return                        # a window superseded by an earlier one
        self.armed = False
        if not self.queue or self.busy >= self.streams:
            return
        batch, self.queue = self.queue, []
        self.busy += 1
        self.batches += 1
        # Queries of different weights share the batch only for as many exchanges as they overlap: segment j
        # runs (w_j - w_{j-1}) exchanges over the queries still in it, and each query ends with its segment.
        batch.sort(key=lambda query: query.weight)
        env, elapsed, previous_weight, start, n = self.env, 0.0, 0.0, 0, len(batch)
        while start < n:
            weight = batch[start].weight
            rest = batch[start:]
            elapsed += (weight - previous_weight) * self.curve(sum(query.work for query in rest)) \
                * max(query.premium for query in rest)
            end = start
            while end < n and batch[end].weight == weight:
                end += 1
            ending = [query.done for query in batch[start:end]]
            last = end == n
            env.timeout(elapsed).callbacks.append(lambda _e, ending=ending, last=last: self._finish(ending, last))
            previous_weight, start = weight, end
        if self.record:
            self._sample(n, elapsed)

    def _finish(self, ending: list[simpy.Event], last: bool) -> None:
        for ev in ending:
            ev.succeed()
        if last:
            self.busy -= 1
            if self.queue and not self.armed:
                self._dispatch()

    def _sample(self, batch_size: int, duration: float = 0.0) -> None:
        t, q, b, d = self.samples
        t.append(self.env.now)
        q.append(len(self.queue))
        b.append(batch_size)
        d.append(duration)


class FifoServer:
    """c identical servers with one FIFO queue: `yield from server.hold(seconds)` waits for one, then holds it.

    Lighter than simpy.Resource (no request objects): an idle server is taken without any event, which
    matters when every fetch and prefill passes through one.
    """

    __slots__ = ("env", "capacity", "busy", "waiting", "max_waiting", "on_change")

    def __init__(self, env: simpy.Environment, capacity: int, on_change=None) -> None:
        self.env, self.capacity = env, max(1, capacity)
        self.busy = 0
        self.waiting: deque[simpy.Event] = deque()
        self.max_waiting = 0
        self.on_change = on_change          # called after every join, start and release (telemetry)

    def hold(self, seconds: float):
        if self.busy < self.capacity:
            self.busy += 1
        else:
            turn = self.env.event()
            self.waiting.append(turn)
            self.max_waiting = max(self.max_waiting, len(self.waiting))
            if self.on_change:
                self.on_change()
            yield turn                      # the releasing holder hands its server over (busy unchanged)
        if self.on_change:
            self.on_change()
        try:
            yield self.env.timeout(seconds)
        finally:
            if self.waiting:
                self.waiting.popleft().succeed()
            else:
                self.busy -= 1
            if self.on_change:
                self.on_change()


class StagingPool:
    """The holder's pool of K CUDA streams for the D2D copies that stage fetched chunks
    (Move the Query, Not the Cache, §6.2 and Fig 5b).

    A chunk is staged as one copy per layer; the pool spreads those L copies over its K streams, so a chunk
    is staged at the copy engines' aggregate rate with c = min(K, L) copies in flight, and chunks queue FIFO
    behind each other (the pool pipelines one chunk's copies, then the next's). The aggregate rate is one
    stream's rate r scaled by

        1 / (1 - gain x (c - 1) / (E - 1))                for c <= E (the elbow, 8 on H100),
        1 / (1 - gain) x (1 - loss x (c - E) / E)         beyond it,

    so K = 1 (a single async stream) is no faster than serial copies, K = E spends `gain` less copy time, and
    K = 2E regresses by `loss` (scheduler oversubscription). `gain` is a copy-time share, not the paper's 7%
    fetch-time gain: simroute.model.staging derives it from that gain (`StagingParams.pool_kwargs`).
    """

    def __init__(self, env: simpy.Environment, streams: int, copy_Bps: float, *, layers: int, elbow: int = 8,
                 gain_at_elbow: float = 0.07, oversubscription_loss: float = STAGING_OVERSUBSCRIPTION_LOSS,
                 record: bool = True) -> None:
        self.env, self.streams, self.copy_Bps, self.layers = env, streams, copy_Bps, layers
        self.elbow, self.gain, self.loss = max(1, elbow), gain_at_elbow, oversubscription_loss
        self.server = FifoServer(env, 1, on_change=self._sample if record else None)
        self.rate_Bps = self.aggregate_Bps(min(streams, max(1, layers)))
        self.samples = (array("d"), array("i"), array("i"))   # time, chunks waiting, chunks being staged

    @property
    def max_queue(self) -> int:
        return self.server.max_waiting

    def aggregate_Bps(self, in_flight: int) -> float:
        """The pool's total copy rate with `in_flight` per-layer copies on streams."""
        c, e, r = in_flight, self.elbow, self.copy_Bps
        if c <= 1:
            return r
        if c <= e:                        # here e > 1
            return r / (1 - self.gain * (c - 1) / (e - 1))
        return r / (1 - self.gain) * max(1 - self.loss * (c - e) / e, 0.05)

    def stage(self, nbytes: float):
        """A SimPy sub-process: wait for the pool, stage the chunk's L copies, release."""
        yield from self.server.hold(nbytes / self.rate_Bps)

    def _sample(self) -> None:
        t, q, b = self.samples
        t.append(self.env.now)
        q.append(len(self.server.waiting))
        b.append(self.server.busy)
