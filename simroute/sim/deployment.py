"""A run's deployment (the instances' GPU, their step-time model) resolved and checked in one place, before any
work: `Simulation` builds its engines from it, and a study (hence `plan`) checks every point's deployment with
it when the study is loaded, so a point that cannot exist fails at once, not after the points before it ran.
The physical rules themselves are `simroute.model.limits`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simroute.calib.profile import Profile
from simroute.errors import ConfigurationError
from simroute.model.limits import Fields, check_deployment, check_tp_fits_host
from simroute.model.steptime import GpuSpec, StepTimeModel


def run_gpu(gpu: str | None, hosts_gpu: str | None, profile: Profile, fields: Fields = Fields()) -> str | None:
    """The GPU entry a run's instances use: `gpu` (the run's --gpu, which must name an entry), else the
    topology's hosts.gpu (which may be a label that names none: the profile's instance GPU then)."""
    if gpu is None:
        return hosts_gpu
    profile.check_gpu_entry(gpu, field=fields.gpu, file=fields.file)
    return gpu


def instance_gpu(profile: Profile, intra_host_fabric: str | None,
                 host_gpu: str | None = None) -> tuple[Profile, GpuSpec, str | None]:
    """(the profile a step model is built from, the instances' GPU spec, the intra-host fabric its all-reduce runs
    over): the topology's host GPU when `host_gpu` names a GPU entry (the profile's or a shipped one), else the
    GPU the intra-host fabric names; a profile that calibrates fabrics only (a host probe run) and names no GPU
    gets the shipped default profile's GPU entry (datasheet values, named in the summary), without its fabric."""
    spec = profile.find_gpu_spec(host_gpu) if host_gpu else None
    if spec is not None:
        return profile, spec, intra_host_fabric
    try:
        name = profile.instance_gpu(intra_host_fabric)
    except ConfigurationError:
        pass                    # the profile names no GPU: the default profile's below
    else:                       # a damaged entry (its tables) is an error of its own, never a silent fallback
        return profile, profile.gpu_spec(name), intra_host_fabric
    from simroute.calib import default_profile_path, load_profile
    default = load_profile(default_profile_path())
    return default, default.gpu_spec(), None


def step_model(profile: Profile, model: str, tp: int, intra_host_fabric: str | None, host_gpu: str | None = None,
               weight_dtype: str | None = None, kv_layout: str = "replicated",
               cache_dtype: str | None = None) -> StepTimeModel:
    """The profile's step-time model of the instances' GPU (`instance_gpu`), with the GPU entry's own tables and
    constant overhead (no framework preset: a run's is `simroute.sim.presets`')."""
    source, spec, fabric = instance_gpu(profile, intra_host_fabric, host_gpu)
    return source.step_model(model, tp=tp, intra_host_fabric=fabric, gpu_spec=spec, weight_dtype=weight_dtype,
                             kv_layout=kv_layout, cache_dtype=cache_dtype)


@dataclass(frozen=True)
class Deployment:
    """What a run's instances are: the GPU entry (None: the profile's instance GPU) and their step model."""

    gpu: str | None
    step: StepTimeModel
    group: Any = None         # a DP / EP / MTP group's `dpstep.DeploymentStep` (sizes: weights, KV per GPU), else None


