"""`simroute run`: the product's main job, as a thin layer over simroute.sim."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import typer

from simroute.cli.common import CALIB_HELP, console, echo_json, table


def run(
    topology: Path = typer.Option(None, help="Topology YAML (default: the shipped fattree.yaml)."),
    trace: Path = typer.Option(None, help="Trace dataset (*.parquet directory; default: the shipped agents trace)."),
    calib: str = typer.Option(None, help=CALIB_HELP + " Default: h100-ibgda."),
    policy: str = typer.Option("paper", help="paper | adaptive | always-route | always-fetch | always-local."),
    routing: str = typer.Option("ecmp", help="Path selection for bulk flows: ecmp | ark | least-loaded."),
    seed: int = typer.Option(0, help="Seed: a run is a pure function of its inputs and this."),
    out: Path = typer.Option(Path("results/run"), "-o", "--out", help="Output directory (replaced atomically)."),
    model: str = typer.Option("deepseek-v2-lite", help="Model geometry."),
    route_exchanges: str = typer.Option("per-layer", help="per-layer (exact) or once (paper's accounting)."),
    placement: str = typer.Option("hash", help="hash | consistent-hash | popularity."),
    replicas: int = typer.Option(1, help="Replicas of hot chunks (popularity placement)."),
    hot_fraction: float = typer.Option(0.01, help="Share of chunks that are replicated (popularity placement)."),
    router: str = typer.Option("hint", help="hint | round-robin | least-loaded | locality."),
    tp: int = typer.Option(1, help="GPUs per instance (tensor-parallel group)."),
    hbm_gb: float = typer.Option(40.0, help="HBM per instance for chunks and copies (GB)."),
    batch_window_us: float = typer.Option(10.0, help="Holder batching window (us)."),
    dispatch_window_us: float = typer.Option(5.0, help="Requester dispatcher window: same-chunk queries to one "
                                                       "holder share a message (us; 0 = off)."),
    staging_streams: int = typer.Option(8, help="K streams of the holder staging pool."),
    decode_steps_per_event: int = typer.Option(4, help="Decode steps one simulated macro-step stands for "
                                                       "(1 = exact; larger is faster, see docs/MODEL.md)."),
    decode_base_ms: float = typer.Option(0.0, help="Non-attention time per decode step (ms)."),
    prefill_us: float = typer.Option(None, help="Prefill cost per token-layer (us); profile value if unset."),
    max_requests: int = typer.Option(None, help="Replay only the first N requests."),
    until: float = typer.Option(None, help="Stop at this simulated time (s); unfinished requests are dropped."),
    slo_ttft_ms: float = typer.Option(500.0, help="TTFT SLO for attainment (ms)."),
    slo_tpot_ms: float = typer.Option(100.0, help="TPOT SLO for attainment (ms)."),
    no_telemetry: bool = typer.Option(False, help="Skip per-flow / per-link / holder telemetry tables."),
    link_series: bool = typer.Option(False, help="Also write per-link utilisation time series."),
    timeline: Path = typer.Option(None, help="Also export a Chrome/Perfetto trace JSON of the run."),
    json_out: bool = typer.Option(False, "--json", help="Print summary.json instead of tables."),
    progress: bool = typer.Option(None, help="Progress bar (default: when stderr is a terminal)."),
) -> None:
    """Replay a trace on a topology with the route/fetch/local predicate, holders and congestion.

    Example: simroute run --topology topologies/fattree.yaml --trace agents.parquet --calib calib/h100-ibgda.yaml
    --policy paper --routing ecmp --seed 1 -o results/
    """
    from simroute.calib import default_profile_path
    from simroute.network import default_topology_path
    from simroute.sim import RunConfig, simulate
    from simroute.sim.config import default_trace_path

    cfg = RunConfig(
        topology=str(topology or default_topology_path()), trace=str(trace or default_trace_path()),
        calib=str(calib or default_profile_path()), model=model, policy=policy, routing=routing, seed=seed,
        route_exchanges=route_exchanges, placement=placement, replicas=replicas, hot_fraction=hot_fraction,
        router=router, tp=tp, hbm_gb=hbm_gb, batch_window_us=batch_window_us,
        dispatch_window_us=dispatch_window_us, staging_streams=staging_streams,
        decode_steps_per_event=decode_steps_per_event, decode_base_ms=decode_base_ms, prefill_us=prefill_us,
        max_requests=max_requests, until_s=until, slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms,
        telemetry=not no_telemetry or timeline is not None, link_series=link_series)
    show = sys.stderr.isatty() if progress is None else progress
    bar = None
    cb: Callable[[int, int], None] | None = None
    if show:
        from tqdm import tqdm
        bar = tqdm(total=None, unit="req", desc="replaying", file=sys.stderr)

        def cb(done: int, total: int) -> None:  # noqa: F811 (rebinds the None above)
            bar.total = total
            bar.n = done
            bar.refresh()
    res = simulate(cfg, out, progress=cb)
    if timeline is not None:
        from simroute.scenarios.timeline import write_timeline
        write_timeline(timeline, res.tables)
    if bar is not None:
        bar.close()
    if json_out:
        echo_json(res.summary)
        return
    print_summary(res.summary, res.perf, out)


def print_summary(s: dict, perf: dict, out: Path) -> None:
    """The terminal summary table."""
    c = console()
    cfg = s["config"]
    c.print(f"[bold]simroute run[/bold]: {Path(cfg['trace']).name} on {Path(cfg['topology']).name} "
            f"({s['instances']} instances), profile {Path(cfg['calib']).name}, policy {cfg['policy']}, "
            f"routing {cfg['routing']}, seed {s['seed']}")
    f = lambda d, k: "-" if d.get(k) is None else f"{d[k]:.3f}"
    reasons = ", ".join(f"{k}: {v}" for k, v in s["dropped_by_reason"].items())
    c.print(f"requests {s['requests']}, completed {s['completed']}, dropped {s['dropped']}"
            + (f" ({reasons})" if reasons else ""))
    table("latency (ms)", ["metric", "mean", "p50", "p95", "p99"],
          [[m, f(s[m], "mean"), f(s[m], "p50"), f(s[m], "p95"), f(s[m], "p99")] for m in ("ttft_ms", "tpot_ms",
                                                                                           "e2e_ms")])
    pc = s["primitive_counts"]
    table("primitives per (chunk, request)", ["route", "fetch", "local", "resident", "first-touch"],
          [[pc["route"], pc["fetch"], pc["local"], pc["resident"], pc["first-touch"]]])
    b = s["bytes"]
    table("bytes", ["route", "fetch", "pd transfer"] + list(s["network"].get("bytes_by_tier", {})),
          [[f"{b['route'] / 1e9:.3f} GB", f"{b['fetch'] / 1e9:.3f} GB", f"{b['pd_transfer'] / 1e9:.3f} GB"]
           + [f"{v / 1e9:.3f} GB" for v in s["network"].get("bytes_by_tier", {}).values()]])
    h = s["holders"]
    slo = s["slo"]
    att = "-" if slo["attainment"] is None else f"{100 * slo['attainment']:.1f}%"
    c.print(f"holders: {h['routed_queries']} routed queries in {h['batches']} batches (mean {h['mean_batch']:.2f}), "
            f"max queue {h['max_queue']}; SLO (TTFT <= {slo['ttft_ms']} ms, TPOT <= {slo['tpot_ms']} ms) "
            f"attainment {att}")
    c.print(f"simulated {s['sim_time_s']:.3f} s in {perf['wall_s']:.2f} s wall "
            f"({perf['sim_s_per_wall_s'] or 0:.1f}x real time, {perf['requests_per_wall_s'] or 0:,.0f} requests/s); "
            f"outputs in {out}/")


def register(app: typer.Typer) -> None:
    app.command("run")(run)
