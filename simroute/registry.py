"""Named variants of one kind: the one extension mechanism of simroute, in every layer.

A variant is a class registered under a name with `@REGISTRY.register("name")`; its docstring's first line
is its help text. Each kind has one registry, found by its kind (`registry("router")`, `registry("topology")`),
and one package of plug-in modules (`PACKAGES`). A registry loads its package on first read, and the package
imports every module in its directory (`discover`), so adding a variant is one new module in that directory:
no list to edit. The packages are named here as strings and imported by name, so this base module imports no
layer, and a layer below the simulator (the network's topology kinds and routing strategies) files its
classes in the same registries the simulator reads.

Most kinds are classes; a kind may hold other objects (`add(name, variant)`): a trace generator is its
parameters and function, a CLI command group is its module's `register(app)`. A kind's package may be a
pattern, `"simroute.workload.generators_*"`: the modules of that package whose names match, imported in
name order; `"simroute.cli.*_cmd:register"` files each matching module's `register` under the module's name
less the pattern's fixed part (`topo_cmd` -> `topo`), so such a module needs no decorator.

The simulator's use of it (a run builds each variant through `create`, with the random stream `run_rng` hands
that kind) is in simroute/sim/registry.py.
"""

from __future__ import annotations

import fnmatch
import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from simroute.errors import UnknownNameError

T = TypeVar("T")

# kind -> the package whose modules hold its variants (imported by name on first read: no import edge).
PACKAGES: dict[str, str] = {
    "router": "simroute.sim.routers",
    "prefill-router": "simroute.sim.prefill_routers",
    "policy": "simroute.sim.policies",
    "placement": "simroute.sim.placements",
    "scheduler": "simroute.sim.schedulers",
    "framework": "simroute.sim.frameworks",
    "routing": "simroute.network.routing",
    "topology": "simroute.network.kinds",
    "solver": "simroute.network.solvers",
    "replay": "simroute.network.replay",
    "generator": "simroute.workload.generators_*",
    "importer": "simroute.workload.importers.*",
    "command": "simroute.cli.*_cmd:register",
}

# kind -> the words an error names it by, where they differ from the kind ("unknown trace generator 'x'")
LABELS: dict[str, str] = {
    "prefill-router": "prefill router",
    "solver": "solver mode",
    "replay": "replay backend",
    "generator": "trace generator",
    "importer": "trace format",
    "command": "command group",
}


class Registry(Generic[T]):
    """Variants of one kind (classes, or other objects through `add`), by name, in registration order (modules
    are discovered in name order). `label`: the words errors name the kind by (default: the kind)."""

    def __init__(self, kind: str, package: str | None = None, label: str | None = None) -> None:
        self.kind = kind
        self.package = package
        self.label = label or kind
        self._classes: dict[str, T] = {}
        self._loaded = package is None

    def register(self, name: str) -> Callable[[T], T]:
        """Class decorator: register under `name` (sets `cls.name`); a second class under one name is refused."""
        def deco(cls: T) -> T:
            self.add(name, cls)
            if isinstance(cls, type):
                cls.name = name       # type: ignore[attr-defined]
            return cls
        return deco

    def add(self, name: str, variant: T) -> T:
        """File `variant` under `name`; a second, different variant under one name is refused."""
        if name in self._classes and self._classes[name] is not variant:
            held = self._classes[name]
            raise ValueError(f"{self.label} '{name}' is already registered by "
                             f"{getattr(held, '__qualname__', type(held).__qualname__)}")
        self._classes[name] = variant
        return variant

    def unregister(self, name: str) -> None:
        """Remove a variant (tests that register a throw-away example use this to clean up)."""
        self._classes.pop(name, None)

    @property
    def classes(self) -> dict[str, T]:
        """Name -> class, the kind's package loaded first (the same dict object for the registry's life, so a
        module that keeps a reference to it sees later registrations)."""
        if not self._loaded:
            self._loaded = True
            self._load(self.package)                       # its modules register as they load
            # module name order, whichever module happened to be imported first (a stable sort: one module's
            # classes keep their registration order)
            order = sorted(self._classes.items(), key=lambda item: _module_of(item[1]))
            self._classes.clear()
            self._classes.update(order)
        return self._classes

    @property
    def registered(self) -> dict[str, T]:
        """The variants registered so far, the package not loaded (the same dict as `classes`): for a check
        made while the package's own modules load."""
        return self._classes

    @property
    def variants(self) -> dict[str, T]:
        """`classes`, by a name that fits a kind whose variants are not classes."""
        return self.classes

    def _load(self, package: str) -> None:
        """Import the kind's package, or the modules its pattern names (see the module's docstring)."""
        where, _, attribute = package.partition(":")
        parent, _, pattern = where.rpartition(".")
        if "*" not in pattern:
            importlib.import_module(where)
            return
        found = importlib.import_module(parent)
        for module in sorted(pkgutil.iter_modules(found.__path__), key=lambda info: info.name):
            if module.name.startswith("_") or not fnmatch.fnmatchcase(module.name, pattern):
                continue
            loaded = importlib.import_module(f"{parent}.{module.name}")
            if attribute:
                fixed = [part for part in pattern.split("*") if part]
                name = module.name
                for part in fixed:
                    name = name.replace(part, "", 1)
                self.add(name, getattr(loaded, attribute))

    def get(self, name: str) -> T:
        try:
            return self.classes[name]
        except KeyError:
            raise UnknownNameError(self.label, name, list(self.classes)) from None

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
        found = _REGISTRIES[kind] = Registry(kind, PACKAGES[kind], LABELS.get(kind))
    return found


def discover(package: str, path: list[str]) -> None:
    """Import every public module of a plug-in package (a package's `__init__` calls this with its own
    `__name__` and `__path__`), so a module dropped into the directory registers its variants."""
    for module in sorted(pkgutil.iter_modules(path), key=lambda info: info.name):
        if not module.name.startswith("_") and module.name != "base":
            importlib.import_module(f"{package}.{module.name}")


def _module_of(variant: Any) -> str:
    """The module a variant was defined in (a record such as a generator: its function's)."""
    fn = getattr(variant, "fn", None)
    module = getattr(fn if fn is not None else variant, "__module__", None)
    return module if isinstance(module, str) else ""


def _first_line(cls: Any) -> str:
    doc = (cls.__doc__ or "").strip()
    return doc.splitlines()[0].rstrip(".") if doc else cls.__qualname__
