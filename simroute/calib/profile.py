"""Loading, composing and writing calibration profiles; turning them into the model's CostParams.

A profile file is validated by the pydantic models of simroute.calib.schema, or, shipped and hashing as recorded,
read by their field table without pydantic (simroute/records.py); either way its entries are records of those
models (`Constant`, `FabricSpec`, `GpuFileSpec`, ...), equal whichever way they were read.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simroute import records
from simroute.calib.optables import load_operator_tables_cached, resolve_fill
from simroute.errors import ConfigurationError, UnknownNameError
from simroute.ioutil import load_yaml, write_text_atomic
from simroute.model.cost import ROUTE_EXCHANGES, CostParams, FabricParams, RouteExchanges
from simroute.model.geometry import get_model
from simroute.model.staging import CUDA_DEFAULT_CONNECTIONS, StagingParams
from simroute.model.optables import OperatorTables
from simroute.model.steptime import GpuSpec, HostCosts, StepTimeModel

if TYPE_CHECKING:   # records of these models at run time (simroute/records.py)
    from simroute.calib.schema import Constant, FabricSpec, GpuFileSpec, ProfileFile

MODEL = "simroute.calib.schema:ProfileFile"
CONSTANT = "simroute.calib.schema:Constant"

# Constants the cost model cannot do without, with the unit each must be given in.
REQUIRED_CONSTANTS: dict[str, str] = {
    "splice_ms": "points over chunk_tokens",
    "holder_compute_dense_us": "points over requesters",
    "holder_sparse_premium": "points over topk",
    "merge_us": "value",
    "prefill_us_per_token_layer": "value",
    "gather_base_ms_per_layer": "value",
    "gather_per_holder_ms_per_layer": "value",
    "host_fixed_ms": "value",
    "host_per_row_us": "value",
}


def shipped_dir() -> Path:
    """The calibration profiles shipped with the package (`calib/` of the repository)."""
    from simroute.shipped import shipped_folder
    return shipped_folder("calib")


def default_profile_path() -> Path:
    return shipped_dir() / "h100-ibgda.yaml"


def resolve_profile_path(name_or_path: str | Path) -> Path:
    """A path, or the name of a shipped profile (`paper-h100`, `fabrics/h100-ibgda`)."""
    from simroute.shipped import check_not_empty
    check_not_empty("calib", name_or_path)
    path = Path(name_or_path)
    if path.exists():
        return path
    for cand in (shipped_dir() / f"{name_or_path}.yaml", shipped_dir() / str(name_or_path)):
        if cand.exists():
            return cand
    raise ConfigurationError("profile not found (neither a file nor a shipped profile name; "
                             "see `simroute calib list`)", file=path)


@dataclass(frozen=True)
class Profile:
    """A composed, validated profile: fabrics and constants, each with provenance."""

    name: str
    description: str
    box: str | None
    fabrics: dict[str, FabricSpec]
    constants: dict[str, Constant]
    files: tuple[str, ...] = ()
    origin: dict[str, str] = field(default_factory=dict)   # "fabric:X" / "const:Y" / "gpu:Z" -> file it came from
    gpus: dict[str, GpuFileSpec] = field(default_factory=dict)
    gpu: str | None = None          # the instance GPU when the intra-host fabric names none

    def fabric(self, name: str) -> FabricSpec:
        try:
            return self.fabrics[name]
        except KeyError:
            raise UnknownNameError("fabric", name, list(self.fabrics)) from None

    def constant(self, name: str) -> Constant:
        try:
            return self.constants[name]
        except KeyError:
            raise ConfigurationError(f"profile '{self.name}' lacks constant '{name}'", file=self.files[0]
                                     if self.files else None, field=f"constants.{name}") from None

    def fabric_params(self, name: str) -> FabricParams:
        fabric_spec = self.fabric(name)
        return FabricParams(name=name, t_probe_s=fabric_spec.t_probe_us.value * 1e-6,
                            single_block_Bps=fabric_spec.single_block_GBps.value * 1e9,
                            bulk_Bps=fabric_spec.link_peak_GBps.value * 1e9,
                            turnaround_s=(fabric_spec.turnaround_us.value * 1e-6) if fabric_spec.turnaround_us else 0.0)

    def gpu_entry(self, name: str) -> GpuFileSpec:
        try:
            return self.gpus[name]
        except KeyError:
            raise UnknownNameError("gpu", name, list(self.gpus)) from None

    def gpu_spec(self, name: str | None = None, *, tables: bool = True) -> GpuSpec:
        """The step-time model's GpuSpec of GPU entry `name` (the profile's instance GPU by default), with its
        operator tables unless `tables` is False (the roofline alone)."""
        name = name or self.instance_gpu()
        entry = self.gpu_entry(name)
        gemm = entry.gemm_efficiency
        eff = gemm.value if gemm.value is not None else (tuple(point_x for point_x, _ in gemm.points or []),
                                                          tuple(point_y for _, point_y in gemm.points or []))
        sources = {field_name: _prov_text(getattr(entry, field_name)) for field_name in records.fields_of(entry)
                   if records.is_record(getattr(entry, field_name), CONSTANT)}
        return GpuSpec(name=name, peak_flops=entry.peak_bf16_TFLOPs.value * 1e12, hbm_Bps=entry.hbm_GBps.value * 1e9,
                       hbm_bytes=entry.hbm_GB.value * 1e9, hbm_efficiency=entry.hbm_efficiency.value,
                       gemm_efficiency=eff, attention_efficiency=entry.attention_efficiency.value,
                       iteration_overhead_s=entry.iteration_overhead_us.value * 1e-6, sources=sources,
                       iteration_overhead_graph_s=(entry.iteration_overhead_graph_us.value * 1e-6
                                                   if entry.iteration_overhead_graph_us is not None else None),
                       peak_fp8_flops=entry.peak_fp8_TFLOPs.value * 1e12 if entry.peak_fp8_TFLOPs is not None else None,
                       kernel_floor_s=entry.kernel_floor_us.value * 1e-6 if entry.kernel_floor_us is not None else 0.0,
                       allreduce_bus_Bps=(entry.allreduce_bus_GBps.value * 1e9 if entry.allreduce_bus_GBps is not None
                                          else None),
                       allreduce_latency_s=(entry.allreduce_latency_us.value * 1e-6
                                            if entry.allreduce_latency_us is not None else None),
                       operator_tables=self.operator_tables(name) if tables else None,
                       nvlink_domain_gpus=(int(entry.nvlink_domain_gpus.value)  # type: ignore[arg-type]
                                           if entry.nvlink_domain_gpus is not None else None),
                       nvlink_Bps=entry.nvlink_GBps.value * 1e9 if entry.nvlink_GBps is not None else None)

    def operator_tables_dir(self, name: str) -> Path | None:
        """The directory of GPU entry `name`'s operator tables (relative to the file naming them), if any."""
        ref = self.gpu_entry(name).operator_tables
        if ref is None:
            return None
        base = Path(self.origin.get(f"gpu:{name}", self.files[0] if self.files else "."))
        # relative to the file naming them; an entry copied from a shipped GPU file into another profile (the
        # probes' measured profile) keeps the shipped tables' relative path, so calib/gpus/ is tried second
        for candidate in (base.parent / ref.path, shipped_dir() / "gpus" / ref.path):
            if candidate.is_dir():
                return Path(os.path.realpath(candidate))
        return Path(os.path.realpath(base.parent / ref.path))     # realpath: a link loop is not a crash

    def operator_tables(self, name: str) -> OperatorTables | None:
        """GPU entry `name`'s operator tables (loaded once per process), or None if it names none; with
        `operator_tables.fill`, the kinds they lack from the tables `fill` names (`merge_operator_tables`)."""
        directory = self.operator_tables_dir(name)
        if directory is None:
            return None
        naming_file = self.origin.get(f"gpu:{name}")
        if not directory.is_dir():
            what = "does not exist" if not directory.exists() else "is not a directory"
            raise ConfigurationError(f"operator_tables.path {what} ({directory})", file=naming_file,
                                     field=f"gpus.{name}.operator_tables.path")
        if not (directory / "tables.yaml").is_file():
            raise ConfigurationError(f"{directory} holds no tables.yaml: not an operator-table directory",
                                     file=naming_file, field=f"gpus.{name}.operator_tables.path")
        fill = self.gpu_entry(name).operator_tables.fill
        if fill is None:
            tables = load_operator_tables_cached(str(directory))
        else:
            fill_directory = resolve_fill(fill, Path(naming_file or (self.files[0] if self.files else ".")))
            if fill_directory is None:
                raise ConfigurationError(f"'{fill}' names no operator-table directory (a path holding tables.yaml, "
                                         "relative to this file, or a shipped name under calib/ops)",
                                         file=naming_file, field=f"gpus.{name}.operator_tables.fill")
            tables = load_operator_tables_cached(str(directory), str(fill_directory))
        if not same_gpu(tables.gpu, name, self.gpu_entry(name)):
            raise ConfigurationError(f"the tables at {directory} were measured on '{tables.gpu}', not on '{name}': "
                                     "another GPU's kernels would time this one", file=naming_file,
                                     field=f"gpus.{name}.operator_tables.path")
        return tables

    def find_gpu_spec(self, name: str) -> GpuSpec | None:
        """GPU entry `name` from this profile, else from the shipped calib/gpus/<name>.yaml; None if neither
        has it (a topology's `hosts.gpu` that is a label, not an entry name)."""
        path = self.gpu_entry_file(name)
        if path is None:
            return None
        return self.gpu_spec(name) if name in self.gpus else load_profile(path).gpu_spec(name)

    def gpu_entry_file(self, name: str) -> Path | None:
        """The file GPU entry `name` is read from (this profile's, else the shipped calib/gpus/<name>.yaml):
        an input of a run whose topology names that GPU."""
        if name in self.gpus:
            return Path(self.origin.get(f"gpu:{name}", self.files[0] if self.files else ""))
        shipped = shipped_dir() / "gpus" / f"{name}.yaml"
        return shipped if len(Path(name).parts) == 1 and shipped.exists() else None

    def check_gpu_entry(self, name: object, *, field: str = "--gpu", file: str | Path | None = None) -> Path:
        """The file GPU entry `name` is read from, or the one-line error naming `field`: how every command
        (run, plan, model step, calib diff, studies) checks a GPU name, so a path, a pattern or an empty value
        is refused as such and an unknown name lists the known ones."""
        from simroute.checks import check_name
        check_name(name, field, file=file, what="GPU entry name")
        path = self.gpu_entry_file(str(name))
        if path is None:
            raise ConfigurationError(str(UnknownNameError("gpu", str(name), self.gpu_entry_names())), file=file,
                                     field=field)
        return path

    def gpu_entry_names(self) -> list[str]:
        """Every GPU entry a run may name: this profile's, then the shipped calib/gpus/*.yaml."""
        shipped = sorted(path.stem for path in (shipped_dir() / "gpus").glob("*.yaml"))
        return list(self.gpus) + [name for name in shipped if name not in self.gpus]

    def instance_gpu(self, intra_host_fabric: str | None = None) -> str:
        """The GPU of an instance whose hosts' intra-host fabric is `intra_host_fabric` (the fabric's `gpu:`),
        else the profile's `gpu:`."""
        if intra_host_fabric is not None and self.fabric(intra_host_fabric).gpu:
            return self.fabric(intra_host_fabric).gpu  # type: ignore[return-value]
        if self.gpu:
            return self.gpu
        if len(self.gpus) == 1:
            return next(iter(self.gpus))
        raise ConfigurationError(f"profile '{self.name}' names no instance GPU (set `gpu:` or a fabric's `gpu:`)",
                                 file=self.files[0] if self.files else None, field="gpu")

    def step_model(self, model: str = "deepseek-v2-lite", *, gpu: str | None = None, tp: int = 1,
                   intra_host_fabric: str | None = None, cache_dtype: str | None = None,
                   gpu_spec: GpuSpec | None = None, cuda_graphs: bool = False,
                   weight_dtype: str | None = None, kv_layout: str = "replicated",
                   host: HostCosts | None = None) -> StepTimeModel:
        """The step-time model of an instance of `tp` GPUs serving `model`. The TP all-reduce runs over
        `intra_host_fabric` (its bulk rate and probe latency); the GPU is that fabric's unless `gpu` is given
        (or `gpu_spec`, an entry taken from another profile). `weight_dtype` overrides the checkpoint's
        (bf16 / fp8), `cache_dtype` the KV cache's default (None: the model's); `kv_layout` where an MLA latent
        lives under TP (steptime.KV_LAYOUTS); `host` a serving framework's CPU side (an engine preset's,
        simroute/sim/frameworks/)."""
        geom = get_model(model)
        if cache_dtype is not None and cache_dtype != geom.cache_dtype:
            geom = geom.with_cache_dtype(cache_dtype)
        if weight_dtype is not None and weight_dtype != geom.weight_dtype:
            geom = geom.with_weight_dtype(weight_dtype)
        spec = gpu_spec or self.gpu_spec(gpu or self.instance_gpu(intra_host_fabric))
        ar_Bps, ar_lat = float("inf"), 0.0
        if intra_host_fabric is not None:
            fabric_spec = self.fabric_params(intra_host_fabric)
            ar_Bps, ar_lat = fabric_spec.bulk_Bps, fabric_spec.t_probe_s
        holder = self.constants.get("holder_compute_dense_us")
        curve = None
        if holder is not None and holder.points:
            curve = (tuple(point_x for point_x, _ in holder.points),
                     tuple(point_y * 1e-6 for _, point_y in holder.points))
        return StepTimeModel(geom, spec, tp, allreduce_Bps=ar_Bps, allreduce_latency_s=ar_lat, holder_curve=curve,
                             cuda_graphs=cuda_graphs, kv_layout=kv_layout, host=host)

    def staging_params(self, copy_GBps: float | None = None, *, gpu_spec: GpuSpec | None = None) -> StagingParams:
        """The holders' staging mechanisms (simroute.model.staging): host dispatch per copy and join per stream
        (`staging_dispatch_us`, `staging_join_us`), copy engines (`staging_copy_engines`), hardware work queues
        (`staging_hw_queues`), and the copy rate: one copy's `copy_GBps` when given (the run's
        --staging-copy-GBps), else the profile's `staging_copy_GBps` (the staging probe's), else the GPU's
        achievable HBM rate / 2 (`gpu_spec`, default the profile's instance GPU); all copies together at most the
        larger of that one-copy rate and the profile's `staging_parallel_GBps` (the probe's), else the HBM copy
        rate."""
        constants = self.constants
        sources: list[tuple[str, str]] = []

        def value(name: str, field: str, default: float | None = None) -> float:
            if name in constants and constants[name].value is not None:
                sources.append((field, _prov_text(constants[name])))
                return float(constants[name].value)
            if default is None:
                raise ConfigurationError("is missing: the staging pool needs it (shared.yaml carries it)",
                                         file=self.files[0] if self.files else None, field=f"constants.{name}")
            sources.append((field, "default"))
            return default

        dispatch_us, join_us = value("staging_dispatch_us", "dispatch_s"), value("staging_join_us", "join_s")
        engines = value("staging_copy_engines", "copy_engines")
        queues = value("staging_hw_queues", "hw_queues", float(CUDA_DEFAULT_CONNECTIONS))
        spec = gpu_spec or self.gpu_spec(tables=False)
        hbm_Bps = spec.achievable_hbm_Bps / 2
        if copy_GBps is not None:
            copy_Bps = copy_GBps * 1e9
            sources.append(("copy_Bps", "the run's staging_copy_GBps"))
        elif "staging_copy_GBps" in constants:
            copy_Bps = constants["staging_copy_GBps"].value * 1e9
            sources.append(("copy_Bps", _prov_text(constants["staging_copy_GBps"])))
        else:
            copy_Bps = hbm_Bps
            sources.append(("copy_Bps", f"{spec.name}'s achievable HBM rate / 2 (read + write)"))
        if "staging_parallel_GBps" in constants:      # the staging probe: copies started together
            hbm_Bps = constants["staging_parallel_GBps"].value * 1e9
            sources.append(("hbm_copy_Bps", _prov_text(constants["staging_parallel_GBps"])))
        else:
            sources.append(("hbm_copy_Bps", f"{spec.name}'s achievable HBM rate / 2 (read + write)"))
        for name, number, least in (("staging_copy_GBps", copy_Bps, "> 0"), ("staging_parallel_GBps", hbm_Bps, "> 0"),
                                    ("staging_copy_engines", engines, "> 0"), ("staging_hw_queues", queues, "> 0"),
                                    ("staging_dispatch_us", dispatch_us, ">= 0"), ("staging_join_us", join_us, ">= 0")):
            if not (math.isfinite(number) and (number > 0 if least == "> 0" else number >= 0)):
                raise ConfigurationError(f"must be {least}", file=self.origin.get(f"const:{name}"),
                                         field=f"constants.{name}")
        return StagingParams(dispatch_s=dispatch_us * 1e-6, join_s=join_us * 1e-6, copy_Bps=copy_Bps,
                             hbm_copy_Bps=max(hbm_Bps, copy_Bps), copy_engines=int(round(engines)),
                             hw_queues=int(round(queues)), sources=tuple(sources))

    def check_complete(self) -> None:
        """Raise if a constant the cost model needs is missing or of the wrong shape."""
        for key, shape in REQUIRED_CONSTANTS.items():
            found = self.constant(key)
            if shape.startswith("points") and found.points is None:
                raise ConfigurationError(f"must be a curve ({shape})", file=self.origin.get(f"const:{key}"),
                                         field=f"constants.{key}")
            if shape == "value" and found.value is None:
                raise ConfigurationError("must be a scalar 'value'", file=self.origin.get(f"const:{key}"),
                                         field=f"constants.{key}")
        if not self.fabrics:
            raise ConfigurationError(f"profile '{self.name}' defines no fabric",
                                     file=self.files[0] if self.files else None, field="fabrics")

    def cost_params(self, model: str = "deepseek-v2-lite", *, route_exchanges: str = RouteExchanges.PER_LAYER,
                    prefill_us: float | None = None, cache_dtype: str | None = None, **switches: Any) -> CostParams:
        """The model's CostParams for `model` on every fabric of this profile (`cache_dtype` None: the model's
        default KV-cache dtype)."""
        self.check_complete()
        if route_exchanges not in ROUTE_EXCHANGES:
            raise UnknownNameError("route_exchanges", route_exchanges, ROUTE_EXCHANGES)
        constants = self.constants
        splice = constants["splice_ms"].points
        holder = constants["holder_compute_dense_us"].points
        prem = constants["holder_sparse_premium"].points
        geom = get_model(model)
        cache_dtype = cache_dtype or geom.cache_dtype
        if cache_dtype != geom.cache_dtype:
            geom = geom.with_cache_dtype(cache_dtype)
        return CostParams(
            geometry=geom, holder_prefill_s=self._prefill_form(model, cache_dtype),
            fabrics=tuple(self.fabric_params(entry_name) for entry_name in self.fabrics),
            splice_ct=tuple(point_x for point_x, _ in splice), splice_s=tuple(point_y * 1e-3 for _, point_y in splice),
            holder_n=tuple(point_x for point_x, _ in holder), holder_s=tuple(point_y * 1e-6 for _, point_y in holder),
            sparse_k=tuple(point_x for point_x, _ in prem), sparse_premium=tuple(point_y for _, point_y in prem),
            merge_s=constants["merge_us"].value * 1e-6,
            prefill_s_per_token_layer=(prefill_us if prefill_us is not None
                                       else constants["prefill_us_per_token_layer"].value) * 1e-6,
            gather_base_s=constants["gather_base_ms_per_layer"].value * 1e-3,
            gather_per_holder_s=constants["gather_per_holder_ms_per_layer"].value * 1e-3,
            route_exchanges=route_exchanges,  # type: ignore[arg-type]
            host_fixed_s=constants["host_fixed_ms"].value * 1e-3,
            host_per_row_s=constants["host_per_row_us"].value * 1e-6,
            **switches,
        )

    def _prefill_form(self, model: str, cache_dtype: str | None) -> tuple[float, float] | None:
        """The prefill-form coefficients of the profile's instance GPU (`StepTimeModel.prefill_form_coeffs`)
        that the closed form charges a routed first pass by; None when the profile names no GPU entry."""
        try:
            gpu = self.instance_gpu()
        except ConfigurationError:
            return None
        if gpu not in self.gpus:
            return None
        # the coefficients are the GPU's rates, not table lookups: the roofline step model gives the same ones
        # without loading and reducing the operator tables (most of what `simroute predict` waited for)
        return self.step_model(model, gpu_spec=self.gpu_spec(gpu, tables=False),
                               cache_dtype=cache_dtype).prefill_form_coeffs()


