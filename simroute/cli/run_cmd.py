"""`simroute run`: the product's main job, as a thin layer over simroute.sim."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import sys
import typing
from pathlib import Path
from typing import Callable

import typer

from simroute.cli.common import checked, console, echo_json, ends_with_command, lazy_command, loading_modules, table
from simroute.defaults import MIN_COMPLETION


def run_options() -> list[tuple[str, inspect.Parameter]]:
    """(RunConfig field, CLI parameter) per field: names, defaults, help and value lists from the field
    metadata (simroute/sim/config.py), so an option can never drift from the config it fills."""
    from simroute.sim.config import RunConfig, field_hints, field_types
    from simroute.sim.registry import Registry
    hints = field_hints(RunConfig)
    out = []
    for f in dataclasses.fields(RunConfig):
        base, optional = field_types(hints[f.name])
        meta = f.metadata
        name = option_name(f)
        flag = "--" + name.replace("_", "-")
        if base is bool:
            flag = f"{flag}/--no-{name.replace('_', '-')}"
        choices = meta["choices"]
        help_text = meta["help"]
        if isinstance(choices, Registry):
            help_text += f" {choices.help()}."
        elif choices is not None:
            help_text += f" One of: {' | '.join(choices)}."
        if meta.get("listing") is not None:
            help_text += f" {meta['listing']()}."
        required = f.default is dataclasses.MISSING
        default = None if required else f.default
        annotation = typing.Optional[base] if (optional or required) else base
        extra: dict[str, str] = {}
        if meta.get("joiner"):      # a repeatable option whose values are joined into the field's one text
            default, annotation, extra = None, typing.Optional[list[str]], {"metavar": "TEXT (repeatable)"}
        out.append((f.name, inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                              default=typer.Option(default, flag, help=help_text, **extra))))
    return out


def option_name(config_field: dataclasses.Field) -> str:
    """The `simroute run` parameter (and, dashed, the flag) a RunConfig field is set by."""
    return config_field.metadata["option"] or config_field.name


def _config_naming_flags(config_type: typing.Any, values: dict[str, typing.Any]) -> typing.Any:
    """`config_type(**values)`, its refusal of a flag's value naming the flag (`naming_flags`)."""
    with naming_flags(config_type):
        return config_type(**values)


@contextlib.contextmanager
def naming_flags(config_type: typing.Any) -> typing.Iterator[None]:
    """A refusal of a flag's value raised inside names the flag (`--kv-cache`), not the config field (`kv_cache`)
    the flag fills: the field's name is what a study file would write, not what the user typed. Covers the config's
    own checks and those made when the run resolves it (an engine preset refusing a setting it lacks)."""
    from simroute.errors import ConfigurationError, UnknownNameError
    flags = {f.name: "--" + (f.metadata.get("option") or f.name).replace("_", "-")
             for f in dataclasses.fields(config_type)}
    try:
        yield
    except UnknownNameError as exc:
        if exc.kind not in flags:
            raise
        raise ConfigurationError(str(exc), field=flags[exc.kind]) from None
    except ConfigurationError as exc:
        if exc.file is not None or exc.field not in flags:
            raise
        raise ConfigurationError(exc.problem, field=flags[exc.field], line=exc.line) from None


def resolve_named_input(kind: str, value: str) -> str:
    """`value` as `resolve_input` resolves it; a bare name that is neither a file nor shipped is refused naming the
    flag and listing the shipped names (`--topology fatree`), before anything is read or written."""
    from simroute.errors import ConfigurationError
    from simroute.shipped import resolve_input
    try:
        return resolve_input(kind, value, strict=True)
    except ConfigurationError as exc:
        if exc.field is not None:
            raise
        raise ConfigurationError(exc.problem, file=exc.file, field=f"--{kind}") from None


