"""Compiled inner loops of the flow engine (numba), each with a pure-NumPy twin that stays the reference.

Kernels, chosen once per engine by `solver_backend()`:
- `fill_groups`: max-min rates of every group from scratch. Compiled: sequential progressive filling
  with an indexed min-heap of link shares (keys inline), one entry per link; fixing a group only marks its
  links stale (a share never drops as groups are fixed, so a stored share is a lower bound) and a stale
  link is refreshed and re-sifted when it reaches the top, so most updates cost O(1); a link left with no
  unfixed group leaves the heap at once from where it sits (near the bottom: a short sift); capped groups
  are a sorted list merged with the heap. Reference: `maxmin.fill_arrays`, parallel water-filling in
  rounds (NumPy).
- `cascade` (compiled only): the incremental re-solve after a change, over the groups whose rate can move
  (see `_compiled.cascade_numba`), with the link membership it reads (`members_build` / `members_add` /
  `members_remove`). Without it (NumPy backend) every re-rating is a full solve, which is the reference.
- `commit_slots`: write re-solved rates into the engine's group arrays: a group whose rate moved has its
  work clock advanced at the old rate, its rate replaced and its completion time recomputed, its links'
  telemetry integrated at the old load and their load moved; returns those links with their clock and
  load before the change.
- `commit_rates`: the older commit over every group (no telemetry, no load); the engine no longer calls
  it, the whole-flow-set replay (`replay.py`) does.

numba is a core dependency; where it cannot be imported, or with SIMROUTE_NO_NUMBA=1, the NumPy
twins run. Tests run both and compare them (tests/network/test_large.py, test_cascade.py).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from simroute.network.flows import rate_kept
from simroute.network.maxmin import fill_arrays

INF = math.inf


class SolverBackend(NamedTuple):
    """The engine kernels and what implements them ("numba" or "numpy"). `cascade` (the incremental re-solve)
    and the membership kernels exist only compiled: without them every re-rating is a full solve."""

    name: str
    fill_groups: Callable[..., tuple[np.ndarray, np.ndarray]]
    commit_rates: Callable[..., np.ndarray]
    commit_slots: Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
    cascade: Callable[..., tuple[bool, np.ndarray, np.ndarray, np.ndarray]] | None = None
    members_build: Callable[..., tuple[np.ndarray, np.ndarray]] | None = None
    members_add: Callable[..., bool] | None = None
    members_remove: Callable[..., None] | None = None


def commit_rates_numpy(now: float, new_rate: np.ndarray, new_bn: np.ndarray, links: np.ndarray,
                       rate: np.ndarray, bn: np.ndarray, work: np.ndarray, last_t: np.ndarray,
                       next_work: np.ndarray, due: np.ndarray, same: float, n_links: int) -> np.ndarray:
    """Reference commit over the first G = len(new_rate) groups; returns the sorted ids of links whose load moves.

    A group keeps its rate while `flows.rate_kept` (|new - old| <= same * old: summation-order noise for same =
    1e-12, the tolerance mode's bound for larger values); otherwise work += old * (now - last_t), rate = new, due =
    now + (next_work - work) / new. `links` is (K, G) padded with the sentinel id n_links.
    """
    groups = len(new_rate)
    old = rate[:groups]
    bn[:groups] = new_bn
    moved = np.flatnonzero(~rate_kept(new_rate, old, same))
    if moved.size == 0:
        return np.empty(0, dtype=np.int64)
    elapsed = now - last_t[moved]
    work[moved] += np.where(elapsed > 0, old[moved] * elapsed, 0.0)
    last_t[moved] = np.maximum(last_t[moved], now)
    fresh = new_rate[moved]
    old[moved] = fresh
    with np.errstate(divide="ignore", invalid="ignore"):
        due[moved] = np.where(fresh > 0, now + (next_work[moved] - work[moved]) / fresh, INF)
    touched = np.unique(links[:, moved])
    return touched[touched < n_links].astype(np.int64)


def commit_slots_numpy(now: float, slots: np.ndarray, new_rate: np.ndarray, new_bn: np.ndarray, links: np.ndarray,
                       flows: np.ndarray, rate: np.ndarray, bn: np.ndarray, work: np.ndarray, last_t: np.ndarray,
                       next_work: np.ndarray, due: np.ndarray, load: np.ndarray, cap: np.ndarray,
                       link_bytes: np.ndarray, link_saturated: np.ndarray, link_t: np.ndarray, same: float,
                       full: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reference commit of re-solved groups `slots` (new_rate[i], new_bn[i] for slots[i]) with the telemetry
    folded in. A group keeps its rate when |new - old| <= same * old; the others' links (sorted, returned
    with their clock and load before the change) are integrated up to now at the old load (bytes, and
    time saturated where load >= full * capacity), then the group's work clock is advanced at the old rate,
    its rate, completion time and its links' load updated. `links` is (K, slots) padded with n_links."""
    n_links = len(cap)
    bn[slots] = new_bn
    old = rate[slots]
    keep = rate_kept(new_rate, old, same)
    moved, fresh, old = slots[~keep], new_rate[~keep], old[~keep]
    empty = np.empty(0, dtype=np.int64)
    if moved.size == 0:
        return empty, np.empty(0), np.empty(0)
    group_links = links[:, moved]
    touched = np.unique(group_links)
    touched = touched[touched < n_links].astype(np.int64)
    starts, loads = link_t[touched].copy(), load[touched].copy()
    elapsed = np.maximum(now - starts, 0.0)
    link_bytes[touched] += np.where(loads > 0, loads * elapsed, 0.0)
    link_saturated[touched] += np.where((loads > 0) & (loads >= cap[touched] * full), elapsed, 0.0)
    link_t[touched] = np.maximum(starts, now)
    elapsed = now - last_t[moved]
    work[moved] += np.where(elapsed > 0, old * elapsed, 0.0)
    last_t[moved] = np.maximum(last_t[moved], now)
    rate[moved] = fresh
    with np.errstate(divide="ignore", invalid="ignore"):
        due[moved] = np.where(fresh > 0, now + (next_work[moved] - work[moved]) / fresh, INF)
    delta = np.tile((fresh - old) * flows[moved], links.shape[0])
    flat = group_links.ravel()
    real = flat < n_links
    np.add.at(load, flat[real], delta[real])
    return touched, starts, loads


def _compile() -> SolverBackend | None:
    from simroute.network import _compiled
    if not _compiled.HAVE_NUMBA:
        return None
    return SolverBackend("numba", _compiled.fill_groups_numba, _compiled.commit_rates_numba,
                         _compiled.commit_slots_numba, _compiled.cascade_numba, _compiled.members_build,
                         _compiled.members_add, _compiled.members_remove)


NUMPY_BACKEND = SolverBackend("numpy", fill_arrays, commit_rates_numpy, commit_slots_numpy)


@lru_cache(maxsize=None)
def compiled_backend() -> SolverBackend | None:
    """The numba kernels (compiled on first use, cached on disk), or None without numba."""
    if os.environ.get("SIMROUTE_NO_NUMBA"):
        return None
    return _compile()


def compiled_available() -> bool:
    """Whether the numba kernels can be used, without importing numba (a CLI run that never reaches array
    mode does not pay for it)."""
    import importlib.util
    return not os.environ.get("SIMROUTE_NO_NUMBA") and importlib.util.find_spec("numba") is not None


def solver_backend(name: str = "auto") -> SolverBackend:
    """`auto`: numba where installed, else NumPy; `numba` (error if missing); `numpy` (the reference)."""
    if name == "numpy":
        return NUMPY_BACKEND
    backend = compiled_backend()
    if backend is None:
        if name == "numba":
            from simroute.errors import ConfigurationError
            raise ConfigurationError("backend 'numba' needs numba, a core dependency: reinstall simroute "
                                     "(pip install simroute)", field="backend")
        return NUMPY_BACKEND
    return backend
