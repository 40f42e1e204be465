"""The instance engine: iteration-level continuous batching on one GPU (or tensor-parallel group).

Per instance a waiting queue and a running set; each iteration batches one decode token per running
sequence plus prefill tokens under a token budget, as the registered scheduler plans. Its time is the
step-time model's `iteration_s` over the whole batch (each sequence's attention is one kernel's work over
its whole context: own tokens + resident chunks; a prefill chunk's pairs in the prefill form, see
`_batch_cost`), plus the routed exchanges of its sequences (exchange.py),
plus the partial-attention work it did for other requesters as a holder. KV lives in one HBM budget
(hbm.py): admission waits for blocks, copies are evicted before running sequences are preempted
(recompute: the victim re-prefills its prompt and generated tokens).

Progress: a sequence whose KV at its largest (`Sequence.peak_tokens`) cannot fit beside the pinned chunks is
refused when submitted (it would otherwise be admitted, outgrow HBM alone, preempt itself and recompute
forever); admission leaves room for one event's growth of every sequence that decodes next; a sequence
preempted while an event is planned is not re-admitted in the same plan; one preempted more than
`max_preemptions` times is refused (`THRASHED`) rather than recomputed again; an idle engine whose queue head
does not fit admits the sequences behind it (`_plan_past_the_head`).

One SimPy event per engine event: while only decodes run, an event stands for `k` identical iterations
(up to `steps_per_event`, never past a completion; a new arrival cuts it at the next iteration boundary).
Their context grows by one token per iteration; the event charges the mid-point context, which is exact
while the attention term is linear in context.

The loop, in named steps, each with one owner: `submit` queues a sequence (and starts an idle engine: `_start`);
`_begin` runs plan -> cost -> arm: `_plan_step` plans the next event (`_plan_next`: the scheduler's batch, then
`_grow` reserves the decodes' blocks, preempting if they do not fit), `_batch_cost` (`_batch_shape` through the
step-time model) and `_cost` (the routed exchanges, the holder's partials) cost it, `_log_event` logs its row and
`_arm` arms one timer; `_on_end` (a timer that is no longer the armed one is stale) calls `_end`: `_close`
(`_advance` moves the sequences: first-token and done events succeed), then `_begin` again. `_cut` ends a macro
event early when a sequence arrives; `absorb` lengthens one by partial work a requester started meanwhile. A DP
attention rank (`group` set) hands the step to its group (`simroute.sim.engine.group.GroupEngine`), which calls
the same steps on every rank with one step time for all and ends them together.

The lifecycle's events (arrival, HBM freed, iteration planned, cut by arrival, partial absorbed, a DP group's
all-to-all done, iteration end, preempted, refused, request finished) each have one owner and one handler
whose docstring, starting "Event *name*", is its contract; docs/ARCHITECTURE.md, "The engine's lifecycle", is
the catalogue.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

import simpy
from simpy.events import NORMAL

from simroute.errors import ConfigurationError, UnknownNameError
from simroute.model.steptime import causal_pairs
from simroute.sim.engine.exchange import MAX_UTILISATION, DemandEntry, HolderPartials, RouteExchange
from simroute.sim.engine.hbm import BLOCK_TOKENS, HbmBudget, blocks_for
from simroute.sim.engine.log import IterationLog
from simroute.sim.engine.peer import EventLegs
from simroute.sim.engine.sequence import DECODE, DONE, NEVER_FITS, PREFILL, THRASHED, WAITING, Sequence
from simroute.sim.registry import registry
from simroute.sim.schedulers.base import Plan, Scheduler
from simroute.sim.vocab import HOLDER_MODES, HolderMode


# SGLang's poll-counter weight of a batch with prefill (managers/scheduler_recv_skipper.py _DEFAULT_WEIGHT, env
# SGLANG_SCHEDULER_RECV_SKIPPER_WEIGHT_DEFAULT = 1000 in sglang 0.5.5-0.5.14): any interval polls after a prefill
RECV_WEIGHT_EXTEND = 1000


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
    holder_mode: HolderMode = HolderMode.INLINE   # partials between/inside own iterations, or a concurrent stream
    interference: float = 0.3       # `stream`: share of partial work that slows the holder's own iterations
    overlap: bool = False           # two micro-batches: exchanges of one behind compute of the other
    check_hbm: bool = False         # assert the HBM invariant at every iteration (tests)
    max_preemptions: int = 64       # preemptions of one sequence before it is refused (a thrash guard)
    schedule_ahead: bool = False    # overlap scheduling: the next iteration is planned while this one runs, so a
    #                                 sequence arriving meanwhile joins the iteration after it (docs/ENGINES.md)
    recv_interval: int = 1          # SGLang's --scheduler-recv-interval: decode iterations between polls of the input
    #                                 queue (`_poll`); 1: every iteration
    batch_wait_iters: int = 0       # TensorRT-LLM's batch waiting (`_batch_wait`): iterations a step's prompts may wait
    batch_wait_ratio: float = 0.0   # ... for the step to hold this share of token_budget; both 0: off
    adp_balance: bool = False       # TensorRT-LLM's attention-DP balancing of a DP group's prompts (`GroupEngine`)
    adp_timeout_iters: int = 0      # ... its timeout_iters (iterations prompts wait while some rank has none)
    adp_batching_wait_iters: int = 0    # ... and batching_wait_iters (iterations they wait once every rank has one)

    def __post_init__(self) -> None:
        if self.scheduler not in registry("scheduler"):
            raise UnknownNameError("scheduler", self.scheduler, list(registry("scheduler")))
        if self.holder_mode not in HOLDER_MODES:
            raise UnknownNameError("holder_mode", self.holder_mode, list(HOLDER_MODES))
        object.__setattr__(self, "holder_mode", HolderMode(self.holder_mode))     # a run's word becomes the mode
        for name in ("max_running", "token_budget", "prefill_chunk", "steps_per_event", "recv_interval"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"must be >= 1, got {getattr(self, name)}", field=name)
        if self.max_preemptions < 0:
            raise ConfigurationError(f"must be >= 0, got {self.max_preemptions}", field="max_preemptions")
        if self.batch_wait_iters < 0:
            raise ConfigurationError(f"must be >= 0, got {self.batch_wait_iters}", field="batch_wait_iters")
        for name in ("adp_timeout_iters", "adp_batching_wait_iters"):
            if getattr(self, name) < 0:
                raise ConfigurationError(f"must be >= 0, got {getattr(self, name)}", field=name)
        if not 0 <= self.batch_wait_ratio <= 1:
            raise ConfigurationError(f"must be within [0, 1], got {self.batch_wait_ratio}", field="batch_wait_ratio")
        if not 0 <= self.interference <= 1:
            raise ConfigurationError("must be within [0, 1]", field="interference")


class LoadBoard:
    """Each engine's load as a holder (`simroute.sim.holder.holder_loads`), kept by instance id in flat lists that
    the engines update as each of their events and calls from outside ends (`InstanceEngine._publish`): a replica
    choice compares up to hundreds of candidate holders per request, and reading each one's engine objects was
    the Zipf run's largest single function (issue 39). A DP group's ranks are planned by their group and do not
    publish: a run with groups has no board."""

    def __init__(self) -> None:
        self.sequences: list[int] = []          # running + waiting
        self.layer_wait_s: list[float] = []     # a routed query's wait for the current layer (nobody routing)
        self.partials: list[HolderPartials] = []
        # raised when demand is added to a holder's partials (`HolderPartials.add`), lowered by the reader that finds
        # its demand empty (`ReplicaChoice._least_loaded`): a holder not flagged has no demand
        self.asked: list[bool] = []

    def join(self, engine: InstanceEngine) -> None:
        """`engine` (the next instance id) publishes here from now on."""
        if engine.eid != len(self.sequences):
            raise ValueError(f"engine {engine.eid} joins a load board of {len(self.sequences)} engines")
        self.sequences.append(0)
        self.layer_wait_s.append(0.0)
        self.partials.append(engine.partials)
        self.asked.append(bool(engine.partials.demand))
        engine.partials.asked, engine.partials.slot = self.asked, engine.eid
        engine.board = self
        engine._publish()


class InstanceEngine:
    """One instance's serving engine. `submit(seq)` queues a sequence; its `first_token` and `done` events
    succeed when its first token is out and when it is done. Also a holder: `partials` is the work it does
    for other requesters.

    Extend by registering a scheduler (simroute/sim/schedulers/); the iteration cost lives in the step-time model.
    """

    def __init__(self, env: simpy.Environment, eid: int, gpu: str, step: StepTime, hbm: HbmBudget,
                 options: EngineOptions, *, layers: int, heads: int, exchange: RouteExchange | None = None,
                 log: IterationLog | None = None, scheduler: Scheduler | None = None) -> None:
        self.env, self.eid, self.gpu = env, eid, gpu
        self.step, self.hbm, self.options = step, hbm, options
        # a run hands each engine the scheduler its registry built (`EngineSet`); an engine built alone makes
        # the plain one of `options.scheduler`
        self.scheduler = scheduler if scheduler is not None else registry("scheduler").get(options.scheduler)()
        self.layers, self.heads = layers, heads
        self.exchange = exchange
        self.log = log if log is not None else IterationLog()
        self.partials = HolderPartials(options.holder_mode, options.interference)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.busy = False
        self.layer_s = 0.0              # per-layer time of the current iteration (holder layer waits)
        self._timer: simpy.Event | None = None     # the timeout that ends the current event
        self._on_end_callback = self._on_end       # bound once: the callback of every event's timer
        self._spare_timers: list[simpy.Event] = []  # timers that fired, armed again (`_arm`)
        self.group: Any = None         # its DP group (simroute.sim.engine.group.GroupEngine), if it is a DP rank
        self.draft_tokens = 0           # MTP drafts per step: a decode may grow by 1 + these tokens in one step
        self.mtp_tokens = 0             # tokens its decodes emitted in MTP steps
        self._plan = _IDLE
        self._t0 = self._dt = self._pre = self._stretch = 0.0
        self._exch = self._hidden = 0.0     # per iteration of the current event: exchange time, of it hidden
        self._wait = 0.0                    # of the exchange, holder waits
        self._legs: EventLegs = _NO_LEGS    # the current event's routed legs (settled when it ends)
        self._row = -1                      # its row in the iteration log
        self._in_step = False
        self._admitted = 0
        self._held: list[Sequence] = []     # preempted while the current event was planned: not re-admitted in it
        # arrived while an event ran under `schedule_ahead`: the next iteration was planned without them, so they
        # reach the waiting queue once it is (`_begin`)
        self._arriving: list[Sequence] = []
        # arrived while busy under a recv interval > 1: not seen by the scheduler before its next poll (`_poll`)
        self._inbox: list[Sequence] = []
        self._polls = 0                 # the poll counter after the current event's last iteration was launched
        # TensorRT-LLM's batch waiting: iterations the prompts have waited so far (`_batch_wait`), and the held
        # decode-only plan whose iterations (as many as ran: a cut shortens it) count once it ends
        self._batch_waited = 0
        self._batch_hold: Plan | None = None
        # the routed groups of the last decode-only batch and its sequences: the next batch of the same sequences
        # routes the same groups (a sequence's routes and the rows of a decode are fixed), so it reuses them
        self._decode_groups: tuple[list[Sequence], dict | None] = ([], None)
        # blocks one decoding sequence may add in one event (k <= steps_per_event tokens)
        self._growth_blocks = -(-options.steps_per_event // BLOCK_TOKENS)
        # SGLang's new_token_ratio (`Scheduler.token_ratio`): the share of the running sequences' future tokens its
        # admission holds back; falls per decode iteration, back to its start when the engine idles, reset by a
        # retraction (`_preempt`)
        self._ratio = self.scheduler.token_ratio[0]
        self.preemptions = 0
        self.rejected = 0               # refused: never fits (`NEVER_FITS`) or preempted too often (`THRASHED`)
        self.thrashed = 0
        self.most_preempted = 0         # the most preemptions of one sequence
        self.cuts = 0                   # macro events an arrival cut short
        self.hidden_s = self.exchange_total_s = 0.0
        self.busy_s = 0.0               # summed event durations (own iterations, exchanges, partials run inline)
        self.board: LoadBoard | None = None    # the run's board, where it publishes its load as a holder

    # ---- interface -----------------------------------------------------------------------------------
    def submit(self, seq: Sequence) -> None:
        """Event *arrival* (the request flow calls it): the sequence waits (or, under `schedule_ahead` while an
        iteration is planned, joins the plan after it; under SGLang's poll, `recv_interval` > 1, a busy engine's
        arrival waits in `_inbox` for the next poll, `_poll`, with no cut); an idle engine plans at once
        (`_start`), a k-iteration decode event is cut at its next iteration boundary (`_cut`); a sequence that
        can never fit is refused."""
        try:
            seq.t_submit = self.env.now
            seq.phase = WAITING
            if blocks_for(seq.peak_tokens) > self.hbm.capacity_blocks - self.hbm.pinned_blocks:
                self._refuse(seq, NEVER_FITS)     # can never fit: refused rather than thrashing or waiting forever
                return
            if self.busy and self.options.recv_interval > 1:
                self._inbox.append(seq)         # the scheduler sees it at its next poll; events end at polls (no cut)
                return
            if self.busy and not self._in_step and self.options.schedule_ahead:
                self._arriving.append(seq)      # the next iteration is planned already: it joins the one after
            else:
                self.waiting.append(seq)
            if self._in_step:
                return                          # the event being processed picks it up
            if not self.busy:
                self._start()
            elif self._plan.k > 1:
                self._cut()
        finally:
            self._publish()     # its queue changed (or not): the board shows it

    def poke(self) -> None:
        """Event *HBM freed* (a copy unpinned or removed, from outside): an idle engine retries admission."""
        if not self.busy and not self._in_step and self.waiting:
            self._start()
            self._publish()

    def _publish(self) -> None:
        """Its load as a holder now, on the run's `LoadBoard` (called where each of its events and calls from
        outside ends, so that the board is current whenever no engine code runs)."""
        board = self.board
        if board is not None:
            eid = self.eid
            board.sequences[eid] = len(self.running) + len(self.waiting)
            # `holder_loads`' wait when nobody routes here: half the current layer, inline, on a busy engine
            board.layer_wait_s[eid] = 0.0 + self.layer_s / 2 if self.busy and self.partials._waits_for_layer else 0.0

    def admit(self, seq: Sequence) -> bool:
        """Move the head of the waiting queue to the running set if the cap and its KV blocks allow."""
        if len(self.running) >= self.options.max_running or (self._held and seq in self._held):
            return False
        target = seq.recompute if seq.recompute else seq.prompt
        need = blocks_for(target)
        # vLLM's 1% watermark: admission leaves head-room for the growth of the sequences that decode next, the
        # blocks each may take in one event (else a small HBM livelocks: admit, preempt it to grow, admit again);
        # a sequence whose KV arrived prefilled decodes at once and counts itself
        if self.scheduler.reserves_to_completion:
            # TensorRT-LLM's GUARANTEED_NO_EVICT: room for this sequence to its last token beside what every running
            # one still needs to reach its own (a decode then never preempts; only `need` is taken now)
            watermark = blocks_for(seq.peak_tokens) - need
            for other in self.running:
                left = blocks_for(other.peak_tokens) - other.blocks
                if left > 0:
                    watermark += left
            watermark = max(watermark, 0)
        elif self.scheduler.completes_in_order:
            if not self._completes_in_order(seq, need):
                return False
            watermark = 0
        else:
            decoding = len(self.running) + (seq.to_prefill <= 0)
            watermark = max(self.hbm.capacity_blocks // 100, decoding * self._growth_blocks) if decoding else 0
        if self.hbm.reserve_kv(need + watermark):
            self.hbm.release_kv(watermark)
        else:
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

    def _completes_in_order(self, seq: Sequence, need: int) -> bool:
        """SGLang's admission of a request (`PrefillAdder.add_one_req_ignore_eos`, managers/schedule_policy.py,
        sglang 0.5.9 lines 632-689): its prompt's blocks fit, and taking the running sequences and it in order of
        tokens left, when the i-th (fewest left) ends every one of the n - i still running has grown by its tokens
        left, beside what those ended before it freed, with a token to spare each (IGNORE_EOS_RESERVE_TOKENS).
        Counted in tokens; copies, which a running sequence may evict, count as free."""
        free = (self.hbm.free_blocks + self.hbm.copy_blocks - need) * BLOCK_TOKENS
        if free < 0:
            return False
        # its prompt within what the running ones' estimated future tokens leave (`rem_total_tokens`): a sequence
        # still in its prefill batch holds its whole output (`_update_prefill_budget`), a decoding one its tokens
        # left x the new-token ratio, each clipped (CLIP_MAX_NEW_TOKENS)
        clip, ratio, held = self.scheduler.token_ratio_clip, self._ratio, 0.0
        for other in self.running:
            left = min(other.output - other.generated, clip)
            held += left if other.generated == 0 else left * ratio
        if free < held:
            return False
        states = [(seq.output - seq.generated, need * BLOCK_TOKENS)]
        for other in self.running:
            left = other.output - other.generated
            if left > 0:
                states.append((left, other.blocks * BLOCK_TOKENS))
        states.sort(key=lambda state: state[0])
        freed, n = 0, len(states)
        for i, (left, kv_tokens) in enumerate(states):
            alive = n - i
            if free + freed - left * alive <= alive:
                return False
            freed += kv_tokens
        return True

    def state(self) -> dict[str, Any]:
        """Where this engine stands (the run's account of work left over): queue lengths, free KV blocks and
        what the head of the waiting queue needs."""
        head = self.waiting[0] if self.waiting else None
        return {"instance": self.eid, "busy": self.busy, "waiting": len(self.waiting) + len(self._inbox),
                "running": len(self.running),
                "free_blocks": self.hbm.free_blocks, "capacity_blocks": self.hbm.capacity_blocks,
                "head_blocks": blocks_for(head.recompute or head.prompt) if head is not None else 0,
                "head_preemptions": head.preemptions if head is not None else 0}

    def _plan_next(self) -> Plan:
        """Admit what the scheduler asks (in order, until one does not fit), then its plan of the running set; a
        decode-only plan stands for k identical iterations: up to steps_per_event, never past the first
        completion (`Sequence.remaining_decode`, inlined)."""
        scheduler, waiting = self.scheduler, self.waiting
        self._batch_hold = None         # this plan's own (`_batch_wait`); the last event's was counted already
        if waiting:
            for _ in range(scheduler.admissions(self)):
                if not self.admit(waiting[0]):
                    break
        plan = scheduler.plan(self.running, self.options)
        options = self.options
        held = False
        if plan.prefill and plan.decode and self.group is None and (options.batch_wait_iters > 0
                                                                     or options.batch_wait_ratio > 0):
            plan, held = self._batch_wait(plan)
        if plan.macro and plan.decode:
            least = self.options.steps_per_event
            for seq in plan.decode:
                generated = seq.generated
                left = seq.output - (generated if generated > 1 else 1)
                if left < least:
                    least = left
            plan.k = least if least > 1 else 1
            if self._arriving:
                plan.k = 1                  # sequences that arrived meanwhile join the iteration after this one
            if held:                        # the prompts wait no longer than the timeout (`_batch_wait`)
                wait_left = self.options.batch_wait_iters - self._batch_waited
                if plan.k > wait_left:
                    plan.k = max(wait_left, 1)
        return plan

    def _batch_wait(self, plan: Plan) -> tuple[Plan, bool]:
        """TensorRT-LLM's batch waiting (py_executor.py `_schedule` / `_waiting_requests`; TP only, and only for a
        step with both context and generation requests): the step's prompts run once they have waited
        `batch_wait_iters` iterations or the step holds `batch_wait_ratio` x token_budget tokens (the prompts'
        tokens and one per decode); else the step runs its decodes alone, the prompts stay admitted and wait, and
        the iterations so held count toward the timeout (`_plan_step`, when the next step is planned). Pure: the
        count changes only in `_plan_step`, so a re-plan after a preemption decides the same."""
        options = self.options
        tokens = len(plan.decode)
        for _seq, chunk in plan.prefill:
            tokens += chunk
        if self._batch_waited >= options.batch_wait_iters or tokens >= options.batch_wait_ratio * options.token_budget:
            self._batch_hold = None
            return plan, False
        hold = Plan(decode=plan.decode, macro=True)
        self._batch_hold = hold
        return hold, True

    def _plan_grown(self) -> Plan:
        """The next event's plan with its decodes' blocks reserved (a preemption plans again), or, when nothing runs
        and the head of the queue does not fit, the plan of the sequences behind it."""
        plan = self._plan_next()
        while plan.decode and not self._grow(plan):
            plan = self._plan_next()    # a preemption changed the running set: plan again
        if not plan.prefill and not plan.decode and self.waiting and not self.running:
            plan = self._plan_past_the_head()
        return plan

    # ---- one event: plan -> cost -> arm -> end --------------------------------------------------------------
    def _start(self) -> None:
        """The next event, planned now: this engine's own (`_begin`), or, for a DP rank, its group's step (it
        plans every rank at once: `simroute.sim.engine.group`)."""
        if self.group is not None:
            self.group.wake()
        else:
            self._begin()

    def _begin(self) -> None:
        """Event *iteration planned* (a TP instance's; a DP group's is `GroupEngine._begin`): plan it, cost it,
        log its row and arm its end, or go idle. After it exactly one timer is live (`_timer`)."""
        plan = self._plan_step()
        if plan is None:
            return
        compute, groups, seq_wait, new_tokens = self._batch_cost(plan)
        self._arm(self._log_event(plan, self._cost(plan, compute, groups, seq_wait), compute, new_tokens))

    def _plan_step(self) -> Plan | None:
        """Plan: the scheduler's batch (arrivals under `schedule_ahead` joining after it), kept as the current
        plan; None (the engine goes idle) when there is nothing to run."""
        self._in_step = True
        hold = self._batch_hold
        if hold is not None:            # the last event held the prompts: its iterations (a cut's fewer) count
            self._batch_waited += hold.k
            self._batch_hold = None
        plan = self._plan_grown()
        prefill, decode = plan.prefill, plan.decode
        arriving = self._arriving
        if arriving:                    # planned without them: they wait for the next plan
            self.waiting.extend(arriving)
            arriving.clear()
            if not prefill and not decode:      # nothing was planned: the CPU schedules them at once
                plan = self._plan_grown()
                prefill, decode = plan.prefill, plan.decode
        if self.options.recv_interval > 1:
            idle = not self.busy
            if self._inbox and not prefill and not decode:      # idle: the scheduler's idle loop polls at once
                self.waiting.extend(self._inbox)
                self._inbox.clear()
                plan = self._plan_grown()
                prefill, decode = plan.prefill, plan.decode
                idle = True
            if prefill or decode:
                self._poll(plan, idle)
        if self._held:
            self._held.clear()
        if prefill and decode:
            self._batch_waited = 0      # the prompts run with decodes: the wait restarts (`_waiting_requests`)
        self._in_step = False
        self._plan = plan
        if not prefill and not decode:
            self.busy = False
            self.layer_s = 0.0
            self._ratio = self.scheduler.token_ratio[0]     # SGLang's self_check_during_idle
            return None
        if not self.busy:
            self.partials.skip(self.env.now)    # partials it answered while idle cost its own work nothing
        self.busy = True
        return plan

    def _cost(self, plan: Plan, compute: float, groups: dict | None, seq_wait: float) -> float:
        """Cost: the event's duration from its compute per iteration, its routed exchanges (`RouteExchange`),
        its sequences' own waits and the holder's partials charged to it; kept as the event's timing."""
        now = self.env.now
        prefill, decode = plan.prefill, plan.decode
        k = plan.k
        if groups and self.exchange is not None:      # (a routed batch without an exchange raised in _batch_cost)
            exch, wait, legs = self.exchange.iteration(self, groups, k, compute)
        else:
            exch = wait = 0.0
            legs = _NO_LEGS
        if seq_wait > exch:             # sequences' own waits (gathers) run beside the routed exchanges
            exch = seq_wait
        pre, stretch = self.partials.charge(now, compute, k, compute + exch)
        dt = compute + exch
        if exch > 0 and self.options.overlap:
            dt = max(compute, compute / 2 + exch)       # per layer: max(c, c/2 + r), summed over layers
        hidden = compute + exch - dt
        self._exch, self._hidden, self._legs, self._wait = exch, hidden, legs, wait
        dt += stretch
        self._t0, self._dt, self._pre, self._stretch = now, dt, pre, stretch
        self.layer_s = compute / self.layers    # GPU-busy time per layer (its own exchange waits leave it idle)
        if prefill:
            gpu_s = compute + pre + stretch     # its GPU time, partials run for others included
            for seq, _tokens in prefill:
                seq.prefill_compute_s += gpu_s
                seq.exchange_s += exch
                seq.holder_wait_s += wait
        if self.options.check_hbm:
            self.hbm.check()
        return pre + k * dt

    def _log_event(self, plan: Plan, duration: float, compute: float, new_tokens: int) -> float:
        """The event's row in the iteration log; returns `duration` (what `_arm` is given)."""
        now, k, decode, prefill = self._t0, plan.k, plan.decode, plan.prefill
        exch, hidden, pre, stretch = self._exch, self._hidden, self._pre, self._stretch
        wait = self._wait
        log = self.log
        if log.enabled:
            h = self.hbm
            b = h.block_bytes
            kv, pinned, copies = h.kv_blocks, h.pinned_blocks, h.copy_blocks
            self._row = log.add((self.eid, now, duration, k, len(decode), len(prefill), new_tokens, compute, exch,
                                 wait, pre + k * stretch, hidden * k, h.weight_bytes, kv * b, pinned * b,
                                 copies * b, (h.capacity_blocks - kv - pinned - copies) * b))
        else:
            self._row = log.count(k)
        return duration

    def _poll(self, plan: Plan, idle: bool) -> None:
        """SGLang's scheduler_recv_interval (managers/scheduler_recv_skipper.py): after launching a batch the
        scheduler adds the batch's weight to a counter (a decode iteration 1, any batch with prefill 1000) and
        polls its input queue only when the counter reaches the interval (then it restarts at 0); an idle
        scheduler polls at once. Called as `plan`'s first iteration is launched (the previous event's later
        iterations counted first; after idling the count starts at 0): a poll moves the inbox to the waiting
        queue, and the plan stops after its first iteration so that they join the next; a decode event otherwise
        stops at the iteration before the next poll, so none falls inside it."""
        interval = self.options.recv_interval
        count = 0 if idle else self._polls
        count += RECV_WEIGHT_EXTEND if plan.prefill else 1
        k = interval - count
        if count >= interval:
            count = 0
            k = interval
            if self._inbox:
                self.waiting.extend(self._inbox)
                self._inbox.clear()
                k = 1
        if plan.k > k:
            plan.k = k
        self._polls = count + plan.k - 1     # the passes after its later iterations (no arrival cuts it short)

    def _plan_past_the_head(self) -> Plan:
        """Nothing runs and the head of the queue does not fit: the blocks it waits for are copies that requests
        queued behind it hold (fetched or re-prefilled for them, pinned until they finish), which only they can
        release (hold-and-wait). Plan with the sequences behind it, FCFS, keeping the head (and any others
        that do not fit) at the front of the queue."""
        blocked: list[Sequence] = []
        plan = Plan()
        while plan.empty and self.waiting:
            blocked.append(self.waiting.popleft())
            plan = self._plan_next()
            while plan.decode and not self._grow(plan):
                plan = self._plan_next()
        self.waiting.extendleft(reversed(blocked))
        return plan

    def _batch_shape(self, plan: Plan) -> tuple[tuple, dict | None, float, int]:
        """The batch as the step-time model reads it (new tokens, sequences, KV read, attention pairs, prefill
        pairs, decode-form sequences: `BatchShape`'s fields), its routed groups by holder, the slowest of its
        sequences' own per-iteration waits (`Sequence.step_wait`) and its new tokens.

        A prefill chunk of more than one token attends in the prefill form (`prefill_pairs`: MLA's expanded,
        non-absorbed kernel, as vLLM's and SGLang's MLA backends run prefill); a one-token chunk (a fully
        cached prompt's last token) runs as a decode does, in the absorbed form (vLLM classifies a query of
        one token as a decode)."""
        k = plan.k
        heads = self.heads
        decode = plan.decode
        kv = prefill_pairs = seq_wait = 0.0
        groups: dict[Any, list] | None = None        # built only when a sequence routes
        new = decode_form = len(decode)              # sequences attending in the decode form (one query token)
        mid = (k - 1) / 2                            # the mid-point context of k iterations
        prefill = plan.prefill
        last_decode, last_groups = self._decode_groups
        same = not prefill and decode and last_decode == decode   # the last decode-only batch's: its groups
        if same:
            groups = last_groups
        for seq in decode:
            ctx = seq.resident_tokens + seq.prompt + seq.generated + mid
            kv += ctx
            if seq.routes and not same:
                if groups is None:
                    groups = {}
                _add_routes(groups, seq, heads)
            if seq.step_wait is not None:
                wait = seq.step_wait(k)
                if wait > seq_wait:
                    seq_wait = wait
        if not prefill and not same:
            self._decode_groups = (list(decode), groups)
        pairs = kv                                   # a decode token attends its whole context
        for seq, t in prefill:
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
                if groups is None:
                    groups = {}
                _add_routes(groups, seq, heads * t)
            if seq.step_wait is not None:
                wait = seq.step_wait(1)
                if wait > seq_wait:
                    seq_wait = wait
        if groups and self.exchange is None:
            raise RuntimeError("a routed sequence on an engine without a RouteExchange")
        return (new, len(decode) + len(prefill), kv, pairs, prefill_pairs, decode_form), groups, seq_wait, new

    def _batch_cost(self, plan: Plan) -> tuple[float, dict | None, float, int]:
        """The step-time model's iteration time for the batch (`_batch_shape`), its routed groups by holder, the
        slowest of its sequences' own per-iteration waits and its new tokens."""
        shape, groups, seq_wait, new = self._batch_shape(plan)
        return self.step.iteration_s(*shape), groups, seq_wait, new

    def _grow(self, plan: Plan) -> bool:
        """Reserve the decode KV blocks of the next k tokens; if they do not fit (copies were already evicted
        by `reserve_kv`), preempt the latest admitted sequence (KV freed, recomputed later) and return False."""
        k = plan.k + self.draft_tokens
        block = BLOCK_TOKENS
        need = 0
        grown = None                    # (sequence, blocks) of those that cross a block boundary
        for seq in plan.decode:
            want = -(-(seq.prompt + seq.generated + k) // block)      # blocks_for, inlined (hot)
            if want != seq.blocks:
                need += want - seq.blocks
                if grown is None:
                    grown = []
                grown.append((seq, want))
        if need < 0:                    # fewer tokens than reserved were emitted (MTP's draws): blocks freed
            self.hbm.release_kv(-need)
        if need <= 0 or self.hbm.reserve_kv(need):
            if grown is not None:
                for seq, want in grown:
                    seq.blocks = want
            return True
        self._preempt(max(self.running, key=lambda s: s.admit_order))
        return False

    def _preempt(self, seq: Sequence) -> None:
        """Event *preempted* (`_grow`: the decodes' next blocks do not fit): the sequence's KV is freed, it will
        recompute its prompt and generated tokens, and it waits at the head of the queue, not re-admitted in
        the plan being made (`_held`); past `max_preemptions` it is refused (`THRASHED`)."""
        self.running.remove(seq)
        self.hbm.release_kv(seq.blocks)
        seq.blocks = 0
        seq.recompute = seq.prompt + seq.generated if seq.generated else 0
        seq.prefilled = 0
        seq.phase = WAITING
        seq.preemptions += 1
        self.preemptions += 1
        if self.scheduler.completes_in_order and self.running:
            # SGLang's retract_decode (schedule_batch.py, sglang 0.5.9 lines 1894-1903): the new-token ratio is
            # what the ones left decoded, plus SGLANG_RETRACT_DECODE_STEPS 20 each, over their outputs
            decoded = sum(other.generated for other in self.running) + 20 * len(self.running)
            self._ratio = min(1.0, decoded / (sum(other.output for other in self.running) + 1))
        if seq.preemptions > self.most_preempted:
            self.most_preempted = seq.preemptions
        if seq.preemptions > self.options.max_preemptions:
            self._refuse(seq, THRASHED)
            return
        self._held.append(seq)
        self.waiting.appendleft(seq)

    def absorb(self, entry: DemandEntry, now: float) -> None:
        """A requester's partial work began during this engine's event: the event runs its share now, lengthened
        by what the work asks of its busy GPU while both last (charge rate c x the event's busy share f, over
        the event's rest lengthened by it: cf (end - now) / (1 - cf), or cf (until - now) if the work ends
        first), prepaid against what the work accrues, so that it is not charged to the next event in one lump.
        `now` is the clock, as the caller read it.

        Event *partial absorbed* (the exchange calls it on the holder): only the engine's own figures move (the
        event's `_pre`, the partials' prepaid seconds, the log row); the armed timer is left as it is: it fires
        at the planned end and `_on_end` re-arms for the rest."""
        plan = self._plan
        if not self.busy or self._in_step or not (plan.prefill or plan.decode):
            return
        end = self._t0 + self._pre + plan.k * self._dt          # `_event_end`, inlined (hot)
        partials = self.partials
        rate = entry.charge * partials.busy_fraction            # min(., MAX_UTILISATION), max and min spelt out (hot)
        if rate > MAX_UTILISATION:
            rate = MAX_UTILISATION
        if end <= now or rate <= 0:
            return
        left = entry.until - now
        extra = rate * (end - now) / (1.0 - rate)
        until = rate * (left if left > 0.0 else 0.0)
        if until < extra:
            extra = until
        if extra <= 0:
            return
        self._pre += extra
        partials.prepay(extra)
        if plan.prefill:
            for seq, _tokens in plan.prefill:
                seq.prefill_compute_s += extra
        self.log.extend(self._row, extra)           # the scheduled end fires early and waits the rest (_end)

    def _arm(self, delay: float) -> None:
        """The current event ends `delay` from now: one timer calls `_on_end`. A cut or a lengthened event
        arms a new one; a timer that is no longer `_timer` is stale and ignored. A timer is queued as a
        `simpy.Timeout` queues itself (triggered now, scheduled `delay` ahead), from the timers that already
        fired (`_on_end` hands each back) rather than a new object per engine event."""
        if delay < 0:
            raise ValueError(f"negative delay {delay}")
        spare = self._spare_timers
        timer = spare.pop() if spare else simpy.Event(self.env)
        timer._ok, timer._value = True, None
        timer.callbacks = [self._on_end_callback]
        self.env.schedule(timer, NORMAL, delay)
        self._timer = timer

    def _event_end(self) -> float:
        """When the event in flight ends: its start, the partial work charged before or absorbed into it
        (`_pre`), then k iterations of `_dt` (spelt out where it runs per event: `absorb`, `_on_end`)."""
        return self._t0 + self._pre + self._plan.k * self._dt

    def _on_end(self, timer: simpy.Event) -> None:
        """Event *iteration end* (a TP instance's armed timer): a timer that is no longer `_timer` is stale (a cut
        armed another) and ignored; an event lengthened by absorbed partials meanwhile is re-armed for the rest;
        else `_end`."""
        self._spare_timers.append(timer)            # fired: free to arm again
        if timer is not self._timer:
            return                                  # superseded by a cut
        now = self.env.now
        end = self._t0 + self._pre + self._plan.k * self._dt    # `_event_end`, inlined (hot)
        if end > now + 1e-12 * max(1.0, now):      # absorbed partial work lengthened the event meanwhile
            self._arm(end - now)
            return
        self._end()
        self._publish()

    def _cut(self) -> None:
        """Event *cut by arrival* (`submit`, while a k-iteration decode event runs): it ends at the next iteration
        boundary, `done` < k iterations in. Each component undoes its own share of the iterations not run,
        through its own method: the engine's KV reservation (`_unreserve`), the holders' partials
        (`RouteExchange.retract`), the stretch prepaid (`HolderPartials.unprepay`), the log row
        (`IterationLog.revise`); then a new timer (the old one goes stale)."""
        plan, dt = self._plan, self._dt
        k = plan.k
        done = math.ceil((self.env.now - self._t0 - self._pre) / dt - 1e-9) if dt > 0 else k
        done = max(1, done)
        if done >= k:
            return
        self._unreserve(plan.decode, done)
        if self._legs and self.exchange is not None:
            self.exchange.retract(self, self._legs, done, k)
        self.partials.unprepay(self._stretch * (k - done))
        self.log.revise(self._row, k, done, self._pre + done * dt, self._pre + done * self._stretch,
                        self._hidden * done)
        self.cuts += 1
        plan.k = done
        self._arm(max(0.0, self._event_end() - self.env.now))

    def _unreserve(self, decode: list[Sequence], done: int) -> None:
        """Hand back the KV blocks `_grow` reserved for decode iterations that will not run (a cut after `done`)."""
        for seq in decode:
            keep = blocks_for(seq.prompt + seq.generated + done)
            self.hbm.release_kv(seq.blocks - keep)
            seq.blocks = keep

    def _end(self) -> None:
        """The TP instance's event ended (`_on_end`): its iterations ran (`_close`); then the next (`_begin`)."""
        self._advance()                 # `_close`, inlined (hot)
        self._plan = _IDLE
        self._begin()

    def _close(self, emitted: list[int] | None = None) -> None:
        """The event in flight ran: its sequences advance (`_advance`) and the engine holds no plan until the next
        is planned (its owner's: the DP group's step end; `_end` spells it out, per event)."""
        self._advance(emitted)
        self._plan = _IDLE

    def _span(self, duration: float) -> None:
        """A DP rank's one-iteration event lasts `duration` from its start: the rank waits for its group's step
        (the group sets it when it costs the step and again when the step ends)."""
        self._dt = duration - self._pre

    def _waited(self, seconds: float) -> None:
        """A DP rank's event waited `seconds` more than logged (its group's all-to-all flows outlasted the table's
        collective time): its log row."""
        self.log.extend(self._row, seconds)

    def _advance(self, emitted: list[int] | None = None) -> None:
        """The event's iterations ran: prefill chunks advance (a finished prompt yields its first token),
        decodes generate k tokens each (inter-token gaps logged), finished sequences leave. `emitted[i]`: the
        tokens decode i emitted in a one-iteration step under MTP (its draws; capped at its output)."""
        self._in_step = True
        now = self.env.now
        self.busy_s += now - self._t0
        plan, dt = self._plan, self._dt
        k = plan.k
        self.exchange_total_s += self._exch * k
        self.hidden_s += self._hidden * k
        if self._legs and self.exchange is not None:
            self.exchange.settle(self._legs, k)
            self._legs = _NO_LEGS
        heads = self.heads
        for seq, t in plan.prefill:
            if seq.routes:
                seq.routed_rows += heads * t * len(seq.routes)
            seq.prefilled += t
            if (seq.recompute or seq.prompt) > seq.prefilled:     # `to_prefill` > 0, inlined (hot)
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
                if seq.first_token is not None:
                    seq.first_token.succeed(seq)
                if seq.output == 1:
                    self._finish(seq)
                else:
                    seq.phase = DECODE
        decode = plan.decode
        if decode and self.scheduler.completes_in_order:
            _init, floor, decay = self.scheduler.token_ratio
            self._ratio = max(self._ratio - k * decay, floor)
        if decode and emitted is not None:
            self._advance_emitted(decode, emitted, now)
        elif decode:
            t0 = self._t0
            first_end = t0 + self._pre + dt
            continuing = 0                  # decoded in the previous event too: one gap entry for all of them
            finished = None
            gap = self.log.gaps.append      # (seconds, tokens) pairs: IterationLog.gap, inlined (hot)
            for seq in decode:
                if seq.routes:
                    seq.routed_rows += heads * len(seq.routes) * k
                last = seq.t_last_token
                if last == t0:
                    continuing += 1
                else:
                    gap(first_end - last)
                    gap(1)
                generated = seq.generated + k
                seq.generated = generated
                seq.t_last_token = now
                if generated >= seq.output:
                    if finished is None:
                        finished = []
                    finished.append(seq)
            if continuing > 0:
                gap(first_end - t0)
                gap(continuing)
            if k > 1:
                gap(dt)
                gap(len(decode) * (k - 1))
            if finished is not None:
                for seq in finished:
                    self._finish(seq)

    def _advance_emitted(self, decode: list[Sequence], emitted: list[int], now: float) -> None:
        """One step's decodes under MTP: decode i emits `emitted[i]` tokens (at most its output's rest), all at the
        step's end; each of them logs the step over its tokens as its inter-token gap (its TPOT this step)."""
        heads = self.heads
        gap = self.log.gaps.append
        finished = []
        total = 0
        for seq, count in zip(decode, emitted):
            if seq.routes:
                seq.routed_rows += heads * len(seq.routes)
            count = min(count, seq.output - seq.generated)
            if count <= 0:
                continue
            gap((now - seq.t_last_token) / count)
            gap(count)
            total += count
            seq.generated += count
            seq.t_last_token = now
            if seq.generated >= seq.output:
                finished.append(seq)
        self.mtp_tokens += total
        for seq in finished:
            self._finish(seq)

    def _refuse(self, seq: Sequence, reason: int) -> None:
        """Event *refused* (it never fits, or was preempted too often): end a sequence unserved (`output` -1,
        `refused` says why); its request is dropped."""
        seq.refused = reason
        self.rejected += 1
        self.thrashed += reason == THRASHED
        self._finish(seq, failed=True)

    def _finish(self, seq: Sequence, failed: bool = False) -> None:
        """Event *request finished* (`_advance` at its last token, or `_refuse`): it leaves the running set, its KV
        is released unless the request keeps it (`keep_kv`), and its `on_done`, `first_token` (if it never came)
        and `done` fire, in that order."""
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
        if seq.first_token is not None and not seq.first_token.triggered:
            seq.first_token.succeed(seq)        # refused before its first token: it never comes (output -1)
        if seq.done is not None:
            seq.done.succeed(seq)


_IDLE = Plan()          # the plan of an idle engine (never changed: `_cut` only shortens a running k > 1 event)
_NO_LEGS = EventLegs()  # an event that routes nothing (never appended to)


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
