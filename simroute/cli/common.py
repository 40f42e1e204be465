"""Options and output helpers shared by the CLI modules."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import typer

CALIB_HELP = "Calibration profile: a YAML path or a shipped name (see `simroute calib list`)."


def lazy_command(build: Callable[[], Callable[..., None]], name: str):
    """A `cls=` for `app.command(name, cls=...)` on a stub: the command's options and callback come from
    `build()` (a function with the real signature), called when they are first needed (parsing the command's
    arguments or printing its own help), not when the CLI is built. `simroute run`'s options are read from
    RunConfig, which imports the simulator's registries; every other command and `--help` need not wait for
    that. The stub's docstring is what `simroute --help` lists."""
    from typer.core import TyperCommand

    class LazyCommand(TyperCommand):
        _built: Any = None

        def _real(self) -> Any:
            if self._built is None:
                single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
                single.command(name)(build())
                type(self)._built = typer.main.get_command(single)   # one command: a command, not a group
            return self._built

        @property
        def params(self) -> list:
            return self._real().params

        @params.setter
        def params(self, _stub: list) -> None:
            pass

        @property
        def callback(self) -> Callable[..., Any] | None:
            return self._real().callback

        @callback.setter
        def callback(self, _stub: Callable[..., Any] | None) -> None:
            pass

    return LazyCommand


def console():
    import sys
    from rich.console import Console
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.table import Table
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    console().print(t)


def echo_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=False, default=_default))


def _default(o: Any) -> Any:
    import numpy as np
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o))


def fmt_us(seconds: float) -> str:
    us = seconds * 1e6
    return f"{us:,.1f}" if us < 1e5 else f"{us:,.0f}"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{n:,.0f} B"
        n /= 1000.0
    return str(n)


def checked(flag: str, *, integer: bool = False, minimum: float | None = None, maximum: float | None = None,
            exclusive_minimum: bool = False):
    """A typer option callback: the value must be finite and in range (click's ranges let NaN through).

    Use as `typer.Option(1.0, "--time-scale", callback=checked("--time-scale", minimum=0, exclusive_minimum=True))`;
    the error names the flag, like every other bad-input error.
    """
    from simroute.checks import check_number

    def callback(value):
        if value is None:
            return None
        return check_number(value, flag, integer=integer, minimum=minimum, maximum=maximum,
                            exclusive_minimum=exclusive_minimum)
    return callback
