"""The redistribution cost model ("Move the Query, Not the Cache" §4): T = probe + transfer + compute + return
+ merge, per primitive.

The formula lives once, in `step_parts` (one step's pieces) and `holder_compute_s` (the holder curve), written
over an `Ops` so that it runs on numpy arrays (`ARRAYS`: `costs` term tables, the predicate) and on plain
floats (`FLOATS`: the simulator's per-request path, `scalar.ScalarModel`; `SCALARS`: one shape in the vector
path's arithmetic, `costs_scalar` and `scalar.decide_scalar`, which need no numpy). Seconds and bytes.

Modelling choices (documented in docs/MODEL.md):
- `route_exchanges="per-layer"` pays one routed round trip per layer per decode step (layer l's query needs
  layer l-1's merged output); `"once"` is the paper's accounting (§5.4: ship the query once).
- Holder compute follows the calibrated curve over requesters N at h_q = 16, ct = 2048 (FlashMLA, paper
  §6.3); a batch of Mq query rows over ct tokens is charged as N_eff = Mq/16 x ct/2048 requesters. A first
  pass (one sequence's T > 1 query tokens) is a prefill block, not T decode requesters: `holder_prefill_s`.
- fetch and local also pay the requester's own attention over the copy each step (`attend`), the cost
  route moves to the holder; the amortisation horizon is the current step plus R reuse steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from simroute.model.curves import (interp_clamped, interp_clamped_array, interp_clamped_as_array, interp_extrap,
                                   interp_extrap_array)
from simroute.model.geometry import ModelGeometry

if TYPE_CHECKING:      # numpy is imported by the array functions that use it: one shape's costs need none
    import numpy as np

PRIMITIVES: tuple[str, ...] = ("route", "fetch", "local")
ROUTE_TERMS = ("probe", "transfer", "compute", "return", "merge", "host")
FETCH_TERMS = ("pull", "splice", "gather", "attend", "host")
LOCAL_TERMS = ("prefill", "attend")
TERMS = {"route": ROUTE_TERMS, "fetch": FETCH_TERMS, "local": LOCAL_TERMS}
ROUTE, FETCH, LOCAL = 0, 1, 2      # indices into PRIMITIVES (the predicate's choice)


@dataclass(frozen=True)
class FabricParams:
    """The two affine constants of one fabric (paper Table 2) plus its bulk (multi-block) rate."""

    name: str
    t_probe_s: float
    single_block_Bps: float
    bulk_Bps: float
    turnaround_s: float = 0.0


class FabricTables(NamedTuple):
    """Per-fabric constants of the formula, indexed by fabric id (numpy arrays and float lists alike)."""

    probe_s: np.ndarray            # probe + turnaround
    qp_per_row_s: np.ndarray       # (q + p) bytes of one row over the single-block rate
    kv_per_token_s: np.ndarray     # one token's cache over all layers at the bulk rate


class RouteExchanges(StrEnum):
    """How many routed exchanges a decode step pays (`CostParams.route_exchanges`, `RunConfig.route_exchanges`)."""

    PER_LAYER = "per-layer"   # exact: layer l's query needs layer l-1's merged output, one round trip a layer
    ONCE = "once"             # the paper's accounting (§5.4: ship the query once)


ROUTE_EXCHANGES = tuple(mode.value for mode in RouteExchanges)


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
    holder_heads_ref: int = 16             # = HOLDER_HEADS_REF
    holder_ct_ref: int = 2048              # = HOLDER_CT_REF
    route_exchanges: RouteExchanges = RouteExchanges.PER_LAYER     # its value (a string) is accepted too
    # the prefill form of a routed query block (T > 1 query tokens of one sequence): seconds per key read and
    # per (row, key) pair on one GPU, from the profile's instance GPU (`StepTimeModel.prefill_form_coeffs`);
    # None: no GPU entry, the holder curve alone
    holder_prefill_s: tuple[float, float] | None = None
    host_overhead: bool = False            # the Python-client regime of paper §5.3
    host_fixed_s: float = 3.5e-3
    host_per_row_s: float = 12.5e-6
    collapsed_response: bool = False       # reduction 1: one put for (o, m, l) instead of three
    holder_amortisation: bool = False      # reduction 2: holder compute shared by a dispatch batch
    dispatcher_batching: bool = False      # reduction 3: host cost paid once per dispatch batch
    dispatch_batch: int = 8
    fabric_index: dict[str, int] = field(default_factory=dict, compare=False, hash=False)
    float_rows: tuple[FabricTables, ...] = field(default=(), compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "route_exchanges", RouteExchanges(self.route_exchanges))
        object.__setattr__(self, "fabric_index", {fabric.name: index for index, fabric in enumerate(self.fabrics)})
        geometry = self.geometry
        kv_token = geometry.kv_bytes_per_token
        # per fabric, plain floats: the float evaluators' rows, and the columns of the arrays' `tables`
        object.__setattr__(self, "float_rows", tuple(
            FabricTables(float(fabric.t_probe_s + fabric.turnaround_s),
                         float(geometry.qp_bytes / fabric.single_block_Bps),
                         float(kv_token / fabric.bulk_Bps)) for fabric in self.fabrics))

    @cached_property
    def tables(self) -> FabricTables:
        """The per-fabric constants as arrays indexed by fabric id (built on first use: numpy is imported by
        the array path only)."""
        import numpy as np
        return FabricTables(*(np.array(column, dtype=float) for column in zip(*self.float_rows)))

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
        return self.geometry.layers if self.route_exchanges == RouteExchanges.PER_LAYER else 1


@dataclass
class Shape:
    """Request shapes, one element per (chunk, request) decision; scalars broadcast.

    mq: routed query rows (sequences x query heads x query tokens); ct: chunk tokens; fabric: index into
    CostParams.fabrics; holders: M holders a selection spans; topk: selection budget (0 = dense);
    reuse: later steps R that would reuse a fetched copy; cached: attended at its cached offset (splice
    elides); tp: tensor-parallel degree of the rank pairing; query_tokens: tokens per sequence in the first
    step's rows (1 at decode; a first pass's prompt tokens: its block is charged in the prefill form).
    """

    mq: np.ndarray | float
    ct: np.ndarray | float
    fabric: np.ndarray | int = 0
    holders: np.ndarray | int = 1
    topk: np.ndarray | int = 0
    reuse: np.ndarray | int = 0
    cached: np.ndarray | bool = False
    tp: np.ndarray | int = 1
    query_tokens: np.ndarray | float = 1


class Ops:
    """The formula's few non-arithmetic operations, bound once for one kind of operand (plain instance
    attributes: the float evaluator runs per request, where attribute lookups show)."""

    def __init__(self, *, maximum, where, curve, clamped, any_, all_, fabric_row) -> None:
        self.maximum, self.where, self.curve, self.clamped = maximum, where, curve, clamped
        self.any, self.all, self.fabric_row = any_, all_, fabric_row


def _where_float(cond, if_true, if_false):
    return if_true if cond else if_false


def _fabric_row_arrays(params: "CostParams", fabric) -> FabricTables:
    import numpy as np
    tables = params.tables
    return FabricTables(np.take(tables.probe_s, fabric), np.take(tables.qp_per_row_s, fabric),
                        np.take(tables.kv_per_token_s, fabric))


def _fabric_row_floats(params: "CostParams", fabric: int) -> FabricTables:
    return params.float_rows[fabric]


class _ArrayOps(Ops):
    """`Ops` over numpy arrays, bound on first use (so that importing the model does not import numpy)."""

    def __init__(self) -> None:     # the attributes appear on first read, then are plain instance attributes
        pass

    def __getattr__(self, name: str):
        import numpy as np
        Ops.__init__(self, maximum=np.maximum, where=np.where, curve=interp_extrap_array,
                     clamped=interp_clamped_array, any_=np.any, all_=np.all, fabric_row=_fabric_row_arrays)
        return object.__getattribute__(self, name)


# numpy arrays (the vectorised predicate, term tables), plain floats (the simulator's per-request path, ~20x
# faster than numpy there) and one shape in the arrays' arithmetic (SCALARS: its clamped curves evaluated as
# numpy does, so a one-shape answer equals the vectorised one bit for bit)
ARRAYS: Ops = _ArrayOps()
FLOATS = Ops(maximum=max, where=_where_float, curve=interp_extrap, clamped=interp_clamped, any_=bool, all_=bool,
             fabric_row=_fabric_row_floats)
SCALARS = Ops(maximum=max, where=_where_float, curve=interp_extrap, clamped=interp_clamped_as_array, any_=bool,
              all_=bool, fabric_row=_fabric_row_floats)


HOLDER_HEADS_REF, HOLDER_CT_REF = 16, 2048   # the measured holder curve's h_q and ct (paper §6.3)


def holder_work(rows, attended, token_fraction: float = 1.0, heads_ref: int = HOLDER_HEADS_REF,
                ct_ref: int = HOLDER_CT_REF):
    """Partial-attention work in reference requesters N: rows x attended tokens (x the kept token fraction)
    over the holder curve's h_q x ct. The one place this scaling lives (model, step-time floor, simulator)."""
    return rows * attended * (token_fraction / (heads_ref * ct_ref))


