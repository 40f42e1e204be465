"""`simroute plan`: the deployment with the fewest GPUs meeting the SLOs at a load (a thin layer over
simroute.study.plan)."""

from __future__ import annotations

from pathlib import Path

import typer

from simroute.cli.common import checked, console
from simroute.defaults import DEFAULT_CALIB, DEFAULT_MODEL, DEFAULT_TOPOLOGY, DEFAULT_TP, DEFAULT_TRACE


def plan(
    trace: str = typer.Option(None, help=f"Trace: a path or a shipped name (default {DEFAULT_TRACE}); or use "
                                         "--workload."),
    workload: str = typer.Option(None, help="Generate the workload instead: agents | corpus | ... (see `simroute "
                                            "trace gen --help`); sized to each host count where it has `instances`."),
    param: list[str] = typer.Option([], "-p", "--param", help="Workload generator parameter key=value (repeatable)."),
    model: str = typer.Option(DEFAULT_MODEL, help="Model geometry."),
    tp: str = typer.Option(str(DEFAULT_TP), "--tp", help="GPUs per instance: one, or several to search (comma "
                                                          "list). Example: --tp 4,8."),
    parallel: str = typer.Option(None, "--parallel", help="Parallelism of each instance group to search instead "
                                 "of --tp (comma list): tp<N> (TP instances), dp<N>ep<M> (DP attention over N GPUs, "
                                 "each its own instance, with expert parallelism M), tp<N>dp<N>ep<M>. Example: "
                                 "--parallel tp8,dp8ep8."),
    topology: str = typer.Option(DEFAULT_TOPOLOGY, help="Topology whose family is resized to each host count."),
    gpu: str = typer.Option(None, help="GPU entry of the instances (default: the topology's hosts.gpu)."),
    calib: str = typer.Option(DEFAULT_CALIB, help="Calibration profile."),
    kv_cache: str = typer.Option(None, "--kv-cache", help="KV-cache dtype: bf16 | fp8, or both to search (comma "
                                 "list; default: the serving framework's default for the checkpoint, bf16 for every "
                                 "shipped model). Example: --kv-cache bf16,fp8."),
    over_window: str = typer.Option("refuse", "--over-window", help="A trace request longer than the model's "
                                    "context window: refuse (exit 2, naming it) | drop (as the engine would, counted "
                                    "in each run's summary)."),
    disagg: str = typer.Option(None, "--disagg", help="Aggregated (none) and / or disaggregated serving as P:D "
                               "ratios of prefill to decode instances, comma list to search (as `simroute run "
                               "--disagg`). Example: --disagg none,1:1,1:3."),
    prefill_tp: int = typer.Option(None, "--prefill-tp", help="GPUs per prefill instance under a P:D ratio (--tp "
                                   "if unset). Example: --prefill-tp 4."),
    engine: str = typer.Option(None, "--engine", help="Serving framework preset of every run, NAME or NAME@VERSION "
                               "(as `simroute run --engine`; default auto: the framework of the GPU's tables), or "
                               "several to search (comma list). Example: --engine sglang,trtllm."),
    slo: list[str] = typer.Option([], "--slo", help="An SLO every seed must meet, e.g. 'p99 ttft_ms <= 2000' "
                                                    "(repeatable, or joined by 'and'; default: simroute's one "
                                                    "default SLO, p99 TTFT <= 2 s and p99 TPOT <= 50 ms; "
                                                    "docs/STUDIES.md, SLOs)."),
    qps: float = typer.Option(None, "--qps", callback=checked("--qps", minimum=0, exclusive_minimum=True),
                              help="Load: open-loop requests per second (a generator's own qps, else the trace's "
                                   "arrivals rescaled)."),
    time_scale: float = typer.Option(None, "--time-scale", callback=checked("--time-scale", minimum=0,
                                                                            exclusive_minimum=True),
                                     help="Load: the trace's arrival times x this (0.5 = twice the load)."),
    concurrency: int = typer.Option(None, "--concurrency", callback=checked("--concurrency", integer=True, minimum=1),
                                    help="Load: at most N requests in flight, the next sent as one completes (the "
                                         "serving benchmark clients' --max-concurrency; a generator's own "
                                         "concurrency, else the runs')."),
    hosts_min: int = typer.Option(1, "--hosts-min", callback=checked("--hosts-min", integer=True, minimum=1)),
    hosts_max: int = typer.Option(64, "--hosts-max", callback=checked("--hosts-max", integer=True, minimum=2,
                                                                      maximum=4096)),
    policy: str = typer.Option("paper", help="The policy of the answer, or several to choose among (comma list). "
                                             "Example: --policy paper,adaptive."),
    compare: str = typer.Option("always-route,always-fetch", help="Other policies to search too (comma list; '' "
                                                                  "for none): what they would need."),
    coarse: int = typer.Option(5, "--coarse", callback=checked("--coarse", integer=True, minimum=2, maximum=64),
                               help="Host counts probed over the whole range before refinement (geometric, both "
                                    "ends included); every boundary between a count that meets the SLO and one "
                                    "that does not is then refined. More: fewer surprises between them."),
    seeds: int = typer.Option(3, "--seeds", callback=checked("--seeds", integer=True, minimum=1, maximum=100),
                              help="Seeds per probe: the answer holds when every seed meets every SLO."),
    max_requests: int = typer.Option(None, "--max-requests", callback=checked("--max-requests", integer=True,
                                                                              minimum=1),
                                     help="Replay only the first N requests of each run."),
    out: Path = typer.Option(Path("results/plan"), "-o", "--out", help="Plan directory (resumable)."),
    jobs: int = typer.Option(None, "-j", "--jobs", callback=checked("--jobs", integer=True, minimum=1, maximum=1024),
                             help="Worker processes (default: all cores; 1: inline)."),
    progress: bool = typer.Option(None, help="Progress bar (default: when stderr is a terminal)."),
) -> None:
    """The deployment with the fewest GPUs that meets the SLOs at a load: hosts searched per deployment (TP,
    KV-cache dtype, policy) over seeds by a coarse grid and refinement (never assuming more hosts help: a host
    count that meets the SLO below one that does not is reported), with what binds below the answer, route vs
    fetch counts, the frontier of throughput per GPU against TPOT naming each point's busiest resource, and what
    the compared policies would need. Writes plan.md, plan.json and report/report.html.

    Example: simroute plan --workload agents -p documents=1 -p doc_tokens=98304 -p subagents=256 --qps 8 \\
    --slo 'p99 ttft_ms <= 2000' --slo 'p99 tpot_ms <= 50' --hosts-max 16 -o results/plan

    A deployment search: simroute plan --workload agents -p documents=1 -p subagents=32 --qps 4 --tp 4,8 \\
    --kv-cache bf16,fp8 --policy paper,adaptive --hosts-max 8 --seeds 1 -o results/plan

    A serving benchmark's closed loop: simroute plan --workload serving -p input_tokens=1024 -p output_tokens=1024 \\
    -p requests=640 -p range_ratio=0.8 --concurrency 64 --slo 'mean ttft_ms <= 500' --hosts-max 4 -o results/plan
    """
    from simroute.errors import ConfigurationError
    from simroute.sim.slo import DEFAULT_SLO
    from simroute.study.plan import PlanRequest, hosts_words, run_plan
    if trace is not None and workload is not None:
        raise ConfigurationError("give --trace or --workload, not both", field="--workload")
    if param and workload is None:
        raise ConfigurationError("-p sets a generator parameter: give --workload too", field="--param")
    from simroute.model.geometry import CACHE_DTYPE_BYTES
    from simroute.sim.config import OVER_WINDOW_MODES
    tps = tuple(_whole(item, "--tp") for item in _items(tp, "--tp"))
    kv_caches = _items(kv_cache, "--kv-cache") if kv_cache is not None else ()
    for dtype in kv_caches:
        if dtype not in CACHE_DTYPE_BYTES:
            raise ConfigurationError(f"unknown KV-cache dtype '{dtype}' (known: {', '.join(CACHE_DTYPE_BYTES)})",
                                     field="--kv-cache")
    if over_window not in OVER_WINDOW_MODES:
        raise ConfigurationError(f"unknown mode '{over_window}' (known: {', '.join(OVER_WINDOW_MODES)})",
                                 field="--over-window")
    if qps is not None and time_scale is not None:
        raise ConfigurationError("set the load by --qps or by --time-scale, not both", field="--qps")
    if hosts_min >= hosts_max:
        raise ConfigurationError(f"need --hosts-min < --hosts-max, got {hosts_min} and {hosts_max}",
                                 field="--hosts-min")
    engines = tuple(_items(engine, "--engine")) if engine is not None else ()
    if engines:
        from simroute.errors import ConfigurationError, UnknownNameError
        from simroute.sim.config import parse_engine
        for name in engines:
            try:
                parse_engine(name)               # a bad name is refused before anything is written
            except UnknownNameError as exc:
                raise ConfigurationError(str(exc), field="--engine") from None
    disaggs = tuple(_items(disagg, "--disagg")) if disagg is not None else ()
    from simroute.sim.pools import parse_disagg
    for ratio in disaggs:
        parse_disagg(ratio, field="--disagg")     # a bad ratio is refused before anything is written
    if prefill_tp is not None and not any(ratio != "none" for ratio in disaggs):
        raise ConfigurationError("sets the prefill pool's TP: give a P:D ratio in --disagg too", field="--prefill-tp")
    if prefill_tp is not None and prefill_tp < 1:
        raise ConfigurationError(f"must be >= 1, got {prefill_tp}", field="--prefill-tp")
    spec = ({"generate": workload, "params": _parse_sets(param)} if workload is not None
            else (trace if trace is not None else DEFAULT_TRACE))
    from simroute.sim import slo as slos
    try:
        slo_texts = slos.parse(slo).texts if slo else DEFAULT_SLO
    except ValueError as exc:
        raise ConfigurationError(str(exc), field="--slo") from None
    request = PlanRequest(trace=spec, model=model, tp=tps[0] if len(tps) == 1 else tps, kv_cache=kv_caches,
                          topology=topology, gpu=gpu, calib=calib,
                          slo=slo_texts, qps=qps, time_scale=time_scale, concurrency=concurrency,
                          hosts_min=hosts_min, hosts_max=hosts_max, policy=tuple(_items(policy, "--policy")),
                          compare=tuple(p.strip() for p in compare.split(",") if p.strip()), seeds=seeds,
                          max_requests=max_requests, coarse=coarse, engine=engines,
                          parallel=tuple(_items(parallel, "--parallel")) if parallel is not None else (),
                          disagg=disaggs, prefill_tp=prefill_tp,
                          base={**({"over_window": over_window} if over_window != "refuse" else {})})
    c = console()

    def announce() -> None:
        shape = (f"parallelism {', '.join(request.parallel)}" if request.parallel
                 else f"TP {', '.join(map(str, tps))}")
        c.print(f"[bold]simroute plan[/bold]: {model} at {shape} on {topology}"
                + (f" ({gpu})" if gpu else "") + (f", {' | '.join(kv_caches)} KV cache" if kv_caches else "")
                + (f", engine {' | '.join(engines)}" if engines else "")
                + (f", serving {' | '.join(disaggs)}" if disaggs else "")
                + f", hosts {hosts_min}-{hosts_max} ({coarse} coarse, then refined), "
                f"policies {', '.join(request.policies)}"
                + (f" (compared: {', '.join(request.compare)})" if request.compare else "")
                + f", {seeds} seed(s); SLO {' and '.join(request.slo)}")
    run, answer, memo = run_plan(request, out, jobs=jobs, progress=progress, announce=announce, report=True)
    page = out / "report" / "report.html"
    own = answer["deployments"][answer["deployment"]]
    verdict = (hosts_words(own["hosts"])
               + (f" ({own['gpus']} GPUs)" if own.get("gpus") else "") if own["hosts"] is not None else
               f"no host count in {hosts_min}-{hosts_max} meets the SLO")
    others = [f"{p}: {v['hosts'] if v['hosts'] is not None else 'none'}"
              for p, v in answer["deployments"].items() if p != answer["deployment"]]
    c.print(f"answer ({answer['deployment']}): {verdict} ({own['status']})" + "".join(f"; {o}" for o in others))
    for edge in answer["nonmonotone"]:
        c.print(f"non-monotone: {edge['deployment']} meets the SLO at {hosts_words(edge['meets'])}, not at "
                f"{hosts_words(edge['fails'])} (more hosts, "
                "worse)")
    if own.get("binding"):
        b = own["binding"]
        c.print(f"binding at {hosts_words(b['hosts'])}: {', '.join(b['violated']) or '-'}; {b['resource']}")
    c.print(f"{run.executed} runs ({run.failed} failed), {run.skipped} stored, {run.wall_s:.1f} s; memo {memo}, "
            f"report {page}")
    if own["hosts"] is None:
        raise typer.Exit(1)


def _items(text: str, flag: str) -> list[str]:
    """A comma list's items ('4,8' -> ['4', '8']); an empty item is refused naming the flag."""
    from simroute.errors import ConfigurationError
    items = [item.strip() for item in str(text).split(",")]
    if not all(items):
        raise ConfigurationError(f"'{text}' has an empty item; give one value or a comma list like 4,8", field=flag)
    return items


def _whole(text: str, flag: str) -> int:
    from simroute.checks import check_number
    try:
        value: float | int = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            from simroute.errors import ConfigurationError
            raise ConfigurationError(f"must be a whole number, got '{text}'", field=flag) from None
    return int(check_number(value, flag, integer=True, minimum=1))


def _parse_sets(items: list[str]) -> dict:
    from simroute.cli.trace_cmd import _parse_sets as parse
    return parse(items)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
