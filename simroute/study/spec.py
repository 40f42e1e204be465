"""Study files: a base run, a grid of axes or an SLO search, and seed repetitions, validated at load.

A study YAML names RunConfig fields. Inputs (topology, trace, calib) may be shipped names, paths relative to the
study file, or generator specs (`{generate: corpus, params: {...}, seed: N}`) so a study is self-contained.
Errors name the study file and the offending field, so a typo in a 200-point study fails before any work.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simroute.checks import check_number
from simroute.errors import ConfigurationError, SimrouteError
from simroute.ioutil import load_yaml
from simroute.sim.config import RunConfig
from simroute.study.backends import Keep
from simroute.study.search import Goal

RUN_FIELDS = {field.name for field in dataclasses.fields(RunConfig)}
INPUTS = ("topology", "trace", "calib")
TOP_KEYS = {"name", "description", "base", "axes", "search", "seeds", "slo", "quick", "report", "keep", "plan"}
MAX_SEEDS = 10_000            # repetitions of one point; a count sizes the study's work
MAX_POINTS = 100_000          # grid points x seeds of one study
DEFAULT_BASE = {"topology": "fattree", "calib": "h100-ibgda", "trace": "agents-default"}


@dataclass(frozen=True)
class SearchSpec:
    """A search over one field for the extreme value meeting the SLO: a coarse grid of `coarse` values, then
    refinement at every feasible / infeasible boundary (simroute.study.search.Refinement)."""

    field: str
    goal: Goal                 # MAX (largest QPS) or MIN (fewest holders / replicas)
    lo: float
    hi: float
    integer: bool
    tolerance: float
    slo: tuple[str, ...]
    coarse: int = 2


@dataclass(frozen=True)
class Study:
    """A validated study: `points()` expands it (grid); `groups()` gives the search's fixed-axis combinations."""

    name: str
    file: str
    description: str
    base: dict[str, Any]
    axes: dict[str, list[Any]]               # field -> values, or case axis -> {label: overrides}
    cases: dict[str, dict[str, dict[str, Any]]]
    seeds: tuple[int, ...]
    search: SearchSpec | None = None
    slo: tuple[str, ...] = ()
    report: dict[str, Any] = field(default_factory=dict)
    keep: Keep = Keep.FULL
    plan: dict[str, Any] = field(default_factory=dict)     # `simroute plan`'s own: {candidates: {axis: [labels]}}

    def groups(self) -> list[dict[str, Any]]:
        """Every combination of axis labels (the grid without seeds)."""
        names = list(self.axes)
        combos = itertools.product(*[self.axes[name] for name in names])
        return [dict(zip(names, combo)) for combo in combos]

    def overrides(self, labels: dict[str, Any]) -> dict[str, Any]:
        """The dotted-field overrides one combination of axis labels stands for."""
        out: dict[str, Any] = {}
        for name, value in labels.items():
            if name in self.cases:
                out.update(self.cases[name][str(value)])
            else:
                out[name] = value
        return out

    def config(self, labels: dict[str, Any], seed: int) -> dict[str, Any]:
        """The full run config (before input resolution) of one point."""
        cfg = copy.deepcopy(self.base)
        for dotted, value in self.overrides(labels).items():
            set_dotted(cfg, dotted, value)
        cfg["seed"] = int(seed)
        return cfg


def set_dotted(cfg: dict[str, Any], dotted: str, value: Any) -> None:
    """`trace.params.qps = 8` into a nested dict (creating levels as needed)."""
    parts = dotted.split(".")
    cur = cfg
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = cur[part] = {}
        cur = nxt
    cur[parts[-1]] = copy.deepcopy(value)


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`b` over `a`, recursing into dicts (lists and scalars are replaced): how `quick:` overrides a study
    (except `axes`, where each named axis is replaced whole)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        nested = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = deep_merge(out[key], value) if nested else copy.deepcopy(value)
    return out


