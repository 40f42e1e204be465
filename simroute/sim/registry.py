"""Named variants of one kind (policies, routers, placements, schedulers): the one extension mechanism of
`simroute.sim`.

A variant is a class registered under a name with `@REGISTRY.register("name")`; its docstring's first line
is its help text. Each kind has one registry, found by its kind (`registry("router")`), and one package of
plug-in modules (`PACKAGES`). A registry loads its package on first read, and the package imports every
module in its directory (`discover`), so adding a variant is one new module in that directory: no list to
edit. `RunConfig` therefore names kinds, not plug-in packages, and a plain value object stays below them.

A run builds each variant through its registry, `create(name, config, rng)`: the class's `from_run`
takes what it needs from the run's config and the random stream the run hands that kind (`run_rng`, derived
from the run's seed), so a random variant is still a pure function of the run's inputs and seed.
"""

from __future__ import annotations

import importlib
import pkgutil
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import numpy as np

from simroute.errors import UnknownNameError

T = TypeVar("T", bound=type)

# kind -> the package whose modules hold its variants (imported by name on first read: no import edge).
PACKAGES: dict[str, str] = {
    "router": "simroute.sim.routers",
    "policy": "simroute.sim.policies",
    "placement": "simroute.sim.placements",
    "scheduler": "simroute.sim.schedulers",
    "routing": "simroute.network.routing",
}
# kinds whose classes a lower layer files in its own dict (network/ may not import sim/): name of that dict
MIRRORED: dict[str, str] = {"routing": "ROUTING_STRATEGIES"}


class Registry(Generic[T]):
    """Classes of one kind, by name, in registration order (modules are discovered in name order)."""

    def __init__(self, kind: str, package: str | None = None) -> None:
        self.kind = kind
        self.package = package
        self._classes: dict[str, T] = {}
        self._loaded = package is None

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

    @property
    def classes(self) -> dict[str, T]:
        """Name -> class, the kind's package loaded first."""
        if not self._loaded:
            self._loaded = True
            module = importlib.import_module(self.package)          # its modules register as they load
            if self.kind in MIRRORED:
                self._classes = getattr(module, MIRRORED[self.kind])
            else:   # module name order, whichever module happened to be imported first
                order = sorted(self._classes.items(), key=lambda item: item[1].__module__)
                self._classes = dict(order)
        return self._classes

    def get(self, name: str) -> T:
        try:
            return self.classes[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, list(self.classes)) from None

    def create(self, name: str, config: Any, rng: np.random.Generator) -> Any:
        """The variant `name` built for one run (`config`: its `RunConfig`, untyped here so that the registry
        stays below the config): `cls.from_run(config, rng)`, or `cls()` for a class without `from_run`."""
        cls = self.get(name)
        from_run = getattr(cls, "from_run", None)
        return from_run(config, rng) if from_run is not None else cls()

    def names(self) -> tuple[str, ...]:
        return tuple(self.classes)

    def help(self) -> str:
        """'name: first docstring line; ...' for CLI help."""
        return "; ".join(f"{n}: {_first_line(c)}" for n, c in self.classes.items())

    def __contains__(self, name: object) -> bool:
        return name in self.classes

    def __iter__(self) -> Iterator[str]:
        return iter(self.classes)


_REGISTRIES: dict[str, Registry[Any]] = {}


def registry(kind: str) -> Registry[Any]:
    """The one registry of `kind` (created on first use; its package loads on first read)."""
    found = _REGISTRIES.get(kind)
    if found is None:
        if kind not in PACKAGES:
            raise UnknownNameError("plug-in kind", kind, list(PACKAGES))
        found = _REGISTRIES[kind] = Registry(kind, PACKAGES[kind])
    return found


def discover(package: str, path: list[str]) -> None:
    """Import every public module of a plug-in package (a package's `__init__` calls this with its own
    `__name__` and `__path__`), so a module dropped into the directory registers its variants."""
    for module in sorted(pkgutil.iter_modules(path), key=lambda info: info.name):
        if not module.name.startswith("_") and module.name != "base":
            importlib.import_module(f"{package}.{module.name}")


def run_rng(seed: int, kind: str) -> np.random.Generator:
    """The random stream a run hands the variants of one kind: its own per kind (drawing in a router does
    not shift a placement's draws), all derived from the run's seed."""
    return np.random.default_rng([seed, zlib.crc32(kind.encode())])


def _first_line(cls: type) -> str:
    doc = (cls.__doc__ or "").strip()
    return doc.splitlines()[0].rstrip(".") if doc else cls.__qualname__
