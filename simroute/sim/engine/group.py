"""A DP-attention group's lockstep step: its ranks' engines planned together, one step time for all of them.

Under DP attention every GPU (or `attn_tp` GPUs) of a group is an attention instance with its own engine: its own
waiting queue, running set, latent KV and HBM budget, routed exchanges and holder partials. The dense and MoE layers
are the group's: every layer ends in a collective all ranks join, so the group steps in lockstep (SGLang's DP
attention; an idle rank runs an empty batch and still joins). `GroupEngine` owns the step, in the engine's named
steps (docs/ARCHITECTURE.md):
- plan: each rank's scheduler plans its batch (`InstanceEngine._plan_step`, `_batch_shape`);
- cost: `dpstep.group_iteration` once over every rank's batch gives the step (compute and collectives, MTP's
  verify and drafts); each active rank adds its own routed exchanges and partials (`InstanceEngine._cost`); the
  step lasts the slowest rank's;
- arm: one timeout for the group; the step's all-to-all goes on the fabric as flows, one per GPU pair carrying
  every layer's and pass's bytes (`A2aLoad`), so they share links with KV fetches and slow routed queries;
- end: when the timeout and the flows are done (the step is compute + max(the table's collective time, the flows'
  time): more load never makes it faster), every active rank's sequences advance (`InstanceEngine._advance`), under
  MTP each decode emitting a seeded draw from `Mtp.length_probabilities()` tokens; then the next step.

A rank engine's event is one step (`steps_per_event` 1): ranks' decodes end at different tokens, and a macro event
would have to end at the earliest of them in every rank. A group of one rank without MTP (`--ep` on TP
attention) has no lockstep to keep: its instance steps alone, as a TP instance, on the group's step
(`OneRankStep`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence as Seq
from typing import Any

import numpy as np
import simpy

from simroute.model.dpstep import DeploymentStep, GroupIteration, decode_rows, group_iteration
from simroute.model.steptime import BatchShape
from simroute.sim.engine.engine import InstanceEngine
from simroute.sim.schedulers.base import Plan

IDLE_BATCH = BatchShape(new_tokens=0.0, sequences=0.0, kv_read_tokens=0.0, attention_pairs=0.0)


class OneRankStep:
    """The step of a group of one attention rank without MTP (TP attention, an expert-parallel MoE: `--ep` alone),
    as an instance engine asks it (`engine.StepTime`). One scheduler plans one batch and nothing steps in lockstep
    with it, so the instance runs as a TP instance does (macro events of identical decode iterations, arrivals
    cutting them), its iterations timed by the group's step (`group_iteration`: the experts at (moe_tp, ep), the
    engine preset's host costs charged as a TP step's), its holder partials by its rank's model (`rank`, whose
    other attributes it answers with).

    With one rank the step's kernels are the attention kernel (every layer's, over the batch's context) plus terms
    of its token counts alone (projections, MLP, experts, collectives, norms, LM head): the second are kept per
    (new tokens, sequences, decodes), as the TP model keeps its token terms, and the attention read per batch; the
    host costs then go on top (`HostCosts.step_s`). The same seconds as `group_iteration` (a test checks)."""

    def __init__(self, rank: Any, group: DeploymentStep) -> None:
        if not steps_alone(group):
            raise ValueError("a group of one rank without MTP steps alone; DP ranks and MTP step in a GroupEngine")
        self.rank, self.group = rank, group
        self._layers = group.geometry.layers
        self._token_terms: dict[tuple[float, float, float], float] = {}

    def iteration_s(self, new_tokens: float, sequences: float, kv_read_tokens: float, attention_pairs: float,
                    prefill_pairs: float = 0.0, decode_sequences: float | None = None) -> float:
        if new_tokens <= 0:
            return 0.0
        batch = BatchShape(new_tokens, sequences, kv_read_tokens, attention_pairs, prefill_pairs, decode_sequences)
        decodes = decode_rows(batch)
        group, host = self.group, self.group.host
        attention = self._layers * group.attn.attention_layer_s(batch)
        key = (new_tokens, sequences, decodes)
        rest = self._token_terms.get(key)
        if rest is None:
            step = group.iteration_s(batch)
            kernels = step.iteration_s - step.terms_s["overhead"] if host is not None else step.iteration_s
            if len(self._token_terms) >= 65536:     # bounded, as the TP model's token cache
                self._token_terms.clear()
            rest = self._token_terms[key] = kernels - attention
        kernels = rest + attention
        return kernels if host is None else host.step_s(kernels, self._layers, ((new_tokens, sequences, decodes),))

    def holder_partial_s(self, *args: Any, **kwargs: Any) -> float:
        return self.rank.holder_partial_s(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rank, name)


def steps_alone(step: DeploymentStep) -> bool:
    """Whether a group's instance steps alone (`OneRankStep`): one attention rank and no MTP draws."""
    return step.deployment.dp == 1 and step.mtp is None


