"""Measured operator tables: the step-time model's primary source (docs/STEP_TIME.md, "Operator tables").

A table holds one operator kind's measured latencies on one GPU under one serving framework and version: shape
columns (numeric, e.g. GEMM m, n, k) and categorical ones (dtype, kernel mode), and a latency per row. The
tables come from the probes (`simroute calibrate`) or from a published database (`simroute calib import
aiconfigurator`); both write the same format (simroute.calib.optables), so the model cannot tell them apart.

This module is pure numpy: it answers "how long does this operator take at this shape" from a table by
interpolating on the table's own grid, in log-log space (the grids are geometric: tokens, batch, context and
message size double from row to row), with what each answer rests on (`Lookup`): a grid point (`measured`),
between grid points (`interpolated`) or past the last one (`extrapolated`, along the last segment's log-log
slope: never a silent clamp; below the first point a curve stays flat, since no kernel gets faster than
its smallest measured launch). Each curve is made monotone in its axis before use (more tokens, batch or
context never make a kernel faster), by isotonic regression in log latency (`isotonic`): a run of points that
violates the order (a tile boundary or timing noise: the H200 GEMM table has such runs at about 4 in 10 of
its points) is replaced by the geometric mean of the run. That is the least-squares monotone fit, so it
adds no bias (lowering each point to the next larger shape's time, the other way to force monotonicity,
made the GEMM table 6% faster on average). `Curve.adjusted` counts the points it moved by more than 2%.

The step-time model folds a model's fixed coordinates (n and k of each GEMM, heads, head width) into curves
over the one axis that varies from iteration to iteration (tokens, batch, context) once, when it is built, so
the simulator's hot loop does a bisect per term.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from enum import Enum
from itertools import product
from typing import Iterable, Mapping, Sequence

import numpy as np


class OpKind(str, Enum):
    """The operator kinds a table may hold (the file name of its table is `<kind>.parquet`)."""

    GEMM = "gemm"                            # dense GEMM: m tokens x k -> n, per weight dtype
    MOE = "moe"                              # fused routed-expert MoE kernel (tp / ep split)
    ATTENTION_PREFILL = "attention_prefill"  # GQA/MHA causal prefill of isl tokens, batch sequences
    ATTENTION_DECODE = "attention_decode"    # GQA/MHA decode of batch sequences over context tokens
    MLA_PREFILL = "mla_prefill"              # MLA prefill (expanded form), heads per rank
    MLA_DECODE = "mla_decode"                # MLA decode (absorbed form), heads per rank
    MLA_BMM = "mla_bmm"                      # MLA's absorbed per-head BMMs (pre: q_nope x W_UK, post: x W_UV)
    ALLREDUCE = "allreduce"                  # TP all-reduce of message_elements bf16 values over gpus GPUs
    ELEMENTWISE = "elementwise"              # a layer's memory-bound kernels (norms, RoPE, activation) by width
    DSA_DECODE = "dsa_decode"                # DSA's whole decode attention module (projections, indexer, top-k)
    # expert parallelism (docs/STEP_TIME.md, "DP attention and expert parallelism")
    MOE_A2A = "moe_a2a"                      # one EP all-to-all phase (DeepEP dispatch / combine), tokens per rank
    MOE_DEEPEP = "moe_deepep"                # DeepEP's grouped expert GEMMs on one rank, the EP group's tokens
    COLLECTIVE = "collective"                # an NCCL collective (all-gather, reduce-scatter, ...) over gpus GPUs
    MLA_MODULE = "mla_module"                # a DP-attention rank's whole MLA block (projections to o_proj)


# Each kind's columns: (categorical, numeric). The numeric ones are shape axes (interpolated); the categorical
# ones select rows exactly. latency_us is every table's value column.
SCHEMA: dict[OpKind, tuple[tuple[str, ...], tuple[str, ...]]] = {
    OpKind.GEMM: (("dtype",), ("m", "n", "k")),
    OpKind.MOE: (("dtype", "distribution"), ("tokens", "hidden", "inter", "topk", "experts", "moe_tp", "moe_ep")),
    OpKind.ATTENTION_PREFILL: (("kv_dtype",), ("batch", "isl", "heads", "kv_heads", "head_dim")),
    OpKind.ATTENTION_DECODE: (("kv_dtype",), ("batch", "context", "heads", "kv_heads", "head_dim")),
    OpKind.MLA_PREFILL: (("kv_dtype",), ("batch", "isl", "heads")),
    OpKind.MLA_DECODE: (("kv_dtype",), ("batch", "context", "heads")),
    OpKind.MLA_BMM: (("stage", "dtype"), ("tokens", "heads")),
    OpKind.ALLREDUCE: (("mode", "dtype"), ("gpus", "message_elements")),
    OpKind.ELEMENTWISE: (("kernel", "dtype"), ("tokens", "width")),
    # one decode token of `batch` sequences over `context` through the sparse model's attention module (its HF
    # `architecture`; dtype: its projections' GEMMs), heads of one rank: the check of the composed sparse terms
    OpKind.DSA_DECODE: (("architecture", "dtype", "kv_dtype"), ("batch", "context", "heads")),
    OpKind.MOE_A2A: (("backend", "phase", "dtype"), ("tokens", "hidden", "topk", "experts", "ep", "nodes", "sms")),
    OpKind.MOE_DEEPEP: (("mode", "dtype", "distribution"), ("tokens", "hidden", "inter", "topk", "experts", "ep")),
    OpKind.COLLECTIVE: (("op", "dtype"), ("gpus", "message_elements")),
    OpKind.MLA_MODULE: (("phase", "kv_dtype", "backend"), ("batch", "tokens", "heads")),
}
# Shape columns that may hold 0: read only at an exact value (a `fixed` key of `OpTable.curve`), never the axis of
# a log-log curve. DeepEP's low-latency kernels have no SM budget (`sms` 0); normal mode's rows name theirs (20).
ZERO_SHAPES: dict[OpKind, frozenset[str]] = {OpKind.MOE_A2A: frozenset({"sms"})}
# The elementwise table's `kernel` values (docs/STEP_TIME.md, "Elementwise kernels"): SGLang's fused residual add +
# RMSNorm, a plain RMSNorm, rotary embedding in place, and the gated activation silu(gate) x up. `width` is the
# elements per token of the row one launch works on, on one rank (simroute.model.steptime.elementwise_kernels).
ELEMENTWISE_KERNEL_NAMES = ("add_rmsnorm", "rmsnorm", "rope", "silu_mul")
LATENCY_COLUMN = "latency_us"


class Lookup(str, Enum):
    """What a term's time rests on, from most to least direct."""

    MEASURED = "measured"          # a grid point of a table
    INTERPOLATED = "interpolated"  # between grid points of a table
    EXTRAPOLATED = "extrapolated"  # past a table's grid, along its last log-log segment
    ROOFLINE = "roofline"          # no table covers it: the datasheet roofline with kernel floors

    @staticmethod
    def worst(*lookups: "Lookup") -> "Lookup":
        return max(lookups, key=_LOOKUP_ORDER.__getitem__) if lookups else Lookup.MEASURED