def load_study(path: str | Path, *, quick: bool = False, document: dict[str, Any] | None = None) -> Study:
    """Load and validate a study YAML; `quick` applies its `quick:` overrides (the small variant for tests).
    With `document`, that mapping is the study and `path` the file it will be written to (`simroute plan`'s
    plan.yaml): nothing is read from or written to disk to validate it."""
    path = Path(path)
    raw = load_yaml(path) if document is None else copy.deepcopy(document)
    file = str(path)
    if not isinstance(raw, dict):
        raise ConfigurationError("a study must be a mapping", file=file)
    unknown = set(raw) - TOP_KEYS
    if unknown:
        raise ConfigurationError(f"unknown key(s) {sorted(unknown)}; valid: {sorted(TOP_KEYS)}", file=file,
                                 field=sorted(unknown)[0])
    if quick:
        overrides = raw.get("quick") or {}
        if not isinstance(overrides, dict):
            raise ConfigurationError("must be a mapping of overrides", file=file, field="quick")
        axes_q = overrides.get("axes") or {}
        raw = deep_merge(raw, {key: value for key, value in overrides.items() if key != "axes"})
        raw["axes"] = {**(raw.get("axes") or {}), **axes_q}    # an axis is replaced whole, never merged
    name = raw.get("name") or path.stem
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", name):
        raise ConfigurationError(f"must be a short name of letters, digits, '.', '_' or '-' (it names the output "
                                 f"directory), got {name!r}"[:200], file=file, field="name")
    base = dict(DEFAULT_BASE)
    base_raw = raw.get("base") or {}
    if not isinstance(base_raw, dict):
        raise ConfigurationError("must be a mapping of RunConfig fields", file=file, field="base")
    base.update(copy.deepcopy(base_raw))
    for key in base:
        _check_field(key, file, "base")
    if "seed" in base:
        raise ConfigurationError("set repetitions with the top-level 'seeds', not base.seed", file=file,
                                 field="base.seed")
    axes, cases = _axes(raw.get("axes") or {}, file)
    seeds = _seeds(raw.get("seeds", 1), file)
    size = math.prod(len(value) for value in axes.values()) * len(seeds)
    if size > MAX_POINTS:
        raise ConfigurationError(f"the grid has {size:,} points (axes x seeds); at most {MAX_POINTS:,}", file=file,
                                 field="axes")
    search = _search(raw["search"], file) if raw.get("search") is not None else None
    if search is not None and not search.integer and _integer_field(search.field):
        raise ConfigurationError(f"'{search.field}' is a whole number: a search over it must be integer (drop "
                                 "'integer: false')", file=file, field="search.integer")
    if search is not None and search.field in axes:
        raise ConfigurationError(f"'{search.field}' is both searched and an axis", file=file, field="search.field")
    slo, search = _one_slo(base, _slo_list(raw.get("slo"), file, "slo"), search, file)
    if "slo" in axes or any("slo" in overrides for case in cases.values() for overrides in case.values()):
        raise ConfigurationError("a study has one SLO, every run judged by it: give it as the top-level 'slo', not "
                                 "as an axis", file=file, field="axes.slo")
    keep = str(raw.get("keep", Keep.FULL))
    if keep not in {mode.value for mode in Keep}:
        raise ConfigurationError("must be 'full' or 'summary'", file=file, field="keep")
    report = _report(raw.get("report") or {}, axes, search, file)
    study = Study(name=name, file=str(path.resolve()), description=str(raw.get("description", "")), base=base,
                  axes=axes, cases=cases, seeds=seeds, search=search, slo=slo, report=report, keep=Keep(keep),
                  plan=_plan(raw.get("plan"), axes, file))
    _validate_points(study)
    return study


def _report(raw: Any, axes: dict[str, list[Any]], search: SearchSpec | None, file: str) -> dict[str, Any]:
    """Plot hints: `x` and `series` must name axes of this study (or the searched field), so a typo fails here,
    not in `report` after the whole sweep."""
    if not isinstance(raw, dict):
        raise ConfigurationError("must be a mapping (x, series)", file=file, field="report")
    bad = set(raw) - {"x", "series"}
    if bad:
        raise ConfigurationError(f"unknown key(s) {sorted(map(str, bad))}; valid: x, series", file=file,
                                 field=f"report.{sorted(map(str, bad))[0]}")
    names = set(axes) | ({search.field} if search is not None else set())
    x_axis = raw.get("x")
    series = raw.get("series", [])
    series = [series] if isinstance(series, str) else series
    if not isinstance(series, list):
        raise ConfigurationError("must be an axis name or a list of them", file=file, field="report.series")
    for where, name in [("report.x", x_axis)] * (x_axis is not None) + [("report.series", column) for column in series]:
        if not isinstance(name, str) or name not in names:
            raise ConfigurationError(f"{name!r} is not an axis of this study; axes: {', '.join(sorted(names)) or '-'}",
                                     file=file, field=where)
    return {**raw, "series": series} if "series" in raw else dict(raw)


def _check_field(dotted: str, file: str, where: str) -> None:
    head = dotted.split(".")[0]
    if head not in RUN_FIELDS:
        raise ConfigurationError(f"'{head}' is not a run field; valid: {', '.join(sorted(RUN_FIELDS))}", file=file,
                                 field=f"{where}.{dotted}")
    if "." in dotted and head not in ("trace", "topology", "extra"):
        raise ConfigurationError("only trace, topology and extra have sub-fields", file=file, field=f"{where}.{dotted}")
    if head == "seed" and where == "axes":
        raise ConfigurationError("repeat over seeds with the top-level 'seeds'", file=file, field="axes.seed")


