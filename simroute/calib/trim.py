"""Drop the operator-table rows no shipped model can read, keeping every read identical (docs/STEP_TIME.md,
"Trimmed tables").

A published database measures every shape of its grid (GEMMs of hundreds of (n, k) pairs, MoE kernels of
dozens of expert shapes); a step model reads the few rows around its own fixed coordinates. `model_reads` records
what the step model (`simroute.model.opstep.MeasuredStep`) asks a table set for, over every shipped model, every
tensor-parallel degree that divides its query heads, both weight and KV dtypes and both MLA layouts, plus the
unfused GEMMs and the expert-parallel MoE splits a framework composition may read instead. `trim_rows` keeps, for
every categorical selection the table holds (every dtype, mode, distribution, not only the ones asked), the rows
at the grid values that bracket each recorded fixed coordinate, every value of the varying axis and of the
attention batch, and, per selection, one row of every distinct value of every numeric column.

Why the answers cannot change (`OpTable.curve`): a fixed coordinate is read from the two grid values around it
(or on it, or the outermost two past the grid), the grid being the column's values within the selection. Each
selection keeps every value of every column, so every coordinate brackets the same way; each corner a recorded read
uses keeps all its rows, and a corner empty on the whole table stays empty (a miss stays a miss). Every selection
and every value stay, so a surface iterates the same batch values and a dtype check sees the same set. tests/calib/test_trim.py checks that model steps read identically from a trimmed and a full table set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from simroute.model.optables import LATENCY_COLUMN, SCHEMA, OperatorTables, OpKind, OpTable, TableMiss, _bracket

# the axis a surface iterates (attention batch): every value of it is kept at the bracketing coordinates
SURFACE_ROW_AXIS = "batch"
# reads are recorded at these weight and KV-cache dtypes and MLA layouts (docs/STEP_TIME.md)
WEIGHT_DTYPES = ("bf16", "fp8")
CACHE_DTYPES = ("bf16", "fp8")
LAYOUTS = ("replicated", "tpla")
MAX_TP = 128


@dataclass(frozen=True)
class Read:
    """One `OpTable.curve` call: the varying axis and the fixed coordinates (the categorical selection is
    replayed over every selection the table holds)."""

    kind: OpKind
    axis: str
    fixed: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class _RecordingTable(OpTable):
    """An OpTable that records each curve it is asked for."""

    reads: list = field(default_factory=list, compare=False, repr=False)

    def curve(self, axis: str, fixed: Mapping[str, float], where: Mapping[str, str] | None = None):
        self.reads.append(Read(self.kind, axis, tuple(sorted((key, float(value)) for key, value in fixed.items()))))
        return super().curve(axis, fixed, where)


def tp_degrees(heads: int) -> list[int]:
    """Every tensor-parallel degree an engine could run `heads` query heads at (divides them, at most 128)."""
    return [tp for tp in range(1, min(heads, MAX_TP) + 1) if heads % tp == 0]


def model_reads(tables: OperatorTables, models: Iterable[str] | None = None) -> set[Read]:
    """What building the step model of every shipped model (or `models`) on `tables` reads, over every TP degree,
    weight and KV dtype and MLA layout; plus each unfused GEMM of a layer and each expert-parallel MoE split
    (moe_tp x moe_ep = tp), which another framework's composition may read."""
    from simroute.model.geometry import MODELS, get_model
    from simroute.model.steptime import GpuSpec, StepTimeModel

    recording = {kind: _RecordingTable(kind, table.categorical, table.numeric, table.latency_us, table.source)
                 for kind, table in tables.tables.items()}
    wrapped = OperatorTables(tables.gpu, tables.framework, tables.version, recording, tables.provenance, tables.path)
    # the reads do not depend on the GPU's constants: any will do
    gpu = GpuSpec(name=tables.gpu, peak_flops=1e15, hbm_Bps=1e12, hbm_bytes=1e12, hbm_efficiency=1.0,
                  gemm_efficiency=1.0, attention_efficiency=1.0, iteration_overhead_s=0.0, operator_tables=wrapped)
    reads: set[Read] = set()
    for name in (models if models is not None else MODELS):
        base = get_model(name)
        if not base.has_linear_geometry:
            continue
        for tp in tp_degrees(base.heads_q):
            for weight in WEIGHT_DTYPES:
                for cache in CACHE_DTYPES:
                    geometry = base.with_weight_dtype(weight) if weight != base.weight_dtype else base
                    geometry = geometry.with_cache_dtype(cache) if cache != geometry.cache_dtype else geometry
                    for layout in LAYOUTS if geometry.is_mla else LAYOUTS[:1]:
                        StepTimeModel(geometry, gpu, tp, kv_layout=layout)
            for kind, count in base.layer_kinds().items():
                if count <= 0:
                    continue
                for gemm in base.linear_ops(tp, kind):
                    if gemm.experts == 1:
                        reads.add(Read(OpKind.GEMM, "m", (("k", float(gemm.k)), ("n", float(gemm.n)))))
            if base.routed_experts:
                for moe_ep in (ep for ep in tp_degrees(tp) if ep > 1):
                    fixed = {"hidden": base.hidden, "inter": base.expert_intermediate,
                             "topk": base.experts_per_token, "experts": base.routed_experts,
                             "moe_tp": tp // moe_ep, "moe_ep": moe_ep}
                    reads.add(Read(OpKind.MOE, "tokens", tuple(sorted((key, float(value))
                                                                      for key, value in fixed.items()))))
    for table in recording.values():
        reads.update(table.reads)
    return reads


def reads_digest(reads: Iterable[Read]) -> str:
    """A fingerprint of a read set: a trimmed table set records the one it was trimmed for, and a test recomputes it
    (a new model or composition that reads other rows makes the shipped sets stale until re-imported)."""
    import hashlib
    text = repr(sorted((read.kind.value, read.axis, read.fixed) for read in reads))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _selections(table: OpTable) -> list[np.ndarray]:
    """A row mask per distinct combination of the table's categorical columns."""
    cats = list(table.categorical)
    if not cats:
        return [np.ones(table.rows, dtype=bool)]
    keys = np.array(["\x1f".join(values) for values in zip(*(table.categorical[col].astype(str) for col in cats))])
    return [keys == key for key in np.unique(keys)]


def trim_rows(table: OpTable, reads: Iterable[Read]) -> np.ndarray:
    """The rows of `table` to keep (a boolean mask) so that every read in `reads`, at any categorical selection,
    gives the same curve as on the whole table (module docstring)."""
    mine = [read for read in reads if read.kind is table.kind]
    keep = np.zeros(table.rows, dtype=bool)
    for selection in _selections(table):
        rows = np.flatnonzero(selection)
        columns = {col: table.numeric[col][rows] for col in table.numeric}
        grids = {col: np.unique(values).tolist() for col, values in columns.items()}
        for read in mine:
            mask = np.ones(rows.size, dtype=bool)
            for col, target in read.fixed:
                if col == SURFACE_ROW_AXIS or col not in grids:
                    continue
                try:
                    corners, _how = _bracket(grids[col], target)
                except TableMiss:
                    mask[:] = False
                    break
                mask &= np.isin(columns[col], [value for value, _weight in corners])
            keep[rows[mask]] = True
        keep[rows[0]] = True                           # the selection itself stays (a dtype check sees it)
        for values in columns.values():                # and each of its grids whole: a coordinate brackets, and a
            _, first = np.unique(values, return_index=True)    # corner misses, as on the whole table
            keep[rows[first]] = True
    return keep


def trim_tables(tables: OperatorTables, kinds: Iterable[OpKind], models: Iterable[str] | None = None,
                reads: set[Read] | None = None) -> tuple[OperatorTables, dict[OpKind, tuple[int, int]]]:
    """`tables` with the rows of `kinds` no model reads dropped, and (kept, of) rows per trimmed kind."""
    reads = model_reads(tables, models) if reads is None else reads
    out: dict[OpKind, OpTable] = dict(tables.tables)
    counts: dict[OpKind, tuple[int, int]] = {}
    for kind in kinds:
        table = tables.get(kind)
        if table is None:
            continue
        keep = trim_rows(table, reads)
        out[kind] = subset(table, keep)
        counts[kind] = (int(keep.sum()), table.rows)
    return OperatorTables(tables.gpu, tables.framework, tables.version, out, tables.provenance, tables.path), counts


def subset(table: OpTable, keep: np.ndarray) -> OpTable:
    return OpTable(table.kind, {col: values[keep] for col, values in table.categorical.items()},
                   {col: values[keep] for col, values in table.numeric.items()}, table.latency_us[keep], table.source)


def table_from_columns(kind: OpKind, columns: Mapping[str, Any]) -> OpTable:
    """An in-memory OpTable from an importer's columns (as `write_operator_tables` takes them)."""
    cats, nums = SCHEMA[kind]
    return OpTable(kind, {col: np.asarray([str(value) for value in columns[col]]) for col in cats},
                   {col: np.asarray(columns[col], dtype=float) for col in nums},
                   np.asarray(columns[LATENCY_COLUMN], dtype=float))


def columns_of(table: OpTable) -> dict[str, Any]:
    """An OpTable back as columns for `write_operator_tables` (integral shapes stay integers there)."""
    out: dict[str, Any] = {col: values.tolist() for col, values in table.categorical.items()}
    out.update({col: [int(value) if math.isfinite(value) and value == int(value) else value
                      for value in values.tolist()] for col, values in table.numeric.items()})
    out[LATENCY_COLUMN] = table.latency_us.tolist()
    return out


def shipped_trimmed_sets() -> list[Path]:
    """The shipped table directories written with --trim (their manifest's provenance says `trimmed`)."""
    from simroute.calib.profile import shipped_dir
    from simroute.ioutil import load_yaml
    return [path.parent for path in sorted((shipped_dir() / "ops").glob("*/*/tables.yaml"))
            if "trimmed" in ((load_yaml(path) or {}).get("provenance") or {})]


def main(argv: list[str] | None = None) -> None:
    """Re-import every shipped trimmed set from the installed aiconfigurator-core (or --from), trimmed for what the
    step model reads now: `python -m simroute.calib.trim [--from DIR]`."""
    import argparse
    import shutil
    import tempfile

    from simroute.calib.aiconfigurator import import_tables
    from simroute.calib.optables import load_operator_tables
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--from", dest="source", default=None, help="the package's systems/data (default: installed)")
    args = parser.parse_args(argv)
    for folder in shipped_trimmed_sets():
        tables = load_operator_tables(folder)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "tables"
            import_tables(tables.gpu, tables.framework, tables.version, out, data_root=args.source, trim=True)
            shutil.rmtree(folder)
            # the shipped sets carry no output manifest (simroute.ioutil's record of files it wrote)
            shutil.copytree(out, folder, ignore=shutil.ignore_patterns(".simroute-manifest.json"))
        print(f"re-imported {folder}")


if __name__ == "__main__":
    main()