def sorted_distinct(values: np.ndarray) -> tuple:
    """`tuple(np.unique(values).tolist())` (sorted distinct values) by one sort and a comparison of neighbours, which
    is what np.unique computes; np.unique itself also imports numpy.ma on its first call. NaN (no table holds
    one: the readers refuse it) goes through np.unique, which counts every NaN as one value."""
    ordered = np.sort(values)
    if ordered.dtype.kind == "f" and len(ordered) and np.isnan(ordered[-1]):
        return tuple(np.unique(values).tolist())
    keep = np.ones(len(ordered), dtype=bool)
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return tuple(ordered[keep].tolist())


_LOOKUP_ORDER = {Lookup.MEASURED: 0, Lookup.INTERPOLATED: 1, Lookup.EXTRAPOLATED: 2, Lookup.ROOFLINE: 3}


class LabelColumns(Mapping[str, np.ndarray]):
    """A table's categorical columns as Parquet holds them: each column's labels and a code per row. A column's
    str array (what `columns[name]` answers) is built on first use; a row selection compares codes (`equal`).
    The step model selects its rows by a few labels, so a run's start-up never builds the str arrays of the
    ~270k rows it reads (16 MB: with their page faults, most of the ~0.05 CPU s its start-up lost, bench/RESULTS.md)."""

    def __init__(self, columns: Mapping[str, tuple[Sequence[str], np.ndarray]]) -> None:
        self._coded = dict(columns)
        self._built: dict[str, np.ndarray] = {}
        self._index: dict[str, dict[str, list[int]]] = {}

    def __getitem__(self, column: str) -> np.ndarray:
        if column not in self._built:
            labels, codes = self._coded[column]
            self._built[column] = np.asarray(labels, dtype=str)[codes]
        return self._built[column]

    def __contains__(self, column: object) -> bool:
        return column in self._coded

    def __iter__(self):
        return iter(self._coded)

    def __len__(self) -> int:
        return len(self._coded)

    def equal(self, column: str, value: object) -> np.ndarray:
        """`self[column] == value` (a bool per row), from the codes. Labels compare as the str array compares
        them (numpy drops a label's trailing NULs), so two entries equal there select the same rows here."""
        if column not in self._index:
            index: dict[str, list[int]] = {}
            for code, label in enumerate(np.asarray(self._coded[column][0], dtype=str).tolist()):
                index.setdefault(label, []).append(code)
            self._index[column] = index
        codes = self._coded[column][1]
        wanted = self._index[column].get(value) if isinstance(value, str) else None
        if not wanted:
            return np.zeros(codes.shape[0], dtype=bool)
        return codes == wanted[0] if len(wanted) == 1 else np.isin(codes, wanted)


