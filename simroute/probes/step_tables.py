"""The step-time probes' per-shape latencies as operator tables (docs/STEP_TIME.md, "Operator tables";
docs/PROBES.md, "Operator tables"): the same format `simroute calib import aiconfigurator` writes
(simroute.calib.optables), so the step-time model reads a measured box the way it reads a published database.

What each probe contributes (only kinds a probe measured; every row one timed shape, latency in us):
- `gemm` -> gemm: dtype, m = tokens, n, k (the shape as timed: the numpy dry run's are narrower);
- `decode-attention` -> mla_decode (batch, context, heads) for absorbed MLA, attention_decode (batch, context,
  heads, kv_heads, head_dim) for GQA; kv_dtype is the operands' dtype;
- `prefill-attention` -> mla_prefill (batch, isl, heads) for MLA's expanded prefill, attention_prefill (batch,
  isl, heads, kv_heads, head_dim) for GQA; one causal sequence (batch 1) of isl tokens;
- `moe` -> moe (dtype, distribution balanced, tokens, hidden, inter, topk, experts, moe_tp, moe_ep 1) and
  `elementwise` -> elementwise (kernel, dtype, tokens, width): simroute.probes.gpu_tables, whose points carry
  their table's columns; the entry names the implementation that ran (a fused kernel, or torch's stand-in).

The manifest's provenance says `measured`, on which box (the host name), which device (the GPU's name) and which
framework ran (torch and its version). A dry run (numpy on the CPU) writes the same files so the writer is
exercised, but marked so that nothing mistakes them for a GPU's: device `cpu (dry run)`, framework
`numpy-dry-run`, the dtype actually used (fp32), a `warning` in the manifest and in the GPU entry's note; the
step model, which reads bf16 rows, finds none of them and keeps its roofline.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simroute.model.optables import LATENCY_COLUMN, SCHEMA, OpKind
from simroute.probes.framework import ProbeOutcome

TABLE_PROBES = ("gemm", "decode-attention", "prefill-attention", "moe", "elementwise")
DRY_RUN_DEVICE = "cpu (dry run)"
DRY_RUN_WARNING = ("DRY RUN: numpy on the CPU with narrowed GEMM shapes, not GPU timings; never simulate a GPU "
                   "with these tables")


@dataclass
class ProbeTables:
    """Operator-table columns from one calibration run, and what ran them."""

    framework: str
    version: str
    device: str
    dry_run: bool
    tables: dict[OpKind, dict[str, list]] = field(default_factory=dict)
    entries: dict[OpKind, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> dict[str, int]:
        return {kind.value: len(cols[LATENCY_COLUMN]) for kind, cols in self.tables.items()}


def _add(tables: dict[OpKind, dict[tuple, float]], kind: OpKind, key: dict[str, Any], seconds: float) -> None:
    """One row, keyed by the kind's columns in schema order (a shape timed twice keeps its first timing)."""
    cats, nums = SCHEMA[kind]
    row = tuple(str(key[column]) for column in cats) + tuple(float(key[column]) for column in nums)
    if seconds > 0:
        tables.setdefault(kind, {}).setdefault(row, seconds * 1e6)


def _gemm_rows(results: dict[str, Any], rows: dict[OpKind, dict[tuple, float]]) -> None:
    for shape in results.get("shapes", {}).values():
        in_width, out_width = shape.get("k_run", shape["k"]), shape.get("n_run", shape["n"])
        for tokens, seconds in shape.get("seconds", {}).items():
            _add(rows, OpKind.GEMM, {"dtype": results["dtype"], "m": int(tokens), "n": out_width, "k": in_width},
                 seconds)


def _attention_rows(results: dict[str, Any], phase: str, rows: dict[OpKind, dict[tuple, float]]) -> list[str]:
    skipped = []
    for point in results.get("points", []):
        table = point.get("table")
        if table is None:                       # results of a probe from before the tables: no shape columns
            skipped.append(point.get("kind", "?"))
            continue
        key = {**point, "kv_dtype": results["dtype"]}
        if phase == "prefill":
            key["isl"] = point["tokens"]
        _add(rows, OpKind(table), key, point["seconds"])
    return sorted(set(skipped))


COLUMN_PROBES = ("moe", "elementwise")     # their points hold their table's columns (simroute.probes.gpu_tables)


def _column_rows(results: dict[str, Any], rows: dict[OpKind, dict[tuple, float]]) -> None:
    """Points that name their table and carry its columns; the dtype is the probe's operands'."""
    for point in results.get("points", []):
        _add(rows, OpKind(point["table"]), {**point, "dtype": results["dtype"]}, point["seconds"])


def step_tables(outcomes: list[ProbeOutcome]) -> ProbeTables | None:
    """The operator tables the table probes' results hold (None when none of them measured anything). The
    first probe's framework is the tables'; a probe run under another is left out, saying so."""
    found: ProbeTables | None = None
    rows: dict[OpKind, dict[tuple, float]] = {}
    for outcome in outcomes:
        if not outcome.ok or outcome.probe.name not in TABLE_PROBES or "dtype" not in outcome.results:
            continue
        results = outcome.results
        framework, version = str(results.get("framework", "?")), str(results.get("framework_version", ""))
        dry = not results.get("measures_gpu", False)
        device = DRY_RUN_DEVICE if dry else str(results.get("device", "?"))
        if found is None:
            found = ProbeTables(framework, version, device, dry)
        elif (framework, version, device) != (found.framework, found.version, found.device):
            found.notes.append(f"probe {outcome.probe.name} ran under {framework} {version} on {device}, not "
                               f"{found.framework} {found.version} on {found.device}: its timings left out")
            continue
        before = set(rows)
        if outcome.probe.name == "gemm":
            _gemm_rows(results, rows)
        elif outcome.probe.name in COLUMN_PROBES:
            _column_rows(results, rows)
        else:
            missing = _attention_rows(results, outcome.probe.name.split("-")[0], rows)
            if missing:
                found.notes.append(f"probe {outcome.probe.name}: points without shape columns left out ({missing})")
        for kind in set(rows) - before:
            found.entries[kind] = _entry(outcome, kind, dry)
    if found is None or not rows:
        return None
    for kind, by_key in rows.items():
        cats, nums = SCHEMA[kind]
        keys = sorted(by_key)
        cols: dict[str, list] = {column: [key[position] for key in keys] for position, column in enumerate(cats)}
        cols.update({column: [key[len(cats) + position] for key in keys] for position, column in enumerate(nums)})
        cols[LATENCY_COLUMN] = [by_key[key] for key in keys]
        found.tables[kind] = cols
    found.tables = dict(sorted(found.tables.items(), key=lambda item: list(OpKind).index(item[0])))
    return found


