"""`simroute validate`: the scorecard of the papers' effects (simroute.scenarios.validate) on the terminal or as
JSON, plus the optional ECMP-vs-ARK QPS sweep."""

from __future__ import annotations

import typer

from simroute.checks import check_number
from simroute.cli.common import echo_json, table
from simroute.errors import ConfigurationError


def _fmt(v: float) -> str:
    return "-" if v in (float("inf"), float("-inf")) else f"{v:.4g}"


def validate(
    json_out: bool = typer.Option(False, "--json", help="Print the scorecard as JSON (rows with verdicts)."),
    only: str = typer.Option(None, help="Comma-separated sections to run (default: all): table1, table2, "
                                        "decode_point, wire_byte, fanout, holder, congestion, staging, ark."),
    ark: bool = typer.Option(False, "--ark", help="Also print the ECMP vs ARK sweep over --ark-qps."),
    ark_qps: str = typer.Option("5,15,25", help="QPS values of the ARK sweep (comma-separated)."),
    ark_duration: float = typer.Option(120.0, help="Simulated seconds per ARK sweep point."),
    seed: int = typer.Option(0, help="Seed of the ARK sweep traces."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 if any row fails (for CI gates)."),
) -> None:
    """Score every effect simroute claims from the two papers: paper value, simulated value, band, verdict.

    Each simulated value comes from running a mechanism (simulator or network engine), never from reading a
    calibration input back. A failing row is a finding, reported with its numbers; --strict turns any into
    exit code 1. Example: simroute validate --json --only table1,ark
    """
    from simroute.scenarios.validate import SECTIONS, scorecard, select_sections
    # every flag is parsed before any section runs (a bad value must not cost minutes of simulation first)
    if only is not None:
        names = [s.strip() for s in only.split(",") if s.strip()]
        if not names:
            raise ConfigurationError(f"{only!r} names no section; give comma-separated section names, or leave "
                                     "--only out to run all", field="--only")
        sections = select_sections(names)
    else:
        sections = SECTIONS
    qps = parse_qps(ark_qps)
    check_number(ark_duration, "--ark-duration", minimum=0, exclusive_minimum=True, maximum=MAX_ARK_DURATION_S)
    check_number(seed, "--seed", integer=True, minimum=0, maximum=2**63 - 1)
    rows = scorecard(sections)
    failed = sum(r.verdict != "pass" for r in rows)
    if json_out:
        echo_json({"rows": [r.as_dict() for r in rows], "passed": len(rows) - failed, "failed": failed})
    else:
        if ark:
            _ark_table(qps, ark_duration, seed)
        table("paper effects, simulated (band: what passes)", ["id", "effect", "source", "paper", "simulated",
                                                                "band", "verdict"],
              [[r.id, r.effect, r.source, f"{_fmt(r.paper)} {r.unit}", f"{_fmt(r.simulated)} {r.unit}",
                f"[{_fmt(r.lo)}, {_fmt(r.hi)}] ({r.tolerance})", "pass" if r.verdict == "pass" else "FAIL"]
               for r in rows])
        typer.echo(f"{len(rows) - failed} of {len(rows)} rows pass")
        for r in rows:
            if r.note:
                typer.echo(f"- {r.id} ({'pass' if r.verdict == 'pass' else 'FAIL'}): {r.note}")
    if failed and strict:
        raise typer.Exit(1)


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
    from simroute.scenarios.ark import ark_sweep
    pts = ark_sweep(qps, duration_s=duration, seed=seed)
    rows = []
    red = lambda x, y: f"{100 * (y - x) / x:+.1f}%" if x else "-"
    for e, a in zip(pts[::2], pts[1::2]):
        rows.append([f"{e.qps:g}", f"{e.fct_mean_ms:.0f} / {a.fct_mean_ms:.0f} ({red(e.fct_mean_ms, a.fct_mean_ms)})",
                     f"{e.fct_p95_ms:.0f} / {a.fct_p95_ms:.0f} ({red(e.fct_p95_ms, a.fct_p95_ms)})",
                     f"{e.ttft_mean_ms:.0f} / {a.ttft_mean_ms:.0f} ({red(e.ttft_mean_ms, a.ttft_mean_ms)})",
                     f"{e.peak_spine_flows} / {a.peak_spine_flows}"])
    table("ARK scenario, ECMP / ARK (ARK paper: mean / P95 FCT -27.3% / -34.0% at QPS 25; peak per-spine flows "
          "18 vs < 8)", ["QPS", "mean KV-transfer FCT ms", "P95 FCT ms", "mean TTFT ms", "peak flows/spine"], rows)


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