class TableMiss(LookupError):
    """No rows of a table cover the asked coordinates (the caller falls back to the roofline)."""


@dataclass(frozen=True)
class OpTable:
    """One operator kind's rows: `categorical` and `numeric` columns (equal-length arrays) and latencies in us.

    `source` says where the rows come from (the manifest's entry: provenance kind, box or package, file)."""

    kind: OpKind
    categorical: Mapping[str, np.ndarray]
    numeric: Mapping[str, np.ndarray]
    latency_us: np.ndarray
    source: Mapping[str, str] = field(default_factory=dict)
    # what was derived from the rows, by its arguments (distinct values, curves, TableMiss): a process builds many
    # step models from one loaded table, and every derived value is immutable
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        cats, nums = SCHEMA[self.kind]
        if set(self.categorical) != set(cats) or set(self.numeric) != set(nums):
            raise ValueError(f"{self.kind.value} table needs columns {cats + nums}, got "
                             f"{tuple(self.categorical) + tuple(self.numeric)}")

    @property
    def rows(self) -> int:
        return int(self.latency_us.shape[0])

    @property
    def label(self) -> str:
        """How outputs name the table: kind and the file it was read from."""
        return f"{self.kind.value} ({self.source.get('file', 'in memory')})"

    def values(self, column: str) -> list:
        """The distinct values of a column (sorted)."""
        key = ("values", column)
        if key not in self._memo:
            arr = self.categorical.get(column, self.numeric.get(column))
            if arr is None:
                raise KeyError(column)
            self._memo[key] = sorted_distinct(arr)
        return list(self._memo[key])

    def note_labels(self, column: str, labels: Iterable[str]) -> None:
        """Records a categorical column's distinct labels, as `values` answers them, where the reader already knows
        them (an Arrow dictionary column's used entries): sorting a 100k-row column of strings to find the same
        few labels took ~50-100 ms per column of a run's start-up."""
        if column not in self.categorical:
            raise KeyError(column)
        self._memo[("values", column)] = tuple(sorted(labels))

    def _mask(self, where: Mapping[str, str]) -> np.ndarray:
        mask = np.ones(self.rows, dtype=bool)
        coded = self.categorical if isinstance(self.categorical, LabelColumns) else None
        for col, val in where.items():
            mask &= coded.equal(col, val) if coded is not None else self.categorical[col] == val
        return mask

    def _rows(self, where: Mapping[str, str]) -> np.ndarray:
        """The rows `where` selects, in file order (memoized: a step model reads many curves at one dtype)."""
        key = ("rows", tuple(sorted(where.items())))
        if key not in self._memo:
            rows = np.flatnonzero(self._mask(where))
            rows.flags.writeable = False
            self._memo[key] = rows
        return self._memo[key]

    def _selected(self, selected: tuple, rows: np.ndarray, col: str) -> np.ndarray:
        """A numeric column at the rows `selected` (a `where`, sorted) picks, memoized: the curves of one step model
        read the same few columns of one dtype's rows (a GEMM table's 100k rows) again and again."""
        key = ("column", selected, col)
        if key not in self._memo:
            values = self.numeric[col][rows]
            values.flags.writeable = False
            self._memo[key] = values
        return self._memo[key]

    def _grid(self, selected: tuple, values: np.ndarray, col: str) -> list[float]:
        """The distinct values (sorted) of `_selected`'s column, memoized."""
        key = ("grid", selected, col)
        if key not in self._memo:
            self._memo[key] = sorted_distinct(values)
        return list(self._memo[key])

    def _equal(self, selected: tuple, values: np.ndarray, col: str, value: float) -> np.ndarray:
        """Which of `_selected`'s rows hold `value` in `col`, memoized (curves at neighbouring shapes share corners)."""
        key = ("equal", selected, col, value)
        if key not in self._memo:
            mask = values == value
            mask.flags.writeable = False
            self._memo[key] = mask
        return self._memo[key]

    def curve(self, axis: str, fixed: Mapping[str, float], where: Mapping[str, str] | None = None) -> "Curve":
        """Latency over `axis` with the other numeric columns at `fixed` and categorical ones at `where`.

        Each fixed coordinate is bracketed by the grid values the rows hold (exact, between two, or past the
        outermost two), and the corner curves are combined linearly in log latency over log coordinate. The
        corners' axis grids are intersected. Raises TableMiss when no rows cover a corner."""
        key = ("curve", axis, tuple(sorted(fixed.items())), tuple(sorted((where or {}).items())))
        if key not in self._memo:
            try:
                self._memo[key] = self._curve(axis, fixed, where)
            except TableMiss as miss:
                self._memo[key] = miss
        found = self._memo[key]
        if isinstance(found, TableMiss):
            raise TableMiss(*found.args)
        return found

    def _curve(self, axis: str, fixed: Mapping[str, float], where: Mapping[str, str] | None) -> "Curve":
        where = dict(where or {})
        rows = self._rows(where)
        if not rows.size:
            raise TableMiss(f"{self.kind.value}: no rows with {where}")
        selected = tuple(sorted(where.items()))
        column = {col: self._selected(selected, rows, col) for col in (*fixed, axis)}
        status = Lookup.MEASURED
        brackets: list[list[tuple[str, float, float]]] = []
        for col, target in fixed.items():
            grid = self._grid(selected, column[col], col)
            corners, how = _bracket(grid, float(target))
            status = Lookup.worst(status, how)
            brackets.append([(col, value, weight) for value, weight in corners])
        axis_grid: set[float] | None = None
        corner_curves: list[tuple[float, dict[float, float]]] = []
        for combo in product(*brackets) if brackets else [()]:
            mask = np.ones(rows.size, dtype=bool)
            weight = 1.0
            for col, value, corner_weight in combo:
                mask &= self._equal(selected, column[col], col, value)
                weight *= corner_weight
            if not mask.any():
                corner = dict((col_name, grid_value) for col_name, grid_value, _ in combo)
                raise TableMiss(f"{self.kind.value}: no rows at {corner} with {where}")
            coordinates, lat = column[axis][mask], self.latency_us[rows[mask]]
            points = repeats_merged([float(coordinate) for coordinate in coordinates.tolist()], lat.tolist())
            corner_curves.append((weight, points))
            axis_grid = set(points) if axis_grid is None else axis_grid & set(points)
        grid_x = sorted(coordinate for coordinate in (axis_grid or ()) if coordinate > 0)
        if len(grid_x) < 2:
            raise TableMiss(f"{self.kind.value}: fewer than two {axis} points shared at {dict(fixed)} {where}")
        log_y = [sum(corner_weight * math.log(pts[coordinate] * 1e-6) for corner_weight, pts in corner_curves)
                 for coordinate in grid_x]
        return Curve.from_points(grid_x, [math.exp(log_value) for log_value in log_y], status=status, table=self.label)