def holder_curve_s(work, holder_n, holder_s, ops=FLOATS):
    """The measured holder-compute curve at `work` reference requesters (flat below its first point, the last
    slope beyond its last): the time of one dense kernel call doing that work."""
    return ops.curve(ops.maximum(work, 1e-9), holder_n, holder_s)


def holder_prefill_s(rows, keys, s_per_key: float, s_per_row_key: float, ops=FLOATS):
    """A query block of one sequence's T > 1 tokens (`rows` = T x heads on one GPU) over `keys` key tokens,
    one layer, in the prefill form a serving engine runs it in: the keys read once, rows x keys FLOPs in MLA's
    expanded form (the step model's prefill attention; both coefficients per key token, the kept token
    fraction folded in: `StepTimeModel.prefill_form_coeffs`, whose `holder_partial_s` charges the same
    products inside its batch roofline; docs/MODEL.md, "Routed first pass")."""
    return ops.maximum(keys * s_per_key, rows * keys * s_per_row_key)


def holder_compute_s(rows, ct, topk, params: CostParams, ops=ARRAYS, query_tokens=1):
    """Partial attention of `rows` query rows over `ct` resident tokens (or `topk` selected entries): the
    measured holder curve at the batch's work, times the sparse kernel's premium under selection. Floats or
    arrays (`ops`); the cost terms, the predicate and the simulator's policy all call this.

    The curve is a decode kernel (N requesters, one token each, every one reading its keys), so a dense block
    of `query_tokens` T > 1 tokens of one sequence (a routed first pass) is charged as a prefill: the larger
    of the curve at one token's rows (rows / T: the block is no faster than one decode step) and
    `holder_prefill_s` of all its rows, not the curve stretched to T x the key reads. Under selection each
    query token gathers its own top-k entries, so T tokens are T gathers: the curve as at decode."""
    sparse = topk > 0
    frac, heads_ref, ct_ref = params.geometry.token_fraction, params.holder_heads_ref, params.holder_ct_ref
    has_block = params.holder_prefill_s is not None and ops.any(query_tokens > 1)    # decode: one cheap test
    if has_block:
        block = (query_tokens > 1) * (topk <= 0)        # dense blocks (1 / True), floats or arrays
        has_block = ops.any(block)
    floor_rows = ops.where(block, rows / query_tokens, rows) if has_block else rows
    if not ops.any(sparse):
        attended, premium = ct, 1.0
    elif ops.all(sparse):     # a batch of selections only: no masking
        attended, premium = topk, sparse_premium(topk, params, ops)
    else:
        attended, premium = ops.where(sparse, topk, ct), ops.where(sparse, sparse_premium(topk, params, ops), 1.0)
    work = holder_work(floor_rows, attended, frac, heads_ref, ct_ref)
    curve_s = holder_curve_s(work, params.holder_n, params.holder_s, ops)
    if has_block:
        s_key, s_row_key = params.holder_prefill_s
        prefill_s = holder_prefill_s(rows, attended, s_key, s_row_key, ops)
        curve_s = ops.where(block, ops.maximum(curve_s, prefill_s), curve_s)
    return curve_s * premium


