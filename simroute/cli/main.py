"""The `simroute` console script.

Each concern registers its commands from its own module (`simroute/cli/<name>_cmd.py`, a `register(app)`
function, found by `simroute.registry`), so the CLI stays thin and modules can be added without touching the
others. Heavy imports (pandas, simpy, matplotlib, the simulator, the flow engine) happen inside the commands,
and each command's options are built when it runs or prints its help (`common.built_on_first_use`; `run`'s,
read from RunConfig, by `common.lazy_command`), keeping `--help`, `predict` and `run`'s start-up short;
tests/test_light_commands.py checks what they import, bench/bench_cli.py and bench/bench_run_startup.py time them.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from simroute import __version__
from simroute.cli.common import (PlainValuesMixin, built_on_first_use, leave_heap_to_exit, one_blas_thread,
                                 process_ends_with_command)
from simroute.errors import SimrouteError
from simroute.registry import registry

DEFAULT_COMMAND = "run"     # the product's main job: listed first by `simroute --help`


class _CommandsInOrder(PlainValuesMixin, TyperGroup):
    """`simroute --help` lists the default command first, then the others alphabetically; its options'
    values are converted without pydantic where they are plain (`common.plain_values`)."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = sorted(self.commands)
        return [DEFAULT_COMMAND] * (DEFAULT_COMMAND in names) + [n for n in names if n != DEFAULT_COMMAND]


