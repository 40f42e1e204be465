"""The request-level operations a request's steps perform on instance engines, in one place:
serve a sequence (prefill + decode, or one side of PD), re-prefill a chunk into a copy, reserve HBM for a
fetched copy, and the TTFT breakdown of a served sequence.

Copies live in the engine's HBM budget (blocks), shared with running sequences' KV: `ChunkCopies` wires a
chunk store's holder lists and request pins to every budget (an evicted copy stops being a holder; a copy a
running request relies on is never evicted).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import simpy

from simroute.sim.engine.build import EngineSet
from simroute.sim.engine.hbm import HbmBudget, blocks_for
from simroute.sim.engine.sequence import RouteShare, Sequence


class TtftParts(NamedTuple):
    """Where a request's time to first token went (seconds; they sum to the TTFT)."""

    queueing: float         # waiting for admission / for a place in an iteration
    prefill_compute: float  # iterations that carried its prefill (the whole batch's compute)
    transfer: float         # before its sequence reached the engine: fetch, PD transfer, copies made
    exchanges: float        # routed round trips on its iterations' critical path (without holder wait)
    holder_wait: float      # routed kernels waiting on busy holders


def ttft_parts(seq: Sequence, t_request: float) -> TtftParts:
    transfer = seq.t_submit - t_request
    exchanges = seq.exchange_s - seq.holder_wait_s
    total = seq.t_first_token - t_request
    queueing = total - transfer - seq.prefill_compute_s - seq.exchange_s
    return TtftParts(max(queueing, 0.0), seq.prefill_compute_s, transfer, exchanges, seq.holder_wait_s)


def _unpinned(pins: dict[int, int], ci: int) -> bool:
    """An instance's evictor's test: no request relies on its copy of ci."""
    return ci not in pins


