"""`simroute validate`: the scorecard of the papers' claims (simroute.scenarios.validate) on the terminal or as
JSON, plus the optional ECMP-vs-ARK QPS sweep with its per-spine heatmap (ARK Figs 2-4)."""

from __future__ import annotations

import sys

import typer

from simroute.checks import check_number
from simroute.cli.common import echo_json, table
from simroute.errors import ConfigurationError


def _fmt(v: float | None) -> str:
    if v is None or v != v:
        return "-"
    return "-" if v in (float("inf"), float("-inf")) else f"{v:.4g}"


MAX_JOBS = 64


def validate(
    json_out: bool = typer.Option(False, "--json", help="Print the scorecard as JSON (rows with kinds and verdicts)."),
    only: str = typer.Option(None, help="Comma-separated sections to run (default: every default section). "
                                        "Example: --only table1,congestion,ark"),
    full: bool = typer.Option(False, "--full", help="Also run the heavy sections (the ARK QPS 1-30 sweep: ~40 CPU "
                                                   "seconds more)."),
    jobs: int = typer.Option(None, "--jobs", "-j", help="Processes for independent sections and ARK runs "
                                                        "(default: the CPUs, at most 8; 1 runs in this process)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines on stderr."),
    ark: bool = typer.Option(False, "--ark", help="Also print the ECMP vs ARK sweep over --ark-qps and the "
                                                  "per-spine heatmap of its highest QPS (ARK Figs 2-4)."),
    ark_qps: str = typer.Option("1,5,10,15,20,25,30", help="QPS values of the ARK sweep (comma-separated)."),
    ark_duration: float = typer.Option(60.0, help="Simulated seconds per ARK sweep point."),
    seed: int = typer.Option(0, help="Seed of the ARK sweep traces."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 if any predicted row fails (for CI gates)."),
    serving: bool = typer.Option(False, "--serving", help="Score simulated serving runs against the public measured "
                                 "serving benchmarks of calib/serving/measured.csv instead of the papers' claims "
                                 "(--only: substrings of row ids). Example: simroute validate --serving --only "
                                 "h200-trtllm-1k1k -j 2"),
    dp_attention: bool = typer.Option(False, "--dp-attention", help="With --serving: also replay the DP-attention "
                                      "rows without MTP (~160 CPU s for the four, so not in the default set), "
                                      "scored as their own set beside the default one. Example: simroute validate "
                                      "--serving --dp-attention -j 2"),
) -> None:
    """Score every claim simroute reproduces from the two papers: paper value, simulated value, band, verdict.

    Each row is `predicted` (its value follows from constants that are not the claim's own numbers) or `input`
    (an implementation check: the value is arithmetic of the constants it is compared with); only predicted
    rows count in the verdict. A failing predicted row is a finding, reported with its numbers; --strict turns
    any into exit code 1. Progress goes to stderr. Example: simroute validate -j 2 --json --only table1,ark

    --serving: the serving scorecard (docs/VALIDATION.md "Serving"): per measured row and metric (median TTFT,
    mean TPOT, output tokens/s per GPU) measured, simulated, ratio and verdict (pass inside 0.67-1.5x), a
    summary per metric, and the fitted constants with the rows they were fitted to (those rows are not judged).
    --dp-attention adds the DP-attention rows without MTP, with their own points and summary (JSON `dp_attention`).
    """
    if serving:
        _serving(json_out=json_out, only=only, full=full, jobs=jobs, quiet=quiet, ark=ark, strict=strict,
                 dp_attention=dp_attention)
        return
    if dp_attention:
        raise ConfigurationError("--dp-attention adds rows to the serving scorecard; give it with --serving",
                                 field="--dp-attention")
    from simroute.scenarios.validate import (FULL_SECTIONS, SECTIONS, default_jobs, scorecard, section_names,
                                             select_sections, summary)
    # every flag is checked before any section runs (a bad value must not cost minutes of simulation first)
    if only is not None:
        names = [s.strip() for s in only.split(",") if s.strip()]
        if not names:
            raise ConfigurationError(f"{only!r} names no section; give comma-separated section names "
                                     f"({', '.join(section_names())}), or leave --only out", field="--only")
        sections = select_sections(names)
    else:
        sections = SECTIONS + (FULL_SECTIONS if full else ())
    qps = parse_qps(ark_qps)
    check_number(ark_duration, "--ark-duration", minimum=0, exclusive_minimum=True, maximum=MAX_ARK_DURATION_S)
    check_number(seed, "--seed", integer=True, minimum=0, maximum=2**63 - 1)
    workers = default_jobs() if jobs is None else int(check_number(jobs, "--jobs", integer=True, minimum=1,
                                                                    maximum=MAX_JOBS))

    def progress(what: str, done: int, total: int, cpu_s: float) -> None:
        print(f"validate [{done}/{total}] {what} ({cpu_s:.1f} CPU s)", file=sys.stderr, flush=True)

    rows = scorecard(sections, jobs=workers, progress=None if quiet else progress)
    counts = summary(rows)
    if json_out:
        echo_json({"rows": [r.as_dict() for r in rows], **counts})
    else:
        if ark:
            _ark_table(qps, ark_duration, seed)
        table("paper claims, simulated (band: what passes; kind: predicted counts, input checks the "
              "implementation)", ["id", "kind", "effect", "source", "paper", "simulated", "band", "verdict"],
              [[r.id, r.kind, r.effect, r.source, f"{_fmt(r.paper)} {r.unit}", f"{_fmt(r.simulated)} {r.unit}",
                f"[{_fmt(r.lo)}, {_fmt(r.hi)}] ({r.tolerance})",
                ("pass" if r.verdict == "pass" else "FAIL") if r.counts else r.verdict]
               for r in rows])
        typer.echo(f"{counts['passed']} of {counts['predicted']} predicted rows pass ({counts['failed']} findings); "
                   f"{counts['inputs'] - counts['inputs_failed']} of {counts['inputs']} implementation checks pass")
        for r in rows:
            if r.note:
                typer.echo(f"- {r.id} ({r.kind}, {r.verdict}): {r.note}")
    if counts["failed"] and strict:
        raise typer.Exit(1)


def _serving(*, json_out: bool, only: str | None, full: bool, jobs: int | None, quiet: bool, ark: bool,
             strict: bool, dp_attention: bool = False) -> None:
    """`validate --serving`: every flag checked first, then the replays, then the table (or JSON). The
    DP-attention rows (--dp-attention) are replayed with the others but scored apart: the default set's points and
    summary stay those of the default set."""
    from simroute.scenarios import serving as sv
    from simroute.scenarios.validate import default_jobs
    if full or ark:
        raise ConfigurationError("--serving runs the serving scorecard alone; leave --full and --ark out",
                                 field="--full" if full else "--ark")
    names = None
    if only is not None:
        names = [s.strip() for s in only.split(",") if s.strip()]
        if not names:
            raise ConfigurationError(f"{only!r} names no row; give comma-separated substrings of row ids of "
                                     "calib/serving/measured.csv, or leave --only out", field="--only")
    workers = default_jobs() if jobs is None else int(check_number(jobs, "--jobs", integer=True, minimum=1,
                                                                    maximum=MAX_JOBS))
    rows, skipped = sv.cases(only=names, dp_attention=dp_attention)
    fitted = sv.fitted_constants(gpus=sorted({row.gpu for row in rows}))

    def progress(what: str, done: int, total: int, cpu_s: float) -> None:
        print(f"validate --serving [{done}/{total}] {what} ({cpu_s:.1f} CPU s)", file=sys.stderr, flush=True)

    every = sv.scorecard(rows, jobs=workers, progress=None if quiet else progress, fitted=fitted)
    dp_ids = {row.id for row in rows if row.dp_attention}
    points = [p for p in every if p.id not in dp_ids]
    dp_points = [p for p in every if p.id in dp_ids]
    counts = sv.summary(points)
    dp_counts = sv.summary(dp_points)
    reasons: dict[str, int] = {}
    for _, reason in skipped:
        reasons[reason] = reasons.get(reason, 0) + 1
    if json_out:
        doc = {"points": [p.as_dict() for p in points], "summary": counts, "band": list(sv.BAND),
               "skipped": [{"id": row.id, "reason": reason} for row, reason in skipped],
               "fitted_constants": [{"file": c.file, "name": c.name, "ref": c.ref, "points": list(c.points),
                                     "rows": list(c.rows)} for c in fitted]}
        if dp_attention:
            doc["dp_attention"] = {"points": [p.as_dict() for p in dp_points], "summary": dp_counts}
        echo_json(doc)
    else:
        _serving_tables("measured serving benchmarks (calib/serving/measured.csv), simulated", points, counts)
        if dp_attention:
            _serving_tables("DP-attention rows (--dp-attention), simulated; scored apart from the rows above",
                            dp_points, dp_counts)
        typer.echo("fitted constants (kind: fitted) the replays read, and the rows of the table they were fitted to:")
        for c in fitted:
            typer.echo(f"- {c.file} {c.name}: {', '.join(c.rows) or 'no row of the table'} ({c.ref[:100]})")
        if reasons:
            typer.echo(f"not replayed: {len(skipped)} rows: " + "; ".join(f"{n} {r}" for r, n in reasons.items()))
    if (counts["failed"] or dp_counts["failed"]) and strict:
        raise typer.Exit(1)


def _serving_tables(title: str, points: list, counts: dict) -> None:
    """One set of serving points: the points, the summary of the judged ones, the closing count."""
    from simroute.scenarios import serving as sv
    table(f"{title}; band {sv.BAND[0]}-{sv.BAND[1]}x",
          ["row", "metric", "version", "load", "holdout", "fitted_to", "measured", "simulated", "ratio", "verdict"],
          [[p.id, p.metric, p.version, p.workload, str(p.holdout).lower(), p.fitted_to or "-",
            f"{_fmt(p.measured)} {p.unit}", f"{_fmt(p.simulated)} {p.unit}", f"{p.ratio:.2f}",
            ("pass" if p.verdict == "pass" else "FAIL") if p.judged else "fitted"] for p in points])
    groups = [[name, metric, str(g["n"]), f"{100 * g['median_abs_err']:.1f}%", str(g["outside_band"])]
              for name, group in counts.get("groups", {}).items() for metric, g in group.items()]
    for metric, entry in counts["metrics"].items():
        for label in ("all", "holdout", "not holdout"):
            if label in entry:
                g = entry[label]
                groups.append([f"{label}", metric, str(g["n"]), f"{100 * g['median_abs_err']:.1f}%",
                               f"{g['outside_band']} ({g['min_ratio']:.2f}-{g['max_ratio']:.2f}x)"])
    table("summary of judged points: median |simulated / measured - 1|", ["group", "metric", "n", "median |err|",
                                                                         "outside band"], groups)
    typer.echo(f"{counts['passed']} of {counts['judged']} judged points pass ({counts['failed']} fail) over "
               f"{counts['rows']} rows, frameworks {', '.join(counts['frameworks']) or '-'}, GPUs "
               f"{', '.join(counts['gpus']) or '-'}; {counts['fitted']} points on rows a constant was fitted to")


MAX_ARK_DURATION_S = 86_400.0     # a simulated day per point: past it, the sweep would not end in a session
MAX_ARK_QPS = 10_000.0


def parse_qps(text: str) -> list[float]:
    """--ark-qps: comma-separated rates, each finite and in (0, MAX_ARK_QPS]."""
    values = []
    for item in text.split(","):
        try:
            value = float(item.strip())
        except ValueError:
            raise ConfigurationError(f"{item.strip()!r} is not a number (give e.g. 5,15,25)",
                                     field="--ark-qps") from None
        values.append(check_number(value, "--ark-qps", minimum=0, exclusive_minimum=True, maximum=MAX_ARK_QPS))
    return values


def _ark_table(qps: list[float], duration: float, seed: int) -> None:
    from simroute.scenarios.ark import HEATMAP_BIN_S, ark_pair
    pairs = [ark_pair(rate, duration, seed, heatmap=rate == max(qps)) for rate in qps]
    rows = []
    red = lambda x, y: f"{100 * (y - x) / x:+.1f}%" if x else "-"
    for e, a in pairs:
        rows.append([f"{e.qps:g}", f"{e.fct_mean_ms:.0f} / {a.fct_mean_ms:.0f} ({red(e.fct_mean_ms, a.fct_mean_ms)})",
                     f"{e.fct_p95_ms:.0f} / {a.fct_p95_ms:.0f} ({red(e.fct_p95_ms, a.fct_p95_ms)})",
                     f"{e.ttft_mean_ms:.0f} / {a.ttft_mean_ms:.0f} ({red(e.ttft_mean_ms, a.ttft_mean_ms)})",
                     f"{e.ttft_p95_ms:.0f} / {a.ttft_p95_ms:.0f} ({red(e.ttft_p95_ms, a.ttft_p95_ms)})",
                     f"{e.peak_spine_flows} / {a.peak_spine_flows}"])
    table("ARK scenario, ECMP / ARK (ARK paper: mean / P95 FCT -27.3% / -34.0% at QPS 25, mean TTFT up to -12.9%; "
          "peak per-spine flows up to 18 vs < ~8)", ["QPS", "mean KV-transfer FCT ms", "P95 FCT ms", "mean TTFT ms",
                                                      "P95 TTFT ms", "peak flows/spine"], rows)
    for point in (point for pair in pairs for point in pair if point.heatmap):
        width = max(len(values) for values in point.heatmap.values())
        group = max(1, -(-width // HEATMAP_COLUMNS))           # bins per column: at most HEATMAP_COLUMNS columns
        columns = [f"{start * HEATMAP_BIN_S:g}-{min(start + group, width) * HEATMAP_BIN_S:g}"
                   for start in range(0, width, group)]
        table(f"per-spine concurrent flows, {point.routing.upper()} at QPS {point.qps:g} (the most at once in each "
              "span of simulated seconds; ARK Fig 3)", ["spine", *columns],
              [[spine, *(str(max(values[start:start + group], default=0)) for start in range(0, width, group))]
               for spine, values in point.heatmap.items()])


HEATMAP_COLUMNS = 15


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
