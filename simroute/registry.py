"""Named variants of one kind: the one extension mechanism of simroute, in every layer.

A variant is a class registered under a name with `@REGISTRY.register("name")`; its docstring's first line
is its help text. Each kind has one registry, found by its kind (`registry("router")`, `registry("topology")`),
and one package of plug-in modules (`PACKAGES`). A registry loads its package on first read, and the package
imports every module in its directory (`discover`), so adding a variant is one new module in that directory:
no list to edit. The packages are named here as strings and imported by name, so this base module imports no
layer, and a layer below the simulator (the network's topology kinds and routing strategies) files its
classes in the same registries the simulator reads.

The simulator's use of it (a run builds each variant through `create`, with the random stream `run_rng` hands
that kind) is in simroute/sim/registry.py.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from simroute.errors import UnknownNameError

T = TypeVar("T", bound=type)

# kind -> the package whose modules hold its variants (imported by name on first read: no import edge).
PACKAGES: dict[str, str] = {
    "router": "simroute.sim.routers",
    "policy": "simroute.sim.policies",
    "placement": "simroute.sim.placements",
    "scheduler": "simroute.sim.schedulers",
    "framework": "simroute.sim.frameworks",
    "routing": "simroute.network.routing",
    "topology": "simroute.network.kinds",
}


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
        """Name -> class, the kind's package loaded first (the same dict object for the registry's life, so a
        module that keeps a reference to it sees later registrations)."""
        if not self._loaded:
            self._loaded = True
            importlib.import_module(self.package)          # its modules register as they load
            # module name order, whichever module happened to be imported first (a stable sort: one module's
            # classes keep their registration order)
            order = sorted(self._classes.items(), key=lambda item: item[1].__module__)
            self._classes.clear()
            self._classes.update(order)
        return self._classes

    def get(self, name: str) -> T:
        try:
            return self.classes[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, list(self.classes)) from None

    def create(self, name: str, config: Any, rng: Any) -> Any:
        """The variant `name` built for one run (`config`: its `RunConfig`, untyped here so that the registry
        stays below the config; `rng`: the kind's random stream): `cls.from_run(config, rng)`, or `cls()` for a
        class without `from_run`."""
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


def _first_line(cls: type) -> str:
    doc = (cls.__doc__ or "").strip()
    return doc.splitlines()[0].rstrip(".") if doc else cls.__qualname__