app = typer.Typer(
    name="simroute",
    cls=_CommandsInOrder,
    help="Discrete-event cluster simulator of cross-instance attention (route / fetch / local), "
         "calibrated by hardware probes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# The command groups: every module `simroute/cli/<name>_cmd.py`, discovered by the one registry of named
# variants, which files its `register(app: typer.Typer) -> None` under <name> (a new group is one new module).
COMMANDS = registry("command")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"simroute {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """simroute: route the query or move the cache? Simulate it on your cluster."""


for _register in COMMANDS.variants.values():
    _register(app)
built_on_first_use(app)     # each command's options built when it runs or shows its help, not all of them


def main(argv: list[str] | None = None) -> int:
    """Run the CLI: a user error prints one line (no traceback) and exits 2; a bug prints one line and a log path.

    Any exception that is not a `SimrouteError` or a usage error is a bug in simroute, whatever input caused
    it: its traceback goes to a log file (`internal_error_log`) and the user sees where, never a bare dump.
    `argv` None is the process's own command line (the console script, `python -m simroute`): the process
    ends when this returns, which spares the cyclic collector work (`common.loading_modules`,
    `common.leave_heap_to_exit`), and asks OpenBLAS for one thread (`common.one_blas_thread`).
    """
    if argv is None:
        process_ends_with_command()
        one_blas_thread()
    saved = sys.stdout, sys.stderr
    _guard_standard_streams()
    try:
        return _main(argv)
    except SystemExit as exc:       # click's own exit on a broken pipe (it quiets the streams and exits 1)
        pipe_gone = type(sys.stdout).__name__ == "PacifyFlushWrapper"
        sys.stdout = saved[0] if saved[0] is not None else sys.stdout
        if pipe_gone:
            _silence_stdout()       # so the interpreter's exit-time flush has nothing left to fail on
        return exc.code if isinstance(exc.code, int) else 1
    finally:                        # the caller's streams back (a test's capture, an embedding program's)
        if saved[0] is not None:
            sys.stdout = saved[0]
        if saved[1] is not None:
            sys.stderr = saved[1]
        leave_heap_to_exit()


def _main(argv: list[str] | None) -> int:
    try:
        rc = app(args=argv, standalone_mode=False)   # click returns typer.Exit's code here rather than raising
        if isinstance(rc, int) and rc:
            return rc
        _flush_stdout()
    except SimrouteError as exc:
        _say(f"error: {_one_line(str(exc))}")
        return exc.exit_code
    except OSError as exc:
        fault = machine_fault(exc)
        if fault is None:
            return _internal_error(exc, argv)
        message, code = fault
        _say(f"error: {message}")
        if code == 1:
            _silence_stdout()
        return code
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        _say("aborted")
        return 130
    except MemoryError:      # what the size checks did not foresee: still the input's size, not a crash
        _say("error: not enough memory for this input on this machine (a smaller trace, study or --max-requests "
             "would fit); no output was replaced")
        return 2
    except Exception as exc:  # noqa: BLE001 - the last line of defence, see the docstring
        # Usage errors (missing argument, bad option value, unknown command) come from the click that typer
        # uses, which may be typer's bundled copy rather than the `click` package: match them by behaviour.
        if callable(getattr(exc, "format_message", None)) and isinstance(getattr(exc, "exit_code", None), int):
            return _usage_error(exc)
        return _internal_error(exc, argv)
    return 0


INTERNAL_ERROR = 70     # EX_SOFTWARE: distinct from the 2 of a user error, so scripts can tell them apart


def _internal_error(exc: BaseException, argv: list[str] | None) -> int:
    log = _log_internal_error(argv)
    _say(f"internal error, please report: {type(exc).__name__}: {_one_line(str(exc))[:300]} (traceback in {log})")
    return INTERNAL_ERROR


# Faults of the machine, not of simroute or its input: what could not be written, and why (exit 2; 1 where
# the reader of stdout went away, as a closed pipe is for other tools).
DISK_FAULTS = {errno.ENOSPC: "no space left on the device", errno.EROFS: "the file system is read-only",
               errno.EDQUOT: "the disk quota is exceeded", errno.EFBIG: "the file is too large for the file system",
               errno.EIO: "an input/output error of the device", errno.EACCES: "permission denied",
               errno.EPERM: "operation not permitted", errno.EMFILE: "too many open files",
               errno.ENFILE: "too many open files in the system",
               # a path the file system cannot take: the user's to change, like any other bad input
               errno.ENAMETOOLONG: "the file name is too long for the file system",
               errno.ELOOP: "too many levels of symbolic links", errno.ENOTDIR: "a part of the path is not a directory",
               errno.EISDIR: "it is a directory", errno.ENXIO: "no such device"}
STREAM_FAULTS = (errno.EPIPE, errno.EBADF)
FAULT_TEXTS = {"No space left on device": errno.ENOSPC, "Read-only file system": errno.EROFS,
               "Disk quota exceeded": errno.EDQUOT, "Broken pipe": errno.EPIPE}


def machine_fault(exc: OSError) -> tuple[str, int] | None:
    """(one line, exit code) for an OSError the machine caused, None for any other (a bug)."""
    code = exc.errno
    if code is None:     # pyarrow and friends raise OSError with the errno only in the text
        code = next((c for text, c in FAULT_TEXTS.items() if text in str(exc)), None)
    if code in STREAM_FAULTS and (exc.filename is None or code == errno.EPIPE):
        return "cannot write to standard output: it is closed (a closed pipe or 1>&-)", 1
    if code not in DISK_FAULTS:
        return None
    where = getattr(exc, "simroute_output", None) or exc.filename or _path_in(str(exc))
    if where == STDOUT:
        return f"cannot write to standard output: {DISK_FAULTS[code]}", 2
    verb = "write" if code in (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG) else "access"
    return f"cannot {verb} {where or 'a file'}: {DISK_FAULTS[code]}; no output was replaced", 2


STDOUT = "standard output"


class _TaggedStream:
    """stdout, with its write faults marked as stdout's (a full /dev/full, a pipe gone), so the one-line error
    says what could not be written; everything else is the stream's own."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            exc.simroute_output = STDOUT
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            exc.simroute_output = STDOUT
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _path_in(text: str) -> str | None:
    """The file an OSError's message names (pyarrow: "... Failed to open local file '/x/y'. ...")."""
    import re
    match = re.search(r"'(/[^']+)'", text)
    return match.group(1) if match else None


class _ClosedStream(io.TextIOBase):
    """Stands for a standard stream that was closed before simroute started (`1>&-`): writing to it is a
    clear error, not a crash on `None`."""

    encoding = "utf-8"

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def isatty(self) -> bool:
        return False


def _guard_standard_streams() -> None:
    """A closed stdout becomes a stream that fails clearly; an encoding that cannot write every character
    (an ASCII-only terminal) writes escapes instead of failing."""
    if sys.stdout is None:
        sys.stdout = _ClosedStream()
    if sys.stderr is None or not _usable(sys.stderr):   # nowhere to say anything: the exit code is all that is left
        sys.stderr = open(os.devnull, "w")      # noqa: SIM115 - lives as long as the process
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            with contextlib.suppress(ValueError, OSError, io.UnsupportedOperation):
                reconfigure(errors="backslashreplace")
    if not isinstance(sys.stdout, (_ClosedStream, _TaggedStream)):
        sys.stdout = _TaggedStream(sys.stdout)


def _usable(stream: Any) -> bool:
    """False for a standard stream over a descriptor that was closed before simroute started (`2>&-`)."""
    try:
        os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation) as exc:
        return not (isinstance(exc, OSError) and exc.errno == errno.EBADF)
    return True


def _flush_stdout() -> None:
    """Flush now, so a closed pipe is reported here and not as noise at interpreter exit."""
    if sys.stdout is not None:
        sys.stdout.flush()


def _say(line: str) -> None:
    """One line on stderr, never an exception of its own (stderr may be gone too)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        typer.secho(line, fg=typer.colors.RED, err=True)


def _silence_stdout() -> None:
    """The reader of stdout left: point the descriptor at /dev/null so the interpreter's exit-time flush
    does not print a second error."""
    if isinstance(sys.stdout, _ClosedStream):
        return
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _usage_error(exc: Exception) -> int:
    """click's usage error as one line: what is wrong, with the command to ask for help."""
    ctx = getattr(exc, "ctx", None)
    where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    _say(f"error: {_one_line(exc.format_message())}{where}")
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