def splice_s(ct, params: CostParams, ops=ARRAYS):
    """Delta-rotation + scatter of a chunk into the paged pool, all layers (paper §7)."""
    return ops.curve(ct, params.splice_ct, params.splice_s)


def sparse_premium(topk, params: CostParams, ops=ARRAYS):
    """The sparse kernel's time over dense at matched k, clamped to the measured range."""
    return ops.clamped(topk, params.sparse_k, params.sparse_premium)


class StepParts(NamedTuple):
    """Per-exchange and per-step pieces of the three primitives for one step; every cost is built from these.

    probe: probe + turnaround of the fabric; wire: Mq (q+p) / single-block rate / tp (out and back); compute:
    the holder's partial for its share; attend: the requester's own attention over the whole copy (both per
    exchange); pull, splice: moving a dense chunk once (splice 0 at the cached offset; both None when every
    shape is a selection); gather: one step of a sparse selection's gather (all layers; None when nothing is
    sparse); prefill: re-prefilling the chunk; sparse: the selection mask.
    """

    probe: object
    wire: object
    ret_extra: object
    compute: object
    attend: object
    pull: object
    splice: object
    gather: object
    prefill: object
    sparse: object


def step_parts(mq, ct, fabric, topk, holders, tp, cached, params: CostParams, ops=ARRAYS, query_tokens=1) -> StepParts:
    """The one cost formula (paper §4), floats or arrays. Route: M parallel exchanges per step, each holder
    attending its k/M share of a selection (the step waits for the slowest, identical here); fetch: pull the
    chunk and splice it, or gather the selection every step; local: re-prefill. fetch and local also pay the
    requester's attention over the copy, the work route moves to the holder. `qt`: query tokens per sequence
    in the rows (a first pass's prompt; `holder_compute_s` charges such a block in the prefill form)."""
    geometry = params.geometry
    probe, qp_per_row_s, kv_per_token_s = ops.fabric_row(params, fabric)
    unit_tp = tp == 1 if isinstance(tp, (int, float)) else False
    if not unit_tp:
        tp = ops.maximum(tp, 1.0)
    wire = mq * qp_per_row_s
    mq = mq if unit_tp else mq / tp       # attention per GPU: the query heads split over the TP ranks
    sparse = topk > 0
    any_sparse = ops.any(sparse)
    every_sparse = any_sparse and ops.all(sparse)
    if any_sparse:
        holders = ops.maximum(holders, 1.0)
        k_holder = ops.maximum(topk / holders, 1.0)
        if not every_sparse:
            k_holder = k_holder * sparse
        compute = holder_compute_s(mq, ct, k_holder, params, ops, query_tokens)
        attend = holder_compute_s(mq, ct, topk, params, ops, query_tokens)
        # the fitted host-copy-bound curve (testbed, §6.3), never faster than the selection's bytes over the
        # fabric's bulk rate (this GPU's 1/tp share, as a pull): on a slow fabric the wire binds
        gather = ops.maximum(geometry.layers * (params.gather_base_s / params.gather_k_ref * topk
                                                + params.gather_per_holder_s * holders),
                             topk * kv_per_token_s if unit_tp else topk * kv_per_token_s / tp)
    else:
        k_holder = topk
        compute = attend = holder_compute_s(mq, ct, topk, params, ops, query_tokens)
        gather = None
    if params.host_overhead and params.holder_amortisation:
        batch = params.dispatch_batch
        compute = holder_compute_s(mq * batch, ct, k_holder, params, ops, query_tokens) / batch
    ret_extra = 2.0 * probe if (params.host_overhead and not params.collapsed_response) else 0.0
    pull = splice = None
    if not every_sparse:
        pull = ct * kv_per_token_s if unit_tp else ct * kv_per_token_s / tp
        splice = ops.where(cached, 0.0, splice_s(ct, params, ops))
    return StepParts(probe, wire if unit_tp else wire / tp, ret_extra, compute, attend, pull, splice, gather,
                     ct * (geometry.layers * params.prefill_s_per_token_layer), sparse)   # positional: hot float path