def _cli_only_options() -> list[inspect.Parameter]:
    kw = inspect.Parameter.KEYWORD_ONLY
    return [
        inspect.Parameter("out", kw, annotation=Path, default=typer.Option(
            Path("results/run"), "-o", "--out", help="Output directory (replaced atomically).")),
        inspect.Parameter("timeline", kw, annotation=typing.Optional[Path], default=typer.Option(
            None, help="Also export a Chrome/Perfetto trace JSON of the run.")),
        inspect.Parameter("json_out", kw, annotation=bool, default=typer.Option(
            False, "--json", help="Print summary.json instead of tables.")),
        inspect.Parameter("progress", kw, annotation=typing.Optional[bool], default=typer.Option(
            None, help="Progress bar (default: when stderr is a terminal).")),
        inspect.Parameter("min_completion", kw, annotation=float, default=typer.Option(
            MIN_COMPLETION, "--min-completion", callback=checked("--min-completion", minimum=0, maximum=1),
            help="Exit 1 when fewer than this share of the requests complete (the outputs are kept).")),
        inspect.Parameter("strict", kw, annotation=bool, default=typer.Option(
            False, "--strict", help="Exit 1 unless every request completes.")),
    ]


def _run(**options: typing.Any) -> None:
    """Replay a trace on a topology with the route/fetch/local predicate, holders and congestion.

    Example: simroute run --topology fattree --trace agents-default --calib h100-ibgda --policy paper --routing ecmp
    --seed 1 -o results/run

    A serving benchmark (ISL 1024 / OSL 1024, 64 clients, one host): simroute trace gen serving -p requests=640
    -p concurrency=64 -p range_ratio=0.8 -o serving.parquet; simroute run --trace serving.parquet --hosts 1
    """
    with loading_modules():
        from simroute.calib import default_profile_path
        from simroute.network import default_topology_path
        from simroute.sim import RunConfig, simulate
        from simroute.sim.config import default_trace_path

    out, timeline = options.pop("out"), options.pop("timeline")
    json_out, progress = options.pop("json_out"), options.pop("progress")
    min_completion, strict = options.pop("min_completion"), options.pop("strict")
    values = {field.name: options[option_name(field)] for field in dataclasses.fields(RunConfig)}
    for config_field in dataclasses.fields(RunConfig):   # a repeated option: its values joined, unset: the default
        joiner = config_field.metadata.get("joiner")
        if joiner:
            given = values[config_field.name]
            values[config_field.name] = joiner.join(given) if given else config_field.default
    shipped = {"topology": default_topology_path, "trace": default_trace_path, "calib": default_profile_path}
    for name, default in shipped.items():       # unset: the shipped default; '' is refused by RunConfig
        values[name] = str(default() if values[name] is None else values[name])
    for name in ("topology", "trace"):          # a mistyped name lists the shipped ones (the profile's loader does)
        values[name] = resolve_named_input(name, values[name])
    values["telemetry"] = values["telemetry"] or timeline is not None    # a timeline needs the telemetry
    cfg = _config_naming_flags(RunConfig, values)
    if cfg.prefill_tp is not None and cfg.disagg == "none":
        from simroute.errors import ConfigurationError
        raise ConfigurationError("sets the prefill pool's TP: name the pools with --disagg P:D too",
                                 field="--prefill-tp")
    from simroute.ioutil import atomic_files, check_new_file, claim_output   # checked, -o locked before simulating
    if timeline is not None:      # never over a user's file: new, or one simroute wrote there
        check_new_file(timeline, inputs=[out, cfg.trace, cfg.topology, cfg.calib], flag="--timeline")
    with naming_flags(RunConfig), claim_output(out, inputs=[cfg.trace, cfg.topology, timeline], flag="--out",
                                               what="simroute run"):
        res = simulate(cfg, out, progress=_progress_bar(progress), leave_frozen=ends_with_command())
    if timeline is not None:
        from simroute.scenarios.timeline import write_timeline
        with atomic_files(timeline.parent, [timeline.name], flag="--timeline") as tmp:
            write_timeline(tmp[timeline.name], res.tables)
    if json_out:
        echo_json(res.summary)
    else:
        print_summary(res.summary, res.perf, out)
    check_completion(res.summary, min_completion=1.0 if strict else min_completion, out=out)


