"""`simroute report DIR`: one self-contained interactive HTML page of a study (or a single run), PNG exports of
its figures for papers, or Markdown tables.

Reads only output files: a study's study.json, points/*.parquet, search.json and runs/<key>/*.parquet; a run's
summary.json and its Parquet tables. The page inlines plotly.js (simroute.study.figures), so it works offline.
A search study's link and spine figures are drawn at each group's answer, a grid's at its largest x.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pyarrow import ArrowException

from simroute.errors import ConfigurationError
from simroute.ioutil import atomic_path, check_output_path, check_replaceable, load_json, manifest_kind
from simroute.network.telemetry import SPINE_COLUMNS
from simroute.study import figures, plots
from simroute.study.search import Goal, finished, meets, parse_slo
from simroute.study.store import Store

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}
CI_COLS = [f"{metric}_{stat}" for metric in ("ttft_ms", "tpot_ms") for stat in ("p50", "p99")]
MEAN_COLS = CI_COLS + ["slo_attainment", "bytes_route", "bytes_fetch", "bytes_pd_transfer", "completed",
                       "output_tokens_per_s_per_gpu",
                       "requests", "n_route", "n_fetch", "n_local", "max_link_utilisation", "peak_spine_flows",
                       "fct_pd_mean_ms", "fct_pd_p95_ms"]
# the columns the report's figures read from a run's tables (required), and the text columns among all it reads:
# every other column a table has must be numeric (a run writes them so; a damaged file is refused in one line)
RUN_REQUEST_COLUMNS = ("status", "ttft_s", "tpot_s")
LINK_COLUMNS = ("link", "src", "dst", "tier")
TEXT_COLUMNS = {"requests.parquet": ("status", "drop_reason", "tenant"), "net_links.parquet": ("src", "dst", "tier"),
                "net_spines.parquet": ("spine",), "holders.parquet": ("gpu",), "iterations.parquet": ()}
FINITE_COLUMNS = ("ttft_s", "tpot_s", "e2e_s")      # NaN: not completed; never infinite


@dataclass
class Figure:
    """One figure of a report: its caption, the interactive builder and (optionally) the PNG export."""

    caption: str
    interactive: Callable[[], Any]
    png: Callable[[Path], Path | None] | None = None


@dataclass
class Report:
    title: str
    sections: list[tuple[str, pd.DataFrame]]
    figures: list[Figure]
    notes: list[str] = field(default_factory=list)


class ReportFormat(StrEnum):
    """What `simroute report --format` writes; the values are the flag's words."""

    HTML = "html"   # report.html (interactive figures) + PNGs in a report directory
    MD = "md"       # Markdown tables, returned as text (stdout)


def write_report(directory: str | Path, out: str | Path | None = None, fmt: ReportFormat = ReportFormat.HTML,
                 png: bool = True, plan: dict[str, Any] | None = None) -> Path | str:
    """Report on a study or run directory. html: writes report.html (+ PNGs), returns its path; md: the text.
    `plan`: a plan's answer not yet beside its study (`simroute plan` writes both together), else plan.json.

    Everything is read and checked before anything is written; the report directory is then written whole
    (a temporary beside it, renamed), with a manifest, so a run holding its report stays simroute's own."""
    input_dir = Path(directory)
    if not input_dir.is_dir():
        raise ConfigurationError("not found" if not input_dir.exists() else "is not a directory; give a run or study "
                                 "directory", file=input_dir)
    out_dir = None
    if fmt != ReportFormat.MD:
        out_dir = check_report_out(input_dir, Path(out) if out else input_dir / "report")
    if (input_dir / "study.json").exists() or (input_dir / "points").is_dir():
        rep = _study(input_dir, plan)
    elif (input_dir / "summary.json").exists():
        rep = _run(input_dir)
    else:
        raise ConfigurationError("neither a study directory (study.json, points/) nor a run directory "
                                 "(summary.json)", file=input_dir)
    if fmt == ReportFormat.MD:
        return "\n".join([f"# {rep.title}", ""] + [f"> {note}\n" for note in rep.notes]
                         + [f"## {heading}\n\n{_md(table)}\n" for heading, table in rep.sections if len(table)])
    assert out_dir is not None
    with atomic_path(out_dir, directory=True, what="report") as tmp:
        drawn = [(figure.caption, fig) for figure in rep.figures if (fig := figure.interactive()) is not None]
        if png:
            for figure in rep.figures:
                if figure.png is not None:
                    figure.png(tmp)
        tables = [(heading, _html_table(table)) for heading, table in rep.sections if len(table)]
        (tmp / "report.html").write_text(figures.page(rep.title, tables, drawn, rep.notes))
    return out_dir / "report.html"


def check_report_out(input_dir: Path, out_dir: Path) -> Path:
    """The report directory: never the run or study it reads, a folder holding it, or one of its files."""
    source = input_dir.resolve()
    target = out_dir.resolve()
    if target == source or target in source.parents:
        raise ConfigurationError(f"is or holds {input_dir}, the directory this report reads: choose another path (the "
                                 "default is DIR/report)", file=out_dir, field="--out")
    inputs = [entry for entry in input_dir.iterdir() if entry.resolve() != target]
    check_output_path(out_dir, directory=True, inputs=inputs, flag="--out")
    check_replaceable(out_dir, what="report")
    if out_dir.is_dir() and any(out_dir.iterdir()) and manifest_kind(out_dir) != "report":
        raise ConfigurationError("holds simroute's results of another kind (a run, a trace, a study), not a report: "
                                 "a report never replaces them; choose a new or empty directory", file=out_dir,
                                 field="--out")
    return out_dir


