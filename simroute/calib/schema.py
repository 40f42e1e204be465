"""The calibration-profile file format, validated at load (pydantic at the file boundary only).

Every constant carries its provenance: `paper` (with table/section), `measured` (on which box), `fitted`
(from what), `loopback` (a 1-PE software floor, never a fabric constant) or `default` (what stands in
when nothing was measured, and why).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

SCHEMA_VERSION = "simroute.calib/1"
# Strict at the file boundary: no bool for a number, no numeric strings, no NaN or inf, no unknown keys.
STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
# A YAML [x, y] list is a pair (strict mode alone would demand a Python tuple); its numbers stay strict.
Pair = Annotated[tuple[Annotated[float, Strict()], Annotated[float, Strict()]], Strict(False)]
ProvenanceKind = Literal["paper", "measured", "fitted", "loopback", "default"]


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
            xs = [p[0] for p in self.points]
            if any(b <= a for a, b in zip(xs, xs[1:])):
                raise ValueError("'points' x values must increase strictly")
            if any(p[1] < 0 for p in self.points):
                raise ValueError("'points' y values must be non-negative")
        if self.range is not None and self.range[0] > self.range[1]:
            raise ValueError("'range' must be [low, high]")
        return self


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

    @field_validator("single_block_GBps", "link_peak_GBps")
    @classmethod
    def _positive(cls, c: Constant) -> Constant:
        if c.value is None or c.value <= 0:
            raise ValueError("a bandwidth must be a positive 'value'")
        return c


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
