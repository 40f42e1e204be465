"""One place for value checks at every boundary (configs, profiles, topologies, traces, CLI flags).

NaN and inf pass every `< 0` comparison, bools are ints and numeric strings look like numbers: each check
here refuses all three and raises a `ConfigurationError` naming the file and the field.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from simroute.errors import ConfigurationError


def check_number(value: object, field: str, *, file: str | Path | None = None, integer: bool = False,
                 minimum: float | None = None, maximum: float | None = None, exclusive_minimum: bool = False,
                 allow_none: bool = False) -> float | int | None:
    """Return `value` if it is a finite real number (an int when `integer`) within the bounds, else raise."""
    if value is None and allow_none:
        return None
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"must be {kind}, got {value!r}", file=file, field=field)
    if integer and not isinstance(value, int):
        if not float(value).is_integer():
            raise ConfigurationError(f"must be an integer, got {value!r}", file=file, field=field)
        value = int(value)
    if not math.isfinite(value):
        raise ConfigurationError(f"must be finite, got {value!r}", file=file, field=field)
    if minimum is not None:
        if exclusive_minimum and not value > minimum:
            raise ConfigurationError(f"must be > {minimum:g}, got {value!r}", file=file, field=field)
        if not exclusive_minimum and value < minimum:
            raise ConfigurationError(f"must be >= {minimum:g}, got {value!r}", file=file, field=field)
    if maximum is not None and value > maximum:
        raise ConfigurationError(f"must be <= {maximum:g}, got {value!r}", file=file, field=field)
    return value


MAX_NAME_CHARS = 128
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def check_name(value: object, field: str, *, file: str | Path | None = None, what: str = "name") -> str:
    """Return `value` if it is a plain name (a GPU entry, a framework, a generator, a policy), else raise.

    A name is looked up in a folder of shipped files or a table, so a value that is a path (`/etc`, `..`,
    `h200_sxm/gemm`), a pattern (`*`), empty or blank would otherwise reach the file system or a glob and be
    reported as something else: letters, digits and `.`, `_`, `+`, `-`, starting with a letter or digit."""
    if not isinstance(value, str):
        raise ConfigurationError(f"must be a {what}, got {value!r}", file=file, field=field)
    if not value.strip():
        raise ConfigurationError(f"must be a {what}, got an empty value", file=file, field=field)
    if len(value) > MAX_NAME_CHARS or not _NAME.fullmatch(value) or ".." in value:
        kind = ("a path" if "/" in value or "\\" in value or value.startswith(".") else
                "a pattern" if any(ch in value for ch in "*?[]{}") else "not a plain name")
        raise ConfigurationError(f"{value[:60]!r} is {kind}: a {what} is letters, digits, '.', '_', '+' or '-'",
                                 file=file, field=field)
    return value