def _axes(raw: Any, file: str) -> tuple[dict[str, list[Any]], dict[str, dict[str, dict[str, Any]]]]:
    """Plain axes (field -> values) and case axes (label -> {field: value, ...}, for fields that move together)."""
    if not isinstance(raw, dict):
        raise ConfigurationError("must be a mapping field -> list of values", file=file, field="axes")
    axes: dict[str, list[Any]] = {}
    cases: dict[str, dict[str, dict[str, Any]]] = {}
    for name, values in raw.items():
        name = str(name)
        if isinstance(values, dict):          # a case axis: each label sets several fields
            if not values:
                raise ConfigurationError("a case axis needs at least one case", file=file, field=f"axes.{name}")
            cases[name] = {}
            for label, overrides in values.items():
                if not isinstance(overrides, dict):
                    raise ConfigurationError("each case must map fields to values", file=file,
                                             field=f"axes.{name}.{label}")
                for key in overrides:
                    _check_field(str(key), file, f"axes.{name}.{label}")
                cases[name][str(label)] = {str(key): value for key, value in overrides.items()}
            axes[name] = list(cases[name])
            continue
        _check_field(name, file, "axes")
        if not isinstance(values, list) or not values:
            raise ConfigurationError("must be a non-empty list of values", file=file, field=f"axes.{name}")
        if len({repr(value) for value in values}) != len(values):
            raise ConfigurationError("values repeat", file=file, field=f"axes.{name}")
        axes[name] = list(values)
    return axes, cases


def _seeds(raw: Any, file: str) -> tuple[int, ...]:
    if isinstance(raw, bool) or not isinstance(raw, (int, list)):
        raise ConfigurationError("must be a count or a list of integers", file=file, field="seeds")
    if isinstance(raw, int):
        check_number(raw, "seeds", file=file, integer=True, minimum=1, maximum=MAX_SEEDS)
    elif len(raw) > MAX_SEEDS:
        raise ConfigurationError(f"{len(raw)} seeds; at most {MAX_SEEDS}", file=file, field="seeds")
    seeds = list(range(raw)) if isinstance(raw, int) else raw
    if not seeds or not all(isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**63
                            for seed in seeds):
        raise ConfigurationError("need at least one non-negative 64-bit integer seed", file=file, field="seeds")
    if len(set(seeds)) != len(seeds):
        raise ConfigurationError("seeds repeat", file=file, field="seeds")
    return tuple(seeds)


def _slo_list(raw: Any, file: str, where: str) -> tuple[str, ...]:
    """An SLO as the study gives it (a condition, `a and b`, or a list), checked by the one SLO module; () if
    none."""
    from simroute.sim import slo as slos
    if raw is None:
        return ()
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ConfigurationError("must be a condition like 'p99 ttft_ms <= 50' or a list of them", file=file,
                                 field=where)
    try:
        return slos.parse(items).texts
    except ValueError as exc:
        raise ConfigurationError(str(exc), file=file, field=where) from None


def _plan(raw: Any, axes: dict[str, list[Any]], file: str) -> dict[str, Any]:
    """`plan: {candidates: {axis: [labels]}}` (what `simroute plan` writes): the axis labels among which a plan's
    answer is chosen; the other labels of those axes are searched for comparison only."""
    if raw is None:
        return {}
    candidates = raw.get("candidates") if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or set(raw) - {"candidates"} or not isinstance(candidates, dict):
        raise ConfigurationError("must be a mapping {candidates: {axis: [labels]}}", file=file, field="plan")
    for axis, labels in candidates.items():
        if axis not in axes or not isinstance(labels, list) or not labels or any(
                str(label) not in map(str, axes[axis]) for label in labels):
            raise ConfigurationError(f"must name labels of the axis '{axis}'", file=file,
                                     field=f"plan.candidates.{axis}")
    return {"candidates": {axis: list(labels) for axis, labels in candidates.items()}}


def _one_slo(base: dict[str, Any], slo: tuple[str, ...], search: SearchSpec | None,
             file: str) -> tuple[tuple[str, ...], SearchSpec | None]:
    """The study's one SLO, from `slo`, `search.slo` or `base.slo` (any of them; where two are given they must
    agree), set into every point's run (`base.slo`), so that each run's `slo_attainment` is measured against it,
    and into the search. A study that gives none runs at the runs' default (simroute.sim.slo.DEFAULT_SLO)."""
    from simroute.sim import slo as slos
    given = [(where, texts) for where, texts in (("slo", slo), ("search.slo", search.slo if search else ()),
                                                  ("base.slo", _slo_list(base.get("slo"), file, "base.slo")))
             if texts]
    for where, texts in given[1:]:
        if set(slos.parse(texts).conditions) != set(slos.parse(given[0][1]).conditions):
            raise ConfigurationError(f"'{slos.JOINER.join(texts)}' differs from {given[0][0]} "
                                     f"'{slos.JOINER.join(given[0][1])}': a study has one SLO, give it once",
                                     file=file, field=where)
    chosen = given[0][1] if given else ()
    if search is not None and not chosen:
        raise ConfigurationError("is required (or a top-level slo)", file=file, field="search.slo")
    if chosen:
        base["slo"] = slos.JOINER.join(chosen)
    if search is not None:
        search = dataclasses.replace(search, slo=chosen)
    return chosen, search