def check_completion(summary: dict, *, min_completion: float, out: Path) -> None:
    """Say on one line (stderr) why requests did not complete; exit 1 below `min_completion` (outputs kept)."""
    from simroute.sim.metrics import incomplete_account
    account = incomplete_account(summary)
    if account is None:
        return
    typer.echo(f"simroute run: {account}", err=True)
    share = summary["completed"] / summary["requests"] if summary["requests"] else 0.0
    if share < min_completion:
        typer.echo(f"simroute run: {share:.0%} completed, below --min-completion {min_completion:g}: not an answer "
                   f"(outputs kept in {out}/)", err=True)
        raise typer.Exit(1)


def _progress_bar(progress: bool | None) -> Callable[[int, int], None] | None:
    if not (sys.stderr.isatty() if progress is None else progress):
        return None
    from tqdm import tqdm
    bar = tqdm(total=None, unit="req", desc="replaying", file=sys.stderr)

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()
        if done >= total:
            bar.close()
    return update


def run_command() -> Callable[..., None]:
    """`_run` with a signature typer can read: every RunConfig option plus the CLI's own."""
    params = [param for _, param in run_options()] + _cli_only_options()

    def run(**options: typing.Any) -> None:
        _run(**options)
    run.__doc__ = _run.__doc__
    run.__signature__ = inspect.Signature(params)     # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    return run


def print_summary(s: dict, perf: dict, out: Path) -> None:
    """The terminal summary table."""
    c = console()
    cfg = s["config"]
    eng = s["engine"]
    width = cfg["tp"] // cfg.get("dp_attention", 1)      # GPUs per instance: a TP group or a DP attention rank
    c.print(f"[bold]simroute run[/bold]: {Path(cfg['trace']).name} on {Path(cfg['topology']).name} "
            f"({s['instances']} instance{'' if s['instances'] == 1 else 's'} of {width} x {eng['gpu']}), {eng['model']} "
            f"({eng.get('weight_dtype', 'bf16')} weights), profile {Path(cfg['calib']).name}, policy {cfg['policy']}, "
            f"routing {cfg['routing']}, seed {s['seed']}")
    preset = eng.get("preset")
    if preset:
        values = {key: setting["value"] for key, setting in preset["settings"].items()}
        flagged = [key for key, setting in preset["settings"].items() if setting["source"].startswith("flag")]
        line = (f"engine {preset['engine']} (kernels: {preset['tables']}): scheduler {values['scheduler']}, "
                f"token budget {values['token_budget']}, prefill chunk {values['prefill_chunk']}, running cap "
                f"{values['max_running_seqs']}")
        if "cuda_graph_max_batch" in values:
            line += (f", CUDA graphs to {values['cuda_graph_max_batch']}, overlap "
                     f"{'on' if values['overlap_scheduling'] else 'off'}, request path "
                     f"{(values['request_ingress_us'] + values['request_egress_us']) / 1e3:.2f} ms")
        if values.get("mem_fraction") is not None:
            line += f", memory fraction {values['mem_fraction']:g}"
        c.print(line + (f"; flags: {', '.join(flagged)}" if flagged else "")
                + "".join(f"; {note}" for note in preset["notes"]))
    f = lambda d, k: "-" if d.get(k) is None else f"{d[k]:.3f}"
    reasons = ", ".join(f"{k}: {v}" for k, v in s["dropped_by_reason"].items())
    c.print(f"requests {s['requests']}, completed {s['completed']}, dropped {s['dropped']}"
            + (f" ({reasons})" if reasons else ""))
    itl = (s.get("serving") or {}).get("itl_ms") or {}
    table("latency (ms)", ["metric", "mean", "p50", "p95", "p99"],
          [[m, f(s[m], "mean"), f(s[m], "p50"), f(s[m], "p95"), f(s[m], "p99")] for m in ("ttft_ms", "tpot_ms",
                                                                                           "e2e_ms")]
          + ([["itl_ms", f(itl, "mean"), f(itl, "median"), f(itl, "p95"), f(itl, "p99")]] if itl.get("mean") else []))
    _print_serving(s.get("serving"))
    _print_pools(s)
    pc = s["primitive_counts"]
    table("primitives per (chunk, request)", ["route", "fetch", "local", "resident", "first-touch"],
          [[pc["route"], pc["fetch"], pc["local"], pc["resident"], pc["first-touch"]]])
    _print_why(s)
    b = s["bytes"]
    fanout = b.get("fetch_fanout_nvlink", 0.0)
    table("bytes (whole instances, all TP ranks)", ["route", "fetch", "pd transfer"]
          + (["fetch fan-out (in host)"] if fanout else [])
          + [f"{tier} links" for tier in s["network"].get("bytes_by_tier", {})],
          [[f"{b['route'] / 1e9:.3f} GB", f"{b['fetch'] / 1e9:.3f} GB", f"{b['pd_transfer'] / 1e9:.3f} GB"]
           + ([f"{fanout / 1e9:.3f} GB"] if fanout else [])
           + [f"{v / 1e9:.3f} GB" for v in s["network"].get("bytes_by_tier", {}).values()]])
    if width > 1 and s["network"].get("bytes_by_tier"):
        typer.echo(f"link bytes: a byte counts on every link it crosses; each of the {width} TP ranks' NICs "
                   f"carries 1/{width} of them (the per-GPU share, summary.json network.bytes_by_tier_per_gpu)")
    if eng.get("group"):
        _print_group(eng["group"])
    if fanout:
        typer.echo(f"kv layout {eng.get('kv_layout')}: every rank holds the whole MLA latent, so each fetched copy "
                   "(1/tp per rank over the network) is all-gathered inside the host over NVLink")
    hp = eng["holder_partials"]
    c.print(f"holders: {hp['queries']:,.0f} routed partial queries in {hp['kernel_calls']:,.0f} kernel calls, "
            f"{eng['routed_messages']:,.0f} routed messages")
    c.print(slo_line(s["slo"]))
    c.print(f"simulated {s['sim_time_s']:.3f} s in {perf['wall_s']:.2f} s wall "
            f"({perf['sim_s_per_wall_s'] or 0:.1f}x real time, {perf['requests_per_wall_s'] or 0:,.0f} requests/s); "
            f"outputs in {out}/")


