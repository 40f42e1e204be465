"""Turn a point's study config into a portable payload, a stable key, and (in the worker) a RunConfig.

Inputs travel as shipped names (resolved on the worker, so a Ray node needs no shared disk for them), absolute
paths, or generator specs (the driver generates them once into the study directory; a worker that cannot see
that directory regenerates the same bytes into its own cache). The key hashes what the result depends on:
every run field, the seed, each input's content hash or generator spec, and the simulator's source.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from simroute.checks import check_number
from simroute.errors import ConfigurationError, SimrouteError
from simroute.ioutil import sha256_file

SHIPPED_TRACES = Path(__file__).resolve().parent.parent / "data" / "traces"


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def digest(obj: Any, chars: int = 16) -> str:
    return hashlib.sha256(canonical(obj).encode()).hexdigest()[:chars]


def _is_gen(value: Any) -> bool:
    return isinstance(value, dict) and "generate" in value


def _shipped(name: str, value: str) -> Path | None:
    """The shipped file a bare name stands for, or None."""
    try:
        if name == "topology":
            from simroute.network import shipped_topology
            return shipped_topology(value)
        if name == "calib":
            from simroute.calib import resolve_profile_path
            return resolve_profile_path(value)
        path = SHIPPED_TRACES / f"{value.removesuffix('.parquet')}.parquet"
        return path if path.exists() else None
    except SimrouteError:
        return None


# how an input not found is said to have been looked for beside a study file (`plan` takes it out: its study file
# is its own, and its paths are the command line's)
RELATIVE_TO_STUDY = " (relative to the study)"


def check_input(name: str, value: Any, file: str, where: str) -> None:
    """Load-time validation of one input (a name, a path or a generator spec)."""
    fld = f"{where}: {name}"
    if _is_gen(value):
        bad = set(value) - {"generate", "params", "seed"}
        if bad:
            raise ConfigurationError(f"a generator spec takes generate, params, seed; got {sorted(bad)}", file=file,
                                     field=fld)
        params = value.get("params") or {}
        if not isinstance(params, dict):
            raise ConfigurationError("params must be a mapping", file=file, field=f"{fld}.params")
        if not isinstance(value["generate"], str):
            raise ConfigurationError("must name a generator", file=file, field=f"{fld}.generate")
        check_number(value.get("seed", 0), f"{fld}.seed", file=file, integer=True, minimum=0, maximum=2**62)
        try:
            if name == "trace":
                from simroute.workload import make_params
                make_params(str(value["generate"]), _sized(params, 1))
            elif name == "topology":
                from simroute.study.topogen import check_topology_spec
                check_topology_spec(str(value["generate"]), params)
            else:
                raise ConfigurationError("only trace and topology can be generated")
        except SimrouteError as exc:
            raise ConfigurationError(str(exc), file=file, field=fld) from None
        return
    if not isinstance(value, str) or not value:
        raise ConfigurationError("must be a shipped name, a path or {generate: ..., params: ...}", file=file,
                                 field=fld)
    loc = _locate(name, value, file)
    if loc is None:
        from simroute.shipped import KINDS, shipped_names
        relative = RELATIVE_TO_STUDY if file is not None else ""
        listed = f" (shipped: {', '.join(shipped_names(name))})" if name in KINDS else ""
        raise ConfigurationError(f"'{value}' is neither a file{relative} nor a shipped {name}{listed}",
                                 file=file, field=fld)
    if loc["kind"] == "path":
        _check_input_file(name, Path(loc["path"]))


_CHECKED: set[tuple[str, str, float]] = set()


def _check_input_file(name: str, path: Path) -> None:
    """A study's own input file, read the way a point will read it, at load: a damaged trace, topology or
    profile is one line now, not a failure of every point later (checked once per file and mtime)."""
    key = (name, str(path), path.stat().st_mtime)
    if key in _CHECKED:
        return
    if name == "trace":                 # every row, as `trace info` and a run check it: not once per point
        from simroute.workload.validate import validate_trace
        validate_trace(path)
    elif name == "topology":
        from simroute.network import load_topology
        load_topology(path)
    else:
        from simroute.calib import load_profile
        load_profile(path)
    _CHECKED.add(key)


def _locate(name: str, value: str, file: str) -> dict[str, str] | None:
    for cand in (Path(file).parent / value, Path(value)):
        if cand.exists():
            return {"kind": "path", "path": str(cand.resolve())}
    if _shipped(name, value) is not None:
        return {"kind": "shipped", "name": value}
    return None


def prepare(cfg: dict[str, Any], study_file: str, study_dir: Path) -> tuple[dict[str, Any], str]:
    """The payload config (inputs as portable specs) and the point's stable key."""
    payload = {key: setting for key, setting in cfg.items()}
    ident: dict[str, Any] = {key: setting for key, setting in cfg.items() if key not in ("topology", "trace", "calib")}
    ident["code"] = code_fingerprint()
    seed = int(cfg.get("seed", 0))
    for name in ("topology", "trace", "calib"):
        value = cfg[name]
        if _is_gen(value):
            kind, params = str(value["generate"]), dict(value.get("params") or {})
            if name == "trace":
                from simroute.workload import make_params
                if params.get("instances") == AUTO:
                    params = _sized(params, cluster_instances(cfg, study_file, study_dir))
                params = dataclasses.asdict(make_params(kind, params))
                gseed = int(value.get("seed", 0)) + seed
            else:
                gseed = 0
            spec = {"generate": kind, "params": params, "seed": gseed}
            spec_digest = digest({name: spec})
            ext = ".parquet" if name == "trace" else ".yaml"
            spec.update(kind="generate", path=str(study_dir / "inputs" / f"{name}-{spec_digest}{ext}"))
            payload[name] = spec
            ident[name] = {"generate": kind, "params": params, "seed": gseed}
        else:
            loc = _locate(name, str(value), study_file)
            if loc is None:
                raise ConfigurationError(f"'{value}' not found", file=study_file, field=name)
            payload[name] = loc
            path = Path(loc["path"]) if loc["kind"] == "path" else _shipped(name, loc["name"])
            ident[name] = {"sha256": _content_hash(path)}
    return payload, digest(ident)


