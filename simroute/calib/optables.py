"""Operator tables on disk: one directory per GPU and framework version (docs/STEP_TIME.md, "Operator tables").

    calib/ops/<gpu>/<framework>-<version>/
        tables.yaml          # manifest: schema, gpu, framework, version, provenance, one entry per table
        gemm.parquet         # one file per operator kind (simroute.model.optables.OpKind), columns per SCHEMA
        ...

The probes (`simroute calibrate`) and the importers (`simroute calib import aiconfigurator`) both write this
format through `write_operator_tables`, so a measured box and a published database are interchangeable. Each
manifest entry carries its provenance: `kind` (measured / paper / datasheet), and where it was measured
(`box`, `device`) or published (`package`, `package_version`, `source_file`, `licence`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from simroute.errors import ConfigurationError
from simroute.model.optables import (ELEMENTWISE_KERNEL_NAMES, LATENCY_COLUMN, SCHEMA, ZERO_SHAPES, LabelColumns,
                                     OperatorTables, OpKind, OpTable, repeats_merged)

MANIFEST = "tables.yaml"
SCHEMA_TAG = "simroute.optables/1"
PROVENANCE_KINDS = ("measured", "paper", "datasheet", "fitted")


def _fail(problem: str, path: Path, field: str | None = None) -> ConfigurationError:
    return ConfigurationError(problem, file=path, field=field)


def load_operator_tables(directory: str | Path) -> OperatorTables:
    """Read a table directory (manifest + parquet files); every column checked against the schema."""
    from simroute.ioutil import load_yaml

    root = Path(directory)
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        raise _fail("operator-table directory has no tables.yaml manifest", root)
    manifest = load_yaml(manifest_path)
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA_TAG:
        raise _fail(f"not an operator-table manifest (schema must be {SCHEMA_TAG})", manifest_path, "schema")
    from simroute.checks import check_name
    for key in ("gpu", "framework", "version"):
        check_name(manifest.get(key), key, file=manifest_path, what=f"{key} name")
    provenance = manifest.get("provenance")
    if not isinstance(provenance, dict) or provenance.get("kind") not in PROVENANCE_KINDS:
        raise _fail(f"provenance.kind must be one of {', '.join(PROVENANCE_KINDS)}", manifest_path, "provenance")
    entries = manifest.get("tables")
    if not isinstance(entries, dict) or not entries:
        raise _fail("no tables listed", manifest_path, "tables")
    tables: dict[OpKind, OpTable] = {}
    for name, entry in entries.items():
        try:
            kind = OpKind(name)
        except ValueError:
            raise _fail(f"unknown operator kind (known: {', '.join(member.value for member in OpKind)})", manifest_path,
                        f"tables.{name}") from None
        entry = entry if isinstance(entry, dict) else {}
        file = root / f"{kind.value}.parquet"
        if not file.is_file():
            raise _fail("listed in tables.yaml but the file is missing", file)
        if file.stat().st_size > MAX_TABLE_BYTES:
            raise _fail(f"is {file.stat().st_size:,} bytes; an operator table is at most {MAX_TABLE_BYTES:,}", file)
        try:
            data = _read_parquet(file, labels=SCHEMA[kind][0])
        except ConfigurationError:
            raise
        except Exception as exc:  # pyarrow raises several types for damaged files
            raise _fail(f"not a readable Parquet file ({type(exc).__name__})", file) from None
        categorical, numeric, latency, distinct = _checked(kind, data, file)
        source = {"file": str(Path(manifest["gpu"]) / root.name / file.name), "kind": str(provenance["kind"]),
                  **{key: str(value) for key, value in entry.items() if isinstance(value, (str, int, float))}}
        tables[kind] = OpTable(kind, categorical, numeric, latency, source)
        for column, labels in distinct.items():      # known from the dictionaries: not sorted again row by row
            tables[kind].note_labels(column, labels)
    return OperatorTables(gpu=manifest["gpu"], framework=manifest["framework"], version=str(manifest["version"]),
                          tables=tables, provenance={key: str(value) for key, value in provenance.items()},
                          path=str(root))


MAX_TABLE_BYTES = 256 << 20        # the shipped tables are under 2 MB each: past this, a file is not a table
# Bounds of a latency any kernel can have: 1 ns (no launch is faster: the shipped tables' least is 1.8 us) and
# 1000 s (no single kernel of an iteration takes longer: their largest is 2.9 s). Past them a value is in other
# units or corrupted, and the log-log interpolation would underflow or overflow on it.
LATENCY_RANGE_US = (1e-3, 1e9)


def check_table(kind: OpKind, data: Any, file: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray],
                                                                np.ndarray]:
    """The one check of an operator table, read from disk or about to be written (an Arrow table): every
    column of its kind's schema present and of its type (categorical: text, no nulls; shape and latency:
    numbers, no nulls), at least one row, shapes finite and > 0 (the curves are log-log; >= 0 in a
    `ZERO_SHAPES` column, read only at exact values), latencies within LATENCY_RANGE_US, elementwise kernels
    known. Returns (categorical, numeric, latency_us) arrays; raises the one-line error naming `file` and the
    column."""
    categorical, numeric, latency, _distinct = _checked(kind, data, file)
    return {column: categorical[column] for column in categorical}, numeric, latency


def _checked(kind: OpKind, data: Any, file: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray,
                                                             dict[str, set[str]]]:
    """`check_table`, and each categorical column's distinct labels."""
    import pyarrow as pa
    cats, nums = SCHEMA[kind]
    missing = [column for column in (*cats, *nums, LATENCY_COLUMN) if column not in data.column_names]
    if missing:
        raise _fail(f"missing column(s) {', '.join(missing)}", file)
    if data.num_rows == 0:
        raise _fail("holds no rows", file)
    for column in cats:
        kind_of = data.schema.field(column).type
        text = pa.types.is_dictionary(kind_of) and (pa.types.is_string(kind_of.value_type)
                                                     or pa.types.is_large_string(kind_of.value_type))
        if not (text or pa.types.is_string(kind_of) or pa.types.is_large_string(kind_of)):
            raise _fail(f"must hold text labels, got {kind_of}", file, column)
        if data.column(column).null_count:
            raise _fail(f"holds {data.column(column).null_count} null label(s)", file, column)
    for column in (*nums, LATENCY_COLUMN):
        kind_of = data.schema.field(column).type
        if not (pa.types.is_integer(kind_of) or pa.types.is_floating(kind_of)):
            raise _fail(f"must hold numbers, got {kind_of}", file, column)
        if data.column(column).null_count:
            raise _fail(f"holds {data.column(column).null_count} null value(s)", file, column)
    latency = _numbers(data.column(LATENCY_COLUMN))
    low, high = LATENCY_RANGE_US
    bad = np.flatnonzero(~(np.isfinite(latency) & (latency >= low) & (latency <= high)))
    if bad.size:
        raise _fail(f"row {int(bad[0])}: latency {float(latency[bad[0]])!r} us is not a kernel's (finite, {low:g} to "
                    f"{high:g} us)", file, LATENCY_COLUMN)
    numeric = {column: _numbers(data.column(column)) for column in nums}
    zero_ok = ZERO_SHAPES.get(kind, frozenset())
    for column, values in numeric.items():
        least = ">= 0" if column in zero_ok else "> 0"
        bad = np.flatnonzero(~(np.isfinite(values) & ((values >= 0) if column in zero_ok else (values > 0))))
        if bad.size:
            raise _fail(f"row {int(bad[0])}: shape value {float(values[bad[0]])!r} must be finite and {least}", file,
                        column)
    coded = {column: _coded(data.column(column)) for column in cats}
    distinct = {column: _used_labels(*found) if found is not None else set(_labels(data.column(column)).tolist())
                for column, found in coded.items()}
    for column, labels in distinct.items():
        if any(not label.strip() for label in labels):
            raise _fail("holds an empty label", file, column)
    if kind is OpKind.ELEMENTWISE:
        unknown = sorted(distinct["kernel"] - set(ELEMENTWISE_KERNEL_NAMES))
        if unknown:
            raise _fail(f"unknown elementwise kernel(s) {', '.join(unknown)} (known: "
                        f"{', '.join(ELEMENTWISE_KERNEL_NAMES)})", file, "kernel")
    categorical: Mapping[str, np.ndarray]
    if all(found is not None for found in coded.values()):   # the str arrays built when read (LabelColumns)
        categorical = LabelColumns({column: found for column, found in coded.items() if found is not None})
    else:
        categorical = {column: _labels(data.column(column)) for column in cats}
    return categorical, numeric, latency, distinct


