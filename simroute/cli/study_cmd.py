"""`simroute sweep`: a thin layer over simroute.study (`report` lives in report_cmd.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from simroute.cli.common import checked, console


def sweep(
    study_file: Path = typer.Argument(..., help="Study YAML or a shipped study's name (see docs/STUDIES.md and "
                                                "studies/)."),
    out: Path = typer.Option(None, "-o", "--out", help="Study directory (default: results/studies/<name>)."),
    quick: bool = typer.Option(False, "--quick", help="Apply the study's `quick:` overrides (small variant)."),
    jobs: int = typer.Option(None, "-j", "--jobs", help="Local worker processes (default: all cores; 1: inline).",
                             callback=checked("--jobs", integer=True, minimum=1, maximum=1024)),
    ray_address: str = typer.Option(None, help="Run on Ray: auto | ray://host:port | local (a private 2-CPU Ray)."),
    max_points: int = typer.Option(None, help="Stop after this many new points (rerun to continue).",
                                   callback=checked("--max-points", integer=True, minimum=0)),
    retry_failed: bool = typer.Option(True, help="Rerun points stored as failed."),
    report: bool = typer.Option(False, "--report", help="Write the HTML report when done."),
    progress: bool = typer.Option(None, help="Progress bar with ETA (default: when stderr is a terminal)."),
) -> None:
    """Run a study (grid or SLO search) resumably: finished points are stored and skipped on rerun.

    Example: simroute sweep ark-ecmp-vs-ark --quick -o results/ark && simroute report results/ark

    Any run field is a base value or an axis of the study file, the serving framework's preset too (docs/ENGINES.md):
    `base: {engine: sglang@0.5.14}` or `axes: {engine: [sglang, vllm, trtllm, none]}`.
    """
    from simroute.shipped import resolve_input
    from simroute.study import load_study, run_study
    study = load_study(Path(resolve_input("study", study_file, strict=True)), quick=quick)
    out = out or Path("results") / "studies" / (study.name + ("-quick" if quick else ""))
    def before_writing() -> None:       # --report: its directory checked before the study runs, not after
        if report and Path(out).is_dir():
            from simroute.study.report import check_report_out
            check_report_out(Path(out), Path(out) / "report")
    run = run_study(study, out, jobs=jobs, ray_address=ray_address, max_points=max_points,
                    retry_failed=retry_failed, progress=progress, before_writing=before_writing)
    c = console()
    if run.discarded:
        c.print(f"study {study.name}: every one of its {run.executed} points failed")
    else:
        c.print(f"study {study.name}: {run.executed} run ({run.failed} failed), {run.skipped} already stored, "
                f"in {run.wall_s:.1f} s -> {run.out_dir}" + ("; stopped at --max-points, rerun to continue"
                                                              if run.stopped else ""))
    for s in run.searches:
        edges = "; ".join(f"meets at {good}, not at {bad}" for good, bad in s.get("nonmonotone") or [])
        c.print(f"  {s['goal']} {s['field']} with {' and '.join(s['slo'])} at {s['labels'] or 'base'}: "
                f"{s['answer']} ({s['status']})" + (f"; non-monotone: {edges}" if edges else ""))
    if report and not run.discarded:
        from simroute.study.report import write_report
        c.print(f"report: {write_report(run.out_dir)}")
    if run.failed:
        kept = ("nothing was kept (the study directory held only these failures)" if run.discarded
                else f"the failed points are stored in {run.out_dir}")
        typer.secho(f"error: {run.failed} of {run.executed} points failed, the first with: "
                    f"{' '.join(run.first_error.split())[:300]}; {kept}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