def check_run_deployment(topology_spec: Any, profile: Profile, *, model: str, tp: int, gpu: str | None = None,
                         weights: str | None = None, kv_layout: str = "replicated", hbm_gb: float | None = None,
                         cache_dtype: str | None = None, fields: Fields = Fields(),
                         group: tuple[Any, Any] | None = None, pooled: bool = False) -> Deployment:
    """The instances of a run on `topology_spec` (a TopologySpec at the run's host count) serving `model` at
    `tp`: refused here, with the field that made them, when they cannot exist (a TP group larger than a host
    or splitting no head, weights past HBM, block-FP8 weights without FP8 tensor cores). `group`: the run's
    (`parallel.Deployment`, `parallel.Mtp` or None) when its instances step as DP groups (`RunConfig.parallel`);
    `pooled`: they are --disagg's decode pool, which need not tile every host (sim/pools.py lays them out)."""
    if group is not None:
        return _check_group(topology_spec, profile, model=model, gpu=gpu, weights=weights, hbm_gb=hbm_gb,
                            cache_dtype=cache_dtype, group=group, fields=fields, pooled=pooled)
    check_tp_fits_host(tp, topology_spec.gpus_per_host, fields)
    entry = run_gpu(gpu, topology_spec.gpu, profile, fields)
    step = step_model(profile, model, tp, topology_spec.intra.fabric, entry, weights, kv_layout, cache_dtype)
    check_deployment(step, hbm_bytes=None if hbm_gb is None else hbm_gb * 1e9, fields=fields)
    return Deployment(entry, step)


def group_step(geometry: Any, gpu: GpuSpec, deployment: Any, mtp: Any, topology_spec: Any, profile: Profile,
               host: Any = None) -> Any:
    """The step-time model of one DP / EP / MTP group (`dpstep.DeploymentStep`, CUDA-graph decode as SGLang runs
    DP attention) on `gpu`, its collectives' roofline over the topology's NVLink and NIC fabrics where no table
    holds them; `host` the engine preset's CPU side (`HostCosts`, charged as a TP instance's: None, the GPU
    entry's constant overhead)."""
    from simroute.model.dpstep import DeploymentStep

    def fabric(name: str | None) -> tuple[float, float] | None:
        if name is None or name not in profile.fabrics:
            return None
        params = profile.fabric_params(name)
        return params.bulk_Bps, params.t_probe_s

    intra = fabric(topology_spec.intra.fabric) or (float("inf"), 0.0)
    return DeploymentStep(geometry, gpu, deployment, mtp=mtp, cuda_graphs=True, intra=intra,
                          inter=fabric(topology_spec.nic_fabric), host=host)


def _check_group(topology_spec: Any, profile: Profile, *, model: str, gpu: str | None, weights: str | None,
                 hbm_gb: float | None, cache_dtype: str | None, group: tuple[Any, Any], fields: Fields,
                 pooled: bool = False) -> Deployment:
    """`check_run_deployment` of DP groups: the group tiles the hosts (inside one, or whole hosts), each GPU holds
    its weights (`limits.check_group`); the instances' step model is one attention rank's (its partials, its
    attention), the group's `DeploymentStep` times the steps and sizes HBM."""
    from dataclasses import replace

    from simroute.model.geometry import get_model
    from simroute.model.limits import check_group, check_parallel
    deployment, mtp = group
    per_host = topology_spec.gpus_per_host
    deployment = replace(deployment, gpus_per_host=per_host)
    if deployment.tp <= per_host:
        check_tp_fits_host(deployment.tp, per_host, fields)
    check_parallel(get_model(model), deployment, mtp, fields)
    if deployment.tp > per_host * topology_spec.hosts:
        raise ConfigurationError(f"a group of {deployment.tp} GPUs spans {deployment.hosts} hosts; the topology has "
                                 f"{topology_spec.hosts}", field=fields.hosts)
    if deployment.tp > per_host and topology_spec.hosts % deployment.hosts and not pooled:
        raise ConfigurationError(f"{topology_spec.hosts} hosts do not split into groups of {deployment.hosts} hosts "
                                 f"(tp {deployment.tp})", field=fields.hosts)
    entry = run_gpu(gpu, topology_spec.gpu, profile, fields)
    rank = step_model(profile, model, deployment.attn_tp, topology_spec.intra.fabric, entry, weights, "replicated",
                      cache_dtype)
    step = group_step(rank.geometry, rank.gpu, deployment, mtp, topology_spec, profile)
    check_group(step, hbm_bytes=None if hbm_gb is None else hbm_gb * 1e9, fields=fields)
    return Deployment(entry, rank, step)

