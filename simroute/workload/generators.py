"""Scenario generators: registry, parameter parsing, shared samplers, and `generate()`.

Each scenario (agents, corpus, sparse, disagg, serving) is a frozen params dataclass plus a function that
streams batches into a TraceWriter from one `numpy.random.default_rng(seed)`. Batches have a fixed
size (GEN_BATCH), so the same seed gives the same rows and, through the writer, the same bytes.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import yaml

from simroute import __version__
from simroute.checks import check_number
from simroute.errors import ConfigurationError, UnknownNameError
from simroute.registry import Registry, registry
from simroute.workload.schema import MAX_CONCURRENCY_KEY
from simroute.workload.writer import TraceWriter, open_trace_writer

GEN_BATCH = 65_536

GeneratorFn = Callable[[TraceWriter, Any, np.random.Generator], None]


@dataclasses.dataclass(frozen=True)
class Generator:
    name: str
    params: type
    fn: GeneratorFn
    doc: str


# The one registry of named variants: the modules `simroute/workload/generators_*.py` are discovered on first
# read (a new scenario is one new module), each filing its `Generator` records with `@register`.
GENERATOR_REGISTRY: Registry[Generator] = registry("generator")


def register(name: str, params: type, doc: str) -> Callable[[GeneratorFn], GeneratorFn]:
    def deco(fn: GeneratorFn) -> GeneratorFn:
        GENERATOR_REGISTRY.add(name, Generator(name, params, fn, doc))
        return fn
    return deco


def _load_all() -> dict[str, Generator]:
    """Every generator, by name (its modules imported on first call)."""
    return GENERATOR_REGISTRY.variants


def __getattr__(name: str) -> Any:
    if name == "GENERATORS":        # name -> Generator, the generator modules loaded first (not at import: a cycle)
        return _load_all()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_generator(kind: str) -> Generator:
    return GENERATOR_REGISTRY.get(kind)


MAX_PARAM_INT = 2**31 - 1
MAX_SIGMA = 10.0


def _coerce(value: Any, typ: Any, name: str, kind: str) -> Any:
    """Check a YAML value (or a CLI value already parsed by `parse_cli_value`) against the declared field type.

    Strict: no bool for a number, no numeric strings, finite floats, integers that fit in 32 bits.
    """
    field = f"{kind}.{name}"
    optional = [a for a in typing.get_args(typ) if a is not type(None)]
    if len(optional) == 1 and type(None) in typing.get_args(typ):     # `float | None`: null leaves it unset
        if value is None:
            return None
        typ = optional[0]
    if typing.get_origin(typ) is typing.Literal:
        choices = typing.get_args(typ)
        if not isinstance(value, str) or value not in choices:
            raise ConfigurationError(f"bad value {value!r}: must be one of {', '.join(choices)}", field=field)
        return value
    if typ is bool:
        if not isinstance(value, bool):
            raise ConfigurationError(f"bad value {value!r}: must be true or false", field=field)
        return value
    if typ is int:
        return check_number(value, field, integer=True, minimum=-MAX_PARAM_INT, maximum=MAX_PARAM_INT)
    if typ is float:
        return float(check_number(value, field))
    if typ is str:
        if not isinstance(value, str):
            raise ConfigurationError(f"bad value {value!r}: must be a string", field=field)
        return value
    raise ConfigurationError(f"unsupported parameter type {typ!r}", field=field)


def parse_cli_value(text: str) -> Any:
    """A `-p key=value` value as YAML reads it (`4` an int, `0.5` a float, `false` a bool, else a string)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and re.fullmatch(r"[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+", value.strip()):
        return float(value)       # YAML 1.1 reads 1e-3 as text (it wants 1.0e-3): a number here, as users mean it
    return value if isinstance(value, (bool, int, float, str)) else text


def make_params(kind: str, overrides: dict[str, Any] | None = None) -> Any:
    """Build the validated params dataclass of `kind` from defaults plus `overrides`."""
    gen = get_generator(kind)
    fields = typing.get_type_hints(gen.params)
    values = {}
    for key, value in (overrides or {}).items():
        key = key.replace("-", "_")
        if key not in fields:
            raise UnknownNameError(f"'{kind}' parameter", key, list(fields))
        values[key] = _coerce(value, fields[key], key, kind)
        if key.endswith("_sigma"):        # every generator's log-normal spread: 0 (none) up to a wide 10
            check_number(values[key], key, minimum=0, maximum=MAX_SIGMA)
    try:
        return gen.params(**values)
    except ValueError as exc:
        raise ConfigurationError(str(exc), field=kind) from None


