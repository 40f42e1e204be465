"""Serving-framework presets on disk: one YAML file per framework version under calib/engines/ (docs/ENGINES.md).

    calib/engines/<framework>-<version>.yaml     # schema simroute.engine/1

A preset is data with provenance: the scheduling a framework runs by default (its scheduler, token budget,
prefill chunk, running-sequence cap, CUDA-graph batch limit, overlap scheduling), the CPU side of an iteration
and the per-request path outside the GPU (API server, tokenisation, the hops to the first token). Every constant
is `{value, unit, provenance: {kind, ref}}`: `source` (the framework's file at that version), `published` (a
doc, PR, issue or page giving a measured figure), `fitted` (and the measured points it was fitted to) or
`default` (what stands in, and why). A constant that depends on the GPU (SGLang sizes its prefill chunk by GPU
memory) is a tier table over GPU memory, as the framework's source states it. The sim layer's framework classes
(simroute/sim/frameworks/) turn a preset and a deployment into engine settings; this module only reads files.
Validated by pydantic at the file boundary, as the profiles are.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (BaseModel, ConfigDict, Discriminator, Field, Strict, Tag, ValidationError, field_validator,
                      model_validator)

# the file-name side lives apart, free of pydantic; re-exported for the callers that load presets too
from simroute.calib.engine_files import FRAMEWORKS, engines_dir, preset_path, preset_versions, version_key  # noqa: F401
from simroute.errors import ConfigurationError

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


@dataclass(frozen=True)
class PresetValue:
    """One constant of a loaded preset: its value (or tiers), unit and provenance."""

    name: str
    value: bool | float | str | None
    tiers: tuple[tuple[float | None, float, float | None], ...]
    unit: str | None
    kind: str
    ref: str
    points: tuple[str, ...] = ()

    def at(self, gpu_gib: float, tp: int) -> bool | float | str:
        """The value for a GPU of `gpu_gib` GiB in a TP group of `tp` (a tier table's row; a scalar as it is)."""
        if not self.tiers:
            assert self.value is not None
            return self.value
        for below, value, value_tp4 in self.tiers:
            if below is None or gpu_gib < below:
                return value_tp4 if (value_tp4 is not None and tp >= 4) else value
        raise AssertionError("the last tier has no bound")      # checked at load

    def cite(self) -> str:
        """'kind: ref' (and the fitted points), as a run's summary records where a setting came from."""
        text = f"{self.kind}: {self.ref}"
        return text + (f" (fitted to: {'; '.join(self.points)})" if self.points else "")


@dataclass(frozen=True)
class EnginePreset:
    """A framework version's preset, validated."""

    framework: str
    version: str
    description: str
    tables: str
    source: str
    file: Path
    constants: dict[str, PresetValue]

    @property
    def label(self) -> str:
        return f"{self.framework}@{self.version}"

    def constant(self, name: str) -> PresetValue:
        try:
            return self.constants[name]
        except KeyError:
            raise ConfigurationError(f"preset {self.label} lacks constant '{name}'", file=self.file,
                                     field=f"constants.{name}") from None


@functools.lru_cache(maxsize=None)
def _load(path: str) -> EnginePreset:
    from simroute.ioutil import load_yaml
    file = Path(path)
    raw = load_yaml(file)
    try:
        parsed = EnginePresetFile.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ConfigurationError(first["msg"], file=file, field=where) from None
    if file.stem != f"{parsed.framework}-{parsed.version}":
        raise ConfigurationError(f"a {parsed.framework} {parsed.version} preset must be named "
                                 f"{parsed.framework}-{parsed.version}.yaml", file=file, field="version")
    constants: dict[str, PresetValue] = {}
    for name, entry in parsed.constants.items():
        prov = entry.provenance
        points = tuple(prov.points or ())
        if isinstance(entry, TierConstant):
            tiers = tuple((tier.below_gib, tier.value, tier.value_tp4) for tier in entry.tiers)
            constants[name] = PresetValue(name, None, tiers, entry.unit, prov.kind, prov.ref, points)
        else:
            constants[name] = PresetValue(name, entry.value, (), entry.unit, prov.kind, prov.ref, points)
    return EnginePreset(parsed.framework, parsed.version, parsed.description, parsed.tables, parsed.source, file,
                        constants)


def load_engine_preset(framework: str, version: str | None = None, directory: Path | None = None) -> EnginePreset:
    """`framework`'s preset at `version` (the newest shipped when None), validated (once per process)."""
    return _load(str(preset_path(framework, version, directory)))


def load_engine_preset_file(path: str | Path) -> EnginePreset:
    """A preset file by path (tests, and a user's own preset checked with `simroute calib validate`)."""
    return _load(str(Path(path).resolve()))