def host_s(mq, params: CostParams) -> tuple[object, float]:
    """(route, fetch) host cost per step in the Python-client regime (paper §5.3); 0 otherwise."""
    if not params.host_overhead:
        return 0.0, 0.0
    div = params.dispatch_batch if params.dispatcher_batching else 1
    return (params.host_fixed_s + params.host_per_row_s * mq) / div, params.host_fixed_s / div


def _inputs(shape: Shape):
    """The shape's fields as float / bool arrays, converted once."""
    import numpy as np
    dtype = np.float64
    tp = float(shape.tp) if np.ndim(shape.tp) == 0 else np.asarray(shape.tp, dtype=dtype)   # 1 skips the divides
    query_tokens = shape.query_tokens if np.ndim(shape.query_tokens) == 0 and shape.query_tokens == 1 else \
        np.asarray(shape.query_tokens, dtype=dtype)                                           # 1: decode rows
    return (np.asarray(shape.mq, dtype=dtype), np.asarray(shape.ct, dtype=dtype), np.asarray(shape.fabric),
            np.asarray(shape.topk, dtype=dtype), np.asarray(shape.holders, dtype=dtype), tp,
            np.asarray(shape.cached, dtype=bool), 1.0 + np.asarray(shape.reuse, dtype=dtype), query_tokens)


def costs(shape: Shape, params: CostParams) -> dict[str, dict[str, np.ndarray]]:
    """Every term of every primitive over the horizon of 1 + R steps, in seconds; plus wire bytes.

    Returns {primitive: {term: array, ..., "total": array, "wire_bytes": array}}.
    """
    import numpy as np
    mq, ct, fabric, topk, holders, tp, cached, steps, query_tokens = _inputs(shape)
    parts = step_parts(mq, ct, fabric, topk, holders, tp, cached, params, ARRAYS, query_tokens)
    zero = np.zeros(np.broadcast(mq, ct, topk, steps, fabric, holders, cached).shape)
    return _term_table(parts, mq, ct, topk, holders, steps, params, ARRAYS, zero)


