"""The closed-form model of cross-instance attention ("Move the Query, Not the Cache" §3-§5): payload geometry,
cost terms, the route / fetch / local predicate and the affine fit; and the step time of one serving-engine
iteration (docs/STEP_TIME.md). Pure numpy functions; no simulator inside."""

from simroute.model.geometry import MODELS, ModelGeometry, get_model
from simroute.model.cost import CostParams, Shape, PRIMITIVES, costs, costs_scalar
from simroute.model.predicate import decide, Decision
from simroute.model.fit import AffineFit, fit_affine
from simroute.model.steptime import BatchShape, GpuSpec, StepTerms, StepTimeModel

__all__ = [
    "MODELS", "ModelGeometry", "get_model", "CostParams", "Shape", "PRIMITIVES", "costs", "costs_scalar",
    "decide", "Decision", "AffineFit", "fit_affine", "BatchShape", "GpuSpec", "StepTerms", "StepTimeModel",
]
