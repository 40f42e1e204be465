"""`simroute report DIR`: an interactive HTML page (and PNGs) or Markdown tables of a study or a run."""

from __future__ import annotations

from pathlib import Path

import typer

from simroute.cli.common import console


def report(
    directory: Path = typer.Argument(..., help="A study directory (from sweep) or a run directory (from run)."),
    fmt: str = typer.Option("html", "--format", help="html (interactive page + PNGs) | md (tables on stdout)."),
    out: Path = typer.Option(None, "-o", "--out", help="Report directory (default: DIR/report)."),
    png: bool = typer.Option(True, help="Also write the figures as PNG files (for papers)."),
) -> None:
    """Tables and plots of a study or a run, from its output files only.

    Example: simroute report results/ark  (writes results/ark/report/report.html); simroute report results/run --format md
    """
    from simroute.errors import ConfigurationError
    from simroute.study.report import ReportFormat, write_report
    if fmt not in {form.value for form in ReportFormat}:
        raise ConfigurationError("must be html or md", field="--format")
    res = write_report(directory, out=out, fmt=ReportFormat(fmt), png=png)
    if fmt == ReportFormat.MD:
        typer.echo(res)
    else:
        console().print(f"report: {res}")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
