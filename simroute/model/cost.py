"""The redistribution cost model (paper §4): T = probe + transfer + compute + return + merge, per primitive.

All functions are vectorised over numpy arrays of request shapes and return each term separately, so
callers (the predicate, the CLI tables, the simulator's policy) can show where a cost lives. Seconds and bytes.

Modelling choices (documented in docs/MODEL.md):
- `route_exchanges="per-layer"` pays one routed round trip per layer per decode step (layer l's query needs
  layer l-1's merged output); `"once"` is the paper's accounting (§5.4: ship the query once).
- Holder compute follows the calibrated curve over requesters N at h_q = 16, ct = 2048 (FlashMLA, paper
  §6.3); a batch of Mq query rows over ct tokens is charged as N_eff = Mq/16 x ct/2048 requesters.
- fetch and local also pay the requester's own attention over the copy each step (`attend`), the cost
  route moves to the holder; the amortisation horizon is the current step plus R reuse steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from simroute.model.geometry import ModelGeometry

PRIMITIVES: tuple[str, ...] = ("route", "fetch", "local")
ROUTE_TERMS = ("probe", "transfer", "compute", "return", "merge", "host")
FETCH_TERMS = ("pull", "splice", "gather", "attend", "host")
LOCAL_TERMS = ("prefill", "attend")
TERMS = {"route": ROUTE_TERMS, "fetch": FETCH_TERMS, "local": LOCAL_TERMS}


@dataclass(frozen=True)
class FabricParams:
    """The two affine constants of one fabric (paper Table 2) plus its bulk (multi-block) rate."""

    name: str
    t_probe_s: float
    single_block_Bps: float
    bulk_Bps: float
    turnaround_s: float = 0.0


@dataclass(frozen=True)
class CostParams:
    """Every constant the closed form needs; built from a calibration profile (simroute.calib)."""

    geometry: ModelGeometry
    fabrics: tuple[FabricParams, ...]
    splice_ct: tuple[float, ...]           # chunk tokens of the measured splice points
    splice_s: tuple[float, ...]
    holder_n: tuple[float, ...]            # requesters N (h_q = 16, ct = 2048) of the holder curve
    holder_s: tuple[float, ...]
    sparse_k: tuple[float, ...]            # selection budgets of the sparse-kernel premium
    sparse_premium: tuple[float, ...]
    merge_s: float
    prefill_s_per_token_layer: float
    gather_base_s: float                   # per layer, at the reference budget, excluding per-holder cost
    gather_per_holder_s: float             # per layer, per holder spanned (serial handshakes)
    gather_k_ref: int = 2048
    holder_heads_ref: int = 16
    holder_ct_ref: int = 2048
    route_exchanges: Literal["per-layer", "once"] = "per-layer"
    host_overhead: bool = False            # the Python-client regime of paper §5.3
    host_fixed_s: float = 3.5e-3
    host_per_row_s: float = 12.5e-6
    collapsed_response: bool = False       # reduction 1: one put for (o, m, l) instead of three
    holder_amortisation: bool = False      # reduction 2: holder compute shared by a dispatch batch
    dispatcher_batching: bool = False      # reduction 3: host cost paid once per dispatch batch
    dispatch_batch: int = 8
    fabric_index: dict[str, int] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fabric_index", {f.name: i for i, f in enumerate(self.fabrics)})

    def fabric_id(self, name: str) -> int:
        from simroute.errors import UnknownNameError
        try:
            return self.fabric_index[name]
        except KeyError:
            raise UnknownNameError("fabric", name, list(self.fabric_index)) from None

    def with_(self, **changes) -> "CostParams":
        """A copy with some constants or switches changed (frozen dataclass)."""
        return replace(self, **changes)

    @property
    def exchanges(self) -> int:
        return self.geometry.layers if self.route_exchanges == "per-layer" else 1


@dataclass
class Shape:
    """Request shapes, one element per (chunk, request) decision; scalars broadcast.

    mq: routed query rows (sequences x query heads x query tokens); ct: chunk tokens; fabric: index into
    CostParams.fabrics; holders: M holders a selection spans; topk: selection budget (0 = dense);
    reuse: later steps R that would reuse a fetched copy; cached: attended at its cached offset (splice
    elides); tp: tensor-parallel degree of the rank pairing.
    """

    mq: np.ndarray | float
    ct: np.ndarray | float
    fabric: np.ndarray | int = 0
    holders: np.ndarray | int = 1
    topk: np.ndarray | int = 0
    reuse: np.ndarray | int = 0
    cached: np.ndarray | bool = False
    tp: np.ndarray | int = 1


def _interp_extrap(x: np.ndarray, xp: tuple[float, ...], fp: tuple[float, ...]) -> np.ndarray:
    """Piecewise-linear through the points, flat below the first, linear (last slope) above the last.

    Written as a sum of hinges, fp[0] + sum_i (s_i - s_{i-1}) max(x - xp[i], 0): for the 2-5 point curves of
    a profile this is ~2x faster than np.interp, and the predicate's throughput depends on it.
    """
    x = np.asarray(x, dtype=float)
    y = np.full(x.shape, float(fp[0])) if x.ndim else float(fp[0])
    prev = 0.0
    for i in range(len(xp) - 1):
        slope = (fp[i + 1] - fp[i]) / (xp[i + 1] - xp[i])
        if slope != prev:
            y = y + (slope - prev) * np.maximum(x - xp[i], 0.0)
        prev = slope
    return np.asarray(y)


def splice_s(ct, p: CostParams) -> np.ndarray:
    """Delta-rotation + scatter of a chunk into the paged pool, all layers (paper §7)."""
    return _interp_extrap(np.asarray(ct, dtype=float), p.splice_ct, p.splice_s)


def holder_compute_s(rows, ct, topk, p: CostParams) -> np.ndarray:
    """Partial attention of `rows` query rows over `ct` resident tokens (or top-k selected entries)."""
    topk = np.asarray(topk, dtype=float)
    sparse = topk > 0
    attended = np.where(sparse, topk, ct)
    scale = p.geometry.token_fraction / (p.holder_heads_ref * p.holder_ct_ref)
    dense = _interp_extrap(np.maximum(np.asarray(rows, dtype=float) * attended * scale, 1e-9), p.holder_n, p.holder_s)
    if not np.any(sparse):
        return dense
    return dense * np.where(sparse, sparse_premium(topk, p), 1.0)


def sparse_premium(k: np.ndarray, p: CostParams) -> np.ndarray:
    """The sparse kernel's time over dense at matched k, clamped to the measured range (np.interp semantics)."""
    xp, fp = p.sparse_k, p.sparse_premium
    if len(xp) == 2:   # one segment (the shipped profile): a line and a clip, ~3x cheaper than a hinge sum
        slope = (fp[1] - fp[0]) / (xp[1] - xp[0])
        return np.clip(fp[0] + slope * (k - xp[0]), min(fp), max(fp))
    return _interp_extrap(np.clip(k, xp[0], xp[-1]), xp, fp)