def same_gpu(tables_gpu: str, entry: str, spec: GpuFileSpec) -> bool:
    """Whether operator tables measured on `tables_gpu` (their manifest's gpu) may time GPU entry `entry`: the
    same name, or the name aiconfigurator gives it (`h200_sxm` for `h200-sxm`; `calib import` takes either), or
    an entry of another name with the same board as the shipped entry the tables name (HBM capacity and bf16
    peak within 1%: a copy of a shipped entry under a name of its own)."""
    from simroute.calib.aiconfigurator import GPU_NAMES
    if tables_gpu == entry or GPU_NAMES.get(entry) == tables_gpu:
        return True
    shipped_name = next((name for name, system in GPU_NAMES.items() if system == tables_gpu), tables_gpu)
    shipped = shipped_dir() / "gpus" / f"{shipped_name}.yaml"
    if len(Path(shipped_name).parts) != 1 or not shipped.is_file():
        return False
    board = load_profile(shipped).gpus.get(shipped_name)
    close = lambda a, b: abs(a - b) <= 0.01 * max(abs(a), abs(b))
    return board is not None and close(board.hbm_GB.value, spec.hbm_GB.value) and \
        close(board.peak_bf16_TFLOPs.value, spec.peak_bf16_TFLOPs.value)


def _loc(err: dict) -> str:
    return ".".join(str(point_x) for point_x in err["loc"] if not str(point_x).startswith("function-after"))