# ---- a study ---------------------------------------------------------------------------------------------
def axes_of(meta: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The x axis (load-like) and the series axes of a study, from its report hints or its axes."""
    names = list(meta.get("axes", {}))
    if meta.get("search"):
        names.append(meta["search"]["field"])
    rep = meta.get("report") or {}
    axis = rep.get("x")
    if axis is None:
        numeric = [name for name in names if name not in meta.get("cases", {}) and all(
            isinstance(value, (int, float)) for value in meta["axes"].get(name, [0]))]
        fallback = numeric[-1] if numeric else (names[-1] if names else None)
        axis = next((name for name in numeric if "qps" in name or "concurrency" in name), fallback)
    series = rep.get("series") or [name for name in names if name != axis]
    return axis, list(series)


def aggregate(frame: pd.DataFrame, axis: str | None, series: list[str], slo: list[str]) -> pd.DataFrame:
    """One row per configuration: means over seeds, 95% CIs of the latency percentiles, SLO met by all seeds."""
    succeeded = frame[frame["status"] == "ok"].copy()
    keys = [f"axis:{name}" for name in series + ([axis] if axis else []) if f"axis:{name}" in succeeded]
    if succeeded.empty:
        return pd.DataFrame()
    if not keys:
        succeeded["axis:_"] = "all"
        keys = ["axis:_"]
    rows = []
    for vals, group in succeeded.groupby(keys, sort=False, dropna=False):
        vals = vals if isinstance(vals, tuple) else (vals,)
        point: dict[str, Any] = {key.removeprefix("axis:"): value for key, value in zip(keys, vals)}
        seeds = len(group)
        point["seeds"] = seeds
        for col in MEAN_COLS:
            point[col] = float(group[col].mean())
        for col in CI_COLS:
            point[f"{col}_ci"] = (T95.get(seeds - 1, 1.96) * float(group[col].std(ddof=1)) / np.sqrt(seeds)
                                  if seeds > 1 else np.nan)
        records = group.to_dict("records")
        point["meets"] = meets(records, tuple(slo)) if slo else None
        point["finished"] = all(finished(row) for row in records)
        point["completion"] = float((group["completed"] / group["requests"]).min()) if len(group) else np.nan
        point["overloaded"] = float(group["overloaded"].fillna(0).max()) if "overloaded" in group else 0.0
        point["ttft_growth"] = float(group["ttft_growth"].max()) if "ttft_growth" in group else np.nan
        rows.append(point)
    agg = pd.DataFrame(rows)
    agg["series"] = [", ".join(f"{axis_name}={point[axis_name]}" for axis_name in series if axis_name in agg)
                     for _, point in agg.iterrows()]
    agg["config"] = [(f"{point['series']} @ " if point["series"] else "")
                     + (f"{axis}={point[axis]}" if axis in agg else "")
                     for _, point in agg.iterrows()]
    agg["marks"] = marks(agg)
    if axis in agg:
        rank = {axis_name: rank_index for rank_index, axis_name in enumerate(dict.fromkeys(agg["series"]))}
        num = pd.to_numeric(agg[axis], errors="coerce")
        agg["_r"], agg["_x"] = agg["series"].map(rank), num if num.notna().all() else agg[axis].astype(str)
        agg = agg.sort_values(["_r", "_x"], kind="stable").drop(columns=["_r", "_x"])
    return agg.reset_index(drop=True)


# Axes that cost (more is more hardware): their frontier is the smallest value meeting the SLO. Any other axis is
# a load (qps, time scale, requests, tokens): its frontier is the largest value meeting the SLO.
RESOURCE_AXES = ("hosts", "instances", "replicas", "hbm_gb", "gpus", "tp", "spines", "staging_streams",
                 "max_running_seqs", "token_budget")


def frontier_goal(axis: str) -> Goal:
    """MIN for a resource axis (fewest hosts meeting the SLO), MAX for a load axis (most QPS)."""
    return Goal.MIN if axis.split(".")[-1] in RESOURCE_AXES else Goal.MAX


def frontier_value(group: pd.DataFrame, axis: str, goal: Goal) -> Any:
    """The frontier of one series: the extreme axis value among points meeting the SLO, compared as numbers
    when every label is one (so 8 < 16 < 32, not '8' > '32' > '16'), else as the labels' given order."""
    met = group[group["meets"].fillna(False).astype(bool)]
    if met.empty:
        return "none"
    values = pd.to_numeric(met[axis], errors="coerce")
    if values.notna().all():
        pick = values.idxmin() if goal == Goal.MIN else values.idxmax()
    else:
        pick = met.index[0] if goal == Goal.MIN else met.index[-1]
    return met.loc[pick, axis]


IDENTITY_COLS = ("ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "bytes_route", "bytes_fetch",
                 "n_route", "n_fetch", "n_local", "completed")


def marks(agg: pd.DataFrame) -> list[str]:
    """Per configuration: 'did not finish' when a seed completed under MIN_COMPLETION of its requests (such points
    are kept out of frontiers and answers), and 'identical to <config>' when its results equal an earlier one's
    (one policy choosing exactly as another: the curves coincide)."""
    from simroute.defaults import MIN_COMPLETION
    seen: dict[tuple, str] = {}
    out = []
    cols = [col for col in IDENTITY_COLS if col in agg]
    for _, row in agg.iterrows():
        notes = []
        if row.get("overloaded", 0) > 0:
            notes.append(f"arrivals above service (late TTFT x{row.get('ttft_growth', float('nan')):.0f} the early)")
        elif not row.get("finished", True):
            notes.append(f"did not finish ({row.get('completion', float('nan')):.0%} completed < "
                         f"{MIN_COMPLETION:.0%})")
        key = tuple(None if pd.isna(row[col]) else round(float(row[col]), 6) for col in cols)
        if key in seen and cols:
            notes.append(f"identical to {seen[key]}")
        else:
            seen.setdefault(key, str(row["config"]))
        out.append("; ".join(notes))
    return out


def no_reuse(agg: pd.DataFrame) -> bool:
    """True when no point moved a chunk across instances (route = fetch = 0 everywhere): the trace has no
    cross-instance reuse, so no policy can differ from another on it."""
    cols = [col for col in ("n_route", "n_fetch") if col in agg]
    return bool(len(agg) and cols and float(agg[cols].fillna(0).to_numpy().sum()) == 0.0)


def _representatives(frame: pd.DataFrame, axis: str | None, series: list[str], limit: int = 8) -> dict[str, str]:
    """Per series, the run at its largest x and smallest seed: the heatmaps' rows (label -> key)."""
    succeeded = frame[frame["status"] == "ok"]
    if succeeded.empty:
        return {}
    cols = [f"axis:{name}" for name in series if f"axis:{name}" in succeeded]
    groups = succeeded.groupby(cols, sort=False) if cols else [((), succeeded)]
    out: dict[str, str] = {}
    for vals, group in groups:
        vals = vals if isinstance(vals, tuple) else (vals,)
        if axis and f"axis:{axis}" in group:
            num = pd.to_numeric(group[f"axis:{axis}"], errors="coerce")
            group = group[num == num.max()] if num.notna().any() else group
        group = group.sort_values("seed")
        label = ", ".join(f"{col.removeprefix('axis:')}={value}" for col, value in zip(cols, vals))
        if axis and f"axis:{axis}" in group:
            label += (" @ " if label else "") + f"{axis}={group[f'axis:{axis}'].iloc[0]}"
        out[label or "run"] = group["key"].iloc[0]
        if len(out) >= limit:
            break
    return out


def _answer_runs(frame: pd.DataFrame, searches: list[dict[str, Any]], limit: int = 8) -> dict[str, str]:
    """Per search group, the run at its answer (smallest seed): what the link and spine figures show."""
    succeeded = frame[frame["status"] == "ok"]
    out: dict[str, str] = {}
    for search in searches:
        col = f"axis:{search['field']}"
        if search["answer"] is None or col not in succeeded:
            continue
        group = succeeded[pd.to_numeric(succeeded[col], errors="coerce") == float(search["answer"])]
        for key, value in search["labels"].items():
            if f"axis:{key}" in group:
                group = group[group[f"axis:{key}"].astype(str) == str(value)]
        if len(group):
            label = ", ".join(f"{key}={value}" for key, value in search["labels"].items())
            name = (label + " @ " if label else "") + f"{search['field']}={search['answer']}"
            out[name] = group.sort_values("seed")["key"].iloc[0]
        if len(out) >= limit:
            break
    return out


STUDY_META = {"name": str, "description": str, "axes": dict, "cases": dict, "report": dict,
              "search": (dict, type(None)), "slo": (str, list, type(None))}


def load_study_meta(path: Path) -> dict[str, Any]:
    """study.json, checked for the fields a report reads (a malformed one is one line naming file and field)."""
    meta = load_json(path)
    if not isinstance(meta, dict):
        raise ConfigurationError("must be a JSON object", file=path)
    for key, kind in STUDY_META.items():
        if key in meta and not isinstance(meta[key], kind):
            raise ConfigurationError(f"has the wrong type ({type(meta[key]).__name__})", file=path, field=key)
    _check_slo(meta.get("slo"), path, "slo")
    if isinstance(meta.get("search"), dict):
        _check_slo(meta["search"].get("slo"), path, "search.slo")
    return meta


def _check_slo(slo: Any, path: Path, field: str) -> None:
    """An SLO the report will evaluate: a condition or a list of them, each one `parse_slo` reads."""
    if slo is None:
        return
    for item in [slo] if isinstance(slo, str) else slo if isinstance(slo, list) else [slo]:
        if not isinstance(item, str):
            raise ConfigurationError(f"must be SLO conditions (text), got {str(item)[:40]!r}", file=path, field=field)
        try:
            parse_slo(item)
        except ValueError as exc:
            raise ConfigurationError(str(exc), file=path, field=field) from None


SEARCH_FIELDS = {"labels": dict, "field": str, "status": str, "slo": list, "probes": dict}


def load_searches(path: Path) -> list[dict[str, Any]]:
    """search.json: a list of search results with the fields the report reads."""
    searches = load_json(path)
    if not isinstance(searches, list):
        raise ConfigurationError("must be a list of search results", file=path)
    for index, entry in enumerate(searches):
        if not isinstance(entry, dict):
            raise ConfigurationError("must be an object", file=path, field=f"[{index}]")
        for key, kind in SEARCH_FIELDS.items():
            if not isinstance(entry.get(key), kind):
                raise ConfigurationError(f"must be {kind.__name__}", file=path, field=f"[{index}].{key}")
        answer = entry.get("answer")
        if not (answer is None or isinstance(answer, (int, float)) and not isinstance(answer, bool)):
            raise ConfigurationError("must be a number or null", file=path, field=f"[{index}].answer")
        _check_slo(entry["slo"], path, f"[{index}].slo")
    return searches


def _read_parquet(path: Path, *, required: bool = False, columns: tuple[str, ...] = ()) -> pd.DataFrame | None:
    """A Parquet table of a run (None if the run did not write it and it is optional); damaged, dangling or
    missing-but-required is one line naming the file."""
    if path.is_symlink() and not path.exists():
        raise ConfigurationError("is a dangling link", file=path)
    if not path.exists():
        if required:
            raise ConfigurationError("missing (the directory looks damaged: every run writes it)", file=path)
        return None
    if not path.is_file():
        raise ConfigurationError("is not a file", file=path)
    try:
        table = pd.read_parquet(path)
    except (OSError, ValueError, TypeError, ArrowException) as exc:
        raise ConfigurationError(f"not a readable Parquet table: {' '.join(str(exc).split())[:160]}",
                                 file=path) from None
    for name in columns:
        if name not in table:
            raise ConfigurationError("missing column", file=path, field=name)
    check_column_kinds(table, path, TEXT_COLUMNS.get(path.name, ()))
    return table


def check_column_kinds(table: pd.DataFrame, path: Path, text: tuple[str, ...]) -> None:
    """Text where a run writes text, numbers (not booleans, not infinite latencies) everywhere else."""
    for name in table.columns:
        kind = table[name].dtype.kind
        if table[name].isna().all():      # an empty table or an all-null column (Arrow's null type): nothing to read
            continue
        if name in text:
            if kind not in "OUST":
                raise ConfigurationError(f"must be text, got {table[name].dtype}", file=path, field=str(name))
            continue
        if kind not in "iuf":
            raise ConfigurationError(f"must be numeric, got {table[name].dtype}", file=path, field=str(name))
        if name in FINITE_COLUMNS and np.isinf(table[name].to_numpy(dtype=float)).any():
            raise ConfigurationError("holds an infinite value (a run writes a time or leaves it empty)", file=path,
                                     field=str(name))


def _tpot_modelled(agg: pd.DataFrame) -> bool:
    """False when every point's TPOT is exactly 0 (no decode step time and no cross-instance decode work)."""
    return "tpot_ms_p99" in agg and bool(agg["tpot_ms_p99"].fillna(0).abs().max() > 0)


def _study(input_dir: Path, plan: dict[str, Any] | None = None) -> Report:
    meta = load_study_meta(input_dir / "study.json") if (input_dir / "study.json").exists() else {}
    if not (input_dir / "points").is_dir():
        raise ConfigurationError("missing or not a directory: a study directory holds its finished points there "
                                 "(has its sweep run yet?)", file=input_dir / "points")
    frame = Store(input_dir).read()
    searches = load_searches(input_dir / "search.json") if (input_dir / "search.json").exists() else []
    axis, series = axes_of(meta) if meta else (None, [])
    slo = list(meta.get("slo") or (meta.get("search") or {}).get("slo") or [])
    agg = aggregate(frame, axis, series, slo)
    notes = []
    table_cols = ["config", "marks", "seeds", *CI_COLS, "slo_attainment", "completed", "output_tokens_per_s_per_gpu",
                  "bytes_route", "bytes_fetch",
                  "bytes_pd_transfer", "max_link_utilisation", "peak_spine_flows"]
    has_pd = len(agg) and "bytes_pd_transfer" in agg and float(agg["bytes_pd_transfer"].max()) > 0
    if has_pd:   # prefill -> decode KV transfers: their FCT is the ARK paper's headline metric
        table_cols[table_cols.index("bytes_pd_transfer") + 1:1] = ["fct_pd_mean_ms", "fct_pd_p95_ms"]
    if len(agg) and not _tpot_modelled(agg):
        table_cols = [col for col in table_cols if not col.startswith("tpot_ms")]
        notes.append("TPOT is 0 at every point (no decode step time and no cross-instance decode work in these "
                     "runs), so it is left out.")
    if no_reuse(agg):
        notes.append("No run moved a chunk between instances (route = fetch = 0 at every point): the trace has no "
                     "cross-instance reuse, so the policies cannot differ on it; their results are identical.")
    if len(agg) and (~agg["finished"]).any():
        notes.append("Points marked 'did not finish' completed too few of their requests to be compared; they are "
                     "kept out of the SLO frontier and of every search answer.")
    if slo:
        notes.append(f"SLO of this study: {' and '.join(slo)}. Every run is judged by it: 'slo_attainment' is the "
                     "share of a run's requests meeting its TTFT / TPOT / e2e conditions, and the frontier asks every "
                     "seed to meet all of it (simroute/sim/slo.py).")
    tab = _fmt(agg[[col for col in table_cols if col in agg]], agg) if len(agg) else pd.DataFrame()
    multi_seed = bool(len(agg) and agg["seeds"].max() > 1)
    sections: list[tuple[str, pd.DataFrame]] = [
        ("Configurations" + (" (mean over seeds, ± 95% CI)" if multi_seed else " (one seed each)"), tab)]
    if searches:
        sections.append(("Capacity search", pd.DataFrame([{
            "group": ", ".join(f"{key}={value}" for key, value in search["labels"].items()) or "base",
            "answer": search["answer"], "status": search["status"], "SLO": " and ".join(search["slo"]),
            "probes (value: met)": ", ".join(f"{key}: {'yes' if value else 'no'}"
                                             for key, value in search["probes"].items())}
            for search in searches])))
    elif slo and len(agg) and axis in agg:
        goal = frontier_goal(axis)
        column = f"{'largest' if goal == Goal.MAX else 'smallest'} {axis} meeting the SLO"
        sections.append((f"SLO frontier ({' and '.join(slo)}, all seeds, finished points only)", pd.DataFrame([{
            "series": series_label or "all", column: frontier_value(group, axis, goal)}
            for series_label, group in agg.groupby("series", sort=False)])))
    failed = frame[frame["status"] == "failed"]
    if len(failed):
        sections.append(("Failed points", pd.DataFrame({
            "key": failed["key"], "labels": failed["labels_json"], "seed": failed["seed"],
            "error": [error.splitlines()[0] if error else "" for error in failed["error"]]})))
    figs = _study_figures(input_dir, frame, agg, axis, series, slo, searches, bool(has_pd), multi_seed)
    if plan is not None or (input_dir / "plan.json").exists():
        answer = plan if plan is not None else load_json(input_dir / "plan.json")
        sections.insert(0, ("Capacity plan (plan.md)", _plan_table(answer, input_dir)))
        figs.insert(0, Figure("Plan: throughput per GPU vs TPOT over every probe, the frontier dotted",
                              lambda: figures.plan_frontier(answer),
                              lambda out: plots.plan_frontier(answer, out / "plan_frontier.png")))
    if meta.get("description"):
        sections.insert(0, ("About", pd.DataFrame({"study": [meta["description"]],
                                                     "points": [len(frame)], "failed": [len(failed)]})))
    return Report(f"simroute study: {meta.get('name', input_dir.name)}", sections, figs, notes)


def _study_figures(input_dir: Path, frame: pd.DataFrame, agg: pd.DataFrame, axis: str | None, series: list[str],
                   slo: list[str],
                   searches: list[dict[str, Any]], has_pd: bool, multi_seed: bool) -> list[Figure]:
    """A study's figures; link and spine figures at the search answers (or each series' largest x)."""
    reps = _answer_runs(frame, searches) if searches else _representatives(frame, axis, series)
    where = "at each search answer" if searches else f"runs at the largest {axis}"
    links = {key: _read_parquet(input_dir / "runs" / value / "net_links.parquet", columns=LINK_COLUMNS)
             for key, value in reps.items()}
    spines = {key: _read_parquet(input_dir / "runs" / value / "net_spines.parquet", columns=SPINE_COLUMNS)
              for key, value in reps.items()}
    axis_or_blank = axis or "_"
    figs = [Figure(f"TTFT and TPOT percentiles vs {axis}", lambda: figures.latency_vs_load(agg, axis_or_blank),
                   lambda out: plots.latency_vs_load(agg, axis_or_blank, out / "latency.png") if axis in agg else None),
            Figure("SLO frontier", lambda: figures.frontier(agg, axis_or_blank, slo, searches),
                   lambda out: plots.frontier(agg, axis_or_blank, slo, searches, out / "slo_frontier.png")),
            Figure("Bytes per primitive", lambda: figures.bytes_per_primitive(agg, "config", over_seeds=multi_seed),
                   lambda out: plots.bytes_per_primitive(agg, "config", out / "bytes.png", over_seeds=multi_seed)),
            Figure(f"Link utilisation ({where})", lambda: figures.link_heatmap(links),
                   lambda out: plots.link_heatmap(links, out / "link_utilisation.png")),
            Figure(f"Per-spine concurrent flows ({where}; ARK Fig 3)", lambda: figures.spine_heatmap(spines),
                   lambda out: plots.spine_heatmap(spines, out / "spines.png"))]
    if has_pd and axis in agg:
        figs.insert(1, Figure(f"KV-transfer FCT vs {axis} (ARK Fig 2)", lambda: figures.fct_vs_load(agg, axis_or_blank),
                              lambda out: plots.fct_vs_load(agg, axis_or_blank, out / "fct.png")))
    return figs


def _fmt(table: pd.DataFrame, agg: pd.DataFrame) -> pd.DataFrame:
    """Human units: ms with CI, GB, percentages."""
    table = table.copy()
    for col in CI_COLS:
        if col in table:
            table[col] = [f"{mean:.2f}" + (f" ± {half:.2f}" if np.isfinite(half) else "")
                          for mean, half in zip(agg[col], agg[f"{col}_ci"])]
    for col in ("bytes_route", "bytes_fetch", "bytes_pd_transfer"):
        if col in table:
            table[col] = [f"{mean / 1e9:.3f} GB" for mean in table[col]]
    for col in ("fct_pd_mean_ms", "fct_pd_p95_ms"):
        if col in table:
            table[col] = [f"{mean:.1f}" if np.isfinite(mean) else "-" for mean in table[col]]
    if "slo_attainment" in table:
        table["slo_attainment"] = [f"{100 * share:.1f}%" if np.isfinite(share) else "-"
                                   for share in table["slo_attainment"]]
    return table


def _plan_table(answer: Any, input_dir: Path) -> pd.DataFrame:
    """One row per deployment of a plan: fewest hosts and GPUs, status, non-monotone host counts, what binds below
    it."""
    if not isinstance(answer, dict) or not isinstance(answer.get("deployments"), dict):
        raise ConfigurationError("is not a plan answer (no 'deployments')", file=input_dir / "plan.json")
    rows = []
    for name, entry in answer["deployments"].items():
        binding = entry.get("binding") or {}
        edges = ", ".join(f"{edge.get('meets')} meets, {edge.get('fails')} fails"
                          for edge in entry.get("nonmonotone") or [])
        rows.append({"deployment": name + (" (the answer)" if name == answer.get("deployment") else
                                           "" if entry.get("candidate", True) else " (compared)"),
                     "fewest hosts": entry.get("hosts") if entry.get("hosts") is not None else "none in range",
                     "GPUs": entry.get("gpus") if entry.get("gpus") is not None else "-",
                     "status": entry.get("status"), "non-monotone": edges or "-",
                     "SLO": " and ".join(answer.get("slo", [])),
                     "binding below it": (f"at {binding.get('hosts')} hosts: {', '.join(binding.get('violated', []))}; "
                                          f"{binding.get('resource')}") if binding else "-"})
    return pd.DataFrame(rows)


# ---- a single run ----------------------------------------------------------------------------------------
def _run_sections(summary: dict[str, Any]) -> list[tuple[str, pd.DataFrame]]:
    cfg = summary["config"]
    lat = pd.DataFrame([{"metric": metric, **{key: value for key, value in summary[metric].items()}}
                        for metric in ("ttft_ms", "tpot_ms", "e2e_ms")])
    net = summary.get("network", {})
    return [
        ("Run", pd.DataFrame([{"topology": Path(cfg["topology"]).name, "trace": Path(cfg["trace"]).name,
                               "calib": Path(cfg["calib"]).name, "policy": cfg["policy"], "routing": cfg["routing"],
                               "seed": summary["seed"], "requests": summary["requests"],
                               "completed": summary["completed"],
                               "dropped": summary["dropped"], "SLO attainment": summary["slo"]["attainment"]}])),
        ("Latency (ms)", lat),
        *_serving_sections(summary.get("serving") or {}),
        ("Primitives per (chunk, request)", pd.DataFrame([summary["primitive_counts"]])),
        ("Bytes (GB)", pd.DataFrame([{key: round(value / 1e9, 4) for key, value in summary["bytes"].items()}])),
        ("Network", pd.DataFrame([{"flows": net.get("flows"),
                                   "most saturated tier": _most_saturated(net.get("bottlenecks") or {}),
                                   "max link mean utilisation": net.get("max_link_utilisation"),
                                   "peak spine flows": max(net.get("peak_spine_concurrency", {}).values(),
                                                           default=0),
                                   **{f"{key} link bytes, all TP ranks (GB)": round(value / 1e9, 4)
                                      for key, value in net.get("bytes_by_tier", {}).items()}}])),
        *_bottleneck_sections(net.get("bottlenecks") or {}),
    ]


SERVING_LATENCY = (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2E", "e2e_ms"))


def _serving_sections(serving: dict[str, Any]) -> list[tuple[str, pd.DataFrame]]:
    """The figures the serving benchmark clients print (summary.json `serving`): latency mean / median / p99 in
    ms, and throughput over the first send to the last completion, in total and per GPU."""
    if not serving.get("duration_s"):
        return []
    latency = pd.DataFrame([{"metric": name, **{stat: (serving.get(key) or {}).get(stat)
                                                for stat in ("mean", "median", "p99")}}
                            for name, key in SERVING_LATENCY])
    rates = ("requests_per_s", "input_tokens_per_s", "output_tokens_per_s", "total_tokens_per_s")
    throughput = pd.DataFrame([{"scope": scope, **{rate: (serving.get(key) or {}).get(rate) for rate in rates}}
                               for scope, key in (("total", "throughput"),
                                                  (f"per GPU ({serving.get('gpus')})", "throughput_per_gpu"))])
    limit = serving.get("concurrency_limit")
    what = (f"{serving.get('completed')} requests in {serving['duration_s']:.4g} s"
            + (f", concurrency {limit}" if limit else "") + "; as SGLang bench_serving / vllm bench serve count it")
    return [(f"Serving benchmark latency (ms): {what}", latency), ("Serving benchmark throughput", throughput)]


def _most_saturated(bottleneck: dict[str, Any]) -> str:
    """The bottleneck tier's name, or why none is named (no tier's p99 window utilisation reached the floor)."""
    if bottleneck.get("most_saturated_tier"):
        return str(bottleneck["most_saturated_tier"])
    floor = bottleneck.get("most_saturated_floor_p99")
    return f"none (no tier's p99 utilisation reached {100 * floor:.0f}%)" if floor is not None else "none"


def _bottleneck_sections(bottleneck: dict[str, Any]) -> list[tuple[str, pd.DataFrame]]:
    """Per-tier utilisation (peak / p99 over the stated window, mean over the run) and the hottest links."""
    if not bottleneck.get("tiers"):
        return []
    window = f"{bottleneck.get('window_s', 0) * 1e3:g} ms windows over {bottleneck.get('span_s', 0):.3g} s"
    tiers = pd.DataFrame([{"tier": tier, "links": stats.get("links"), "peak": stats.get("peak_utilisation"),
                           "p99": stats.get("p99_utilisation"), "mean": stats.get("mean_utilisation"),
                           "saturated link-s": stats.get("saturated_link_s"),
                           "bulk GB (one TP rank)": (stats.get("bulk_bytes") or 0) / 1e9,
                           "message GB (one TP rank)": (stats.get("message_bytes") or 0) / 1e9}
                          for tier, stats in bottleneck["tiers"].items()])
    hot = pd.DataFrame([{"tier": link.get("tier"), "link": f"{link.get('src')} -> {link.get('dst')}",
                         "peak": link.get("peak_utilisation"), "p99": link.get("p99_utilisation"),
                         "mean": link.get("mean_utilisation"), "saturated s": link.get("saturated_s"),
                         "bulk GB": (link.get("bulk_bytes") or 0) / 1e9,
                         "message GB": (link.get("message_bytes") or 0) / 1e9}
                        for link in bottleneck.get("hottest_links", [])])
    return [(f"Utilisation by tier ({window})", tiers), ("Hottest links", hot)]


# holders.parquet column -> the run report's heading, and the scale it is shown at
HOLDER_VIEW = {"holder": ("holder", 1), "gpu": ("GPU", 1), "queries": ("queries", 1),
               "queries_per_call": ("queries / call", 1), "mean_fan_in": ("mean fan-in", 1),
               "max_fan_in": ("max fan-in", 1), "work_share": ("partial work (% of time)", 100),
               "busy_share": ("busy (% of time)", 100), "mean_wait_s": ("mean wait (us)", 1e6)}
HOLDER_ROWS = 16


def _holder_sections(input_dir: Path) -> tuple[list[tuple[str, pd.DataFrame]], list[str]]:
    """The busiest holders by partial-attention work (holders.parquet), or a note where the run's file is from
    before the engines' per-holder counters (the retired batching server's samples, zeros on the engine path)."""
    path = input_dir / "holders.parquet"
    if not path.exists():
        return [], []
    table = _read_parquet(path)
    if "batch_size" in table and "work_s" not in table:
        return [], [f"{path.name} is from an older simroute (holder batch samples, zeros since requests run on "
                    "the instance engines): rerun the run for per-holder load."]
    for name in HOLDER_VIEW:
        if name not in table:
            raise ConfigurationError("missing column", file=path, field=name)
    busiest = table.sort_values(["work_s", "holder"], ascending=[False, True]).head(HOLDER_ROWS)
    view = pd.DataFrame({title: busiest[name].to_numpy() * scale if scale != 1 else busiest[name].to_numpy()
                         for name, (title, scale) in HOLDER_VIEW.items()})
    shown = f"the {HOLDER_ROWS} busiest of {len(table)}" if len(table) > HOLDER_ROWS else f"all {len(table)}"
    return [(f"Holders by partial-attention work ({shown})", view)], []


def _hbm_table(input_dir: Path) -> pd.DataFrame | None:
    """The engine's per-instance iteration table with HBM columns, when the run wrote one."""
    for name in ("iterations", "engine", "hbm"):
        table = _read_parquet(input_dir / f"{name}.parquet")
        if table is not None and "instance" in table and any(col in table for col, _ in figures.HBM_PARTS):
            return table
    return None


NUMBER = "number"
NUMBER_OR_NULL = "number or null"
NUMBERS = "a mapping of numbers"
NUMBERS_OR_NULL = "a mapping of numbers or nulls"
TEXT = "text"
# what the run report reads from summary.json (a nested dict is a section; an optional one is marked with "?")
SUMMARY_FIELDS: dict[str, Any] = {
    "config": {"topology": TEXT, "trace": TEXT, "calib": TEXT, "policy": TEXT, "routing": TEXT},
    "seed": NUMBER, "requests": NUMBER, "completed": NUMBER, "dropped": NUMBER,
    "slo": {"attainment": NUMBER_OR_NULL},
    "ttft_ms": NUMBERS_OR_NULL, "tpot_ms": NUMBERS_OR_NULL, "e2e_ms": NUMBERS_OR_NULL,
    "primitive_counts": NUMBERS, "bytes": NUMBERS,
    "serving?": {"duration_s?": NUMBER_OR_NULL, "completed?": NUMBER, "gpus?": NUMBER,
                 "concurrency_limit?": NUMBER_OR_NULL, "throughput?": NUMBERS_OR_NULL,
                 "throughput_per_gpu?": NUMBERS_OR_NULL, "ttft_ms?": NUMBERS_OR_NULL, "tpot_ms?": NUMBERS_OR_NULL,
                 "itl_ms?": NUMBERS_OR_NULL, "e2e_ms?": NUMBERS_OR_NULL},
    "network?": {"flows?": NUMBER_OR_NULL, "max_link_utilisation?": NUMBER_OR_NULL,
                 "peak_spine_concurrency?": NUMBERS, "bytes_by_tier?": NUMBERS,
                 "bottlenecks?": {"window_s?": NUMBER_OR_NULL, "span_s?": NUMBER_OR_NULL,
                                  "most_saturated_tier?": (str, type(None))}},
}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_summary(doc: Any, spec: dict[str, Any], path: Path, where: str = "") -> None:
    """summary.json has every field the report reads, of the kind a run writes (one line naming the field)."""
    if not isinstance(doc, dict):
        raise ConfigurationError("not a simroute run summary: must be a JSON object", file=path, field=where or None)
    for key, kind in spec.items():
        name = key.rstrip("?")
        field = f"{where}.{name}" if where else name
        if name not in doc or (doc[name] is None and key.endswith("?")):
            if key.endswith("?"):
                continue
            raise ConfigurationError("missing: not a simroute run summary (or a damaged one)", file=path, field=field)
        value = doc[name]
        if isinstance(kind, dict):
            check_summary(value, kind, path, field)
        elif isinstance(kind, tuple):
            if not isinstance(value, kind):
                raise ConfigurationError(f"has the wrong type ({type(value).__name__})", file=path, field=field)
        elif kind == TEXT and not isinstance(value, str) or kind == NUMBER and not _is_number(value) \
                or kind == NUMBER_OR_NULL and not (value is None or _is_number(value)):
            raise ConfigurationError(f"must be {kind}, got {str(value)[:40]!r}", file=path, field=field)
        elif kind in (NUMBERS, NUMBERS_OR_NULL):
            nullable = kind == NUMBERS_OR_NULL
            if not isinstance(value, dict) or not all(_is_number(number) or (nullable and number is None)
                                                      for number in value.values()):
                raise ConfigurationError(f"must be {kind}", file=path, field=field)


def _run(input_dir: Path) -> Report:
    summary = load_json(input_dir / "summary.json")
    check_summary(summary, SUMMARY_FIELDS, input_dir / "summary.json")
    for key in ("route", "fetch", "pd_transfer"):
        if key not in summary["bytes"]:
            raise ConfigurationError("missing: not a simroute run summary (or a damaged one)",
                                     file=input_dir / "summary.json", field=f"bytes.{key}")
    moved = summary["bytes"]
    agg = pd.DataFrame([{"config": "run", "bytes_route": moved["route"], "bytes_fetch": moved["fetch"],
                         "bytes_pd_transfer": moved["pd_transfer"]}])
    req = _read_parquet(input_dir / "requests.parquet", required=True, columns=RUN_REQUEST_COLUMNS)
    if not len(req):
        raise ConfigurationError("holds no requests (a run writes one row per request)",
                                 file=input_dir / "requests.parquet")
    links = {"run": _read_parquet(input_dir / "net_links.parquet", columns=LINK_COLUMNS)}
    spines = {"run": _read_parquet(input_dir / "net_spines.parquet", columns=SPINE_COLUMNS)}
    hbm = _hbm_table(input_dir)
    figs = [Figure("TTFT and TPOT distributions", lambda: figures.latency_cdf(req),
                   lambda out: plots.latency_cdf(req, out / "latency.png") if req is not None else None),
            Figure("TTFT breakdown per primitive", lambda: figures.ttft_breakdown(req)),
            Figure("Bytes per primitive", lambda: figures.bytes_per_primitive(agg, "config", over_seeds=False),
                   lambda out: plots.bytes_per_primitive(agg, "config", out / "bytes.png", over_seeds=False)),
            Figure("Link utilisation", lambda: figures.link_heatmap(links),
                   lambda out: plots.link_heatmap(links, out / "link_utilisation.png")),
            Figure("Per-spine concurrent flows (ARK Fig 3)", lambda: figures.spine_heatmap(spines),
                   lambda out: plots.spine_heatmap(spines, out / "spines.png")),
            Figure("HBM composition", lambda: figures.hbm_composition(hbm))]
    holders, notes = _holder_sections(input_dir)
    return Report(f"simroute run: {input_dir.name}", _run_sections(summary) + holders, figs, notes)


# ---- rendering -------------------------------------------------------------------------------------------
def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "-" if not np.isfinite(value) else f"{value:.4g}"
    return "-" if value is None else str(value)


def _md(table: pd.DataFrame) -> str:
    cols = [str(col) for col in table.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(value).replace("|", "\\|").replace("\n", " ") for value in row) + " |")
    return "\n".join(lines)


def _html_table(table: pd.DataFrame) -> str:
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(value))}</td>" for value in row) + "</tr>"
                   for row in table.itertuples(index=False))
    cols = "".join(f"<th>{html.escape(str(col))}</th>" for col in table.columns)
    return f"<table><tr>{cols}</tr>{rows}</table>"
