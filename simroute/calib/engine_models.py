"""The engine-preset file's pydantic models (schema simroute.engine/1, docs/ENGINES.md): validated at the file
boundary where a preset is not a shipped one that hashes as recorded (simroute/records.py reads those by the
models' field table). Kept apart from simroute.calib.engines, which loads presets, so that a default run imports
no pydantic (docs/PERFORMANCE.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Strict, Tag, field_validator, model_validator

SCHEMA_TAG = "simroute.engine/1"
STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
PresetKind = Literal["source", "published", "fitted", "default"]
Number = Annotated[float, Strict()]


class PresetProvenance(BaseModel):
    """Where a preset constant comes from: `ref` names the file and version (source), the page or PR and its
    figure (published), or the measured points (fitted; `points` lists them) or what a default stands in for."""

    model_config = STRICT

    kind: PresetKind
    ref: str = Field(min_length=1)
    points: list[str] | None = None

    @model_validator(mode="after")
    def _fitted_names_its_points(self) -> "PresetProvenance":
        if self.kind == "fitted" and not self.points:
            raise ValueError("a 'fitted' constant names the measured points it was fitted to ('points')")
        return self


class PresetConstant(BaseModel):
    """One scalar setting: a number, a switch or a name (a scheduler)."""

    model_config = STRICT

    value: Union[bool, Number, str]
    unit: str | None = None
    note: str | None = None
    provenance: PresetProvenance

    @field_validator("value")
    @classmethod
    def _non_negative(cls, value: bool | float | str) -> bool | float | str:
        if isinstance(value, float) and not isinstance(value, bool) and value < 0:
            raise ValueError(f"must be non-negative, got {value}")
        return value


class Tier(BaseModel):
    """One row of a tier table: the value for GPUs with less memory than `below_gib` (None: any larger GPU), and
    the value at tensor parallelism >= 4 where the framework picks another (`value_tp4`)."""

    model_config = STRICT

    below_gib: Number | None = None
    value: Number
    value_tp4: Number | None = None


class TierConstant(BaseModel):
    """A setting the framework picks from the GPU's memory, as its source states the tiers."""

    model_config = STRICT

    tiers: list[Tier] = Field(min_length=1)
    unit: str | None = None
    note: str | None = None
    provenance: PresetProvenance

    @model_validator(mode="after")
    def _ordered(self) -> "TierConstant":
        bounds = [tier.below_gib for tier in self.tiers]
        if bounds[-1] is not None or any(bound is None for bound in bounds[:-1]):
            raise ValueError("every tier but the last names below_gib; the last (any larger GPU) names none")
        finite = [bound for bound in bounds[:-1] if bound is not None]
        if any(following <= previous for previous, following in zip(finite, finite[1:])):
            raise ValueError("below_gib must increase from tier to tier")
        return self


def _constant_kind(entry: Any) -> str:
    """A constant with `tiers` is a tier table, any other a scalar (one error message for each, not both)."""
    if isinstance(entry, dict):
        return "tiers" if "tiers" in entry else "scalar"
    return "tiers" if isinstance(entry, TierConstant) else "scalar"


Entry = Annotated[Union[Annotated[TierConstant, Tag("tiers")], Annotated[PresetConstant, Tag("scalar")]],
                  Discriminator(_constant_kind)]


class EnginePresetFile(BaseModel):
    """What one preset file holds."""

    model_config = STRICT

    schema_: Literal["simroute.engine/1"] = Field(alias="schema")
    framework: Literal["sglang", "vllm", "trtllm"]
    version: str = Field(min_length=1)
    description: str = Field(min_length=1)
    tables: str = Field(min_length=1)       # the calib/ops/<gpu>/<name> directory whose kernels it measured
    source: str = Field(min_length=1)       # where its defaults were read (repository, tag, how)
    constants: dict[str, Entry]
