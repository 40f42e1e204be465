"""The closed-form model of cross-instance attention ("Move the Query, Not the Cache" §3-§5): payload geometry,
cost terms, the route / fetch / local predicate and the affine fit; and the step time of one serving-engine
iteration (docs/STEP_TIME.md). Pure functions; no simulator inside.

The names below load with their module on first use (PEP 562), so that `simroute predict`, which evaluates one
shape on floats, never imports numpy.
"""

from __future__ import annotations

from simroute.lazy import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "simroute.model.geometry": ("MODELS", "ModelGeometry", "get_model"),
    "simroute.model.cost": ("CostParams", "Shape", "PRIMITIVES", "costs", "costs_scalar"),
    "simroute.model.scalar": ("decide_scalar",),
    "simroute.model.predicate": ("decide", "Decision"),
    "simroute.model.fit": ("AffineFit", "fit_affine"),
    "simroute.model.steptime": ("BatchShape", "GpuSpec", "StepTerms", "StepTimeModel"),
})
