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
Validated by pydantic at the file boundary (simroute.calib.engine_models), as the profiles are; a shipped preset
that hashes as recorded is read by the models' field table instead (simroute/records.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the file-name side lives apart, free of pydantic; re-exported for the callers that load presets too
from simroute.calib.engine_files import FRAMEWORKS, engines_dir, preset_path, preset_versions, version_key  # noqa: F401
from simroute.errors import ConfigurationError

MODEL = "simroute.calib.engine_models:EnginePresetFile"
TIERS = "simroute.calib.engine_models:TierConstant"
_MODELS = ("SCHEMA_TAG", "PresetProvenance", "PresetConstant", "Tier", "TierConstant", "EnginePresetFile")


def __getattr__(name: str) -> Any:
    """The schema's names (simroute.calib.engine_models), imported with pydantic on first use."""
    if name in _MODELS:
        from simroute.calib import engine_models
        return getattr(engine_models, name)
    raise AttributeError(f"module 'simroute.calib.engines' has no attribute {name!r}")

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
    from simroute import records
    from simroute.ioutil import load_yaml
    file = Path(path)
    raw = load_yaml(file)
    parsed = records.read_shipped(file, MODEL, raw)
    if parsed is None:
        from pydantic import ValidationError

        from simroute.calib.engine_models import EnginePresetFile
        try:
            parsed = records.to_record(EnginePresetFile.model_validate(raw))
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
        if records.is_record(entry, TIERS):
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