def _print_group(g: dict) -> None:
    """A DP group's deployment and its steps (summary.json engine.group)."""
    if not g["lockstep"]:
        typer.echo(f"groups: {g['groups']} x (tp {g['tp']}, ep {g['ep']}, moe tp {g['moe_tp']}): one attention rank "
                   f"each, stepping alone as a TP instance on the group's step; {g['kv_capacity_tokens_per_rank']:,} "
                   "tokens of KV each")
        return
    a2a = g["a2a_bytes"]
    line = (f"groups: {g['groups']} x (tp {g['tp']}, dp-attention {g['dp_attention']}, ep {g['ep']}, "
            f"{g['a2a']}); each rank {g['kv_capacity_tokens_per_rank']:,} tokens of KV; {g['steps']:,} steps, "
            f"collectives {g['table_collective_s']:.3f} s by the tables, all-to-all flows {g['a2a_flows']:,} "
            f"({a2a['nvlink'] / 1e9:.3f} GB NVLink, {a2a['rdma'] / 1e9:.3f} GB RDMA) took {g['a2a_flow_s']:.3f} s, "
            f"{g['a2a_flow_extra_s']:.3f} s past the tables")
    if g["nextn"]:
        line += (f"; MTP nextn {g['nextn']}: {g['emitted_tokens_per_decode_step']:.3f} tokens per decode step "
                 f"(model mean {g['mtp_tokens_per_step']:.3f})")
    typer.echo(line)


def slo_line(slo: dict) -> str:
    """The run's verdict against its SLO (summary.json `slo`, simroute/sim/slo.py) on one line."""
    att = "-" if slo["attainment"] is None else f"{100 * slo['attainment']:.1f}% of requests"
    verdict = ("met" if slo["met"] else "not met: " + (", ".join(slo["violated"]) if slo["violated"] else
                                                       "the run was not served (completion or overload)"))
    return f"SLO {slo['text']}: {verdict}; attainment {att}"


