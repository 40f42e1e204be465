"""The closed-form model of cross-instance attention (paper §3-§5): payload geometry, cost terms, the
route / fetch / local predicate and the affine fit. Pure numpy functions; no simulator inside."""

from simroute.model.geometry import MODELS, ModelGeometry, get_model
from simroute.model.cost import CostParams, Shape, PRIMITIVES, costs, costs_scalar
from simroute.model.predicate import decide, Decision
from simroute.model.fit import AffineFit, fit_affine

__all__ = [
    "MODELS", "ModelGeometry", "get_model", "CostParams", "Shape", "PRIMITIVES", "costs", "costs_scalar",
    "decide", "Decision", "AffineFit", "fit_affine",
]
