"""The instance engine: iteration-level continuous batching on one GPU (or tensor-parallel group).

Per instance a waiting queue and a running set; each iteration batches one decode token per running
sequence plus prefill tokens under a token budget, as the registered scheduler plans. Its time is the
step-time model's `iteration_s` over the whole batch (each sequence's attention is one kernel's work over
its whole context: own tokens + resident chunks; a prefill chunk's pairs in the prefill form, see
`_batch_cost`), plus the routed exchanges of its sequences (exchange.py),
plus the partial-attention work it did for other requesters as a holder. KV lives in one HBM budget
(hbm.py): admission waits for blocks, copies are evicted before running sequences are preempted
(recompute: the victim re-prefills its prompt and generated tokens).

One SimPy event per engine event: while only decodes run, an event stands for `k` identical iterations
(up to `steps_per_event`, never past a completion; a new arrival cuts it at the next iteration boundary).
Their context grows by one token per iteration; the event charges the mid-point context, which is exact
while the attention term is linear in context.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

import simpy

from simroute.errors import ConfigurationError, UnknownNameError
from simroute.model.steptime import causal_pairs
from simroute.sim.engine.exchange import MAX_UTILISATION, HolderPartials, RouteExchange
from simroute.sim.engine.hbm import BLOCK_TOKENS, HbmBudget, blocks_for
from simroute.sim.engine.log import IterationLog
from simroute.sim.engine.sequence import DECODE, DONE, PREFILL, WAITING, Sequence
from simroute.sim.registry import registry
from simroute.sim.schedulers.base import Plan
from simroute.sim.vocab import HOLDER_MODES


class StepTime(Protocol):
    """What the engine asks of the step-time model (docs/STEP_TIME.md)."""

    def iteration_s(self, new_tokens: float, sequences: float, kv_read_tokens: float,
                    attention_pairs: float, prefill_pairs: float = 0.0,
                    decode_sequences: float | None = None) -> float: ...
    # (decode_sequences: the sequences attending in the decode form, one query token each; a measured model
    # splits the batch's attention by it)

    def holder_partial_s(self, queries: float, rows_per_query: float | list[float],
                         key_tokens: float | list[float]) -> float: ...
    # (StepTimeModel's also takes `dense=False` for a selection's queries; the exchange passes it only then)


@dataclass(frozen=True)
class EngineOptions:
    """Scheduler and engine knobs (the run config carries them; defaults are vLLM-like)."""

    scheduler: str = "sarathi"
    max_running: int = 256          # running sequences at most (vLLM max_num_seqs)
    token_budget: int = 2048        # tokens per iteration (vLLM max_num_batched_tokens)
    prefill_chunk: int = 2048       # largest prefill chunk of one sequence per iteration (sarathi)
    steps_per_event: int = 8        # identical decode iterations one event may stand for
    holder_mode: str = "inline"     # holder partials between/inside own iterations, or a concurrent stream
    interference: float = 0.3       # `stream`: share of partial work that slows the holder's own iterations
    overlap: bool = False           # two micro-batches: exchanges of one behind compute of the other
    check_hbm: bool = False         # assert the HBM invariant at every iteration (tests)

    def __post_init__(self) -> None:
        if self.scheduler not in registry("scheduler"):
            raise UnknownNameError("scheduler", self.scheduler, list(registry("scheduler")))
        if self.holder_mode not in HOLDER_MODES:
            raise UnknownNameError("holder_mode", self.holder_mode, list(HOLDER_MODES))
        for name in ("max_running", "token_budget", "prefill_chunk", "steps_per_event"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"must be >= 1, got {getattr(self, name)}", field=name)
        if not 0 <= self.interference <= 1:
            raise ConfigurationError("must be within [0, 1]", field="interference")


class InstanceEngine:
    """One instance's serving engine. `submit(seq)` queues a sequence; its callbacks fire at its first
    token and when it is done. Also a holder: `partials` is the work it does for other requesters.

    Extend by registering a scheduler (simroute/sim/schedulers/); the iteration cost lives in the step-time model.
    """

    def __init__(self, env: simpy.Environment, eid: int, gpu: str, step: StepTime, hbm: HbmBudget,
                 options: EngineOptions, *, layers: int, heads: int, exchange: RouteExchange | None = None,
                 log: IterationLog | None = None) -> None:
        self.env, self.eid, self.gpu = env, eid, gpu
        self.step, self.hbm, self.options = step, hbm, options
        self.scheduler = registry("scheduler").get(options.scheduler)()
        self.layers, self.heads = layers, heads
        self.exchange = exchange
        self.log = log if log is not None else IterationLog()
        self.partials = HolderPartials(options.holder_mode, options.interference)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.busy = False
        self.layer_s = 0.0              # per-layer time of the current iteration (holder layer waits)
        self._gen = 0
        self._plan = Plan()
        self._t0 = self._dt = self._pre = self._stretch = 0.0
        self._exch = self._hidden = 0.0     # per iteration of the current event: exchange time, of it hidden
        self._legs: list[tuple] = []        # the current event's routed legs (settled when it ends)
        self._row = -1                      # its row in the iteration log
        self._in_step = False
        self._admitted = 0
        self.preemptions = 0
        self.rejected = 0
        self.cuts = 0                   # macro events an arrival cut short
        self.hidden_s = self.exchange_total_s = 0.0
        self.busy_s = 0.0               # summed event durations (own iterations, exchanges, partials run inline)

    # ---- interface -----------------------------------------------------------------------------------
    def submit(self, seq: Sequence) -> None:
        seq.t_submit = self.env.now
        seq.phase = WAITING
        self.waiting.append(seq)
        if self._in_step:
            return                          # the event being processed picks it up
        if not self.busy:
            self._begin()
        elif self._plan.k > 1:
            self._cut()

    def poke(self) -> None:
        """HBM was freed from outside (a copy unpinned or removed): an idle engine retries admission."""
        if not self.busy and not self._in_step and self.waiting:
            self._begin()

    def unblock(self) -> bool:
        """Break a hold-and-wait deadlock of an idle engine (called only when no event is left in the run): its
        waiting sequences hold the copies they fetched, and those fill the HBM the waiting head needs, so FCFS
        admission would wait forever. The first waiting sequence that fits (beside copies nobody uses) moves to
        the head and the engine starts; its finish unpins its copies, which makes room for the rest. False when
        none fits (a true stall, reported as such)."""
        if self.busy or self.running or not self.waiting:
            return False
        room = self.hbm.free_blocks + sum(size for key, size in self.hbm.copies.items() if self.hbm.evictable(key))
        for position, seq in enumerate(self.waiting):
            if position and blocks_for(seq.recompute if seq.recompute else seq.prompt) <= room:
                del self.waiting[position]
                self.waiting.appendleft(seq)
                self._begin()
                return self.busy
        return False

    def admit(self, seq: Sequence) -> bool:
        """Move the head of the waiting queue to the running set if the cap and its KV blocks allow."""
        if len(self.running) >= self.options.max_running:
            return False
        target = seq.recompute if seq.recompute else seq.prompt
        need = blocks_for(target)
        # vLLM's 1% watermark: admission leaves head-room for running sequences' growth, at least the one block
        # each may take in the next event (else a small HBM livelocks: admit, preempt it to grow, admit again)
        watermark = max(self.hbm.capacity_blocks // 100, len(self.running)) if self.running else 0
        if self.hbm.reserve_kv(need + watermark):
            self.hbm.release_kv(watermark)
        else:
            if not self.running and need > self.hbm.capacity_blocks - self.hbm.pinned_blocks:
                self.waiting.popleft()          # can never fit: refused rather than waiting forever
                self.rejected += 1
                self._finish(seq, failed=True)
            return False
        self.waiting.popleft()
        seq.blocks = need
        self._admitted += 1
        seq.admit_order = self._admitted
        if seq.t_scheduled < 0:
            seq.t_scheduled = self.env.now
        seq.phase = PREFILL if seq.to_prefill > 0 else DECODE
        self.running.append(seq)
        return True

    def macro_k(self, decode: list[Sequence]) -> int:
        if not decode:
            return 1
        return max(1, min(self.options.steps_per_event, min(s.remaining_decode for s in decode)))

    # ---- one event -------------------------------------------------------------------------------------
    def _begin(self) -> None:
        self._in_step = True
        plan = self.scheduler.plan(self)
        while plan.decode and not self._grow(plan):
            plan = self.scheduler.plan(self)    # a preemption changed the running set: plan again
        self._in_step = False
        self._plan = plan
        if plan.empty:
            self.busy = False
            self.layer_s = 0.0
            return
        if not self.busy:
            self.partials.skip(self.env.now)    # partials it answered while idle cost its own work nothing
        self.busy = True
        compute, groups, seq_wait = self._batch_cost(plan)
        k = plan.k
        exch = wait = 0.0
        legs: list[tuple] = []
        if groups:
            exch, wait, legs = self.exchange.iteration(self, groups, k, compute)
        exch = max(exch, seq_wait)      # sequences' own waits (gathers) run beside the routed exchanges
        pre, stretch = self.partials.charge(self.env.now, compute, k, compute + exch)
        dt = compute + exch
        if self.options.overlap and exch > 0:
            dt = max(compute, compute / 2 + exch)       # per layer: max(c, c/2 + r), summed over layers
        self._exch, self._hidden, self._legs = exch, compute + exch - dt, legs
        dt += stretch
        self._t0, self._dt, self._pre, self._stretch = self.env.now, dt, pre, stretch
        self.layer_s = compute / self.layers    # GPU-busy time per layer (its own exchange waits leave it idle)
        for seq, _tokens in plan.prefill:
            seq.prefill_compute_s += compute + pre + stretch    # its GPU time, partials run for others included
            seq.exchange_s += exch
            seq.holder_wait_s += wait
        if self.options.check_hbm:
            self.hbm.check()
        h = self.hbm
        b = h.block_bytes
        self._row = self.log.add((self.eid, self.env.now, pre + k * dt, k, len(plan.decode), len(plan.prefill),
                      len(plan.decode) + sum(t for _, t in plan.prefill), compute, exch, wait, pre + k * stretch,
                      self._hidden * k, h.weight_bytes, h.kv_blocks * b, h.pinned_blocks * b,
                      h.copy_blocks * b, h.free_blocks * b))
        self._schedule(pre + k * dt)

    def _batch_cost(self, plan: Plan) -> tuple[float, dict, float]:
        """The step-time model's iteration time for the batch, its routed groups by holder, and the slowest
        of its sequences' own per-iteration waits (`Sequence.step_wait`).

        A prefill chunk of more than one token attends in the prefill form (`prefill_pairs`: MLA's expanded,
        non-absorbed kernel, as vLLM's and SGLang's MLA backends run prefill); a one-token chunk (a fully
        cached prompt's last token) runs as a decode does, in the absorbed form (vLLM classifies a query of
        one token as a decode)."""
        k = plan.k
        heads = self.heads
        kv = pairs = prefill_pairs = seq_wait = 0.0
        groups: dict[Any, list] = {}
        new = decode_form = len(plan.decode)         # sequences attending in the decode form (one query token)
        for seq in plan.decode:
            ctx = seq.resident_tokens + seq.prompt + seq.generated + (k - 1) / 2
            kv += ctx
            pairs += ctx
            if seq.routes:
                _add_routes(groups, seq, heads)
            if seq.step_wait is not None:
                seq_wait = max(seq_wait, seq.step_wait(k))
        for seq, t in plan.prefill:
            base = seq.resident_tokens + seq.prefilled
            kv += base + t
            chunk_pairs = causal_pairs(t, base)
            pairs += chunk_pairs
            if t > 1:
                prefill_pairs += chunk_pairs
            else:
                decode_form += 1
            new += t
            if seq.routes:
                _add_routes(groups, seq, heads * t)
            if seq.step_wait is not None:
                seq_wait = max(seq_wait, seq.step_wait(1))
        compute = self.step.iteration_s(new, len(plan.decode) + len(plan.prefill), kv, pairs, prefill_pairs,
                                        decode_form)
        if groups and self.exchange is None:
            raise RuntimeError("a routed sequence on an engine without a RouteExchange")
        return compute, groups, seq_wait

    def _grow(self, plan: Plan) -> bool:
        """Reserve the decode KV blocks of the next k tokens; if they do not fit (copies were already evicted
        by `reserve_kv`), preempt the latest admitted sequence (KV freed, recomputed later) and return False."""
        k = plan.k
        block = BLOCK_TOKENS
        want = [-(-(s.prompt + s.generated + k) // block) for s in plan.decode]   # blocks_for, inlined (hot)
        need = sum(want) - sum(s.blocks for s in plan.decode)
        if self.hbm.reserve_kv(need):
            for s, blocks in zip(plan.decode, want):
                s.blocks = blocks
            return True
        self._preempt(max(self.running, key=lambda s: s.admit_order))
        return False

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.hbm.release_kv(seq.blocks)
        seq.blocks = 0
        seq.recompute = seq.prompt + seq.generated if seq.generated else 0
        seq.prefilled = 0
        seq.phase = WAITING
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def absorb(self, entry: list) -> None:
        """A requester's partial work began during this engine's event: the event runs its share now, lengthened
        by what the work asks of its busy GPU while both last (charge rate c x the event's busy share f, over
        the event's rest lengthened by it: cf (end - now) / (1 - cf), or cf (until - now) if the work ends
        first), prepaid against what the work accrues, so that it is not charged to the next event in one lump."""
        plan = self._plan
        if not self.busy or self._in_step or not (plan.prefill or plan.decode):
            return
        now = self.env.now
        end = self._t0 + self._pre + plan.k * self._dt
        rate = min(entry[4] * self.partials.busy_fraction, MAX_UTILISATION)
        if end <= now or rate <= 0:
            return
        extra = min(rate * (end - now) / (1.0 - rate), rate * max(0.0, entry[1] - now))
        if extra <= 0:
            return
        self._pre += extra
        self.partials.prepay(extra)
        for seq, _tokens in plan.prefill:
            seq.prefill_compute_s += extra
        self.log.extend(self._row, extra)           # the scheduled end fires early and waits the rest (_end)

    def _schedule(self, delay: float) -> None:
        self._gen += 1
        gen = self._gen
        self.env.timeout(delay).callbacks.append(lambda _e: self._end(gen))

    def _cut(self) -> None:
        """A new arrival ends a k-iteration decode event at the next iteration boundary."""
        plan, dt = self._plan, self._dt
        done = math.ceil((self.env.now - self._t0 - self._pre) / dt - 1e-9) if dt > 0 else plan.k
        done = max(1, done)
        if done >= plan.k:
            return
        for seq in plan.decode:          # hand back the blocks reserved for the iterations not run
            keep = blocks_for(seq.prompt + seq.generated + done)
            self.hbm.release_kv(seq.blocks - keep)
            seq.blocks = keep
        if self._legs:                   # nor did the holders' partials for them run
            self.exchange.retract(self, self._legs, done, plan.k)
        self.partials.unprepay(self._stretch * (plan.k - done))
        self.log.revise(self._row, plan.k, done, self._pre + done * dt, self._pre + done * self._stretch,
                        self._hidden * done)
        self.cuts += 1
        plan.k = done
        self._gen += 1
        gen = self._gen
        end = self._t0 + self._pre + done * dt
        self.env.timeout(max(0.0, end - self.env.now)).callbacks.append(lambda _e: self._end(gen))

    def _end(self, gen: int) -> None:
        if gen != self._gen:
            return
        now = self.env.now
        end = self._t0 + self._pre + self._plan.k * self._dt
        if end > now + 1e-12 * max(1.0, now):      # absorbed partial work lengthened the event meanwhile
            self.env.timeout(end - now).callbacks.append(lambda _e: self._end(gen))
            return
        self._in_step = True
        self.busy_s += now - self._t0
        plan, dt, log = self._plan, self._dt, self.log
        k = plan.k
        self.exchange_total_s += self._exch * k
        self.hidden_s += self._hidden * k
        if self._legs:
            self.exchange.settle(self._legs, k)
            self._legs = []
        heads = self.heads
        for seq, t in plan.prefill:
            if seq.routes:
                seq.routed_rows += heads * t * len(seq.routes)
            seq.prefilled += t
            if seq.to_prefill > 0:
                continue
            if seq.recompute:                       # recomputed after a preemption: resumes decoding
                seq.recompute = 0
                seq.prefilled = seq.prompt
                seq.phase = DECODE
            elif seq.output == 0:
                self._finish(seq)
            else:
                seq.generated = 1
                seq.t_first_token = seq.t_last_token = now
                if seq.on_first_token is not None:
                    seq.on_first_token(seq)
                if seq.output == 1:
                    self._finish(seq)
                else:
                    seq.phase = DECODE
        if plan.decode:
            t0 = self._t0
            first_end = t0 + self._pre + dt
            continuing = 0                  # decoded in the previous event too: one gap entry for all of them
            finished = []
            for seq in plan.decode:
                if seq.routes:
                    seq.routed_rows += heads * len(seq.routes) * k
                if seq.t_last_token == t0:
                    continuing += 1
                else:
                    log.gap(first_end - seq.t_last_token, 1)
                seq.generated += k
                seq.t_last_token = now
                if seq.generated >= seq.output:
                    finished.append(seq)
            log.gap(first_end - t0, continuing)
            log.gap(dt, len(plan.decode) * (k - 1))
            for seq in finished:
                self._finish(seq)
        self._plan = Plan()
        self._begin()

    def _finish(self, seq: Sequence, failed: bool = False) -> None:
        if seq in self.running:
            self.running.remove(seq)
        if not seq.keep_kv or failed:
            self.hbm.release_kv(seq.blocks)
            seq.blocks = 0
        seq.phase = DONE
        seq.t_done = self.env.now
        if failed:
            seq.output = -1
        if seq.on_done is not None:
            seq.on_done(seq)


def _add_routes(groups: dict, seq: Sequence, rows: float) -> None:
    """One query per holder the sequence routes to: its own rows and keys, kept per query (a holder's kernel
    over one long-context query and many short ones is not their average's). Its rows are counted in
    `routed_rows` when the event ends, with the iterations it ran."""
    for share in seq.routes:
        g = groups.get(share.holder)
        if g is None:
            groups[share.holder] = [[rows], [share.key_tokens], share.premium]
        else:
            g[0].append(rows)
            g[1].append(share.key_tokens)
            if share.premium > g[2]:
                g[2] = share.premium
