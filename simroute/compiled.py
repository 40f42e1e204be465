"""The modules an install compiles with mypyc, which of them this process runs compiled, and how to run them as
Python.

A routed run's CPU is the exchange's per-leg state (link clocks, NIC contexts, holders' demand) and the
engine's per-event work: Python object operations, which the interpreter's dispatch does not bound (Cython
over the same sources, untyped, saved 7%). mypyc compiles the same type-annotated sources into native classes
(attributes in C structs, typed methods called directly): one source, no second implementation to keep equal;
always-route on the agent trace went 12.14 -> 8.85 us per iteration with identical outputs. `pip install .`
installs plain Python; `SIMROUTE_COMPILE=1 pip install .` compiles them (setup.py: ~35 CPU-seconds more, and
an error, not a Python install, when mypyc or the C compiler fails); an editable install (`pip install -e .`) is
never compiled, so that an edited source is what runs.
docs/ARCHITECTURE.md ("Where a routed run's CPU goes") has the measurements and what was left out and why.

A compiled module behaves as its source does, with two differences a contributor meets:
- its type annotations are checked at run time (a `None` passed where `float` is declared raises TypeError);
- its classes are native: no attributes beyond those `__init__` sets, no patched methods (the planted-bug tests
  run on the sources), and a Python subclass only where the class says `allow_interpreted_subclasses`
  (`MessageModel`).
`SIMROUTE_PURE_PYTHON=1` in the environment runs an install's compiled modules from their sources (set before
`import simroute`).
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec, PathFinder

# module -> its source, relative to the project root (setup.py compiles these, in this order)
COMPILED_MODULES = {
    "simroute.network.messages": "simroute/network/messages.py",
    "simroute.sim.engine.exchange": "simroute/sim/engine/exchange.py",
    "simroute.sim.engine.engine": "simroute/sim/engine/engine.py",
    "simroute.sim.engine.log": "simroute/sim/engine/log.py",
    "simroute.sim.engine.hbm": "simroute/sim/engine/hbm.py",
    # the flow engine's object-mode solver: group re-rating (maxmin.fill, the cascade) and group membership, their
    # link ids kept as Python ints (`maxmin.LinkId`). Not network/flows.py (numba compiles its functions into the
    # array-mode kernels, network/_compiled.py); not network/telemetry.py (its per-link clocks are lists or arrays,
    # read as objects: compiled, Zipf 2k ran the same instructions, docs/ARCHITECTURE.md); not network/engine.py
    # (tests and benches set its class attributes, which a native class does not take).
    "simroute.network.maxmin": "simroute/network/maxmin.py",
    "simroute.network.solvers.base": "simroute/network/solvers/base.py",
    "simroute.network.solvers.groups": "simroute/network/solvers/groups.py",
    "simroute.network.solvers.objects": "simroute/network/solvers/objects.py",
}
PURE_PYTHON_ENV = "SIMROUTE_PURE_PYTHON"
COMPILE_ENV = "SIMROUTE_COMPILE"            # at install time: build the compiled modules (setup.py)


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def compile_requested() -> bool:
    """The install asks for the compiled build (`SIMROUTE_COMPILE` set to anything but empty or 0)."""
    return _flag(COMPILE_ENV)


def pure_python_requested() -> bool:
    """The environment asks for the sources (`SIMROUTE_PURE_PYTHON` set to anything but empty or 0)."""
    return _flag(PURE_PYTHON_ENV)


def compiled_modules() -> list[str]:
    """The modules of COMPILED_MODULES that this process imported from a compiled extension (outputs record
    them beside the versions: a run states what ran)."""
    found = []
    for name in COMPILED_MODULES:
        module = sys.modules.get(name)
        if module is not None and str(getattr(module, "__file__", "")).endswith(tuple(EXTENSION_SUFFIXES)):
            found.append(name)
    return found


class SourcesFirst:
    """A meta-path finder that imports COMPILED_MODULES from their `.py` files where a compiled extension sits
    beside them (`SIMROUTE_PURE_PYTHON`): the same code as Python, for a debugger, a profiler or a check
    that the compiled build computes what its sources do."""

    @classmethod
    def find_spec(cls, name: str, path=None, target=None) -> ModuleSpec | None:
        if name not in COMPILED_MODULES:
            return None
        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.origin is None or not spec.origin.endswith(tuple(EXTENSION_SUFFIXES)):
            return None             # no extension found: the normal import finds the source anyway
        from importlib.util import spec_from_file_location
        source = os.path.join(os.path.dirname(spec.origin), name.rpartition(".")[2] + ".py")
        if not os.path.isfile(source):
            return None
        return spec_from_file_location(name, source)


def prefer_sources() -> None:
    """Import COMPILED_MODULES from their sources from now on (modules already imported stay as they are)."""
    if SourcesFirst not in sys.meta_path:
        sys.meta_path.insert(0, SourcesFirst)   # type: ignore[arg-type]


def follow_environment() -> None:
    """`prefer_sources` when the environment asks for the sources (`import simroute` calls this)."""
    if pure_python_requested():
        prefer_sources()