def scalar_inputs(shape: Shape):
    """One shape's fields as `_inputs` gives them, as plain floats (fabric an int, cached a bool)."""
    query_tokens = shape.query_tokens
    return (float(shape.mq), float(shape.ct), int(shape.fabric), float(shape.topk), float(shape.holders),
            float(shape.tp), bool(shape.cached), 1.0 + float(shape.reuse),
            query_tokens if query_tokens == 1 else float(query_tokens))


def costs_scalar(shape: Shape, params: CostParams) -> dict[str, dict[str, float]]:
    """`costs` for one shape, as plain floats (CLI tables, tests), equal to `costs`' bit for bit; no numpy."""
    mq, ct, fabric, topk, holders, tp, cached, steps, query_tokens = scalar_inputs(shape)
    parts = step_parts(mq, ct, fabric, topk, holders, tp, cached, params, SCALARS, query_tokens)
    return _term_table(parts, mq, ct, topk, holders, steps, params, SCALARS, 0.0)


def _term_table(parts: StepParts, mq, ct, topk, holders, steps, params: CostParams, ops: Ops, zero):
    """`costs`' table from one step's parts, arrays or floats (`zero`: the broadcast shape's zeros, or 0.0)."""
    geometry = params.geometry
    per_step = steps * float(params.exchanges)
    host_route, host_fetch = host_s(mq, params)
    q_share = geometry.q_bytes / geometry.qp_bytes
    route = {"probe": per_step * parts.probe + zero, "transfer": per_step * parts.wire * q_share + zero,
             "compute": per_step * parts.compute + zero,
             "return": per_step * (parts.wire * (1.0 - q_share) + parts.ret_extra) + zero,
             "merge": per_step * params.merge_s + zero, "host": steps * host_route + zero}
    holders_m = ops.where(parts.sparse, ops.maximum(holders, 1.0), 1.0)
    route["wire_bytes"] = per_step * holders_m * mq * geometry.qp_bytes + zero
    attend = per_step * parts.attend + zero
    fetch = {"pull": zero if parts.pull is None else ops.where(parts.sparse, 0.0, parts.pull) + zero,
             "splice": zero if parts.splice is None else ops.where(parts.sparse, 0.0, parts.splice) + zero,
             "gather": (zero if parts.gather is None else ops.where(parts.sparse, steps * parts.gather, 0.0) + zero),
             "attend": attend,
             "host": steps * host_fetch + zero}
    kv_token = geometry.kv_bytes_per_token
    fetch["wire_bytes"] = ops.where(parts.sparse, steps * topk * kv_token, ct * kv_token) + zero
    local = {"prefill": parts.prefill + zero, "attend": attend, "wire_bytes": zero}
    out = {"route": route, "fetch": fetch, "local": local}
    for prim, terms in out.items():
        terms["total"] = sum(terms[term] for term in TERMS[prim])
    return out


def route_transport_s(mq, fabric: FabricParams, geometry: ModelGeometry, tp: int = 1) -> np.ndarray:
    """One routed round trip's transport: probe + Mq (q+p) / BW (paper §4.2, what Table 1 measures)."""
    import numpy as np
    mq = np.asarray(mq, dtype=float)
    return fabric.t_probe_s + fabric.turnaround_s + mq * geometry.qp_bytes / tp / fabric.single_block_Bps


def wire_break_even_mq(ct, geometry: ModelGeometry) -> np.ndarray:
    """Mq* = ct b_KV / (q+p): above it route moves more bytes than pulling the chunk (one layer, §5.2)."""
    import numpy as np
    return np.asarray(ct, dtype=float) * geometry.token_fraction * geometry.b_kv / geometry.qp_bytes


def route_byte_saving(mq, ct, geometry: ModelGeometry) -> np.ndarray:
    """Fraction of wire bytes route saves against pulling the chunk (per layer; 76% at Mq 256, ct 2048)."""
    import numpy as np
    chunk_bytes = np.asarray(ct, dtype=float) * geometry.token_fraction * geometry.b_kv
    return 1.0 - np.asarray(mq, dtype=float) * geometry.qp_bytes / chunk_bytes


def route_loses_below_bw(mq, ct, params: CostParams) -> np.ndarray:
    """Effective bandwidth below which route's byte term exceeds fetch's splice: Mq (q+p) / T_splice (§8)."""
    import numpy as np
    return np.asarray(mq, dtype=float) * params.geometry.qp_bytes / splice_s(ct, params)