def columns_table(kind: OpKind, columns: Mapping[str, Any], file: Path) -> Any:
    """An Arrow table of one kind's columns (sequences, numpy or pandas), checked by `check_table`: how the
    writers (the probes, the importers) refuse a table before it is written. Integral shapes are stored as
    integers, latencies as floats; a column of mixed types is named."""
    import pyarrow as pa
    cats, nums = SCHEMA[kind]
    arrays: dict[str, Any] = {}
    for column in (*cats, *nums, LATENCY_COLUMN):
        if column not in columns:
            raise _fail(f"missing column(s) {column}", file)
        values = columns[column]
        try:
            array = pa.array(np.asarray(values) if not isinstance(values, (list, tuple)) else values)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            raise _fail("holds values of mixed types", file, column) from None
        if column in nums and (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
            floats = np.asarray(array.to_numpy(zero_copy_only=False), dtype=float)
            array = pa.array(floats.astype(np.int64) if _integral(floats) else floats)
        elif column == LATENCY_COLUMN and (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
            array = array.cast(pa.float64())
        arrays[column] = array
    lengths = {len(array) for array in arrays.values()}
    if len(lengths) > 1:
        raise _fail(f"columns of unequal lengths {sorted(lengths)}", file)
    table = pa.table(arrays)
    check_table(kind, table, file)
    return table


def _numbers(column: Any) -> np.ndarray:
    """An Arrow column (or array) as a float array. A column of plain numbers is read from its buffers: pyarrow's
    `to_numpy` imports pandas on first use, which was most of what `simroute predict` waited for."""
    import pyarrow as pa
    kind = column.type
    if column.null_count == 0 and (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        dtype = np.dtype(kind.to_pandas_dtype())
        parts = [np.frombuffer(chunk.buffers()[1], dtype=dtype, count=len(chunk), offset=chunk.offset * dtype.itemsize)
                 for chunk in getattr(column, "chunks", [column])]
        return (parts[0] if len(parts) == 1 else np.concatenate(parts)).astype(float) if parts else np.empty(0)
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=float)


def _read_parquet(file: Path, labels: Sequence[str]) -> Any:
    """A table file, its `labels` (categorical) columns read as dictionaries. Not `read_table`, whose dataset
    layer imports pandas (0.3 s of `simroute predict`); one thread, since a few MB gain nothing from more."""
    import pyarrow.parquet as pq
    try:
        reader = pq.ParquetFile(file, read_dictionary=list(labels))
    except KeyError:        # a labels column missing (refused by the checks): the file opened again without it
        present = set(pq.ParquetFile(file).schema_arrow.names)
        reader = pq.ParquetFile(file, read_dictionary=[column for column in labels if column in present])
    return reader.read(use_threads=False)


def _coded(column: Any) -> tuple[list[str], np.ndarray] | None:
    """A dictionary column of text (how the tables store their labels) as (labels, a code per row into them);
    None for any other column. The codes come from the index buffers, for `_numbers`'s reason; a column of
    several chunks gets one list of labels, each chunk's codes shifted past the chunks before it."""
    import pyarrow as pa
    if not (column.null_count == 0 and pa.types.is_dictionary(column.type)
            and pa.types.is_string(column.type.value_type)):
        return None
    labels: list[str] = []
    parts = []
    for chunk in getattr(column, "chunks", [column]):
        indices = chunk.indices
        dtype = np.dtype(indices.type.to_pandas_dtype())
        codes = np.frombuffer(indices.buffers()[1], dtype=dtype, count=len(indices),
                              offset=indices.offset * dtype.itemsize)       # read-only, as the tables are
        parts.append(codes.astype(np.int64) + len(labels) if labels else codes)
        labels.extend(chunk.dictionary.to_pylist())
    return labels, (parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, np.int32))


def _used_labels(labels: list[str], codes: np.ndarray) -> set[str]:
    """The labels the rows use (the codes' distinct values, without a Python string per row; not np.unique:
    no sort)."""
    used = np.bincount(codes, minlength=len(labels))
    return {labels[index] for index in np.flatnonzero(used).tolist()}


def _labels(column: Any) -> np.ndarray:
    """An Arrow column as a str array; a dictionary column through its dictionary, for `_numbers`'s reason."""
    found = _coded(column)
    if found is not None:
        labels, codes = found
        return np.asarray(labels, dtype=str)[codes] if labels else np.empty(0, dtype=str)
    return np.asarray(column.to_numpy(zero_copy_only=False)).astype(str)


@functools.lru_cache(maxsize=16)
def load_operator_tables_cached(directory: str, fill: str | None = None) -> OperatorTables:
    """`load_operator_tables` once per resolved directory (and fill directory) and process (runs build many step
    models); with `fill`, the two merged op kind by op kind (`merge_operator_tables`)."""
    own = load_operator_tables(directory)
    return own if fill is None else merge_operator_tables(own, load_operator_tables(fill))


def merge_operator_tables(own: OperatorTables, fill: OperatorTables) -> OperatorTables:
    """`own`'s tables, and for each op kind it lacks, `fill`'s (a probe-written set that measured some kinds,
    filled from the published one: a kind the probes did not time falls back to measured data before the
    roofline). Each table keeps its source file, and `answered_by` names the directory that answered it; the
    merged provenance lists which kinds came from where. Both must be the same GPU's."""
    if own.gpu != fill.gpu:
        raise _fail(f"fill tables are for GPU '{fill.gpu}', these for '{own.gpu}'", Path(fill.path) / MANIFEST, "gpu")
    tables: dict[OpKind, OpTable] = {}
    for kind in OpKind:
        chosen, directory = (own.get(kind), own.path) if own.get(kind) is not None else (fill.get(kind), fill.path)
        if chosen is None:
            continue
        tables[kind] = OpTable(kind, chosen.categorical, chosen.numeric, chosen.latency_us,
                               {**chosen.source, "answered_by": directory})
    provenance = {**own.provenance,
                  "fill": f"{fill.path} ({fill.framework} {fill.version}, {fill.provenance.get('kind', '?')})",
                  "own_kinds": ", ".join(kind.value for kind in OpKind if own.get(kind) is not None),
                  "filled_kinds": ", ".join(kind.value for kind in OpKind
                                            if own.get(kind) is None and fill.get(kind) is not None)}
    return OperatorTables(gpu=own.gpu, framework=own.framework, version=own.version, tables=tables,
                          provenance=provenance, path=own.path)


def shipped_tables_name(gpu: str) -> str | None:
    """The published tables the shipped GPU entry `gpu` names, as a name under calib/ops
    (`h200-sxm/sglang-0.5.14`), or None: what a probe-written table directory's `fill` names."""
    from simroute.calib.profile import shipped_dir
    from simroute.ioutil import load_yaml

    entry_file = shipped_dir() / "gpus" / f"{gpu}.yaml"
    if len(Path(gpu).parts) != 1 or not entry_file.is_file():
        return None
    entry = ((load_yaml(entry_file) or {}).get("gpus") or {}).get(gpu) or {}
    path = (entry.get("operator_tables") or {}).get("path")
    if not isinstance(path, str):
        return None
    directory = (entry_file.parent / path).resolve()
    ops = (shipped_dir() / "ops").resolve()
    if not (directory / MANIFEST).is_file() or ops not in directory.parents:
        return None
    return directory.relative_to(ops).as_posix()


def resolve_fill(fill: str, naming_file: Path) -> Path | None:
    """The table directory a `fill` names: a path relative to the file naming it, else a shipped tables name
    under calib/ops (`h200-sxm/sglang-0.5.14`); None when neither holds a tables.yaml."""
    from simroute.calib.profile import shipped_dir

    for candidate in (naming_file.parent / fill, shipped_dir() / "ops" / fill, shipped_dir() / "gpus" / fill):
        if (candidate / MANIFEST).is_file():
            return candidate.resolve()
    return None


def write_operator_tables(directory: str | Path, *, gpu: str, framework: str, version: str,
                          provenance: Mapping[str, Any], tables: Mapping[OpKind, Mapping[str, Any]],
                          entries: Mapping[OpKind, Mapping[str, Any]] | None = None) -> Path:
    """Write a table directory atomically (a temporary sibling, renamed into place; an existing directory is
    never replaced: the caller picks a new path). `tables[kind]` maps each schema column and latency_us to a
    sequence of equal length."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    from simroute.ioutil import atomic_path

    target = Path(directory)
    if provenance.get("kind") not in PROVENANCE_KINDS:
        raise ValueError(f"provenance kind must be one of {PROVENANCE_KINDS}")
    checked = {kind: columns_table(kind, columns, target / f"{kind.value}.parquet")    # before any write
               for kind, columns in tables.items()}
    with atomic_path(target, directory=True, what="operator tables") as tmp:
        listing: dict[str, Any] = {}
        for kind, table in checked.items():
            pq.write_table(table, Path(tmp) / f"{kind.value}.parquet", compression="zstd")
            listing[kind.value] = {"rows": table.num_rows, **dict((entries or {}).get(kind, {}))}
        manifest = {"schema": SCHEMA_TAG, "gpu": gpu, "framework": framework, "version": version,
                    "provenance": dict(provenance), "tables": listing}
        (Path(tmp) / MANIFEST).write_text(yaml.safe_dump(manifest, sort_keys=False, width=120))
    return target


def _integral(values: Any) -> bool:
    arr = np.asarray(values, dtype=float)
    return bool(arr.size) and bool(np.all(np.isfinite(arr))) and bool(np.all(arr == np.round(arr))) \
        and bool(np.all(np.abs(arr) < 2.0 ** 62))


def diff_operator_tables(left: OperatorTables, right: OperatorTables) -> list[dict[str, Any]]:
    """Op-by-op comparison of two table sets at the shapes both hold: per kind and categorical selection, the
    shared rows, their median and largest ratio right / left. Kinds only one side has are listed too."""
    rows: list[dict[str, Any]] = []
    for kind in OpKind:
        left_table, right_table = left.get(kind), right.get(kind)
        if left_table is None and right_table is None:
            continue
        if left_table is None or right_table is None:
            rows.append({"kind": kind.value, "selection": "", "shared_points": 0,
                         "note": f"only in {'right' if left_table is None else 'left'}"})
            continue
        cats, nums = SCHEMA[kind]
        index_a = _index(left_table, cats, nums)
        index_b = _index(right_table, cats, nums)
        by_selection: dict[tuple, list[float]] = {}
        for key, lat in index_a.items():
            other = index_b.get(key)
            if other is not None:
                by_selection.setdefault(key[:len(cats)], []).append(other / lat)
        if not by_selection:
            rows.append({"kind": kind.value, "selection": "", "shared_points": 0, "note": "no shared shapes"})
        for selection, ratios in sorted(by_selection.items()):
            arr = np.asarray(ratios)
            worst = float(arr[np.argmax(np.abs(np.log(arr)))])
            rows.append({"kind": kind.value, "selection": ",".join(selection), "shared_points": int(arr.size),
                         "median_ratio": float(np.median(arr)), "worst_ratio": worst, "note": ""})
    return rows


def _index(table: OpTable, cats: tuple[str, ...], nums: tuple[str, ...]) -> dict[tuple, float]:
    """Shape -> latency, a shape measured more than once at the geometric mean (as the step model reads it)."""
    keys = list(zip(*(table.categorical[column].tolist() for column in cats),
                    *(table.numeric[column].tolist() for column in nums)))
    return repeats_merged(keys, table.latency_us.tolist())
