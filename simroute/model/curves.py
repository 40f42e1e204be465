"""Piecewise-linear curves of calibration points: the one place their interpolation rules live.

Profiles give measured curves as a few (x, y) points. Cost curves (holder compute, splice) are flat below the
first point and extend with the last slope above the last; efficiency curves (fractions of a peak) are clamped at
both ends, since an efficiency may not extrapolate past what was measured. Each rule has a float version (the
simulator's per-request hot path, where numpy's per-call overhead dominates) and an array version; the clamped
rule also has `interp_clamped_as_array`, the array version's arithmetic on one float (what a one-shape
evaluation that must equal the vectorised predicate bit for bit uses, without importing numpy).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import numpy as np


def interp_extrap(x: float, xp: Sequence[float], fp: Sequence[float]) -> float:
    """Flat below xp[0], linear between points, the last slope above xp[-1]; one float."""
    if x <= xp[0]:
        return fp[0]
    if x >= xp[-1]:
        if len(xp) < 2:
            return fp[-1]
        return fp[-1] + (x - xp[-1]) * (fp[-1] - fp[-2]) / (xp[-1] - xp[-2])
    i = bisect_right(xp, x) - 1
    return fp[i] + (x - xp[i]) * (fp[i + 1] - fp[i]) / (xp[i + 1] - xp[i])


def interp_extrap_array(x, xp: Sequence[float], fp: Sequence[float]) -> np.ndarray:
    """`interp_extrap` over an array, written as a sum of hinges fp[0] + sum_i (s_i - s_{i-1}) max(x - xp[i], 0)
    computed in place.

    For the 2-5 point curves of a profile this is ~2x faster than np.interp, and the predicate's throughput
    depends on it.
    """
    import numpy as np
    x = np.asarray(x, dtype=float)
    if x.ndim == 0:
        return np.asarray(interp_extrap(float(x), xp, fp))
    y = None
    prev = 0.0
    for i in range(len(xp) - 1):
        slope = (fp[i + 1] - fp[i]) / (xp[i + 1] - xp[i])
        if slope != prev:
            hinge = x - xp[i]
            np.maximum(hinge, 0.0, out=hinge)
            hinge *= slope - prev
            if y is None:
                y = hinge
            else:
                y += hinge
        prev = slope
    if y is None:
        return np.full(x.shape, float(fp[0]))
    y += fp[0]
    return y


def interp_clamped(x: float, xp: Sequence[float], fp: Sequence[float]) -> float:
    """np.interp semantics on one float: linear between points, clamped to the end values outside them."""
    if x <= xp[0]:
        return fp[0]
    if x >= xp[-1]:
        return fp[-1]
    i = bisect_right(xp, x) - 1
    return fp[i] + (x - xp[i]) * (fp[i + 1] - fp[i]) / (xp[i + 1] - xp[i])


def interp_clamped_array(x, xp: Sequence[float], fp: Sequence[float]) -> np.ndarray:
    """`interp_clamped` over an array. One segment (the shipped profiles) is a line and a clip, ~3x cheaper
    than np.interp."""
    import numpy as np
    x = np.asarray(x, dtype=float)
    if len(xp) == 2:
        return np.clip(_segment(x, xp, fp), min(fp), max(fp))
    return np.interp(x, xp, fp)


def _segment(x, xp: Sequence[float], fp: Sequence[float]):
    """The line through a two-point curve, in the array rule's arithmetic (float or array)."""
    return fp[0] + (fp[1] - fp[0]) / (xp[1] - xp[0]) * (x - xp[0])


def interp_clamped_as_array(x: float, xp: Sequence[float], fp: Sequence[float]) -> float:
    """`interp_clamped_array` on one float, bit for bit (its line and clip for two points, np.interp's
    slope form otherwise), where `interp_clamped` may differ from it in the last bit."""
    if len(xp) == 2:
        return min(max(_segment(x, xp, fp), min(fp)), max(fp))
    if x < xp[0]:
        return fp[0]
    if x >= xp[-1]:
        return fp[-1]
    i = bisect_right(xp, x) - 1
    if x == xp[i]:
        return fp[i]
    return (fp[i + 1] - fp[i]) / (xp[i + 1] - xp[i]) * (x - xp[i]) + fp[i]