class GroupEngine:
    """One DP group: `ranks[r]` is attention rank r's engine, `gpus` the group's GPUs in rank order (rank r's
    `attn_tp` GPUs at r * attn_tp), `network` the fabric the all-to-all flows go on (None: the table's time only),
    `rng` the group's MTP draws."""

    def __init__(self, env: simpy.Environment, ranks: Seq[InstanceEngine], step: DeploymentStep, *,
                 gpus: Seq[str], network: Any = None, rng: np.random.Generator | None = None,
                 iterate: Callable[..., GroupIteration] = group_iteration) -> None:
        self.env, self.ranks, self.step = env, list(ranks), step
        self._iterate = iterate             # the model's call (a test hands a GroupIteration of its own)
        self.gpus = tuple(gpus)
        self.network = network
        mtp = step.mtp
        self._lengths = np.asarray(mtp.length_probabilities()) if mtp is not None else None
        self._rng = rng if rng is not None else np.random.default_rng(0)
        for rank in self.ranks:
            rank.group = self
            rank.draft_tokens = mtp.nextn if mtp is not None else 0
        self.busy = False
        self._planning = self._again = False
        self._timer: simpy.Event | None = None
        self._on_end_callback = self._on_end
        self._active: list[tuple[InstanceEngine, Any]] = []
        self._emitted: list[list[int] | None] = []
        self._t0 = self._end_at = 0.0
        self._collective_s = 0.0
        self._flows_left = 0
        # figures for the summary
        self.steps = 0
        self.step_s = 0.0                   # summed step durations
        self.table_collective_s = 0.0       # summed collective seconds of the table (group_iteration)
        self.flow_s = 0.0                   # summed time the all-to-all flows took (steps that put them on links)
        self.flow_extra_s = 0.0             # summed time the flows added past the table's collective time
        self.a2a_flows = 0
        self.a2a_bytes = {"nvlink": 0.0, "rdma": 0.0}
        self._pair_bytes: dict[tuple[int, int], float] = {}     # all-to-all bytes per GPU pair (`a2a_tier_bytes`)
        # TensorRT-LLM's attention-DP balancing (`_adp_hold`): (timeout_iters, batching_wait_iters, max batch) or
        # None (off), its two counters as py_executor.py keeps them, and the steps that held prompts
        options = self.ranks[0].options if self.ranks else None
        self._adp = ((options.adp_timeout_iters, options.adp_batching_wait_iters, options.max_running)
                     if options is not None and options.adp_balance else None)
        self.adp_waited = self.adp_batched = self.adp_held = 0
        self.decode_steps = 0               # decode-sequence steps, and the tokens they emitted (MTP's mean)
        self.decode_tokens = 0

    # ---- plan -----------------------------------------------------------------------------------------
    def wake(self) -> None:
        """A rank has work: an idle group plans its next step now; a busy one plans it when its step ends."""
        if self._planning:
            self._again = True          # work reached a rank while the ranks were being planned
        elif not self.busy:
            self._begin()

    def _begin(self) -> None:
        """Event *iteration planned* (the group's step): every rank plans its batch (an idle rank runs an empty
        one), the model gives the step once for all; its all-to-all flows start, then each active rank is
        costed (`_cost`). No rank has work: the group goes idle (or plans again if work came meanwhile)."""
        self._planning, self._again = True, False
        active: list[tuple[InstanceEngine, Any, dict | None, float, int]] = []
        batches: list[BatchShape] = []
        plans = [rank._plan_step() for rank in self.ranks]
        if self._adp is not None and any(plans) and self._adp_hold(plans):
            for r, plan in enumerate(plans):
                if plan is not None and plan.prefill:   # held: its decodes run alone (never empty: `_adp_hold`)
                    plans[r] = self.ranks[r]._plan = Plan(decode=plan.decode, k=plan.k, macro=True)
        for rank, plan in zip(self.ranks, plans):
            if plan is None:
                batches.append(IDLE_BATCH)
                continue
            shape, routed, seq_wait, new = rank._batch_shape(plan)
            batches.append(BatchShape(*shape))
            active.append((rank, plan, routed, seq_wait, new))
        self._planning = False
        if not active:
            self.busy = False
            self._active = []
            if self._again:             # a rank planned before that work arrived: plan again
                self._begin()
            return
        self.busy = True
        it = self._iterate(self.step, batches, traffic=self.network is not None)
        self._t0 = self.env.now
        self._flows_left = 0
        if self.network is not None and it.a2a:
            # arm's flows first: the network rates them at this instant's flush, and the ranks' routed messages,
            # costed just after it (a zero timeout queues behind the flush), see the links they share with them
            self._start_flows(it)
            self.env.timeout(0).callbacks.append(lambda _event: self._cost(active, it))
        else:
            self._cost(active, it)

    def _adp_hold(self, plans: Seq[Any]) -> bool:
        """TensorRT-LLM's attention-DP balancing (`attention_dp_config` enable_balance; py_executor.py
        `_balance_adp_requests`, which every rank runs on the all-gathered counts, so one decision for the group):
        whether this iteration holds every rank's context requests (each rank's prompts stay admitted; its decodes
        run). Counts per rank are the plan's prompts and decodes; a rank with no request at all runs TensorRT-LLM's
        dummy generation request (`_pad_attention_dp_dummy_request`), so it counts one generation and no context.
        - every rank has a free slot (decodes < max_running) and a context: the timeout counter restarts; with
          every rank generating, the contexts wait `batching_wait_iters` iterations (the batching counter), else go;
        - otherwise the timeout counter grows and the contexts wait until it reaches `timeout_iters` (it restarts)
          or some rank has no generation request (it restarts).
        Called once per group step that runs (an idle group iterates nothing, as the executor waits)."""
        timeout, batching_wait, max_running = self._adp
        ctx = all_ctx = all_gen = free = True
        for rank, plan in zip(self.ranks, plans):
            if plan is None:
                ctx = False
                gen = 0 if (rank.running or rank.waiting or rank._inbox) else 1
            else:
                ctx = bool(plan.prefill)
                gen = len(plan.decode)
            all_ctx = all_ctx and ctx
            all_gen = all_gen and gen > 0
            free = free and gen < max_running
        if free and all_ctx:
            self.adp_waited = 0
            if all_gen:
                if self.adp_batched < batching_wait:
                    self.adp_batched += 1
                    self.adp_held += 1
                    return True
                self.adp_batched = 0
            return False
        self.adp_waited += 1
        if self.adp_waited >= timeout or not all_gen:
            self.adp_waited = 0
            return False
        if any(plan is not None and plan.prefill for plan in plans):
            self.adp_held += 1          # a step that held prompts (the figure the summary gives)
        return True

    def _cost(self, active: list, it: GroupIteration) -> None:
        """The group's step (`it`), then each active rank's routed exchanges and partials on top: the step lasts
        the slowest rank's; then its timeout."""
        now = self.env.now
        duration = it.seconds
        for rank, plan, routed, seq_wait, _new in active:
            duration = max(duration, rank._cost(plan, it.seconds, routed, seq_wait))
        for rank, plan, _routed, _wait, new in active:
            rank._span(duration)                     # a rank waits for the group (one iteration per event)
            rank._log_event(plan, duration, it.seconds, new)
        self._active = [(rank, plan) for rank, plan, *_rest in active]
        self._emitted = [self._draw(len(plan.decode)) for _rank, plan in self._active]
        self._end_at, self._collective_s = now + duration, it.collective_s
        self.steps += 1
        self.table_collective_s += it.collective_s
        if not self._flows_left:        # (flows still moving: their end arms it)
            self._arm(duration)

    def _draw(self, decodes: int) -> list[int] | None:
        """Tokens each of `decodes` sequences emits this step under MTP (seeded), else None (one each)."""
        if self._lengths is None or decodes == 0:
            return None
        draws = self._rng.choice(len(self._lengths), size=decodes, p=self._lengths) + 1
        return draws.tolist()

    # ---- the all-to-all as flows ------------------------------------------------------------------------
    def pair_bytes(self, it: GroupIteration) -> dict[tuple[int, int], float]:
        """Bytes between each pair of the group's GPUs over the step: every pass's dispatch and combine (or
        all-gather and reduce-scatter) legs of one layer (`LayerTraffic.legs`: DeepEP's normal mode reaches a host
        once) times the layers that move it, the GPU's own rows excluded."""
        out: dict[tuple[int, int], float] = {}
        for load in it.a2a:
            layers = load.layers
            for pair, nbytes in load.traffic.legs().items():
                out[pair] = out.get(pair, 0.0) + nbytes * layers
        return out

    def _start_flows(self, it: GroupIteration) -> None:
        """One flow per GPU pair carrying the step's bytes (NVLink within a host, RDMA across: the topology's
        path), started with the step: the collectives' bytes at the links' fair share."""
        network, gpus = self.network, self.gpus
        hosts = it.a2a[0].traffic.hosts
        done = self._flow_done
        sent = self._pair_bytes
        for pair, nbytes in self.pair_bytes(it).items():
            src, dst = pair
            self.a2a_bytes["nvlink" if hosts[src] == hosts[dst] else "rdma"] += nbytes
            sent[pair] = sent.get(pair, 0.0) + nbytes
            event = network.transfer(gpus[src], gpus[dst], nbytes, tag="a2a")
            event.callbacks.append(done)
            self._flows_left += 1
            self.a2a_flows += 1

    @property
    def a2a_tier_bytes(self) -> dict[str, float]:
        """The all-to-all flows' bytes per link tier crossed, each link once (every rank's flow: the summary
        counts them once), from the bytes per GPU pair: every equal-cost path of a pair crosses the same tiers."""
        out: dict[str, float] = {}
        if not self._pair_bytes:
            return out
        topo, gpus = self.network.topology, self.gpus
        for (src, dst), nbytes in self._pair_bytes.items():
            links, _spine = topo.path_ids(topo.index(gpus[src]), topo.index(gpus[dst]), 0)
            for link in links:
                tier = topo.links[link].tier
                out[tier] = out.get(tier, 0.0) + nbytes
        return out

    def _flow_done(self, _event: simpy.Event) -> None:
        """Event *all-to-all done* (each of the step's flows calls it; the last one acts): flows that took longer
        than the table's collective time lengthen the step (each active rank's log row: `_waited`), and the
        step's end is armed."""
        self._flows_left -= 1
        if self._flows_left:
            return
        now = self.env.now
        took = now - self._t0
        self.flow_s += took
        extra = took - self._collective_s
        if extra > 0:                   # the flows took longer than the table's collectives: the step waits
            self.flow_extra_s += extra
            self._end_at += extra
            for rank, _plan in self._active:
                rank._waited(extra)
        self._arm(max(0.0, self._end_at - now))

    # ---- arm and end ----------------------------------------------------------------------------------
    def _arm(self, delay: float) -> None:
        timer = self.env.timeout(delay)
        timer.callbacks.append(self._on_end_callback)
        self._timer = timer

    def _on_end(self, timer: simpy.Event) -> None:
        """Event *iteration end* (the group's step): a stale timer, or one that fires while the all-to-all flows
        still move, is ignored; a rank whose event absorbed partial work meanwhile keeps the group waiting
        (re-armed); else every active rank's event closes at once (`InstanceEngine._close`, MTP's draws) and
        the next step is planned."""
        if timer is not self._timer or self._flows_left:
            return                      # superseded, or the flows are still moving (their end arms it again)
        now = self.env.now
        end = self._end_at
        for rank, _plan in self._active:    # a rank's event lengthened by partial work it absorbed meanwhile
            rank_end = rank._event_end()
            if rank_end > end:
                end = rank_end
        if end > now + 1e-12 * max(1.0, now):
            self._arm(end - now)
            return
        self.step_s += now - self._t0
        active, emitted = self._active, self._emitted
        self._active, self._emitted = [], []
        for (rank, plan), draws in zip(active, emitted):
            rank._span(now - rank._t0)              # its tokens come out when the group's step ends
            before = rank.mtp_tokens
            rank._close(draws)
            self.decode_steps += len(plan.decode)
            self.decode_tokens += rank.mtp_tokens - before if draws is not None else len(plan.decode)
        self._begin()

    def summary(self) -> dict[str, Any]:
        """The group's figures (summed over its steps)."""
        return {"steps": self.steps, "step_s": self.step_s, "table_collective_s": self.table_collective_s,
                "a2a_flow_s": self.flow_s, "a2a_flow_extra_s": self.flow_extra_s, "a2a_flows": self.a2a_flows,
                "a2a_bytes": dict(self.a2a_bytes), "a2a_tier_bytes": self.a2a_tier_bytes,
                "decode_steps": self.decode_steps,
                "decode_tokens": self.decode_tokens,
                **({"adp_held_steps": self.adp_held} if self._adp is not None else {})}