def _parse(path: Path) -> ProfileFile:
    """The file's contents as records: by the field table when shipped and hashing as recorded, else
    validated."""
    raw = load_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigurationError("a profile must be a YAML mapping", file=path)
    plain = records.read_shipped(path, MODEL, raw)
    if plain is not None:
        return plain                            # type: ignore[return-value]
    from pydantic import ValidationError

    from simroute.calib.schema import ProfileFile
    try:
        return records.to_record(ProfileFile.model_validate(raw))
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "missing"
        elif "input" in err and err["type"] not in ("value_error",):
            msg = f"{msg} (got {err['input']!r})"
        more = f" (+{len(exc.errors()) - 1} more problems)" if len(exc.errors()) > 1 else ""
        raise ConfigurationError(msg + more, file=path, field=_loc(err)) from None


UNIT_OF_SUFFIX = {"_us": "us", "_ms": "ms", "_GBps": "GB/s", "_GB": "GB", "_TFLOPs": "TFLOP/s"}


def _check_units(profile_file: ProfileFile, path: Path) -> None:
    """A constant's name carries its unit (`t_probe_us`); a `unit:` that says otherwise is an error, not a
    silent factor of 1000."""
    items = [(f"fabrics.{name}.{field_name}", field_name, getattr(fabric, field_name))
             for name, fabric in profile_file.fabrics.items() for field_name in records.fields_of(fabric)
             if records.is_record(getattr(fabric, field_name), CONSTANT)]
    items += [(f"constants.{field_name}", field_name, constant)
              for field_name, constant in profile_file.constants.items()]
    items += [(f"gpus.{name}.{field_name}", field_name, getattr(gpu_file_entry, field_name))
              for name, gpu_file_entry in profile_file.gpus.items() for field_name in records.fields_of(gpu_file_entry)
              if records.is_record(getattr(gpu_file_entry, field_name), CONSTANT)]
    for where, key, constant in items:
        want = next((unit for suf, unit in UNIT_OF_SUFFIX.items() if key.endswith(suf) or f"{suf}_" in key), None)
        if constant.unit is not None and want is not None and constant.unit != want:
            raise ConfigurationError(f"unit '{constant.unit}' contradicts the name, which says {want}", file=path,
                                     field=f"{where}.unit")