def _print_serving(serving: dict | None) -> None:
    """Throughput as the serving benchmark clients count it (summary.json `serving`): over the duration from the
    first send to the last completion, in total and per GPU."""
    if not serving or not serving.get("duration_s"):
        return
    rate, per_gpu = serving["throughput"], serving["throughput_per_gpu"]
    tokens = lambda d: " / ".join("-" if d[k] is None else f"{d[k]:,.1f}"
                                  for k in ("input_tokens_per_s", "output_tokens_per_s", "total_tokens_per_s"))
    limit = serving.get("concurrency_limit")
    console().print(f"benchmark (as SGLang bench_serving / vllm bench serve count it): {serving['completed']:,} "
                    f"requests in {serving['duration_s']:.3f} s"
                    + (f" at concurrency {limit}" if limit else "")
                    + f"; {rate['requests_per_s'] or 0:.3f} requests/s; input / output / total tokens/s "
                    f"{tokens(rate)}, per GPU ({serving['gpus']}) {tokens(per_gpu)}")


def _print_pools(s: dict) -> None:
    """--disagg's pools (summary.json `pools`): their sizes, TP, GPUs and the PD transfers' flow time."""
    pools = s.get("pools") or {}
    if pools.get("mode") != "disaggregated":
        return
    prefill, decode = pools["prefill"], pools["decode"]
    pd = (s.get("network") or {}).get("fct_ms_pd") or {}
    shape = (f"TP {decode['tp']}" if "dp_attention" not in decode else
             f"DP attention {decode['dp_attention']} + EP {decode['ep']}")
    console().print(f"pools P:D {pools['ratio']}: {prefill['instances']} prefill x TP {prefill['tp']} "
                    f"({prefill['gpus']} GPUs, {prefill['router']}), {decode['instances']} decode x {shape} "
                    f"({decode['gpus']} GPUs), {pools['idle_gpus']} idle"
                    + (f"; PD transfers {pd['flows']:,} flows, {pd['mean']:.2f} / {pd['p95']:.2f} ms mean / p95"
                       if pd else ""))


def _print_why(s: dict) -> None:
    """Why the primitives came out as they did: routes the policy chose vs fetches that did not fit, the
    horizons behind them, and one GPU's HBM at the busiest moment (summary.json `why`, `engine.hbm`)."""
    c = console()
    why, hbm = s.get("why"), s["engine"]["hbm"]
    counts = s["primitive_counts"]
    if counts["route"] + counts["fetch"] + counts["local"] == 0 and s["completed"]:
        c.print("no chunk crossed instances: every attended chunk was resident on its requester or first touched "
                "there, so the policy chose nothing and no policy can differ on this trace (no cross-instance reuse)")
    if why:
        med = why["median_output_tokens"]
        fmt = lambda v: "-" if v is None else f"{v:g}"
        c.print(f"why: route {why['route_by_policy']} chosen by the policy + {why['route_fetch_did_not_fit']} "
                f"fetches that did not fit in HBM; requests that route decode a median of "
                f"{fmt(med['routing_requests'])} tokens, those that fetch {fmt(med['fetching_requests'])} "
                "(a routed chunk pays its round trips every decode step, a fetched one once)")
    peak = hbm.get("at_peak")
    line = f"HBM per GPU {hbm['capacity_gb_per_gpu']:.0f} GB: weights {hbm['weights_gb_per_gpu']:.1f} GB, "
    if hbm.get("outside_pool_gb_per_gpu"):
        line += f"outside the KV pool {hbm['outside_pool_gb_per_gpu']:.1f} GB (the framework's memory fraction), "
    line += f"KV room {hbm['kv_capacity_tokens']:,} tokens"
    if peak:
        line += (f"; at the busiest moment (instance {peak['instance']}, t = {peak['t_s']:.2f} s) running KV "
                 f"{peak['running_kv_gb']:.1f} GB, pinned chunks {peak['pinned_chunks_gb']:.1f} GB, copies "
                 f"{peak['copies_gb']:.1f} GB, free {peak['free_gb']:.1f} GB")
    c.print(line + f"; copies evicted {hbm['evictions']}, refused {hbm['copies_refused']}")


def register(app: typer.Typer) -> None:
    def run() -> None:    # a stub: the options and what runs come from run_command(), built on first use
        raise AssertionError("unreachable: the lazy command calls run_command()'s callback")
    run.__doc__ = _run.__doc__
    app.command("run", cls=lazy_command(run_command, "run"))(run)
