"""Options and output helpers shared by the CLI modules."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import typer
from typer.core import TyperCommand

CALIB_HELP = "Calibration profile: a YAML path or a shipped name (see `simroute calib list`)."


# True when the process ends with the command (`main()` on the process's own command line, not a test's or an
# embedding program's call): the collector may then leave what is loaded, and the heap at exit, untraversed.
_PROCESS_ENDS_WITH_COMMAND = False


def process_ends_with_command() -> None:
    """Called by `main()` for the process's own command line (the console script, `python -m simroute`)."""
    global _PROCESS_ENDS_WITH_COMMAND
    _PROCESS_ENDS_WITH_COMMAND = True


def ends_with_command() -> bool:
    """Whether the process ends with this command (`process_ends_with_command` was called)."""
    return _PROCESS_ENDS_WITH_COMMAND


BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"


def one_blas_thread() -> None:
    """Called by `main()` for the process's own command line, before anything loads numpy: OpenBLAS (numpy's
    BLAS) is asked for one thread unless the user set `OPENBLAS_NUM_THREADS`. At import OpenBLAS starts a thread
    per core that spins waiting for work: CPU time the process pays (0.04 s of the default run's start-up,
    bench/bench_run_startup.py). The simulator runs on one thread and its numpy work is elementwise, sorting and
    searching, none of it BLAS; the probes' numpy backend serves dry runs and correctness references, never a
    timing. Child processes (a study's workers) inherit the setting, so they do not oversubscribe the cores."""
    os.environ.setdefault(BLAS_THREADS_ENV, "1")


def leave_heap_to_exit() -> None:
    """Where the process ends next: every object alive is moved out of the cyclic collector's reach
    (`gc.freeze`), so the interpreter's teardown skips its full collections over the whole heap (0.1 of the
    default run's ~1 CPU s, bench/bench_run_startup.py) and the memory goes back with the process."""
    if _PROCESS_ENDS_WITH_COMMAND:
        import gc
        gc.freeze()


@contextlib.contextmanager
def loading_modules() -> Iterator[None]:
    """The cyclic collector paused while a command loads its modules: imports make long-lived objects (modules,
    classes, functions) and little garbage, which the collector would traverse again and again as they load.
    Where the process ends with the command, what loaded is then frozen (`gc.freeze`: never traversed again;
    0.05 of the default run's ~1 CPU s, bench/bench_run_startup.py); else its next pass takes it as usual.
    The collector's state is restored after."""
    import gc
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _PROCESS_ENDS_WITH_COMMAND:
            gc.freeze()
        if paused:
            gc.enable()


def lazy_command(build: Callable[[], Callable[..., None]], name: str):
    """A `cls=` for `app.command(name, cls=...)` on a stub: the command's options and callback come from
    `build()` (a function with the real signature), called when they are first needed (parsing the command's
    arguments or printing its own help), not when the CLI is built. `simroute run`'s options are read from
    RunConfig, which imports the simulator's registries; every other command and `--help` need not wait for
    that. The stub's docstring is what `simroute --help` lists."""
    def make() -> Any:
        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        with loading_modules():
            single.command(name)(build())
        return typer.main.get_command(single)   # one command: a command, not a group
    return _lazy(make)


def built_on_first_use(app: typer.Typer) -> None:
    """Every command of `app` and of its groups that names no class of its own gets its options and callback
    when first used, as `lazy_command` gives `run` its own: the CLI builds (from each function's signature) only
    the command it runs, not the others' (~0.015 CPU s of `simroute run`, bench/bench_run_startup.py). The
    command is the one typer builds from the same registration (tests/test_cli_collector.py compares every
    command's help with the eager build's)."""
    import copy
    for info in app.registered_commands:
        if info.cls not in (None, TyperCommand) or info.callback is None:
            continue
        real = copy.copy(info)

        def make(real: Any = real) -> Any:
            single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
            single.registered_commands.append(real)
            return typer.main.get_command(single)
        info.callback = _stub(real.callback)
        info.cls = _lazy(make)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            built_on_first_use(group.typer_instance)


def _stub(callback: Callable[..., Any]) -> Callable[[], None]:
    """A function of no options with `callback`'s name and docstring: the command's name and help, unbuilt."""
    def stub() -> None:
        raise AssertionError("unreachable: the lazy command calls the real command's callback")
    stub.__name__, stub.__qualname__, stub.__doc__ = callback.__name__, callback.__qualname__, callback.__doc__
    return stub