def _fabric_arrays(fabric, p: CostParams) -> tuple[np.ndarray, ...]:
    fabric = np.asarray(fabric)
    probe = np.array([f.t_probe_s + f.turnaround_s for f in p.fabrics])
    single = np.array([f.single_block_Bps for f in p.fabrics])
    bulk = np.array([f.bulk_Bps for f in p.fabrics])
    if fabric.ndim == 0:
        i = int(fabric)
        return probe[i], single[i], bulk[i]
    return probe[fabric], single[fabric], bulk[fabric]


def costs(shape: Shape, p: CostParams) -> dict[str, dict[str, np.ndarray]]:
    """Every term of every primitive over the horizon of 1 + R steps, in seconds; plus wire bytes.

    Returns {primitive: {term: array, ..., "total": array, "wire_bytes": array}}.
    """
    g = p.geometry
    mq = np.asarray(shape.mq, dtype=float)
    ct = np.asarray(shape.ct, dtype=float)
    topk = np.asarray(shape.topk)
    sparse = topk > 0
    holders = np.where(sparse, np.maximum(np.asarray(shape.holders), 1), 1)
    steps = 1.0 + np.asarray(shape.reuse, dtype=float)
    tp = np.maximum(np.asarray(shape.tp, dtype=float), 1.0)
    cached = np.asarray(shape.cached, dtype=bool)
    probe_s, single, bulk = _fabric_arrays(shape.fabric, p)
    exch = float(p.exchanges)
    L = float(g.layers)
    zero = np.zeros(np.broadcast(mq, ct, topk, steps).shape)

    # route: M parallel exchanges per step, each holder attending its k/M share of the selection; the step
    # waits for the slowest (identical here).
    k_holder = np.where(sparse, np.maximum(topk / holders, 1.0), 0.0)
    compute = holder_compute_s(mq, ct, k_holder, p)
    if p.host_overhead and p.holder_amortisation:
        compute = holder_compute_s(mq * p.dispatch_batch, ct, k_holder, p) / p.dispatch_batch
    ret_extra = 0.0 if (not p.host_overhead or p.collapsed_response) else 2.0 * probe_s
    per_step = steps * exch
    host = zero
    if p.host_overhead:
        div = p.dispatch_batch if p.dispatcher_batching else 1
        host = steps * (p.host_fixed_s + p.host_per_row_s * mq) / div + zero
    route = {
        "probe": per_step * probe_s + zero,
        "transfer": per_step * mq * g.q_bytes / tp / single + zero,
        "compute": per_step * compute + zero,
        "return": per_step * (mq * g.p_bytes / tp / single + ret_extra) + zero,
        "merge": per_step * p.merge_s + zero,
        "host": host,
    }
    route["wire_bytes"] = per_step * holders * mq * g.qp_bytes + zero

    # The requester's own attention over a resident copy (what route moves to the holder).
    attend = per_step * holder_compute_s(mq, ct, topk, p) + zero
    frac = g.token_fraction
    pull = np.where(sparse, 0.0, ct * frac * g.b_kv * L / tp / bulk)
    gather_layer = p.gather_base_s * topk / p.gather_k_ref + p.gather_per_holder_s * holders
    fetch = {
        "pull": pull + zero,
        "splice": np.where(sparse | cached, 0.0, splice_s(ct, p)) + zero,
        "gather": np.where(sparse, steps * L * gather_layer, 0.0) + zero,
        "attend": attend,
        "host": (steps * p.host_fixed_s / (p.dispatch_batch if p.dispatcher_batching else 1) + zero)
        if p.host_overhead else zero,
    }
    fetch["wire_bytes"] = np.where(sparse, steps * topk * frac * g.b_kv * L, ct * frac * g.b_kv * L) + zero
    local = {"prefill": ct * L * p.prefill_s_per_token_layer + zero, "attend": attend}
    local["wire_bytes"] = zero
    out = {"route": route, "fetch": fetch, "local": local}
    for prim, terms in out.items():
        terms["total"] = sum(terms[t] for t in TERMS[prim])
    return out


