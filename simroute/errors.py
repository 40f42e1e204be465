"""User-facing errors. The CLI prints these without a traceback and exits non-zero."""

from __future__ import annotations

from pathlib import Path


class SimrouteError(Exception):
    """Base class of every error caused by user input (not by a bug)."""

    exit_code = 2


class ConfigurationError(SimrouteError):
    """A config, topology, profile or trace is malformed: names the file, the field and the problem."""

    def __init__(self, problem: str, *, file: str | Path | None = None, field: str | None = None,
                 line: int | None = None) -> None:
        self.file = str(file) if file is not None else None
        self.field = field
        self.line = line
        self.problem = problem
        where = []
        if self.file:
            where.append(self.file + (f":{line}" if line is not None else ""))
        if field:
            where.append(f"field '{field}'")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {problem}" if prefix else problem)


class UnknownNameError(SimrouteError):
    """An unknown model, fabric, policy... : lists the valid names."""

    def __init__(self, kind: str, name: str, valid: list[str] | tuple[str, ...]) -> None:
        self.kind, self.name, self.valid = kind, name, list(valid)
        super().__init__(f"unknown {kind} '{name}'; valid: {', '.join(sorted(self.valid))}")