class ChunkCopies:
    """Copies of chunks in the engines' HBM budgets, kept consistent with the chunk store's holder lists.

    `holders[ci]` lists the instances holding chunk ci (canonical or copy); `pins_at(instance)` maps ci to
    the requests relying on its copy there (`ChunkStore.pins_at`). `held_at[instance]` is the holder relation
    as each instance's set of chunks, so asking whether an instance holds a chunk does not scan a popular
    chunk's list of hundreds of holders (a request asks it for each of its chunks: an int lookup, no key built
    per chunk)."""

    def __init__(self, engines: EngineSet, holders: list[list[int]], pins_at: Callable[[int], dict[int, int]],
                 tokens: Any) -> None:
        self.engines, self.holders, self.tokens = engines, holders, tokens
        # each chunk's KV blocks, once (asked per chunk of every request: a numpy scalar read costs more)
        self._tokens: list[int] = [int(t) for t in np.asarray(tokens).tolist()]
        self._blocks = [blocks_for(t) for t in self._tokens]
        self._hbm = [eng.hbm for eng in engines.engines]    # by instance id (asked per chunk, too)
        self.held_at: list[set[int]] = [set() for _ in engines.engines]
        for ci, instances in enumerate(holders):
            for eid in instances:
                self.held_at[eid].add(ci)
        self.fell_back = 0              # fetches that did not fit in the requester's HBM (routed instead)
        for eng in engines.engines:
            eid = eng.eid
            eng.hbm.evictable = partial(_unpinned, pins_at(eid))
            eng.hbm.on_evict = self._evictor(eid)

    def _evictor(self, eid: int) -> Callable[[int], None]:
        """Instance eid's `on_evict`: its copy of ci went, so it no longer holds ci (called once per eviction:
        a closure over the instance's set, no keyword partial)."""
        held_here, holders = self.held_at[eid], self.holders

        def evicted(ci: int) -> None:
            if ci in held_here:
                held_here.discard(ci)
                holders[ci].remove(eid)
        return evicted

    def holds(self, ci: int, eid: int) -> bool:
        """Whether instance eid holds chunk ci now (canonical or an arrived copy)."""
        return ci in self.held_at[eid]

    @property
    def held(self) -> set[tuple[int, int]]:
        """Every (chunk, instance) held now, as one set (a view built on request: for checks, not the hot path)."""
        return {(ci, eid) for eid, chunks in enumerate(self.held_at) for ci in chunks}

    def blocks(self, ci: int) -> int:
        return self._blocks[ci]

    def pin_canonical(self, per_instance_chunks: list[list[int]]) -> list[int]:
        """Pin placement's chunks in their instances' budgets; returns the chunks that did not fit (the
        placement filled HBM beyond what weights leave): they stay in the store but take no blocks."""
        unplaced = []
        for eid, chunks in enumerate(per_instance_chunks):
            hbm = self.engines[eid].hbm
            for ci in chunks:
                if not hbm.pin(self.blocks(ci)):
                    unplaced.append(ci)
        return unplaced

    def fits(self, ci: int, eid: int) -> bool:
        """Whether a copy of ci could take blocks on eid now (`fits_blocks`)."""
        return self.fits_blocks(self.blocks(ci), eid)

    def fits_blocks(self, need: int, eid: int) -> bool:
        """Whether `need` blocks of copies could be had on eid now (free, or by evicting unpinned copies). Scans
        the copies LRU first and stops once enough are found (pinned copies are the recently used ones)."""
        hbm = self._hbm[eid]
        room = hbm.free_blocks
        if room >= need:
            return True
        evictable = hbm.evictable
        for key, blocks in hbm.copies.items():
            if evictable(key):
                room += blocks
                if room >= need:
                    return True
        return False

    def reserve(self, ci: int, eid: int, keep_free_tokens: int = 0) -> bool:
        """Blocks for a copy about to arrive (fetch): taken now (LRU-evicting unpinned copies), leaving room
        for `keep_free_tokens` of KV (the request's own); False if they cannot be had, and nothing changed."""
        return self._hbm[eid].add_copy(ci, self._blocks[ci], keep_free=blocks_for(keep_free_tokens))

    def reserver(self, eid: int, keep_free_tokens: int = 0) -> Callable[[int], bool]:
        """`reserve` on eid for one request's chunks, one after another (its keep-free blocks worked out once)."""
        add_copy, blocks, keep_free = self._hbm[eid].add_copy, self._blocks, blocks_for(keep_free_tokens)
        return lambda ci: add_copy(ci, blocks[ci], keep_free)

    def arrived(self, ci: int, eid: int) -> None:
        """The reserved copy is in HBM: from now on the instance holds the chunk."""
        self.arrived_all((ci,), eid)

    def touch(self, ci: int, eid: int) -> None:
        self._hbm[eid].touch(ci)

    def budget(self, eid: int) -> HbmBudget:
        """Instance eid's HBM budget (a request touches its resident copies there, one per chunk)."""
        return self._hbm[eid]

    def arrived_all(self, chunks: Iterable[int], eid: int) -> None:
        """Each of these copies (one pull's, or one re-prefill's) is in HBM, in order: from now on the instance
        holds the chunk."""
        holders, held_here = self.holders, self.held_at[eid]
        for ci in chunks:
            if ci not in held_here:
                held_here.add(ci)
                holders[ci].append(eid)

    def reprefill(self, chunks: list[int], eid: int, rid: int) -> simpy.Event:
        """Prefill `chunks` on instance eid as engine work (one sequence of their tokens, no output) whose KV
        becomes one copy per chunk; the event fires when the copies are resident."""
        eng = self.engines[eid]
        done = eng.env.event()
        block_list = self._blocks
        sizes = [block_list[ci] for ci in chunks]

        def hand_over(seq: Sequence) -> None:
            if seq.output >= 0:           # not refused: its blocks become the copies
                left = seq.blocks
                kv_to_copy = eng.hbm.kv_to_copy
                for ci, blocks in zip(chunks, sizes):
                    take = blocks if blocks < left else left
                    kv_to_copy(ci, take)
                    left -= take
                self.arrived_all(chunks, eid)   # after every copy is in: nothing reads holders meanwhile
                eng.hbm.release_kv(left)
                seq.blocks = 0

        tokens = int(sum(self._tokens[ci] for ci in chunks))
        eng.submit(Sequence(rid, tokens, 0, keep_kv=True, on_done=hand_over, done=done))
        return done


def serve(engines: EngineSet, eid: int, rid: int, *, prompt: int, output: int, resident_tokens: float = 0.0,
          routes: dict[int, float] | None = None, prefilled: bool = False, route_premium: float = 1.0,
          step_wait: Callable[[int], float] | None = None,
          keep_kv: bool = False) -> tuple[Sequence, simpy.Event, simpy.Event]:
    """Submit a request's sequence to instance eid's engine; returns (sequence, first-token event, done event).

    `routes` maps holder instance -> key tokens attended there (one query per holder covers them all),
    answered by a kernel `route_premium` x a dense one's time (a sparse selection's); `prefilled` is PD's
    decode side: the prompt's KV arrived, the first token was produced elsewhere; `step_wait`: see
    `Sequence`; `keep_kv`: its KV blocks stay taken when it is done (PD's prefill side, until the KV is shipped:
    the caller releases them)."""
    eng = engines[eid]
    env = eng.env
    first, done = env.event(), env.event()
    if not prefilled and output > 0:
        prompt = max(prompt, 1)        # a fully cached prompt still runs its last token to sample the first
    shares = (tuple(RouteShare(engines[h], keys, route_premium) for h, keys in sorted(routes.items())) if routes
              else ())
    seq = Sequence(rid, prompt, output, resident_tokens=resident_tokens, routes=shares, step_wait=step_wait,
                   first_token=first, done=done, keep_kv=keep_kv)
    if prefilled:
        seq.prefilled = prompt
        seq.generated = 1
        seq.t_first_token = seq.t_last_token = env.now
        first.succeed(seq)
    eng.submit(seq)
    return seq, first, done

