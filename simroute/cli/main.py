"""The `simroute` console script.

Each concern registers its commands from its own module (`simroute/cli/<name>_cmd.py`, a `register(app)`
function), so the CLI stays thin and modules can be added without touching the others. Heavy imports
(pandas, simpy, matplotlib, the simulator, the flow engine) happen inside the commands, and `run`'s options,
read from RunConfig, are built on first use (`common.lazy_command`), keeping `--help` and `predict` fast;
tests/test_light_commands.py checks what they import, bench/bench_cli.py times them.
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
    "flows_cmd",
    "plan_cmd",
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
    """Run the CLI: a user error prints one line (no traceback) and exits 2; a bug prints one line and a log path.

    Any exception that is not a `SimrouteError` or a usage error is a bug in simroute, whatever input caused
    it: its traceback goes to a log file (`internal_error_log`) and the user sees where, never a bare dump.
    """
    try:
        rc = app(args=argv, standalone_mode=False)   # click returns typer.Exit's code here rather than raising
        if isinstance(rc, int) and rc:
            return rc
    except SimrouteError as exc:
        typer.secho(f"error: {_one_line(str(exc))}", fg=typer.colors.RED, err=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("aborted", err=True)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence, see the docstring
        # Usage errors (missing argument, bad option value, unknown command) come from the click that typer
        # uses, which may be typer's bundled copy rather than the `click` package: match them by behaviour.
        if callable(getattr(exc, "format_message", None)) and isinstance(getattr(exc, "exit_code", None), int):
            return _usage_error(exc)
        log = _log_internal_error(argv)
        typer.secho(f"internal error, please report: {type(exc).__name__}: {_one_line(str(exc))[:300]} "
                    f"(traceback in {log})", fg=typer.colors.RED, err=True)
        return INTERNAL_ERROR
    return 0


INTERNAL_ERROR = 70     # EX_SOFTWARE: distinct from the 2 of a user error, so scripts can tell them apart


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _usage_error(exc: Exception) -> int:
    """click's usage error as one line: what is wrong, with the command to ask for help."""
    ctx = getattr(exc, "ctx", None)
    where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    typer.secho(f"error: {_one_line(exc.format_message())}{where}", fg=typer.colors.RED, err=True)
    return getattr(exc, "exit_code", 2) or 2


def internal_error_log() -> "Path":
    """Where tracebacks of internal errors go: $SIMROUTE_LOG_DIR, else $XDG_STATE_HOME/simroute, else a
    per-user folder in the temp directory."""
    import os
    import tempfile
    from pathlib import Path
    if os.environ.get("SIMROUTE_LOG_DIR"):
        root = Path(os.environ["SIMROUTE_LOG_DIR"])
    elif os.environ.get("XDG_STATE_HOME"):
        root = Path(os.environ["XDG_STATE_HOME"]) / "simroute"
    else:
        root = Path(tempfile.gettempdir()) / f"simroute-{os.getuid()}"
    return root / "internal-errors.log"


def _log_internal_error(argv: list[str] | None) -> str:
    import datetime
    import traceback
    log = internal_error_log()
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as f:
            f.write(f"--- {datetime.datetime.now(datetime.timezone.utc).isoformat()} simroute {__version__} "
                    f"argv={sys.argv[:1] + list(argv if argv is not None else sys.argv[1:])}\n")
            f.write(traceback.format_exc())
        return str(log)
    except OSError:
        return "stderr (log file not writable): " + traceback.format_exc(limit=1).strip().splitlines()[-1]


if __name__ == "__main__":
    sys.exit(main())
