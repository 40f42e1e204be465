"""Build one instance engine per instance of a run, sharing one step-time model, one routed-exchange
model and one iteration log."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence as Seq
from typing import TYPE_CHECKING, Any

import simpy

from simroute.calib.profile import Profile
from simroute.model.steptime import StepTimeModel
from simroute.sim.engine.engine import EngineOptions, InstanceEngine, LoadBoard
from simroute.sim.engine.exchange import RouteExchange
from simroute.sim.engine.hbm import BLOCK_TOKENS, HbmBudget
from simroute.sim.engine.log import IterationLog
from simroute.sim.schedulers.base import Scheduler

if TYPE_CHECKING:       # a DP group's engine (and its step model, model/dpstep.py): imported by the runs with one
    from simroute.sim.engine.group import GroupEngine


class EngineSet:
    """The engines of a run (index = instance id) and what they share.

    `gpus[i]` is instance i's network endpoint; `fabric_of(a, b)` the FabricParams between instances a and
    b (by id); `schedulers()` builds one engine's scheduler (in instance order: the run's registry `create`). HBM per instance is the GPU's (or `hbm_gb` per GPU when given): weights, KV and chunks of one
    rank of the tensor-parallel group (an MLA latent is replicated on every rank; GQA heads are split).
    """

    def __init__(self, env: simpy.Environment, profile: Profile | None, *, model: str, tp: int, gpus: Seq[str],
                 intra_host_fabric: str | None, network: Any, fabric_of: Callable[[int, int], Any],
                 options: EngineOptions, exchanges_per_step: int, merge_s: float, hbm_gb: float | None = None,
                 record: bool = True, host_gpu: str | None = None, weight_dtype: str | None = None,
                 kv_layout: str = "replicated", schedulers: Callable[[], Scheduler] | None = None,
                 cache_dtype: str | None = None, step: StepTimeModel | None = None, ingress_s: float = 0.0,
                 egress_s: float = 0.0, group: Any = None, group_gpus: Seq[str] = (), seed: int = 0,
                 ep_flows: bool = True, kv_pool: Callable[[float], float | None] | None = None) -> None:
        # a run hands the step model its engine preset built (simroute.sim.presets, resolved with the profile in
        # sim/calibration.py); one built alone (a unit test) takes `profile`'s GPU entry tables and overhead
        from simroute.sim.deployment import step_model
        self.step: StepTimeModel = step if step is not None else step_model(
            profile, model, tp, intra_host_fabric, host_gpu, weight_dtype, kv_layout, cache_dtype)
        # a request's path outside the GPU (the engine preset's): arrival to the scheduler, a token to the client
        self.ingress_s, self.egress_s = ingress_s, egress_s
        g = self.step.geometry
        self.log = IterationLog(enabled=record)
        self.exchange = RouteExchange(network, lambda a, b: fabric_of(a.eid, b.eid), q_bytes=g.q_bytes,
                                      p_bytes=g.p_bytes, tp=tp, merge_s=merge_s,
                                      exchanges_per_step=exchanges_per_step)
        hbm_bytes = hbm_gb * 1e9 if hbm_gb is not None else self.step.gpu.hbm_bytes
        self.hbm_bytes = hbm_bytes
        # a DP group's GPU holds what `parallel.hbm_per_gpu` says (its experts, the attention every rank keeps, its
        # own latent per token); a TP instance's GPU its rank's share
        self.group_step = group
        sized = group if group is not None else self.step
        weights = sized.weight_bytes_per_gpu
        # the framework's KV pool (its memory fraction) where the preset models it, else all HBM after the weights
        self.kv_pool_bytes = kv_pool(weights) if kv_pool is not None else None
        from simroute.model.limits import check_deployment, check_group
        # a group of one rank without MTP steps alone (`OneRankStep`): a TP instance's engine on the group's step
        self.alone = False
        step_of: Any = self.step
        if group is not None:
            from simroute.sim.engine.group import OneRankStep, steps_alone
            check_group(group, hbm_bytes=hbm_bytes)
            self.alone = steps_alone(group)
            if self.alone:
                step_of = OneRankStep(self.step, group)
            else:
                options = dataclasses.replace(options, steps_per_event=1)    # an event is one lockstep step
        else:
            check_deployment(self.step, hbm_bytes=hbm_bytes)  # a run checked it before building (sim/deployment.py)
        self.engines = [
            InstanceEngine(env, i, gpu, step_of,
                           HbmBudget(hbm_bytes, weights, sized.kv_bytes_per_token_per_gpu, self.kv_pool_bytes),
                           options,
                           layers=g.layers, heads=g.heads_q, exchange=self.exchange, log=self.log,
                           scheduler=schedulers() if schedulers is not None else None)
            for i, gpu in enumerate(gpus)]
        self.groups: list[GroupEngine] = []
        if group is not None and not self.alone:
            from simroute.sim.engine.group import GroupEngine
            from simroute.sim.registry import run_rng
            dp, width = group.deployment.dp, group.deployment.tp
            rng = run_rng(seed, "mtp")
            for g in range(len(self.engines) // dp):
                self.groups.append(GroupEngine(env, self.engines[g * dp:(g + 1) * dp], group,
                                               gpus=group_gpus[g * width:(g + 1) * width],
                                               network=network if ep_flows else None, rng=rng))
        # the holders' loads as the replica choice reads them (`holder_loads`); DP ranks, planned by their group,
        # do not publish theirs: the choice reads their engines
        self.board: LoadBoard | None = None if self.groups else LoadBoard()
        if self.board is not None:
            for engine in self.engines:
                self.board.join(engine)

    def add_pool(self, env: simpy.Environment, gpus: Seq[str], step: StepTimeModel, options: EngineOptions,
                 schedulers: Callable[[], Scheduler] | None = None) -> list[InstanceEngine]:
        """Engines of another pool (--disagg's prefill pool, `simroute/sim/pools.py`), numbered after these: a
        step model and an HBM budget of their own (their TP's weights and KV per GPU); the run's exchange and
        log. Returns them."""
        from simroute.model.limits import check_deployment
        check_deployment(step, hbm_bytes=self.hbm_bytes)
        g = step.geometry
        added = [InstanceEngine(env, len(self.engines) + i, gpu, step,
                                HbmBudget(self.hbm_bytes, step.weight_bytes_per_gpu, step.kv_bytes_per_token_per_gpu),
                                options, layers=g.layers, heads=g.heads_q, exchange=self.exchange, log=self.log,
                                scheduler=schedulers() if schedulers is not None else None)
                 for i, gpu in enumerate(gpus)]
        self.engines.extend(added)
        if self.board is not None:
            for engine in added:
                self.board.join(engine)
        return added

    def __getitem__(self, i: int) -> InstanceEngine:
        return self.engines[i]

    def __len__(self) -> int:
        return len(self.engines)

    def summary(self) -> dict[str, Any]:
        """Run-level engine figures (deterministic)."""
        es = self.engines
        log = self.log
        hp = [e.partials for e in es]
        return {
            "scheduler": es[0].options.scheduler if es else None,
            "gpu": self.step.gpu.name, "model": self.step.geometry.name,
            "weight_dtype": self.step.geometry.weight_dtype, "fp8_rate": self.step.fp8_rate,
            "kv_cache": self.step.geometry.cache_dtype,
            "kv_cache_source": self.step.geometry.sources.get("cache_dtype", "default: bf16"),
            "kv_bytes_per_token_per_gpu": self.step.kv_bytes_per_token_per_gpu,
            "kv_layout": self.step.kv_layout, "kv_shards": self.step.kv_shards,
            "iterations": int(log.iterations), "events": int(log.events),
            "preemptions": int(sum(e.preemptions for e in es)), "rejected": int(sum(e.rejected for e in es)),
            "max_preemptions_of_a_sequence": int(max((e.most_preempted for e in es), default=0)),
            "thrashed": int(sum(e.thrashed for e in es)),
            "left_over": left_over(es),
            "hbm": {"capacity_gb_per_gpu": self.hbm_bytes / 1e9,
                    "weights_gb_per_gpu": es[0].hbm.weight_bytes / 1e9 if es else 0.0,
                    # the framework's reserve beside its KV pool (activations, CUDA graphs, context; 0: the pool
                    # is all HBM after the weights)
                    "outside_pool_gb_per_gpu": es[0].hbm.outside_pool_bytes / 1e9 if es else 0.0,
                    "kv_capacity_tokens": int(es[0].hbm.capacity_blocks * 64) if es else 0,
                    "evictions": int(sum(e.hbm.evictions for e in es)),
                    "copies_refused": int(sum(e.hbm.refused for e in es)),
                    "peak_kv_blocks": int(max((e.hbm.peak_kv_blocks for e in es), default=0)),
                    "at_peak": hbm_at_peak(log)},
            "holder_partials": {"kernel_calls": float(sum(h.calls for h in hp)),
                                "queries": float(sum(h.queries for h in hp)),
                                "work_s": float(sum(h.work_s for h in hp)),
                                "busiest_holder_work_s": float(max((h.work_s for h in hp), default=0.0)),
                                "charged_to_own_iterations_s": float(sum(h.charged_s for h in hp))},
            "routed_messages": float(self.exchange.messages),
            **({"routed_round_trip_network_us": self.exchange.network_s / self.exchange.round_trips * 1e6
                if self.exchange.round_trips else None} if self.group_step is not None else {}),
            "exchange_s": float(sum(e.exchange_total_s for e in es)),
            "exchange_hidden_share": (float(sum(e.hidden_s for e in es)) /
                                      max(1e-300, float(sum(e.exchange_total_s for e in es))))
            if any(e.options.overlap for e in es) else 0.0,
            "itl_ms": log.itl_percentiles(),
            **({"group": self.group_summary()} if self.group_step is not None else {}),
        }

    def a2a_tier_bytes(self) -> dict[str, float]:
        """The all-to-all flows' bytes per link tier, summed over the groups (every rank's flow: count once)."""
        out: dict[str, float] = {}
        for group in self.groups:
            for tier, nbytes in group.a2a_tier_bytes.items():
                out[tier] = out.get(tier, 0.0) + nbytes
        return out

    def group_summary(self) -> dict[str, Any]:
        """The DP groups' deployment and their lockstep steps' figures (summed over the groups). A group of one rank
        steps alone (`lockstep` false, `OneRankStep`): no lockstep figures; its steps are its instance's iterations
        (the engine summary's `iterations`, `itl_ms`)."""
        step = self.group_step
        dep = step.deployment
        out = {"tp": dep.tp, "dp_attention": dep.dp, "ep": dep.ep, "attn_tp": dep.attn_tp, "moe_tp": dep.moe_tp,
               "a2a": step.mode.value, "moe_load": dep.expert_distribution,
               "groups": len(self.engines) if self.alone else len(self.groups), "lockstep": not self.alone,
               "nextn": step.mtp.nextn if step.mtp is not None else 0,
               "mtp_tokens_per_step": step.mtp.tokens_per_step if step.mtp is not None else 1.0,
               "kv_bytes_per_token_per_gpu": step.kv_bytes_per_token_per_gpu,
               "kv_capacity_tokens_per_rank": int(self.engines[0].hbm.capacity_blocks * BLOCK_TOKENS)
               if self.engines else 0,
               "weights_gb_by_part": {part: value / 1e9 for part, value in step.hbm.parts.items()}}
        if self.alone:
            return out
        parts = [group.summary() for group in self.groups]
        total = {key: sum(part[key] for part in parts) for key in ("steps", "step_s", "table_collective_s",
                                                                    "a2a_flow_s", "a2a_flow_extra_s", "a2a_flows",
                                                                    "decode_steps", "decode_tokens")}
        held = [part["adp_held_steps"] for part in parts if "adp_held_steps" in part]
        if held:                    # TensorRT-LLM's attention-DP balancing is on: the steps that held prompts
            total["adp_held_steps"] = sum(held)
        return {**out, **total,
                "a2a_bytes": {link: sum(part["a2a_bytes"][link] for part in parts) for link in ("nvlink", "rdma")},
                "a2a_tier_bytes": self.a2a_tier_bytes(),
                "emitted_tokens_per_decode_step": total["decode_tokens"] / total["decode_steps"]
                if total["decode_steps"] else None}


def left_over(engines: Seq[InstanceEngine], examples: int = 4) -> dict[str, Any]:
    """The work still queued when the run ended (at --until, or stalled with no event left): how many
    instances and sequences, and the first few instances' state (why their heads were not admitted)."""
    busy = [e for e in engines if e.waiting or e.running]
    return {"instances": len(busy), "waiting": sum(len(e.waiting) for e in busy),
            "running": sum(len(e.running) for e in busy), "examples": [e.state() for e in busy[:examples]]}


def hbm_at_peak(log: IterationLog) -> dict[str, float] | None:
    """One GPU's HBM composition (GB) at the engine event where KV + pinned chunks + copies peaked over all
    instances, and the largest copies any instance held; None without the iteration log."""
    import numpy as np
    cols = log.cols
    if not log.enabled or not len(cols["kv_bytes"]):
        return None
    part = {name: np.frombuffer(cols[name], dtype=np.float64) for name in ("weights_bytes", "kv_bytes",
                                                                            "pinned_bytes", "copy_bytes",
                                                                            "free_bytes")}
    i = int(np.argmax(part["kv_bytes"] + part["pinned_bytes"] + part["copy_bytes"]))
    return {"instance": int(cols["instance"][i]), "t_s": float(cols["t_start_s"][i]),
            "weights_gb": part["weights_bytes"][i] / 1e9, "running_kv_gb": part["kv_bytes"][i] / 1e9,
            "pinned_chunks_gb": part["pinned_bytes"][i] / 1e9, "copies_gb": part["copy_bytes"][i] / 1e9,
            "free_gb": part["free_bytes"][i] / 1e9, "max_copies_gb": float(part["copy_bytes"].max()) / 1e9}