def gemm_rows_no_faster_than(table: OpTable, dtype: str, flops_per_s: float, why: str) -> OpTable:
    """`table` (a GEMM table) with each `dtype` row no faster than `flops_per_s` (2 m n k FLOPs): the rows of a
    kernel that a launch replaces by one whose measured throughput never exceeds that rate, where no table times
    the launched kernel shape by shape (docs/STEP_TIME.md, "FlashInfer's TRT-LLM FP8 GEMM"). Other rows are kept."""
    if table.kind is not OpKind.GEMM:
        raise ValueError(f"{table.kind.value} is not a GEMM table")
    if not flops_per_s > 0:
        raise ValueError(f"the FLOP rate must be positive, got {flops_per_s}")
    tokens, width, depth = (np.asarray(table.numeric[axis], dtype=float) for axis in ("m", "n", "k"))
    bound_us = 2.0 * tokens * width * depth / flops_per_s * 1e6
    rows = np.asarray(table._mask({"dtype": dtype}))
    latency = np.where(rows, np.maximum(table.latency_us, bound_us), table.latency_us)
    return OpTable(table.kind, table.categorical, table.numeric, latency,
                   {**table.source, "file": f"{table.source.get('file', 'in memory')}; {dtype} rows no faster "
                                            f"than {flops_per_s / 1e12:.0f} TFLOP/s ({why})"})


