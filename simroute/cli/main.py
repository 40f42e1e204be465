"""The `simroute` console script.

Each concern registers its commands from its own module (`simroute/cli/<name>_cmd.py`, a `register(app)`
function), so the CLI stays thin and modules can be added without touching the others. Heavy imports
(pandas, simpy, matplotlib) happen inside the commands, keeping `--help` fast.
"""

from __future__ import annotations

import importlib
import sys

import typer

from simroute import __version__
from simroute.errors import SimrouteError

app = typer.Typer(
    name="simroute",
    help="Discrete-event cluster simulator of cross-instance attention (route / fetch / local), "
         "calibrated by hardware probes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Modules under simroute/cli/ that define `register(app: typer.Typer) -> None`.
COMMAND_MODULES: list[str] = [
    "topo_cmd",
    "model_cmd",
    "calib_cmd",
    "run_cmd",
    "calibrate_cmd",
    "trace_cmd",
    "study_cmd",
    "validate_cmd",
    "report_cmd",
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"simroute {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """simroute: route the query or move the cache? Simulate it on your cluster."""


for _name in COMMAND_MODULES:
    importlib.import_module(f"simroute.cli.{_name}").register(app)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors print one clear line (no traceback) and exit non-zero."""
    try:
        rc = app(args=argv, standalone_mode=False)   # click returns typer.Exit's code here rather than raising
        if isinstance(rc, int) and rc:
            return rc
    except SimrouteError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 130
    except Exception as exc:
        # Usage errors (missing argument, bad option value, unknown command) come from the click that typer
        # uses, which may be typer's bundled copy rather than the `click` package: match them by behaviour.
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            return exc.exit_code or 2
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