AUTO = "auto"     # a generated trace's `instances: auto`: sized to the point's cluster (hosts x GPUs / tp)


def _sized(params: dict[str, Any], instances: int) -> dict[str, Any]:
    return {**params, "instances": instances} if params.get("instances") == AUTO else params


def cluster_instances(cfg: dict[str, Any], study_file: str, study_dir: Path) -> int:
    """Instances of a point's cluster: its topology (resized to `hosts`) x GPUs per host / tp."""
    from simroute.defaults import DEFAULT_TP
    spec = point_topology(cfg, study_file)
    return max(1, spec.hosts * spec.gpus_per_host // int(cfg.get("tp", DEFAULT_TP)))


def point_topology(cfg: dict[str, Any], study_file: str, where: str = ""):
    """The TopologySpec of a point: its topology file or generator, resized to the point's `hosts`. A host count
    the topology's family cannot take is named as the study's field (`where: hosts`)."""
    from simroute.network.schema import load_topology_spec
    topology, hosts = cfg["topology"], cfg.get("hosts")
    field = f"{where}: hosts" if where else "hosts"
    if _is_gen(topology):
        if hosts is not None:
            raise ConfigurationError("a generated topology has no hosts to resize", file=study_file, field=field)
        from simroute.study.topogen import fabric_pair
        from simroute.network.schema import parse_topology
        return parse_topology(fabric_pair(**dict(topology.get("params") or {})))
    loc = _locate("topology", str(topology), study_file)
    if loc is None:
        raise ConfigurationError(f"'{topology}' not found", file=study_file, field="topology")
    path = Path(loc["path"]) if loc["kind"] == "path" else _shipped("topology", loc["name"])
    try:
        return load_topology_spec(path, hosts=hosts)
    except ConfigurationError as exc:
        if hosts is None or not (exc.field or "").startswith(("hosts", "network")):
            raise
        raise ConfigurationError(f"{hosts} hosts: {exc.problem} (the topology's family, {Path(str(path)).name})",
                                 file=study_file, field=field) from None


_POINTS_CHECKED: set[str] = set()


def check_point(cfg: dict[str, Any], study_file: str, where: str) -> None:
    """A point's deployment and load checked at load, as its run would check them (`sim.deployment`, the
    arrivals' rescaling): a study holding a point that cannot exist fails before any point runs, naming the
    study file and the field. Checked once per distinct deployment and process."""
    from simroute.defaults import DEFAULT_MODEL, DEFAULT_TP
    from simroute.model.limits import Fields
    from simroute.sim.deployment import check_run_deployment
    keys = ("topology", "hosts", "calib", "model", "tp", "gpu", "weights", "kv_layout", "hbm_gb", "kv_cache",
            "dp_attention", "ep", "a2a", "moe_load", "nextn", "accept_rate", "accept_length", "disagg",
            "prefill_tp")
    files = {}
    for name in ("topology", "calib"):          # a file by where it is and when it changed, not by its name
        loc = None if _is_gen(cfg[name]) else _locate(name, str(cfg[name]), study_file)
        if loc is not None and loc["kind"] == "path":
            files[name] = [loc["path"], Path(loc["path"]).stat().st_mtime_ns]
    key = canonical({**{name: cfg.get(name) for name in keys}, "files": files})
    if key not in _POINTS_CHECKED:
        spec = point_topology(cfg, study_file, where)
        calib = cfg["calib"]
        loc = _locate("calib", str(calib), study_file)
        path = Path(loc["path"]) if loc and loc["kind"] == "path" else _shipped("calib", str(calib))
        from simroute.calib import load_profile
        profile = load_profile(path if path is not None else calib)
        named = {name: f"{where}: {name}" for name in ("tp", "gpu", "weights", "model")}
        group = _group(cfg, spec.gpus_per_host)
        check_run_deployment(spec, profile, model=cfg.get("model", DEFAULT_MODEL), tp=int(cfg.get("tp", DEFAULT_TP)),
                             gpu=cfg.get("gpu"), weights=cfg.get("weights"),
                             kv_layout=cfg.get("kv_layout", "replicated"), hbm_gb=cfg.get("hbm_gb"),
                             cache_dtype=cfg.get("kv_cache"), group=group,
                             pooled=cfg.get("disagg", "none") != "none",
                             fields=Fields(**named, hbm=f"{where}: hbm_gb", dp=f"{where}: dp_attention",
                                           ep=f"{where}: ep", hosts=f"{where}: hosts", file=study_file))
        if cfg.get("disagg", "none") != "none":   # the prefill pool's TP instances
            from simroute.sim.pools import prefill_tp_of
            prefill_tp = prefill_tp_of(None if cfg.get("prefill_tp") is None else int(cfg["prefill_tp"]),
                                        int(cfg.get("tp", DEFAULT_TP)), spec.gpus_per_host)
            check_run_deployment(spec, profile, model=cfg.get("model", DEFAULT_MODEL), tp=prefill_tp,
                                 gpu=cfg.get("gpu"), weights=cfg.get("weights"),
                                 kv_layout=cfg.get("kv_layout", "replicated"), hbm_gb=cfg.get("hbm_gb"),
                                 cache_dtype=cfg.get("kv_cache"),
                                 fields=Fields(**{**named, "tp": f"{where}: prefill_tp"}, hbm=f"{where}: hbm_gb",
                                               file=study_file))
        _POINTS_CHECKED.add(key)
    if (cfg.get("qps") is not None or cfg.get("time_scale") is not None) and not _is_gen(cfg["trace"]):
        loc = _locate("trace", str(cfg["trace"]), study_file)
        path = Path(loc["path"]) if loc and loc["kind"] == "path" else _shipped("trace", str(cfg["trace"]))
        if path is not None:
            from simroute.sim.arrivals import check_rescaled_arrivals
            check_rescaled_arrivals(str(path), cfg.get("max_requests"), qps=cfg.get("qps"),
                                    time_scale=cfg.get("time_scale"), file=study_file, where=where)


def _group(cfg: dict[str, Any], gpus_per_host: int) -> tuple[Any, Any] | None:
    """A point's DP / EP / MTP group (`RunConfig.parallel`), or None for TP instances."""
    if int(cfg.get("dp_attention", 1)) == 1 and int(cfg.get("ep", 1)) == 1 and int(cfg.get("nextn", 0)) == 0:
        return None
    from simroute.model.parallel import Deployment, Mtp
    from simroute.defaults import DEFAULT_TP
    deployment = Deployment(tp=int(cfg.get("tp", DEFAULT_TP)), dp=int(cfg.get("dp_attention", 1)),
                            ep=int(cfg.get("ep", 1)), gpus_per_host=gpus_per_host, a2a=cfg.get("a2a"),
                            distribution=cfg.get("moe_load", "power_law_1.01"))
    nextn = int(cfg.get("nextn", 0))
    return deployment, (Mtp(nextn, cfg.get("accept_rate"), cfg.get("accept_length")) if nextn else None)


_HASHES: dict[tuple[str, float], str] = {}
_CODE: list[str] = []
CODE_PACKAGES = ("model", "calib", "network", "workload", "sim")


def code_fingerprint() -> str:
    """Hash of the simulator's source (the layers a run executes): results stored by an older simulator are
    not reused after its code changes, since the package version alone does not move with every commit."""
    if not _CODE:
        root = Path(__file__).resolve().parent.parent
        sha = hashlib.sha256()
        for pkg in CODE_PACKAGES:
            for source in sorted((root / pkg).rglob("*.py")):
                sha.update(source.relative_to(root).as_posix().encode())
                sha.update(source.read_bytes())
        _CODE.append(sha.hexdigest()[:16])
    return _CODE[0]


def _content_hash(path: Path | None) -> str:
    """Content hash, cached by (path, mtime): a rerun of a large study hashes each input once."""
    if path is None:
        return "?"
    key = (str(path), path.stat().st_mtime)
    if key not in _HASHES:
        _HASHES[key] = sha256_file(path)
    return _HASHES[key]


def materialise(spec: dict[str, Any], name: str) -> Path:
    """The local file an input spec stands for, generating it if needed (driver or worker)."""
    kind = spec["kind"]
    if kind == "path":
        return Path(spec["path"])
    if kind == "shipped":
        shipped = _shipped(name, spec["name"])
        if shipped is None:
            raise ConfigurationError(f"no shipped {name} '{spec['name']}'", field=name)
        return shipped
    path = Path(spec["path"])
    if path.exists():
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        target = path if os.access(path.parent, os.W_OK) else None
    except OSError:
        target = None
    if target is None:   # a remote worker: its own cache, same bytes
        target = Path(tempfile.gettempdir()) / "simroute-study-inputs" / path.name
        if target.exists():
            return target
    if name == "trace":
        from simroute.workload import generate
        return generate(spec["generate"], target, seed=spec["seed"], params=spec["params"])
    from simroute.study.topogen import write_topology
    return write_topology(spec["generate"], spec["params"], target)


def run_config(payload: dict[str, Any]):
    """The RunConfig of a payload, materialising its inputs."""
    from simroute.sim.config import RunConfig
    options = dict(payload)
    for name in ("topology", "trace", "calib"):
        options[name] = str(materialise(payload[name], name))
    return RunConfig(**options)