def _lazy(make: Callable[[], Any]) -> type:
    """A command class whose options and callback are those of `make()`'s command, built on first use; their
    plain values converted by `plain_values`, as a `PlainValues` command's are."""

    class LazyCommand(TyperCommand):
        _built: Any = None

        def _real(self) -> Any:
            if self._built is None:
                built = make()
                plain_values(built.params)
                type(self)._built = built
            return self._built

        def get_help_option(self, ctx: Any) -> Any:
            option = super().get_help_option(ctx)
            plain_values([option] if option is not None else [])
            return option

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


def plain_values(params: list[Any]) -> None:
    """Option values of plain types (str, int, float, an Enum) given plainly (`--mq 256`, `--offset cached`) are
    converted by `_PlainValue`, in range, as typer would, and so are an absent value and a path option's default
    (typer's own path check); anything else (a range violated, `1e3`, a path given as text) goes to typer's own
    conversion and its messages. Typer converts every value through a pydantic TypeAdapter, and importing
    pydantic is most of what `simroute --help` and `predict` would otherwise wait for (bench/bench_cli.py); a
    default `simroute run` would build ~40 of them (bench/bench_run_startup.py). A typer without that converter
    (no `_runtime_param`) is left as it is."""
    for param in params:
        if getattr(param, "_runtime_param", 0) is None and hasattr(param, "type_descriptor"):
            param._runtime_param = _PlainValue(param.type_descriptor)


class PlainValuesMixin:
    """A command's (or group's) options and its `--help` converted by `plain_values`."""

    params: list[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        plain_values(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        plain_values([option] if option is not None else [])
        return option


class PlainValues(PlainValuesMixin, TyperCommand):
    """A `cls=` for `app.command(name, cls=PlainValues)`: a light command's values without pydantic."""


_NOT_PLAIN = object()
_INT = r"-?(?:0|[1-9][0-9]*)"
_FLOAT = _INT + r"(?:\.[0-9]+)?"


class _PlainValue:
    """Typer's coercion of one parameter for values of plain types; typer's own for every other value."""

    def __init__(self, descriptor: Any) -> None:
        self.annotation, self.info = descriptor.annotation, descriptor.parameter_info
        self.path = getattr(descriptor, "is_path", False)

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:       # as typer's RuntimeParam.coerce: an absent value is converted by no adapter
            return () if (param.multiple or param.nargs == -1) else None
        if getattr(self.info, "parser", None) is not None or getattr(self.info, "click_type", None) is not None:
            plain = _NOT_PLAIN      # an option's own parser or click type: typer runs it
        else:
            plain = self._path(value, param, ctx) if self.path else self._plain(value)
        if plain is not _NOT_PLAIN:
            return plain
        param._runtime_param = None     # typer builds its own (pydantic) converter: its checks, its messages
        return param.get_runtime_param().coerce(value, param=param, ctx=ctx)

    def _path(self, value: Any, param: Any, ctx: Any) -> Any:
        """A path option's value, a path already (its default) or a text (`-o out`) made the option's path type as
        pydantic's lax validation makes it: typer's own path check (exists, file or directory, ...), which needs
        pydantic only to turn a text into a path. An empty text or one holding NUL goes to typer's own converter,
        for its message."""
        from pathlib import Path, PurePath
        try:
            from typer._param_types import coerce_cli_path
        except ImportError:
            return _NOT_PLAIN
        path_type = self.info.path_type
        if path_type is None and isinstance(self.annotation, type) and issubclass(self.annotation, Path):
            path_type = self.annotation
        if isinstance(value, str) and value and "\x00" not in value and isinstance(path_type, type) \
                and issubclass(path_type, Path):
            value = path_type(value)    # what pydantic's lax path validation does with a text (`-o out`)
        if not isinstance(value, PurePath) or not (path_type in (None, str, bytes) or isinstance(value, path_type)):
            return _NOT_PLAIN
        return coerce_cli_path(value, self.info, path_type=path_type, param=param, ctx=ctx)

    def _plain(self, value: Any) -> Any:
        import re
        from enum import Enum
        kind, info = self.annotation, self.info
        if kind is str and isinstance(value, str):
            return value
        if isinstance(kind, type) and issubclass(kind, Enum) and info.case_sensitive:
            for member in kind:
                if value is member or (isinstance(value, str) and value == member.value):
                    return member
            return _NOT_PLAIN
        if kind not in (int, float) or isinstance(value, bool) or getattr(info, "clamp", False):
            return _NOT_PLAIN
        if isinstance(value, str) and re.fullmatch(_INT if kind is int else _FLOAT, value):
            number = kind(value)
        elif isinstance(value, int) or (kind is float and isinstance(value, float) and value == value):
            number = kind(value)
        else:
            return _NOT_PLAIN
        if (info.min is not None and number < info.min) or (info.max is not None and number > info.max):
            return _NOT_PLAIN
        return number


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