def _search(raw: Any, file: str) -> SearchSpec:
    if not isinstance(raw, dict):
        raise ConfigurationError("must be a mapping (field, goal, lo, hi, slo)", file=file, field="search")
    valid = {"field", "goal", "lo", "hi", "integer", "tolerance", "slo", "coarse"}
    bad = set(raw) - valid
    if bad:
        raise ConfigurationError(f"unknown key(s) {sorted(bad)}; valid: {sorted(valid)}", file=file,
                                 field=f"search.{sorted(bad)[0]}")
    for key in ("field", "lo", "hi"):
        if key not in raw:
            raise ConfigurationError("is required", file=file, field=f"search.{key}")
    fld = str(raw["field"])
    _check_field(fld, file, "search.field")
    goal = str(raw.get("goal", Goal.MAX))
    if goal not in {end.value for end in Goal}:
        raise ConfigurationError("must be 'max' (largest value meeting the SLO) or 'min' (fewest)", file=file,
                                 field="search.goal")
    low = check_number(raw["lo"], "search.lo", file=file, minimum=-1e15, maximum=1e15)
    high = check_number(raw["hi"], "search.hi", file=file, minimum=-1e15, maximum=1e15)
    if not low < high:
        raise ConfigurationError(f"need lo < hi, got lo = {low!r}, hi = {high!r}", file=file, field="search.lo")
    integer = raw.get("integer", isinstance(low, int) and isinstance(high, int))
    if not isinstance(integer, bool):
        raise ConfigurationError(f"must be true or false, got {integer!r}", file=file, field="search.integer")
    tol = check_number(raw.get("tolerance", 1 if integer else (high - low) / 32), "search.tolerance", file=file,
                       minimum=max((high - low) / 2**40, 0.0), exclusive_minimum=True)
    slo = _slo_list(raw.get("slo"), file, "search.slo")
    if "slo" in raw and not slo:
        raise ConfigurationError("needs at least one condition", file=file, field="search.slo")
    coarse = check_number(raw.get("coarse", 2), "search.coarse", file=file, integer=True, minimum=2, maximum=64)
    return SearchSpec(fld, Goal(goal), float(low), float(high), integer, float(max(tol, 1) if integer else tol), slo,
                      int(coarse))


def _integer_field(dotted: str) -> bool:
    """Whether a RunConfig field holds a whole number (`hosts`, `tp`, `replicas`...)."""
    import typing
    from simroute.sim.config import field_types
    head = dotted.split(".")[0]
    if "." in dotted or head not in RUN_FIELDS:
        return False
    return field_types(typing.get_type_hints(RunConfig)[head])[0] is int


def _validate_points(study: Study) -> None:
    """Build every grid point's RunConfig with placeholder inputs: enum / range errors surface at load."""
    from simroute.study.resolve import check_input
    probe_values = [study.search.lo, study.search.hi] if study.search else [None]
    for labels in study.groups():
        where = "base" if not labels else "axes." + ",".join(f"{key}={value}" for key, value in labels.items())
        for probe_value in probe_values:
            cfg = study.config(labels, study.seeds[0])
            if study.search is not None:
                value = int(probe_value) if study.search.integer else probe_value
                set_dotted(cfg, study.search.field, value)
            for name in INPUTS:
                check_input(name, cfg.get(name), study.file, where)
            flat = {key: value for key, value in cfg.items() if key not in INPUTS}
            try:
                RunConfig(topology="-", trace="-", calib="-", **flat)
                if isinstance(flat.get("model"), str):      # a name the run would only look up at run time
                    from simroute.model.geometry import get_model
                    get_model(flat["model"])
            except SimrouteError as exc:
                fld = getattr(exc, "field", None) or getattr(exc, "kind", None)
                raise ConfigurationError(str(exc), file=study.file, field=f"{where}: {fld}") from None
            except (TypeError, ValueError) as exc:
                raise ConfigurationError(f"wrong type: {exc}", file=study.file, field=where) from None
            from simroute.study.resolve import check_point
            check_point(cfg, study.file, f"{where}" + (f", {study.search.field}={value}" if study.search else ""))
