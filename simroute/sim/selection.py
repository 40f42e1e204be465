"""Sparse selection (DSA / NSA; Move the Query, Not the Cache, §5.4) on the instance engines: every step's
top-k entries are spread over the M holders a selection spans, and one decision covers the whole selection.

- route: every iteration of the request's sequence sends, per layer, one query to each of the M holders
  (its new tokens x query heads as rows, its k/M share as keys, answered by the sparse kernel), the engine's
  exchange groups; the partials run on the holders' engines and lengthen their iterations; the iteration
  waits for the slowest holder, then merges.
- fetch: every iteration gathers the k entries from the M holders one after another (host-copy bound, no
  splice; the selection is re-chosen every step) before its attention: a wait on the iteration's critical
  path. The gathered entries take KV blocks of the requester's HBM for the request's life (a request whose
  entries do not fit routes instead) and are attended in the sequence's own kernel.
- local: the selection's chunks are re-prefilled once on the requester's engine as copies in its HBM, then
  attended resident (k entries a step, in the sequence's own kernel).
Resident, joined and first-touch chunks, the prompt's prefill (PD included) and decoding in the engine's
batches are the dense request's.
"""

from __future__ import annotations

import simpy

from simroute.model.cost import FLOATS, sparse_premium
from simroute.sim.engine.hbm import blocks_for
from simroute.sim.vocab import DECODE
from simroute.sim.policies.base import RequestShape
from simroute.sim.request import ChunkPlan, DenseRequest, RemoteChunks, Steps, build_decision_context
from simroute.sim.vocab import Primitive


