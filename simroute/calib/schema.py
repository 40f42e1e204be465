"""The calibration-profile file format, validated at load (pydantic at the file boundary only).

Every constant carries its provenance: `paper` (with table/section), `datasheet` (the vendor document named),
`measured` (on which box), `fitted` (from what), `loopback` (a 1-PE software floor, never a fabric constant)
or `default` (what stands in when nothing was measured, and why).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

SCHEMA_VERSION = "simroute.calib/1"
# Strict at the file boundary: no bool for a number, no numeric strings, no NaN or inf, no unknown keys.
STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
# A YAML [x, y] list is a pair (strict mode alone would demand a Python tuple); its numbers stay strict.
Pair = Annotated[tuple[Annotated[float, Strict()], Annotated[float, Strict()]], Strict(False)]
ProvenanceKind = Literal["paper", "datasheet", "measured", "fitted", "loopback", "default"]


class Provenance(BaseModel):
    model_config = STRICT

    kind: ProvenanceKind
    ref: str | None = None          # paper table/section, probe name, or what a default stands in for
    box: str | None = None          # the machine a measurement ran on
    date: str | None = None
    samples: str | None = None      # raw-sample file beside the profile (Parquet)

    @model_validator(mode="after")
    def _needs(self) -> "Provenance":
        if self.kind == "paper" and not self.ref:
            raise ValueError("a 'paper' provenance needs 'ref' (table or section)")
        if self.kind == "datasheet" and not self.ref:
            raise ValueError("a 'datasheet' provenance needs 'ref' (the vendor document)")
        if self.kind in ("measured", "loopback") and not self.box:
            raise ValueError(f"a '{self.kind}' provenance needs 'box' (which machine)")
        return self


class Constant(BaseModel):
    """A scalar (`value`, optional `range`) or a curve (`points` of [x, y] with x increasing)."""

    model_config = STRICT

    value: float | None = None
    points: list[Pair] | None = None
    x: str | None = None            # what the curve's x is (chunk_tokens, requesters, topk, ...)
    range: Pair | None = None
    unit: str | None = None
    note: str | None = None
    provenance: Provenance

    @model_validator(mode="after")
    def _shape(self) -> "Constant":
        if (self.value is None) == (self.points is None):
            raise ValueError("give exactly one of 'value' or 'points'")
        if self.value is not None and self.value < 0:
            raise ValueError(f"must be non-negative, got {self.value}")
        if self.points is not None:
            if len(self.points) < 1:
                raise ValueError("'points' is empty")
            coordinates = [point[0] for point in self.points]
            if any(following <= previous for previous, following in zip(coordinates, coordinates[1:])):
                raise ValueError("'points' x values must increase strictly")
            if any(point[1] < 0 for point in self.points):
                raise ValueError("'points' y values must be non-negative")
            if coordinates[0] < 0:      # every curve's x is a count (tokens, requesters, top-k): never below zero
                raise ValueError(f"'points' x values must be non-negative, got {coordinates[0]}")
        if self.range is not None and self.range[0] > self.range[1]:
            raise ValueError("'range' must be [low, high]")
        return self


def _require_positive(constant: Constant, what: str) -> Constant:
    if constant.value is None or constant.value <= 0:
        raise ValueError(f"{what} must be a positive 'value'")
    return constant


class FabricSpec(BaseModel):
    """One fabric class of paper Table 2: the affine constants plus the bulk link peak."""

    model_config = STRICT

    description: str = ""
    t_probe_us: Constant
    single_block_GBps: Constant
    link_peak_GBps: Constant
    turnaround_us: Constant | None = None
    mape_amortised: Constant | None = None
    mape_full: Constant | None = None
    gpu: str | None = None          # the GPU entry (`gpus:`) whose hosts this fabric connects

    @field_validator("single_block_GBps", "link_peak_GBps")
    @classmethod
    def _positive(cls, constant: Constant) -> Constant:
        return _require_positive(constant, "a bandwidth")


class OperatorTablesRef(BaseModel):
    """Where a GPU entry's operator tables are (docs/STEP_TIME.md, "Operator tables"): a directory holding a
    tables.yaml manifest, relative to the file that names it."""

    model_config = STRICT

    path: str
    note: str = ""
    fill: str | None = None   # tables for the op kinds `path` lacks: a shipped tables name or a path


class GpuFileSpec(BaseModel):
    """One GPU entry of the `gpus:` section (docs/STEP_TIME.md): datasheet peaks and achievable fractions."""

    model_config = STRICT

    description: str = ""
    peak_bf16_TFLOPs: Constant
    peak_fp8_TFLOPs: Constant | None = None  # dense FP8 tensor-core peak; absent: no FP8 rate (FP8 GEMMs at bf16)
    hbm_GBps: Constant
    hbm_GB: Constant
    hbm_efficiency: Constant
    gemm_efficiency: Constant              # a fraction, or points over tokens
    attention_efficiency: Constant
    iteration_overhead_us: Constant
    iteration_overhead_graph_us: Constant | None = None   # under CUDA graphs, when measured
    kernel_floor_us: Constant | None = None     # the least time one kernel launch takes (the roofline's floor)
    allreduce_bus_GBps: Constant | None = None  # a switched board's all-reduce bus bandwidth (NVSwitch)
    allreduce_latency_us: Constant | None = None
    operator_tables: OperatorTablesRef | None = None   # measured operator tables (the step model's first source)
    # the NVLink domain the GPU sits in: how many GPUs one NVLink / NVSwitch fabric connects all-to-all (8 on an
    # HGX board, 72 in a GB200 / GB300 NVL72 rack) and the NVLink bandwidth of one GPU, one direction
    nvlink_domain_gpus: Constant | None = None
    nvlink_GBps: Constant | None = None

    @field_validator("nvlink_domain_gpus")
    @classmethod
    def _whole_gpus(cls, constant: Constant | None) -> Constant | None:
        if constant is None:
            return None
        if constant.value is None or constant.value < 1 or constant.value != int(constant.value):
            raise ValueError("must be a whole number of GPUs >= 1 ('value')")
        return constant

    @field_validator("peak_bf16_TFLOPs", "peak_fp8_TFLOPs", "hbm_GBps", "hbm_GB", "allreduce_bus_GBps",
                     "nvlink_GBps")
    @classmethod
    def _positive_value(cls, constant: Constant | None) -> Constant | None:
        if constant is None:
            return None
        return _require_positive(constant, "a peak or capacity")

    @field_validator("hbm_efficiency", "attention_efficiency", "gemm_efficiency")
    @classmethod
    def _fraction(cls, constant: Constant) -> Constant:
        fractions = ([constant.value] if constant.value is not None
                     else [fraction_value for _, fraction_value in constant.points or []])
        if any(not 0 < fraction_value <= 1 for fraction_value in fractions):
            raise ValueError("an achievable fraction must lie in (0, 1]")
        if any(coordinate <= 0 for coordinate, _ in constant.points or []):
            raise ValueError("an efficiency curve's x (tokens) must be > 0")
        return constant

    @field_validator("iteration_overhead_us", "kernel_floor_us", "allreduce_latency_us")
    @classmethod
    def _scalar(cls, constant: Constant | None) -> Constant | None:
        if constant is None:
            return None
        if constant.value is None or constant.value < 0:
            raise ValueError("must be a scalar 'value' >= 0")
        return constant


class BoxSpec(BaseModel):
    model_config = STRICT

    name: str
    description: str = ""


class ProfileFile(BaseModel):
    """What one YAML file holds; `include` composes several files (later ones override earlier)."""

    model_config = STRICT

    schema_: Literal["simroute.calib/1"] = Field(alias="schema")
    name: str
    description: str = ""
    box: BoxSpec | None = None
    include: list[str] = Field(default_factory=list)
    fabrics: dict[str, FabricSpec] = Field(default_factory=dict)
    constants: dict[str, Constant] = Field(default_factory=dict)
    gpus: dict[str, GpuFileSpec] = Field(default_factory=dict)
    gpu: str | None = None          # the profile's instance GPU when a fabric does not name one