def load_profile(path: str | Path, *, _seen: tuple[Path, ...] = ()) -> Profile:
    """Load a profile, resolving `include:` relative to the including file (later entries override)."""
    path = resolve_profile_path(path).resolve()
    if path in _seen:
        raise ConfigurationError("include cycle", file=path, field="include")
    profile_file = _parse(path)
    _check_units(profile_file, path)
    fabrics: dict[str, FabricSpec] = {}
    constants: dict[str, Constant] = {}
    gpus: dict[str, GpuFileSpec] = {}
    origin: dict[str, str] = {}
    files: list[str] = [str(path)]
    box = profile_file.box.name if profile_file.box else None
    gpu = profile_file.gpu
    for inc in profile_file.include:
        # "shipped:NAME" names a profile shipped with simroute (portable across boxes and installs);
        # anything else is a path relative to the including file.
        inc_path = shipped_dir() / inc.removeprefix("shipped:") if inc.startswith("shipped:") else path.parent / inc
        if inc.startswith("shipped:") and inc_path.suffix != ".yaml":
            inc_path = inc_path.with_suffix(".yaml")
        if not inc_path.exists():
            raise ConfigurationError(f"included file '{inc}' not found", file=path, field="include")
        sub = load_profile(inc_path, _seen=_seen + (path,))
        fabrics.update(sub.fabrics)
        constants.update(sub.constants)
        gpus.update(sub.gpus)
        origin.update(sub.origin)
        files.extend(fabric for fabric in sub.files if fabric not in files)     # a GPU file two fabrics include, once
        box = box or sub.box
        gpu = gpu or sub.gpu
    for name, fabric in profile_file.fabrics.items():
        fabrics[name] = fabric
        origin[f"fabric:{name}"] = str(path)
    for name, constant in profile_file.constants.items():
        constants[name] = constant
        origin[f"const:{name}"] = str(path)
    for name, gpu_file_entry in profile_file.gpus.items():
        gpus[name] = gpu_file_entry
        origin[f"gpu:{name}"] = str(path)
    _check_gpu_names(gpu, fabrics, gpus, path)
    return Profile(name=profile_file.name, description=profile_file.description, box=box, fabrics=fabrics,
                   constants=constants, files=tuple(files), origin=origin, gpus=gpus, gpu=gpu)