def repeats_merged(keys: Sequence, latencies_us: Sequence[float]) -> dict:
    """key -> latency, a shape measured more than once taking the geometric mean of its measurements (the H100
    MLA tables hold every shape twice, 1-2% apart)."""
    logs: dict = {}
    for key, ordinate in zip(keys, latencies_us):
        logs.setdefault(key, []).append(math.log(ordinate))
    return {coordinate: math.exp(sum(value) / len(value)) for coordinate, value in logs.items()}


def _bracket(grid: Sequence[float], target: float) -> tuple[list[tuple[float, float]], Lookup]:
    """Grid values around `target` with their log-space weights, and whether it is on, inside or past the grid."""
    if not grid:
        raise TableMiss("empty grid")
    if target in grid:
        return [(target, 1.0)], Lookup.MEASURED
    if len(grid) == 1 or target <= 0:
        raise TableMiss(f"coordinate {target} off a one-point grid {list(grid)}")
    index = bisect_right(grid, target)
    low, high = ((grid[0], grid[1]) if index == 0 else (grid[-2], grid[-1]) if index >= len(grid)
                 else (grid[index - 1], grid[index]))
    fraction = (math.log(target) - math.log(low)) / (math.log(high) - math.log(low))
    how = Lookup.INTERPOLATED if 0.0 < fraction < 1.0 else Lookup.EXTRAPOLATED
    return [(low, 1.0 - fraction), (high, fraction)], how


def _position(value: float, grid: Sequence[float]) -> Lookup:
    """Where log coordinate `v` lies on a log grid: on a point, between two, or past either end."""
    if value < grid[0] - 1e-12 or value > grid[-1] + 1e-12:
        return Lookup.EXTRAPOLATED
    if any(abs(value - grid_point) < 1e-9 for grid_point in grid):
        return Lookup.MEASURED
    return Lookup.INTERPOLATED


ADJUSTED_LOG = math.log(1.02)      # a point the monotone fit moved by more than 2% counts as adjusted