def generate(kind: str, output: str | Path, *, seed: int = 0, params: dict[str, Any] | None = None,
             row_group_rows: int | None = None) -> Path:
    """Generate a `kind` trace into the dataset directory `output` (atomically); returns the path."""
    gen = get_generator(kind)
    p = make_params(kind, params)
    meta = {"producer": "generator", "name": kind, "params": dataclasses.asdict(p), "seed": int(seed),
            "source_sha256": None, "simroute_version": __version__}
    limit = getattr(p, "max_concurrency", None)      # the clients' concurrency limit a run honours
    if limit is not None:
        meta[MAX_CONCURRENCY_KEY] = int(limit)
    kwargs = {"row_group_rows": row_group_rows} if row_group_rows else {}
    with open_trace_writer(output, meta, **kwargs) as writer:
        gen.fn(writer, p, np.random.default_rng(seed))
    return Path(output)


# -- shared helpers for the scenario modules ---------------------------------------------------

MAX_REQUESTS = 50_000_000      # bounds on what sizes a generator's memory or work (a typo must not hang)
MAX_CHUNKS = 10_000_000
MAX_INSTANCES = 131_072
MAX_TENANTS = 100_000


def check_sizes(requests: int, chunks: int = 0, instances: int = 0, tenants: int = 0) -> None:
    """The totals a params dataclass implies, within the generator bounds (ValueError names the bound)."""
    for what, value, bound in (("requests", requests, MAX_REQUESTS), ("chunks", chunks, MAX_CHUNKS),
                               ("instances", instances, MAX_INSTANCES), ("tenants", tenants, MAX_TENANTS)):
        check(value <= bound, f"{value:,} {what} is more than the {bound:,} a generated trace may hold")


MAX_REFS = 200_000_000          # chunk references (list entries) a generated trace may hold in all
REQUEST_BYTES = 96               # a generated request's columns, in memory while it is built
REF_BYTES = 9                    # one chunk reference: an int64 id and a bool


def available_memory() -> int | None:
    """Bytes of memory this machine can still hand out (MemAvailable), None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_refs(refs: float) -> None:
    """The chunk references (list entries) a trace would hold in all, within the bound (work and size)."""
    check(refs <= MAX_REFS, f"{refs:,.0f} chunk references is more than the {MAX_REFS:,} a generated trace may hold")


def check_memory(requests: int, refs: int) -> None:
    """A generator that builds the whole trace in memory: its size, checked before anything is allocated
    (ValueError with the figure, not a MemoryError mid-way)."""
    check_refs(refs)
    need = requests * REQUEST_BYTES + refs * REF_BYTES
    free = available_memory()
    if free is not None:
        check(need <= 0.8 * free, f"the trace would need ~{need / 2**30:.1f} GiB of memory to build; this machine "
                                  f"has {free / 2**30:.1f} GiB available")


def check(cond: bool, message: str) -> None:
    """Params validation in __post_init__: a ValueError becomes a ConfigurationError in make_params."""
    if not cond:
        raise ValueError(message)


HORIZON_MARGIN = 8.0       # a Poisson stream of n requests ends past 8 x n / qps with probability < e^-8 (n = 1)


def check_horizon(seconds: float, what: str) -> None:
    """A generator's arrivals must end within the writer's MAX_ARRIVAL_S, with room for a Poisson stream's tail:
    a rate so low (or an interval so long) that they cannot is refused when the parameters are read, not when a
    study's point generates its trace after the others ran."""
    from simroute.workload.writer import MAX_ARRIVAL_S
    limit = MAX_ARRIVAL_S / HORIZON_MARGIN
    check(seconds == seconds and seconds <= limit,
          f"{what} puts the arrivals about {seconds:g} s apart from the first: past {limit:g} s (a rate or "
          "interval in other units?)")


def lengths(rng: np.random.Generator, n: int, median: float, sigma: float, lo: int, hi: int) -> np.ndarray:
    """Log-normal token counts (sigma 0 gives the median exactly), clipped to [lo, hi]."""
    if sigma <= 0:
        return np.full(n, int(np.clip(round(median), lo, hi)), dtype=np.int32)
    x = rng.lognormal(np.log(max(median, 1e-9)), sigma, size=n)
    return np.clip(np.rint(x), lo, hi).astype(np.int32)


def poisson_arrivals(rng: np.random.Generator, n: int, qps: float, start: float) -> np.ndarray:
    """Open-loop Poisson arrivals continuing from `start`."""
    return start + np.cumsum(rng.exponential(1.0 / qps, size=n))


def dict_strings(indices: np.ndarray, names: list[str]) -> pa.DictionaryArray:
    """A dictionary-encoded string column from integer codes (no per-row Python strings)."""
    return pa.DictionaryArray.from_arrays(pa.array(indices.astype(np.int32)), pa.array(names, pa.string()))


def tenant_names(k: int) -> list[str]:
    return [f"t{i}" for i in range(k)]


def dedupe_rows(rows: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Drop repeated values within each row of a CSR list; rows sorted, values ascending per row."""
    order = np.lexsort((values, rows))
    r, v = rows[order], values[order]
    keep = np.ones(len(v), dtype=bool)
    keep[1:] = (r[1:] != r[:-1]) | (v[1:] != v[:-1])
    r, v = r[keep], v[keep]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=n), out=offsets[1:])
    return offsets, v