def _check_gpu_names(gpu: str | None, fabrics: dict[str, FabricSpec], gpus: dict[str, GpuFileSpec],
                     path: Path) -> None:
    """A profile's `gpu:` and every fabric's `gpu:` must name a GPU entry it has (once composed)."""
    if gpu is not None and gpu not in gpus:
        raise ConfigurationError(f"names gpu '{gpu}', which no `gpus:` entry defines (have: {sorted(gpus)})",
                                 file=path, field="gpu")
    for name, fabric in fabrics.items():
        if fabric.gpu is not None and fabric.gpu not in gpus:
            raise ConfigurationError(f"names gpu '{fabric.gpu}', which no `gpus:` entry defines (have: {sorted(gpus)})",
                                     file=path, field=f"fabrics.{name}.gpu")


def write_profile(data: dict[str, Any], path: str | Path) -> Path:
    """Validate a profile dict and write it as YAML atomically (the calibrate pipeline's writer)."""
    import yaml
    from pydantic import ValidationError

    from simroute.calib.schema import ProfileFile
    path = Path(path)
    try:
        ProfileFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigurationError(err["msg"], file=path, field=_loc(err)) from None
    write_text_atomic(path, yaml.safe_dump(data, sort_keys=False, width=120))
    return path


def _prov_text(constant: Constant) -> str:
    """'kind: ref on box', the provenance of a constant as one line."""
    path = constant.provenance
    return path.kind + (f": {path.ref}" if path.ref else "") + (f" on {path.box}" if path.box else "")


