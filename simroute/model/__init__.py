"""The closed-form model of cross-instance attention ("Move the Query, Not the Cache" §3-§5): payload geometry,
cost terms, the route / fetch / local predicate and the affine fit; and the step time of one serving-engine
iteration (docs/STEP_TIME.md). Pure functions; no simulator inside.

The names below load with their module on first use (PEP 562), so that `simroute predict`, which evaluates one
shape on floats, never imports numpy.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "simroute.model.geometry": ("MODELS", "ModelGeometry", "get_model"),
    "simroute.model.cost": ("CostParams", "Shape", "PRIMITIVES", "costs", "costs_scalar"),
    "simroute.model.scalar": ("decide_scalar",),
    "simroute.model.predicate": ("decide", "Decision"),
    "simroute.model.fit": ("AffineFit", "fit_affine"),
    "simroute.model.steptime": ("BatchShape", "GpuSpec", "StepTerms", "StepTimeModel"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = list(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'simroute.model' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