def costs_scalar(shape: Shape, p: CostParams) -> dict[str, dict[str, float]]:
    """`costs` for one shape, as plain floats (CLI tables, tests)."""
    return {prim: {k: float(np.asarray(v).reshape(-1)[0]) for k, v in terms.items()}
            for prim, terms in costs(shape, p).items()}


def route_transport_s(mq, fabric: FabricParams, g: ModelGeometry, tp: int = 1) -> np.ndarray:
    """One routed round trip's transport: probe + Mq (q+p) / BW (paper §4.2, what Table 1 measures)."""
    mq = np.asarray(mq, dtype=float)
    return fabric.t_probe_s + fabric.turnaround_s + mq * g.qp_bytes / tp / fabric.single_block_Bps


def wire_break_even_mq(ct, g: ModelGeometry) -> np.ndarray:
    """Mq* = ct b_KV / (q+p): above it route moves more bytes than pulling the chunk (one layer, §5.2)."""
    return np.asarray(ct, dtype=float) * g.token_fraction * g.b_kv / g.qp_bytes


def route_byte_saving(mq, ct, g: ModelGeometry) -> np.ndarray:
    """Fraction of wire bytes route saves against pulling the chunk (per layer; 76% at Mq 256, ct 2048)."""
    return 1.0 - np.asarray(mq, dtype=float) * g.qp_bytes / (np.asarray(ct, dtype=float) * g.token_fraction * g.b_kv)


def route_loses_below_bw(mq, ct, p: CostParams) -> np.ndarray:
    """Effective bandwidth below which route's byte term exceeds fetch's splice: Mq (q+p) / T_splice (§8)."""
    return np.asarray(mq, dtype=float) * p.geometry.qp_bytes / splice_s(ct, p)
