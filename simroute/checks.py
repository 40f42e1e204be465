"""One place for value checks at every boundary (configs, profiles, topologies, traces, CLI flags).

NaN and inf pass every `< 0` comparison, bools are ints and numeric strings look like numbers: each check
here refuses all three and raises a `ConfigurationError` naming the file and the field.
"""

from __future__ import annotations

import math
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