def isotonic(values: Sequence[float]) -> list[float]:
    """The non-decreasing sequence closest to `values` in least squares (pool adjacent violators): each run
    that breaks the order becomes its mean."""
    blocks: list[list[float]] = []            # [mean, count]
    for value in values:
        blocks.append([float(value), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean, count = blocks.pop()
            prev_mean, prev_count = blocks[-1]
            total = prev_count + count
            blocks[-1] = [(prev_mean * prev_count + mean * count) / total, total]
    out: list[float] = []
    for mean, count in blocks:
        out.extend([mean] * int(count))
    return out


@dataclass(frozen=True)
class Curve:
    """Seconds over one positive axis, piecewise linear in log-log between grid points, extended along the
    outermost segments' slopes (so a GEMM past its last m grows linearly, not clamped). `status` is what the
    fixed coordinates rest on; `lookup` adds whether x itself is on, between or past the points."""

    log_x: tuple[float, ...]
    log_y: tuple[float, ...]
    status: Lookup = Lookup.MEASURED
    table: str = ""
    adjusted: int = 0          # measured points the monotone fit moved by more than 2% (module docstring)
    # derived once for the hot path (`seconds`): each segment's log-log slope, the last segment's index and the
    # time below the grid; the same expressions `seconds` used to evaluate per call, so the same floats
    _slopes: tuple[float, ...] = field(default=(), init=False, repr=False, compare=False)
    _last: int = field(default=0, init=False, repr=False, compare=False)
    _floor: float = field(default=0.0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        log_xs, log_ys = self.log_x, self.log_y
        object.__setattr__(self, "_slopes", tuple((log_ys[index + 1] - log_ys[index])
                                                  / (log_xs[index + 1] - log_xs[index])
                                                  for index in range(len(log_xs) - 1)))
        object.__setattr__(self, "_last", len(log_xs) - 2)
        object.__setattr__(self, "_floor", math.exp(log_ys[0]) if log_ys else 0.0)

    @classmethod
    def from_points(cls, coordinates: Sequence[float], seconds: Sequence[float], *, status: Lookup = Lookup.MEASURED,
                    table: str = "") -> "Curve":
        """A monotone curve through (x, seconds) points (x increasing, all positive): the isotonic fit in log
        seconds (see the module docstring)."""
        raw = [math.log(ordinate) for ordinate in seconds]
        fit = isotonic(raw)
        adjusted = sum(1 for first, second in zip(raw, fit) if abs(first - second) > ADJUSTED_LOG)
        return cls(tuple(math.log(coordinate) for coordinate in coordinates), tuple(fit), status, table, adjusted)

    @property
    def xs(self) -> tuple[float, ...]:
        return tuple(math.exp(value) for value in self.log_x)

    @property
    def seconds_at_points(self) -> tuple[float, ...]:
        return tuple(math.exp(value) for value in self.log_y)

    def seconds(self, coordinate: float) -> float:
        """The hot path: seconds at x > 0 (0 at x <= 0: no work launches no kernel)."""
        if coordinate <= 0:
            return 0.0
        log_xs = self.log_x
        value = math.log(coordinate)
        if value <= log_xs[0]:
            return self._floor                 # below the grid: the smallest launch's time (the kernel floor)
        index = bisect_right(log_xs, value) - 1            # >= 0 here; past the grid, the last segment's slope
        if index > self._last:
            index = self._last
        return math.exp(self.log_y[index] + (value - log_xs[index]) * self._slopes[index])

    def lookup(self, coordinate: float) -> tuple[float, Lookup]:
        """Seconds at x and what they rest on."""
        if coordinate <= 0:
            return 0.0, self.status                  # no work launches no kernel
        return self.seconds(coordinate), Lookup.worst(self.status, _position(math.log(coordinate), self.log_x))

    def plus(self, other: "Curve") -> "Curve":
        """The sum of two curves on the union of their grids (two kernels launched one after the other)."""
        coordinates = sorted(set(self.xs) | set(other.xs))
        return Curve.from_points(coordinates, [self.seconds(coordinate) + other.seconds(coordinate)
                                               for coordinate in coordinates],
                                 status=Lookup.worst(self.status, other.status),
                                 table="; ".join(label for label in (self.table, other.table) if label))


ISOTONIC_PASSES = 4


def _monotone_rows(curves: Sequence[Curve]) -> tuple[Curve, ...]:
    """Row curves (each monotone in its column axis) made monotone across rows too: on the union of their column
    grids, alternating isotonic fits down each column and along each row, then a running maximum down the
    columns (which keeps every row monotone: a maximum of non-decreasing rows is non-decreasing) so that a
    larger batch is never faster at any column point. Each row keeps its own column range (a point past it
    stays an extrapolation)."""
    grid = sorted(set().union(*(set(row_curve.log_x) for row_curve in curves)))
    matrix = [[row_curve.seconds(math.exp(log_value)) for log_value in grid] for row_curve in curves]
    logs = [[math.log(ordinate) for ordinate in row] for row in matrix]
    for _ in range(ISOTONIC_PASSES):
        for inner_index in range(len(grid)):
            column = isotonic([row[inner_index] for row in logs])
            for row, value in zip(logs, column):
                row[inner_index] = value
        logs = [isotonic(row) for row in logs]
    for index in range(1, len(logs)):
        logs[index] = [max(first, second) for first, second in zip(logs[index - 1], logs[index])]
    out = []
    for curve, row in zip(curves, logs):
        low, high = curve.log_x[0] - 1e-12, curve.log_x[-1] + 1e-12
        keep = [(log_value, ordinate) for log_value, ordinate in zip(grid, row) if low <= log_value <= high]
        out.append(Curve(tuple(log_value for log_value, _ in keep), tuple(ordinate for _, ordinate in keep),
                         curve.status, curve.table,
                         curve.adjusted))
    return tuple(out)


@dataclass(frozen=True)
class Surface:
    """Seconds over two axes (batch, and context or isl), as one `Curve` over the second axis per grid value of
    the first, combined in log-log between the two around the asked batch."""

    log_rows: tuple[float, ...]
    curves: tuple[Curve, ...]
    # derived once for the hot path (`seconds`): the row gaps in log space and the last pair's index
    _gaps: tuple[float, ...] = field(default=(), init=False, repr=False, compare=False)
    _last: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        log_rows = self.log_rows
        object.__setattr__(self, "_gaps", tuple(log_rows[index + 1] - log_rows[index]
                                                for index in range(len(log_rows) - 1)))
        object.__setattr__(self, "_last", len(log_rows) - 2)

    @classmethod
    def from_table(cls, table: OpTable, row_axis: str, col_axis: str, fixed: Mapping[str, float],
                   where: Mapping[str, str] | None = None, *, one_row_scales: bool = False) -> "Surface":
        """The surface over (row_axis, col_axis). `one_row_scales`: a table with a single row value (a probe
        that timed one sequence) still makes a surface, whose time past that row grows in proportion to the row
        count (independent sequences, one after another: an upper bound) and is flagged extrapolated."""
        rows, curves = [], []
        for value in table.values(row_axis):
            if value <= 0:
                continue
            try:
                curves.append(table.curve(col_axis, {**fixed, row_axis: value}, where))
                rows.append(math.log(value))
            except TableMiss:
                continue
        if len(curves) == 1 and one_row_scales:
            scaled = Curve(curves[0].log_x, tuple(ordinate + math.log(2.0) for ordinate in curves[0].log_y),
                           Lookup.EXTRAPOLATED,
                           curves[0].table, curves[0].adjusted)
            return cls((rows[0], rows[0] + math.log(2.0)), (curves[0], scaled))
        if len(curves) < 2:
            raise TableMiss(f"{table.kind.value}: fewer than two {row_axis} rows at {dict(fixed)} {where}")
        return cls(tuple(rows), _monotone_rows(curves))

    @property
    def status(self) -> Lookup:
        return Lookup.worst(*(row_curve.status for row_curve in self.curves))

    @property
    def table(self) -> str:
        return self.curves[0].table

    def seconds(self, row: float, col: float) -> float:
        if row <= 0 or col <= 0:
            return 0.0
        log_rows = self.log_rows
        value = math.log(row)
        if value <= log_rows[0]:
            return self.curves[0].seconds(col)          # below the first row: flat, as a curve below its grid
        index = bisect_right(log_rows, value) - 1
        if index > self._last:
            index = self._last
        curves = self.curves
        log_lo = math.log(curves[index].seconds(col))
        fraction = (value - log_rows[index]) / self._gaps[index]
        return math.exp(log_lo + fraction * (math.log(curves[index + 1].seconds(col)) - log_lo))

    def lookup(self, row: float, col: float) -> tuple[float, Lookup]:
        """Seconds at (row, col) and what they rest on: the row's position among the rows, and the column's on
        the row curves it reads (both around a row between two)."""
        if row <= 0 or col <= 0:
            return 0.0, self.status
        value, log_rows = math.log(row), self.log_rows
        index = min(max(bisect_right(log_rows, value) - 1, 0), len(log_rows) - 1)
        rows = {index, index + 1} if log_rows[index] < value < log_rows[-1] else {index}
        return self.seconds(row, col), Lookup.worst(_position(value, log_rows),
                                                    *(self.curves[inner_index].lookup(col)[1] for inner_index in rows))


@dataclass(frozen=True)
class OperatorTables:
    """The tables of one GPU under one framework version, and where they come from (the manifest)."""

    gpu: str
    framework: str
    version: str
    tables: Mapping[OpKind, OpTable]
    provenance: Mapping[str, str] = field(default_factory=dict)
    path: str = ""

    def get(self, kind: OpKind) -> OpTable | None:
        return self.tables.get(kind)

    @property
    def label(self) -> str:
        return f"{self.gpu} {self.framework} {self.version}"