class SelectionRequest(DenseRequest):
    """A request whose remote attention is one top-k selection over the chunks of M holders.

    Contract: `decide` (called by `DenseRequest.first_pass` with the remote chunks) settles one primitive for
    every remote chunk and sets what the sequence carries: `routes` (holder -> k/M keys) and
    `route_premium` for route, `step_wait` and its HBM blocks for fetch, `resident_tokens` (entries attended
    in its own kernel per step) for all three.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.primitive = Primitive.LOCAL
        self.remote: list[int] = []      # the remote holders the selection spans
        self.gather_blocks = 0           # fetch: KV blocks of the gathered entries, held until `finish`
        self.gather_s = 0.0              # fetch: one step's gather, uncongested (the closed form's term)
        self.gather_bytes = 0.0          # fetch: bytes one step gathers from each remote holder (per rank)
        self.prefill_gathers = 0         # fetch: gathers of prefill iterations (decode gathers one per step)

    def span(self, remote: RemoteChunks, here: bool) -> list[int]:
        """The remote holders the selection spans: each remote chunk's holder, filled up to the trace's
        `holders_spanned` (the requester counting as one when it holds some of the chunks, `here`) with other
        instances (deterministic spread, no RNG state)."""
        spec, requester = self.spec, self.requester
        holders: list[int] = list(dict.fromkeys(remote.holders))      # in the order of their first chunk
        n = len(self.ctx.cluster.instances)
        wanted = min(spec.holders_spanned - (1 if here else 0), n - 1)
        probe = 0
        while len(holders) < wanted and probe < 4 * n:
            candidate = (spec.request_id * 7919 + probe * 104729) % n
            if candidate not in holders and candidate != requester.id:
                holders.append(candidate)
            probe += 1
        return holders

    def decide(self, remote: RemoteChunks) -> None:
        """One primitive for the whole selection; the k entries split evenly over the span (the remote holders,
        and the requester when it holds some of the selection's chunks)."""
        ctx, spec, requester = self.ctx, self.spec, self.requester
        chunks = ctx.cluster.chunks
        topk = float(spec.topk)
        here_tokens = self.resident_tokens          # resident, joined and first-touch chunks (classify_chunks)
        self.remote = self.span(remote, here_tokens > 0)
        if not self.remote:
            self.resident_tokens = min(topk, here_tokens)
            return
        share = topk / (len(self.remote) + (1 if here_tokens > 0 else 0))
        here_entries = min(share, here_tokens)
        tokens = float(sum(chunks.tokens[chunk] for chunk in remote.chunks))
        self.primitive = self._choose(tokens)
        if self.primitive == Primitive.FETCH and not self._reserve_gather(share):
            self.primitive = Primitive.ROUTE
            ctx.copies.fell_back += len(remote)     # per chunk, as the decisions (and a dense request) count
        remote.primitives = [self.primitive] * len(remote)
        # route and fetch read the holders' chunks; local makes copies here
        for chunk, holder in zip(remote.chunks, remote.holders):
            self.record(chunk, holder, self.primitive)
            self.pin(chunk, requester.id if self.primitive == Primitive.LOCAL else holder)
        if self.primitive == Primitive.ROUTE:
            self.routes = {h: max(share, 1.0) for h in self.remote}
            self.route_premium = sparse_premium(max(share, 1.0), ctx.params, FLOATS)
            self.resident_tokens = here_entries
        elif self.primitive == Primitive.FETCH:
            self.step_wait = self.gather_wait
            self.resident_tokens = here_entries + share * len(self.remote)
        else:
            self.resident_tokens = min(topk, here_tokens + tokens)
        self._floor(tokens)

    def start_first_pass(self, plan: ChunkPlan) -> list[simpy.Event]:
        """A selection moves no whole chunk: only local's re-prefill (and first touch) makes copies before the
        sequence starts; route and fetch attend the holders' chunks every step."""
        plan.remote = plan.remote.only(Primitive.LOCAL)
        return super().start_first_pass(plan)

    def _choose(self, tokens: float) -> Primitive:
        ctx, requester, spec = self.ctx, self.requester, self.spec
        holders = [ctx.cluster.instances[h] for h in self.remote]
        shape = RequestShape(mq_first=self.mq_first, mq_step=self.heads, steps=self.decode_steps, tokens=tokens,
                             fabric=ctx.cluster.fabric_id(requester, holders[0]), cached=True, topk=spec.topk,
                             holders=len(holders), tp=ctx.config.instance_gpus)
        copy_bytes = tokens * ctx.compute.kv_bytes_per_token     # what local's re-prefill would keep resident
        return ctx.policy.choose(build_decision_context(ctx, requester, holders, shape, copy_bytes,
                                                        ctx.engines[requester.id].hbm.free_bytes))

    def _reserve_gather(self, share: float) -> bool:
        """KV blocks for the entries gathered from the remote holders, leaving room for the request's own KV;
        False (nothing taken) if the requester's HBM cannot have them. Sets the gather's per-step terms."""
        ctx, spec = self.ctx, self.spec
        entries = share * len(self.remote)
        blocks = blocks_for(entries)
        own = blocks_for(spec.prompt_tokens + spec.output_tokens)
        hbm = ctx.engines[self.requester.id].hbm
        if not hbm.reserve_kv(blocks + own):
            return False
        hbm.release_kv(own)
        self.gather_blocks = blocks
        fabric = ctx.cluster.fabric_id(self.requester, ctx.cluster.instances[self.remote[0]])
        self.gather_s = ctx.floor_model.step(self.heads, 0.0, fabric, True, topk=int(round(entries)),
                                             holders=len(self.remote), tp=ctx.config.instance_gpus).fetch_move
        self.gather_bytes = share * ctx.compute.kv_bytes_per_token / ctx.config.instance_gpus
        return True

    def gather_wait(self, iterations: int) -> float:
        """One iteration's gather (the engine asks once per event of `iterations`): the closed form's
        host-copy-bound time per holder, or the holder -> requester path's live share if slower, one holder
        after another."""
        ctx, requester = self.ctx, self.requester
        if self.sequence is None or self.sequence.phase != DECODE:
            self.prefill_gathers += 1   # a prefill iteration is never one of a cut macro-event
        instances, network = ctx.cluster.instances, ctx.network
        per_holder_s = self.gather_s / len(self.remote)
        wait = 0.0
        for h in self.remote:
            share_Bps = network.path_share(instances[h].gpu, requester.gpu)
            wait += max(per_holder_s, self.gather_bytes / share_Bps)
        return wait

    def decode(self) -> Steps:
        """The dense request's decode; a fetch's bytes: every prefill iteration's gather and one per step."""
        yield from super().decode()
        if self.gather_blocks:
            gathers = self.prefill_gathers + self.decode_steps
            self.ctx.recorder.bytes_fetch[self.spec.request_id] += \
                gathers * self.gather_bytes * self.ctx.config.instance_gpus * len(self.remote)

    def _floor(self, tokens: float) -> None:
        """The selection's share of the TTFT floor: the cheapest primitive's first pass, uncongested."""
        ctx = self.ctx
        fabric = ctx.cluster.fabric_id(self.requester, ctx.cluster.instances[self.remote[0]])
        step = ctx.floor_model.step(self.mq_first, 0.0, fabric, True, topk=self.spec.topk,
                                    holders=len(self.remote), tp=ctx.config.instance_gpus,
                                    query_tokens=self.mq_first / self.heads)
        self.floor_chunks_s = max(self.floor_chunks_s,
                                  min(step.route, step.fetch_move, self._prefill_alone_s(tokens)))

    def finish(self, egress_s: float = 0.0) -> None:
        if self.gather_blocks:
            self.ctx.engines[self.requester.id].hbm.release_kv(self.gather_blocks)
            self.gather_blocks = 0
            self.ctx.engines[self.requester.id].poke()
        super().finish(egress_s)
