"""The flow engine's max-min solvers, one module each, registered by `SolverMode` (see `base` for the contract
and how to add one): object mode (`objects`), array mode (`arrays`) and the online core's adaptor (`online`).

Every module of this package is imported when it loads (in name order), so a new solver is one new module.
"""

from __future__ import annotations

import importlib
import pkgutil

from simroute.network.solvers.base import (SOLVERS, Solver, SolverHost, SolverMode, SolverSettings, register_solver,
                                           solver_class)

for _module in sorted(info.name for info in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")

__all__ = ["SOLVERS", "Solver", "SolverHost", "SolverMode", "SolverSettings", "register_solver", "solver_class"]