def flatten(profile: Profile) -> dict[str, tuple[str, str]]:
    """'fabrics.X.t_probe_us' / 'constants.Y' / 'gpus.Z.hbm_GBps' -> (value text, provenance text): for show
    and diff."""
    out: dict[str, tuple[str, str]] = {}

    def fmt(constant: Constant) -> tuple[str, str]:
        value_text = (f"{constant.value:g}" if constant.value is not None
                      else " ".join(f"({point_x:g},{point_y:g})" for point_x, point_y in constant.points or []))
        if constant.range:
            value_text += f" [{constant.range[0]:g}..{constant.range[1]:g}]"
        return value_text, _prov_text(constant)

    for fname, fabric in profile.fabrics.items():
        for key in ("t_probe_us", "single_block_GBps", "link_peak_GBps", "turnaround_us", "mape_amortised",
                    "mape_full"):
            constant = getattr(fabric, key)
            if constant is not None:
                out[f"fabrics.{fname}.{key}"] = fmt(constant)
    for cname, constant in profile.constants.items():
        out[f"constants.{cname}"] = fmt(constant)
    for gname, gpu_file_entry in profile.gpus.items():
        for key in records.fields_of(gpu_file_entry):
            constant = getattr(gpu_file_entry, key)
            if records.is_record(constant, CONSTANT):
                out[f"gpus.{gname}.{key}"] = fmt(constant)
    return out
