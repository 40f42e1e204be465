"""`simroute trace gen | import | info | list`: thin front over simroute.workload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from simroute.cli.common import checked
from simroute.errors import ConfigurationError, UnknownNameError

trace_app = typer.Typer(help="Workload traces: generate scenarios, import public traces, summarise.",
                        no_args_is_help=True)


def _warn(msg: str) -> None:
    typer.secho(f"warning: {msg}", fg=typer.colors.YELLOW, err=True)


def _parse_sets(items: list[str]) -> dict[str, Any]:
    from simroute.workload.generators import parse_cli_value
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigurationError(f"expected key=value, got {item!r}", field="--param")
        key, value = item.split("=", 1)
        if key.strip() in out:
            raise ConfigurationError(f"{key.strip()} is given twice ({out[key.strip()]!r} and {value.strip()!r}): "
                                     "give each parameter once", field="--param")
        out[key.strip()] = parse_cli_value(value.strip())
    return out


@trace_app.command("gen")
def gen(
    kind: str = typer.Argument(..., help="Scenario: agents, corpus, sparse, disagg or serving (see `simroute trace "
                                         "list`)."),
    output: Path = typer.Option(None, "-o", "--output", help="Output trace directory, named *.parquet."),
    seed: int = typer.Option(None, "--seed", help="Seed of numpy default_rng (default 0, or the preset's).",
                             callback=checked("--seed", integer=True, minimum=0, maximum=2**63 - 1)),
    param: list[str] = typer.Option([], "-p", "--param", help="Generator parameter key=value (repeatable)."),
    config: Path = typer.Option(None, "--config", help="YAML preset {kind, seed, params} (e.g. workloads/*.yaml)."),
    show_params: bool = typer.Option(False, "--show-params", help="Print the parameters with their values and exit."),
) -> None:
    """Generate a scenario trace.

    Example: simroute trace gen agents -p documents=2 -p subagents=16 -o agents.parquet --seed 1

    A serving benchmark's closed loop (SGLang bench_serving --dataset-name random --random-input-len 1024
    --random-output-len 1024 --random-range-ratio 0.8 --num-prompts 640 --max-concurrency 64): simroute trace gen
    serving -p input_tokens=1024 -p output_tokens=1024 -p range_ratio=0.8 -p requests=640 -p concurrency=64
    -o serving.parquet (-p qps=8 for a Poisson rate instead of, or with, the concurrency limit).
    """
    import dataclasses

    from simroute.checks import check_number
    from simroute.ioutil import check_output_path, load_yaml
    from simroute.workload.generators import generate, make_params

    params: dict[str, Any] = {}
    if config is not None:
        preset = load_yaml(config) or {}
        if not isinstance(preset, dict):
            raise ConfigurationError("a preset must be a mapping {kind, seed, params}", file=config)
        unknown = set(preset) - {"kind", "seed", "params", "description", "name"}
        if unknown:
            raise ConfigurationError(f"unknown key(s) {sorted(map(str, unknown))}; valid: kind, seed, params",
                                     file=config, field=str(sorted(map(str, unknown))[0]))
        if preset.get("kind", kind) != kind:
            raise ConfigurationError(f"preset is for kind {preset.get('kind')!r}, not {kind!r}", file=config,
                                     field="kind")
        if not isinstance(preset.get("params") or {}, dict):
            raise ConfigurationError("must be a mapping of generator parameters", file=config, field="params")
        params.update(preset.get("params") or {})
        if seed is None and "seed" in preset:
            seed = check_number(preset["seed"], "seed", file=config, integer=True, minimum=0, maximum=2**63 - 1)
    from_file = dict(params)
    given = _parse_sets(param)
    param_keys = set(given)
    params.update(given)
    try:
        p = make_params(kind, params)
    except ConfigurationError as exc:
        if config is None or not from_file:     # only -p's values are in play: name the flag
            raise ConfigurationError(f"{exc.field}: {exc.problem}" if exc.field else exc.problem,
                                     field="--param") from None
        raise ConfigurationError(f"params: {exc}", file=config) from None     # the preset's values are in play
    except UnknownNameError as exc:      # a mistyped parameter: -p's (named as typed) or the preset's
        if not exc.kind.endswith(" parameter"):
            raise
        if config is None or exc.name in {key.replace("-", "_") for key in param_keys}:
            raise ConfigurationError(str(exc), field="--param") from None
        raise ConfigurationError(f"params: {exc}", file=config) from None
    if show_params:
        for key, value in dataclasses.asdict(p).items():
            typer.echo(f"{key} = {value}")
        return
    if output is None:
        raise ConfigurationError("missing -o/--output", field="output")
    check_output_path(output, directory=True, inputs=[config], flag="--output")
    path = generate(kind, output, seed=0 if seed is None else seed, params=params)
    typer.echo(f"wrote {path}")


@trace_app.command("import")
def import_(
    fmt: str = typer.Argument(..., metavar="FORMAT", help="mooncake, azure, burstgpt or agent."),
    files: list[Path] = typer.Argument(..., metavar="FILE...", help="Input file(s); agent also takes directories; "
                                                                   "mooncake-sample is a shipped excerpt."),
    output: Path = typer.Option(..., "-o", "--output", help="Output trace directory, named *.parquet."),
    time_scale: float = typer.Option(1.0, "--time-scale", help="Multiply all times (arrivals, think times); > 0.",
                                     callback=checked("--time-scale", minimum=0, exclusive_minimum=True)),
    load_scale: float = typer.Option(1.0, "--load-scale", help="Multiply the open-loop request rate; > 0.",
                                     callback=checked("--load-scale", minimum=0, exclusive_minimum=True)),
    strict: bool = typer.Option(False, "--strict", help="Reject unsorted timestamps instead of sorting them."),
    block_tokens: int = typer.Option(None, "--block-tokens", help="Tokens per hash block (mooncake 512, agent 64).",
                                     callback=checked("--block-tokens", integer=True, minimum=1, maximum=1 << 20)),
) -> None:
    """Import a public trace (streamed; bad input leaves no output).

    Example: simroute trace import mooncake mooncake_trace.jsonl -o mooncake.parquet
    """
    from simroute.shipped import resolve_input
    from simroute.workload.importers import import_trace

    files = [Path(resolve_input("sample", f, strict=True)) for f in files]
    path = import_trace(fmt, files, output, time_scale=time_scale, load_scale=load_scale, strict=strict,
                        block_tokens=block_tokens, warn=_warn)
    typer.echo(f"wrote {path}")


@trace_app.command("info")
def info(
    file: Path = typer.Argument(..., help="Trace directory (*.parquet)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    lru_capacity: int = typer.Option(None, "--lru-capacity", help="Also replay an LRU of this many tokens.",
                                     callback=checked("--lru-capacity", integer=True, minimum=0)),
) -> None:
    """Requests, span, rate, token percentiles, and reuse (unbounded store and LRU).

    Example: simroute trace info mooncake.parquet --lru-capacity 2000000
    """
    from simroute.cli.common import echo_json
    from simroute.workload.stats import format_info, trace_info

    result = trace_info(file, lru_capacity_tokens=lru_capacity)
    if json_out:
        echo_json(result.to_dict())
    else:
        typer.echo(format_info(result))


@trace_app.command("list")
def list_() -> None:
    """List the generators (with their parameters) and the import formats.

    Example: simroute trace list
    """
    import dataclasses

    from simroute.workload.generators import GENERATORS, _load_all
    from simroute.workload.importers import IMPORTERS

    _load_all()
    for name, g in sorted(GENERATORS.items()):
        typer.echo(f"{name}: {g.doc}")
        for f in dataclasses.fields(g.params):
            typer.echo(f"    {f.name} = {f.default}")
    typer.echo("import formats: " + ", ".join(IMPORTERS))


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")
