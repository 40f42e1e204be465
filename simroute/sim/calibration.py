"""The calibration profile resolved once per run into what the run's components read from it.

A profile answers many questions (a GPU entry, a step-time model, cost constants, the staging pool's rates,
measured NIC constants, the files it was read from); a run asks each once, here, at its start, with its engine
preset (whose kernel tables and CPU-side costs go into the step-time model), and hands the answers to the
components as one frozen `RunCalibration`: no component consults the profile itself, and a profile that cannot
serve the run fails before any other work.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from simroute.calib import load_profile
from simroute.calib.profile import Profile
from simroute.model.cost import CostParams
from simroute.model.staging import StagingParams
from simroute.model.steptime import StepTimeModel
from simroute.network.messages import NIC_CONSTANTS, MessageModel, MessageModelParams
from simroute.sim.config import RunConfig
from simroute.sim.deployment import check_run_deployment
from simroute.sim.pools import PoolLayout, parse_disagg, pool_layout, prefill_tp_of
from simroute.sim.presets import ResolvedEngine, resolve_engine


@dataclass(frozen=True, eq=False)
class RunCalibration:
    """What one run takes from its calibration profile, resolved at its start (`resolve_calibration`)."""

    profile: str                   # the profile's name (errors name it)
    gpu: str | None                # the instances' GPU entry (None: the profile's instance GPU)
    engine: ResolvedEngine         # the run's engine preset resolved for its deployment (simroute.sim.presets)
    step: StepTimeModel            # the instances' step-time model: the deployment's (checked), the preset's tables
    group: Any                     # a DP / EP / MTP group's `dpstep.DeploymentStep` (the preset's tables), else None
    params: CostParams             # route / fetch / local cost constants of the run's model
    staging: StagingParams         # each holder's staging pool (simroute.model.staging)
    messages: MessageModel | None  # the NIC constants the profile measured, else None (the engine's default)
    files: tuple[str | Path, ...]  # the files it was read from, the GPU entry's and the preset's included (inputs)
    layout: PoolLayout | None = None          # --disagg: where the prefill and decode pools sit (sim/pools.py)
    prefill_step: StepTimeModel | None = None  # --disagg: the prefill pool's step model (its TP, the same preset)


def nic_message_model(profile: Profile) -> MessageModel | None:
    """A message model with the NIC constants a measured profile carries (the nic-qp-sweep probe's), else None:
    the engine's default model."""
    measured = {name: constant.value for name, constant in profile.constants.items()
                if name in NIC_CONSTANTS and constant.value is not None}
    return MessageModel(MessageModelParams.from_profile(measured)) if measured else None


def engine_and_step(cfg: RunConfig, profile: Profile, intra_host_fabric: str | None, host_gpu: str | None,
                    sized: StepTimeModel) -> tuple[ResolvedEngine, StepTimeModel]:
    """The run's engine preset resolved for its deployment (simroute.sim.presets), and the step-time model of its
    instances: the preset's kernel tables and CPU-side costs. `sized` is the deployment's checked step model
    (`check_run_deployment`), read for its sizes (weights and KV bytes per GPU) only."""
    from simroute.model.geometry import get_model
    from simroute.sim.deployment import instance_gpu
    source, spec, fabric = instance_gpu(profile, intra_host_fabric, host_gpu)
    hbm_bytes = cfg.hbm_gb * 1e9 if cfg.hbm_gb is not None else None
    kv_tokens = int(max((hbm_bytes if hbm_bytes is not None else spec.hbm_bytes) - sized.weight_bytes_per_gpu, 0.0)
                    // sized.kv_bytes_per_token_per_gpu)
    model = get_model(cfg.model)
    engine, spec = resolve_engine(cfg, spec, layers=model.layers, kv_capacity_tokens=kv_tokens,
                                  hbm_bytes=hbm_bytes, mla=model.is_mla, moe=model.is_moe)
    step = source.step_model(cfg.model, tp=cfg.instance_gpus, intra_host_fabric=fabric, gpu_spec=spec,
                             weight_dtype=cfg.weights, kv_layout=cfg.kv_layout, cache_dtype=cfg.kv_cache,
                             host=engine.host)
    return engine, step


def resolve_calibration(cfg: RunConfig, topology_spec: Any) -> RunCalibration:
    """`cfg.calib` loaded and asked, once, everything the run on `topology_spec` (its TopologySpec) needs; a
    deployment that cannot exist is refused here (`sim/deployment.py`)."""
    profile = load_profile(cfg.calib)
    deployment = check_run_deployment(topology_spec, profile, model=cfg.model, tp=cfg.tp, gpu=cfg.gpu,
                                      weights=cfg.weights, kv_layout=cfg.kv_layout, hbm_gb=cfg.hbm_gb,
                                      cache_dtype=cfg.kv_cache,
                                      group=cfg.parallel(topology_spec.gpus_per_host) if cfg.grouped else None,
                                      pooled=cfg.disagg != "none")
    params = profile.cost_params(cfg.model, route_exchanges=cfg.route_exchanges, prefill_us=cfg.prefill_us,
                                 cache_dtype=cfg.kv_cache)
    messages = nic_message_model(profile)
    engine, step = engine_and_step(cfg, profile, topology_spec.intra.fabric, deployment.gpu,
                                   deployment.group if deployment.group is not None else deployment.step)
    group = None
    if deployment.group is not None:            # the group's step on the preset's tables (the GPU spec it resolved)
        from simroute.sim.deployment import group_step   # and its CPU side, charged as the TP step charges it
        group = group_step(step.geometry, step.gpu, deployment.group.deployment, deployment.group.mtp,
                           topology_spec, profile, host=engine.host)
    layout, prefill_step = disagg_pools(cfg, topology_spec, profile)
    applied = engine.applied(cfg)                   # the settings that run (the preset's, where the run left them)
    files: list[str | Path] = list(profile.files)
    gpu_file = profile.gpu_entry_file(deployment.gpu) if deployment.gpu is not None else None
    if gpu_file is not None and str(gpu_file) not in map(str, files):
        files.append(gpu_file)
    if engine.preset_file is not None:              # the engine preset is an input too
        from simroute.calib.engine_files import engines_dir
        name = engine.preset_file
        files.append(engines_dir() / Path(name).name if name.startswith("calib/engines/") else Path(name))
    return RunCalibration(profile=profile.name, gpu=deployment.gpu, engine=engine, step=step, group=group,
                          params=params,
                          staging=profile.staging_params(applied.staging_copy_GBps, gpu_spec=step.gpu),
                          messages=messages,
                          files=tuple(files), layout=layout, prefill_step=prefill_step)


def disagg_pools(cfg: RunConfig, topology_spec: Any, profile: Profile) -> tuple[PoolLayout | None,
                                                                                  StepTimeModel | None]:
    """--disagg's pools on the run's cluster and the prefill pool's step model (TP instances at its TP, the run's
    engine preset; the decode pool's DP attention, EP and MTP are the decode groups'): refused, naming the flag,
    where the prefill TP cannot be a host's group or its weights do not fit, or the cluster cannot hold one P:D
    group. (None, None) for aggregated serving."""
    ratio = parse_disagg(cfg.disagg)
    if ratio is None:
        return None, None
    from simroute.model.limits import Fields
    prefill_tp = prefill_tp_of(cfg.prefill_tp, cfg.tp, topology_spec.gpus_per_host)
    pcfg = replace(cfg, tp=prefill_tp, disagg="none", prefill_tp=None, dp_attention=1, ep=1, a2a=None, nextn=0,
                   accept_rate=None, accept_length=None)
    fields = Fields(tp="prefill_tp")
    deployment = check_run_deployment(topology_spec, profile, model=cfg.model, tp=prefill_tp, gpu=cfg.gpu,
                                      weights=cfg.weights, kv_layout=cfg.kv_layout, hbm_gb=cfg.hbm_gb,
                                      cache_dtype=cfg.kv_cache, fields=fields)
    _engine, prefill_step = engine_and_step(pcfg, profile, topology_spec.intra.fabric, deployment.gpu,
                                            deployment.step)
    layout = pool_layout(ratio, total_gpus=topology_spec.hosts * topology_spec.gpus_per_host, tp=cfg.tp,
                         prefill_tp=prefill_tp, dp=cfg.dp_attention, ep=cfg.ep)
    return layout, prefill_step