def _entry(outcome: ProbeOutcome, kind: OpKind, dry: bool) -> dict[str, Any]:
    results = outcome.results
    entry: dict[str, Any] = {"probe": outcome.probe.name, "backend": str(results.get("backend", "")),
                             "sweep": str(results.get("sweep", ""))}
    kernels = results.get("kernels")
    if isinstance(kernels, dict) and kernels:
        mla = kind in (OpKind.MLA_DECODE, OpKind.MLA_PREFILL)
        used = {kernel_name for kernel_key, kernel_name in kernels.items() if kernel_key.startswith("mla-") == mla}
        if used:
            entry["kernel"] = ", ".join(sorted(used))
    if kind is OpKind.GEMM:
        entry["note"] = ("weights rotated over copies larger than the L2; shapes are every shipped model's linear "
                         "layers at TP 1/2/4/8") + ("; narrowed 16x for the numpy dry run" if dry else "")
    if kind in (OpKind.ATTENTION_PREFILL, OpKind.MLA_PREFILL):
        entry["note"] = "one causal sequence of isl tokens (batch 1)"
    if kind in (OpKind.MOE, OpKind.ELEMENTWISE):
        entry["implementation"] = str(results.get("implementation", "?"))
    if kind is OpKind.MOE:
        entry["note"] = ("balanced routing (every expert the same load), tensor-parallel experts without expert "
                         "parallelism (moe_ep 1), bf16 weights") + ("; narrowed for the numpy dry run" if dry else "")
    return entry


def directory_name(framework: str, version: str) -> str:
    """`<framework>-<version>`, with anything but letters, digits, '.', '_' and '-' replaced by '-'."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", f"{framework}-{version}" if version else framework)


def free_directory(base: Path) -> Path:
    """`base`, unless it holds files simroute did not write (never replaced): then `base-2`, `base-3`, ..."""
    from simroute.ioutil import foreign_files
    candidate, suffix = base, 1
    while candidate.exists() and (not candidate.is_dir() or foreign_files(candidate)):
        suffix += 1
        candidate = base.with_name(f"{base.name}-{suffix}")
    return candidate


@dataclass
class WrittenTables:
    path: Path            # the table directory
    ref: dict[str, str]   # the GPU entry's operator_tables: path relative to the profile, note, fill
    created: bool         # False when it replaced a directory a previous run wrote
    tables: ProbeTables


def write_step_tables(tables: ProbeTables, *, box: str, box_description: str, gpu: str, profile_path: Path,
                      samples_name: str = "samples.parquet") -> WrittenTables:
    """Write `tables` to <profile dir>/ops/<gpu>/<framework>-<version>/ (atomically; a directory holding files
    simroute did not write is left alone and a fresh name taken) and return the GPU entry's reference to it,
    whose `fill` names the shipped (published) tables of the same GPU, if any: an op kind the probes did not
    time is read from those before the roofline."""
    from simroute.calib.optables import shipped_tables_name, write_operator_tables
    base = Path(profile_path).parent
    target = free_directory(base / "ops" / gpu / directory_name(tables.framework, tables.version))
    created = not target.exists()
    date = dt.date.today().isoformat()
    what = ", ".join(sorted({entry["probe"] for entry in tables.entries.values()}))
    provenance: dict[str, Any] = {
        "kind": "measured", "box": box, "device": tables.device, "framework": tables.framework,
        "framework_version": tables.version, "date": date, "samples": samples_name,
        "ref": f"simroute calibrate, probes {what}, on {box_description}"}
    if tables.dry_run:
        provenance["dry_run"] = "true"
        provenance["warning"] = DRY_RUN_WARNING
    write_operator_tables(target, gpu=gpu, framework=tables.framework, version=tables.version or "unknown",
                          provenance=provenance, tables=tables.tables, entries=tables.entries)
    rel = target.relative_to(base).as_posix()
    note = (f"measured by simroute calibrate on {box} ({tables.device}, {tables.framework} {tables.version}), {date}: "
            + ", ".join(f"{kind} {count} rows" for kind, count in tables.rows.items()))
    if tables.dry_run:
        note = f"{DRY_RUN_WARNING}. {note}"
    ref = {"path": rel, "note": note}
    fill = shipped_tables_name(gpu)
    if fill is not None:
        ref["fill"] = fill
        ref["note"] = f"{note}; the kinds not probed read the shipped {fill}"
    return WrittenTables(target, ref, created, tables)


def remove_written(written: WrittenTables | None) -> None:
    """Undo `write_step_tables` when the profile naming them could not be written (only a new directory)."""
    if written is not None and written.created and written.path.is_dir():
        shutil.rmtree(written.path, ignore_errors=True)
