"""Named variants of one kind (policies, routers, placements): the one extension mechanism of `simroute.sim`.

A variant is a class registered under a name with `@REGISTRY.register("name")`; its docstring's first line
is its help text. Configs hold the name, `RunConfig` validates it against the registry, the CLI lists the
registry's names and help. Adding a variant is one new module plus one import line in the package that
loads the built-ins (see `simroute/sim/policies/__init__.py` for the pattern).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from simroute.errors import UnknownNameError

T = TypeVar("T", bound=type)


class Registry(Generic[T]):
    """Classes of one kind, by name, in registration order."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._classes: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Class decorator: register under `name` (sets `cls.name`); a second class under one name is refused."""
        def deco(cls: T) -> T:
            if name in self._classes and self._classes[name] is not cls:
                raise ValueError(f"{self.kind} '{name}' is already registered by {self._classes[name].__qualname__}")
            cls.name = name
            self._classes[name] = cls
            return cls
        return deco

    def unregister(self, name: str) -> None:
        """Remove a variant (tests that register a throw-away example use this to clean up)."""
        self._classes.pop(name, None)

    def get(self, name: str) -> T:
        try:
            return self._classes[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, list(self._classes)) from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._classes)

    def help(self) -> str:
        """'name: first docstring line; ...' for CLI help."""
        return "; ".join(f"{n}: {_first_line(c)}" for n, c in self._classes.items())

    def __contains__(self, name: object) -> bool:
        return name in self._classes

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)


def _first_line(cls: type) -> str:
    doc = (cls.__doc__ or "").strip()
    return doc.splitlines()[0].rstrip(".") if doc else cls.__qualname__
