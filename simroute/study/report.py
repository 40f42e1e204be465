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
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pyarrow import ArrowException

from simroute.errors import ConfigurationError
from simroute.ioutil import atomic_path, check_output_path, check_replaceable, load_json, manifest_kind
from simroute.study import figures, plots
from simroute.study.search import finished, meets, parse_slo
from simroute.study.store import Store

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}
CI_COLS = [f"{m}_{s}" for m in ("ttft_ms", "tpot_ms") for s in ("p50", "p99")]
MEAN_COLS = CI_COLS + ["slo_attainment", "bytes_route", "bytes_fetch", "bytes_pd_transfer", "completed",
                       "requests", "n_route", "n_fetch", "n_local", "max_link_utilisation", "peak_spine_flows",
                       "fct_pd_mean_ms", "fct_pd_p95_ms"]
# the columns the report's figures read from a run's tables (required), and the text columns among all it reads:
# every other column a table has must be numeric (a run writes them so; a damaged file is refused in one line)
RUN_REQUEST_COLUMNS = ("status", "ttft_s", "tpot_s")
LINK_COLUMNS = ("link", "src", "dst", "tier")
SPINE_COLUMNS = ("t_s", "spine", "active_flows")
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


def write_report(directory: str | Path, out: str | Path | None = None, fmt: str = "html",
                 png: bool = True) -> Path | str:
    """Report on a study or run directory. html: writes report.html (+ PNGs), returns its path; md: the text.

    Everything is read and checked before anything is written; the report directory is then written whole
    (a temporary beside it, renamed), with a manifest, so a run holding its report stays simroute's own."""
    d = Path(directory)
    if not d.is_dir():
        raise ConfigurationError("not found" if not d.exists() else "is not a directory; give a run or study "
                                 "directory", file=d)
    out_dir = None
    if fmt != "md":
        out_dir = check_report_out(d, Path(out) if out else d / "report")
    if (d / "study.json").exists() or (d / "points").is_dir():
        rep = _study(d)
    elif (d / "summary.json").exists():
        rep = _run(d)
    else:
        raise ConfigurationError("neither a study directory (study.json, points/) nor a run directory "
                                 "(summary.json)", file=d)
    if fmt == "md":
        return "\n".join([f"# {rep.title}", ""] + [f"> {n}\n" for n in rep.notes]
                         + [f"## {h}\n\n{_md(t)}\n" for h, t in rep.sections if len(t)])
    assert out_dir is not None
    with atomic_path(out_dir, directory=True, what="report") as tmp:
        drawn = [(f.caption, fig) for f in rep.figures if (fig := f.interactive()) is not None]
        if png:
            for f in rep.figures:
                if f.png is not None:
                    f.png(tmp)
        tables = [(h, _html_table(t)) for h, t in rep.sections if len(t)]
        (tmp / "report.html").write_text(figures.page(rep.title, tables, drawn, rep.notes))
    return out_dir / "report.html"


def check_report_out(d: Path, out_dir: Path) -> Path:
    """The report directory: never the run or study it reads, a folder holding it, or one of its files."""
    source = d.resolve()
    target = out_dir.resolve()
    if target == source or target in source.parents:
        raise ConfigurationError(f"is or holds {d}, the directory this report reads: choose another path (the "
                                 "default is DIR/report)", file=out_dir, field="--out")
    inputs = [p for p in d.iterdir() if p.resolve() != target]
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
    x = rep.get("x")
    if x is None:
        numeric = [n for n in names if n not in meta.get("cases", {}) and all(
            isinstance(v, (int, float)) for v in meta["axes"].get(n, [0]))]
        x = next((n for n in numeric if "qps" in n), numeric[-1] if numeric else (names[-1] if names else None))
    series = rep.get("series") or [n for n in names if n != x]
    return x, list(series)


def aggregate(df: pd.DataFrame, x: str | None, series: list[str], slo: list[str]) -> pd.DataFrame:
    """One row per configuration: means over seeds, 95% CIs of the latency percentiles, SLO met by all seeds."""
    ok = df[df["status"] == "ok"].copy()
    keys = [f"axis:{n}" for n in series + ([x] if x else []) if f"axis:{n}" in ok]
    if ok.empty:
        return pd.DataFrame()
    if not keys:
        ok["axis:_"] = "all"
        keys = ["axis:_"]
    rows = []
    for vals, g in ok.groupby(keys, sort=False, dropna=False):
        vals = vals if isinstance(vals, tuple) else (vals,)
        r: dict[str, Any] = {k.removeprefix("axis:"): v for k, v in zip(keys, vals)}
        n = len(g)
        r["seeds"] = n
        for c in MEAN_COLS:
            r[c] = float(g[c].mean())
        for c in CI_COLS:
            r[f"{c}_ci"] = T95.get(n - 1, 1.96) * float(g[c].std(ddof=1)) / np.sqrt(n) if n > 1 else np.nan
        records = g.to_dict("records")
        r["meets"] = meets(records, tuple(slo)) if slo else None
        r["finished"] = all(finished(row) for row in records)
        r["completion"] = float((g["completed"] / g["requests"]).min()) if len(g) else np.nan
        r["overloaded"] = float(g["overloaded"].fillna(0).max()) if "overloaded" in g else 0.0
        r["ttft_growth"] = float(g["ttft_growth"].max()) if "ttft_growth" in g else np.nan
        rows.append(r)
    agg = pd.DataFrame(rows)
    agg["series"] = [", ".join(f"{s}={r[s]}" for s in series if s in agg) for _, r in agg.iterrows()]
    agg["config"] = [(f"{r['series']} @ " if r["series"] else "") + (f"{x}={r[x]}" if x in agg else "")
                     for _, r in agg.iterrows()]
    agg["marks"] = marks(agg)
    if x in agg:
        rank = {s: i for i, s in enumerate(dict.fromkeys(agg["series"]))}
        num = pd.to_numeric(agg[x], errors="coerce")
        agg["_r"], agg["_x"] = agg["series"].map(rank), num if num.notna().all() else agg[x].astype(str)
        agg = agg.sort_values(["_r", "_x"], kind="stable").drop(columns=["_r", "_x"])
    return agg.reset_index(drop=True)


# Axes that cost (more is more hardware): their frontier is the smallest value meeting the SLO. Any other axis is
# a load (qps, time scale, requests, tokens): its frontier is the largest value meeting the SLO.
RESOURCE_AXES = ("hosts", "instances", "replicas", "hbm_gb", "gpus", "tp", "spines", "staging_streams",
                 "max_running_seqs", "token_budget")


def frontier_goal(axis: str) -> str:
    """'min' for a resource axis (fewest hosts meeting the SLO), 'max' for a load axis (most QPS)."""
    return "min" if axis.split(".")[-1] in RESOURCE_AXES else "max"


def frontier_value(group: pd.DataFrame, axis: str, goal: str) -> Any:
    """The frontier of one series: the extreme axis value among points meeting the SLO, compared as numbers
    when every label is one (so 8 < 16 < 32, not '8' > '32' > '16'), else as the labels' given order."""
    met = group[group["meets"].fillna(False).astype(bool)]
    if met.empty:
        return "none"
    values = pd.to_numeric(met[axis], errors="coerce")
    if values.notna().all():
        pick = values.idxmin() if goal == "min" else values.idxmax()
    else:
        pick = met.index[0] if goal == "min" else met.index[-1]
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
    cols = [c for c in IDENTITY_COLS if c in agg]
    for _, row in agg.iterrows():
        notes = []
        if row.get("overloaded", 0) > 0:
            notes.append(f"arrivals above service (late TTFT x{row.get('ttft_growth', float('nan')):.0f} the early)")
        elif not row.get("finished", True):
            notes.append(f"did not finish ({row.get('completion', float('nan')):.0%} completed < "
                         f"{MIN_COMPLETION:.0%})")
        key = tuple(None if pd.isna(row[c]) else round(float(row[c]), 6) for c in cols)
        if key in seen and cols:
            notes.append(f"identical to {seen[key]}")
        else:
            seen.setdefault(key, str(row["config"]))
        out.append("; ".join(notes))
    return out


def no_reuse(agg: pd.DataFrame) -> bool:
    """True when no point moved a chunk across instances (route = fetch = 0 everywhere): the trace has no
    cross-instance reuse, so no policy can differ from another on it."""
    cols = [c for c in ("n_route", "n_fetch") if c in agg]
    return bool(len(agg) and cols and float(agg[cols].fillna(0).to_numpy().sum()) == 0.0)


def _representatives(df: pd.DataFrame, x: str | None, series: list[str], limit: int = 8) -> dict[str, str]:
    """Per series, the run at its largest x and smallest seed: the heatmaps' rows (label -> key)."""
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return {}
    cols = [f"axis:{s}" for s in series if f"axis:{s}" in ok]
    groups = ok.groupby(cols, sort=False) if cols else [((), ok)]
    out: dict[str, str] = {}
    for vals, g in groups:
        vals = vals if isinstance(vals, tuple) else (vals,)
        if x and f"axis:{x}" in g:
            num = pd.to_numeric(g[f"axis:{x}"], errors="coerce")
            g = g[num == num.max()] if num.notna().any() else g
        g = g.sort_values("seed")
        label = ", ".join(f"{c.removeprefix('axis:')}={v}" for c, v in zip(cols, vals))
        if x and f"axis:{x}" in g:
            label += (" @ " if label else "") + f"{x}={g[f'axis:{x}'].iloc[0]}"
        out[label or "run"] = g["key"].iloc[0]
        if len(out) >= limit:
            break
    return out


def _answer_runs(df: pd.DataFrame, searches: list[dict[str, Any]], limit: int = 8) -> dict[str, str]:
    """Per search group, the run at its answer (smallest seed): what the link and spine figures show."""
    ok = df[df["status"] == "ok"]
    out: dict[str, str] = {}
    for s in searches:
        col = f"axis:{s['field']}"
        if s["answer"] is None or col not in ok:
            continue
        g = ok[pd.to_numeric(ok[col], errors="coerce") == float(s["answer"])]
        for k, v in s["labels"].items():
            if f"axis:{k}" in g:
                g = g[g[f"axis:{k}"].astype(str) == str(v)]
        if len(g):
            label = ", ".join(f"{k}={v}" for k, v in s["labels"].items())
            out[(label + " @ " if label else "") + f"{s['field']}={s['answer']}"] = g.sort_values("seed")["key"].iloc[0]
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
    for i, entry in enumerate(searches):
        if not isinstance(entry, dict):
            raise ConfigurationError("must be an object", file=path, field=f"[{i}]")
        for key, kind in SEARCH_FIELDS.items():
            if not isinstance(entry.get(key), kind):
                raise ConfigurationError(f"must be {kind.__name__}", file=path, field=f"[{i}].{key}")
        answer = entry.get("answer")
        if not (answer is None or isinstance(answer, (int, float)) and not isinstance(answer, bool)):
            raise ConfigurationError("must be a number or null", file=path, field=f"[{i}].answer")
        _check_slo(entry["slo"], path, f"[{i}].slo")
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


def _study(d: Path) -> Report:
    meta = load_study_meta(d / "study.json") if (d / "study.json").exists() else {}
    if not (d / "points").is_dir():
        raise ConfigurationError("missing or not a directory: a study directory holds its finished points there "
                                 "(has its sweep run yet?)", file=d / "points")
    df = Store(d).read()
    searches = load_searches(d / "search.json") if (d / "search.json").exists() else []
    x, series = axes_of(meta) if meta else (None, [])
    slo = list(meta.get("slo") or (meta.get("search") or {}).get("slo") or [])
    agg = aggregate(df, x, series, slo)
    notes = []
    table_cols = ["config", "marks", "seeds", *CI_COLS, "slo_attainment", "completed", "bytes_route", "bytes_fetch",
                  "bytes_pd_transfer", "max_link_utilisation", "peak_spine_flows"]
    has_pd = len(agg) and "bytes_pd_transfer" in agg and float(agg["bytes_pd_transfer"].max()) > 0
    if has_pd:   # prefill -> decode KV transfers: their FCT is the ARK paper's headline metric
        table_cols[table_cols.index("bytes_pd_transfer") + 1:1] = ["fct_pd_mean_ms", "fct_pd_p95_ms"]
    if len(agg) and not _tpot_modelled(agg):
        table_cols = [c for c in table_cols if not c.startswith("tpot_ms")]
        notes.append("TPOT is 0 at every point (no decode step time and no cross-instance decode work in these "
                     "runs), so it is left out.")
    if no_reuse(agg):
        notes.append("No run moved a chunk between instances (route = fetch = 0 at every point): the trace has no "
                     "cross-instance reuse, so the policies cannot differ on it; their results are identical.")
    if len(agg) and (~agg["finished"]).any():
        notes.append("Points marked 'did not finish' completed too few of their requests to be compared; they are "
                     "kept out of the SLO frontier and of every search answer.")
    if slo:
        notes.append(f"SLO of this study: {' and '.join(slo)}. 'slo_attainment' is each run's own attainment "
                     "(against the run's slo_ttft_ms / slo_tpot_ms); the frontier uses the study's SLO.")
    tab = _fmt(agg[[c for c in table_cols if c in agg]], agg) if len(agg) else pd.DataFrame()
    multi_seed = bool(len(agg) and agg["seeds"].max() > 1)
    sections: list[tuple[str, pd.DataFrame]] = [
        ("Configurations" + (" (mean over seeds, ± 95% CI)" if multi_seed else " (one seed each)"), tab)]
    if searches:
        sections.append(("Capacity search", pd.DataFrame([{
            "group": ", ".join(f"{k}={v}" for k, v in s["labels"].items()) or "base",
            "answer": s["answer"], "status": s["status"], "SLO": " and ".join(s["slo"]),
            "probes (value: met)": ", ".join(f"{k}: {'yes' if v else 'no'}" for k, v in s["probes"].items())}
            for s in searches])))
    elif slo and len(agg) and x in agg:
        goal = frontier_goal(x)
        sections.append((f"SLO frontier ({' and '.join(slo)}, all seeds, finished points only)", pd.DataFrame([{
            "series": s or "all", f"{'largest' if goal == 'max' else 'smallest'} {x} meeting the SLO":
                frontier_value(g, x, goal)} for s, g in agg.groupby("series", sort=False)])))
    failed = df[df["status"] == "failed"]
    if len(failed):
        sections.append(("Failed points", pd.DataFrame({
            "key": failed["key"], "labels": failed["labels_json"], "seed": failed["seed"],
            "error": [e.splitlines()[0] if e else "" for e in failed["error"]]})))
    figs = _study_figures(d, df, agg, x, series, slo, searches, bool(has_pd), multi_seed)
    if (d / "plan.json").exists():
        sections.insert(0, ("Capacity plan (plan.md)", _plan_table(load_json(d / "plan.json"), d)))
    if meta.get("description"):
        sections.insert(0, ("About", pd.DataFrame({"study": [meta["description"]],
                                                     "points": [len(df)], "failed": [len(failed)]})))
    return Report(f"simroute study: {meta.get('name', d.name)}", sections, figs, notes)


def _study_figures(d: Path, df: pd.DataFrame, agg: pd.DataFrame, x: str | None, series: list[str], slo: list[str],
                   searches: list[dict[str, Any]], has_pd: bool, multi_seed: bool) -> list[Figure]:
    """A study's figures; link and spine figures at the search answers (or each series' largest x)."""
    reps = _answer_runs(df, searches) if searches else _representatives(df, x, series)
    where = "at each search answer" if searches else f"runs at the largest {x}"
    links = {k: _read_parquet(d / "runs" / v / "net_links.parquet", columns=LINK_COLUMNS) for k, v in reps.items()}
    spines = {k: _read_parquet(d / "runs" / v / "net_spines.parquet", columns=SPINE_COLUMNS)
              for k, v in reps.items()}
    xx = x or "_"
    figs = [Figure(f"TTFT and TPOT percentiles vs {x}", lambda: figures.latency_vs_load(agg, xx),
                   lambda o: plots.latency_vs_load(agg, xx, o / "latency.png") if x in agg else None),
            Figure("SLO frontier", lambda: figures.frontier(agg, xx, slo, searches),
                   lambda o: plots.frontier(agg, xx, slo, searches, o / "slo_frontier.png")),
            Figure("Bytes per primitive", lambda: figures.bytes_per_primitive(agg, "config", over_seeds=multi_seed),
                   lambda o: plots.bytes_per_primitive(agg, "config", o / "bytes.png", over_seeds=multi_seed)),
            Figure(f"Link utilisation ({where})", lambda: figures.link_heatmap(links),
                   lambda o: plots.link_heatmap(links, o / "link_utilisation.png")),
            Figure(f"Per-spine concurrent flows ({where}; ARK Fig 3)", lambda: figures.spine_heatmap(spines),
                   lambda o: plots.spine_heatmap(spines, o / "spines.png"))]
    if has_pd and x in agg:
        figs.insert(1, Figure(f"KV-transfer FCT vs {x} (ARK Fig 2)", lambda: figures.fct_vs_load(agg, xx),
                              lambda o: plots.fct_vs_load(agg, xx, o / "fct.png")))
    return figs


def _fmt(t: pd.DataFrame, agg: pd.DataFrame) -> pd.DataFrame:
    """Human units: ms with CI, GB, percentages."""
    t = t.copy()
    for c in CI_COLS:
        if c in t:
            t[c] = [f"{v:.2f}" + (f" ± {e:.2f}" if np.isfinite(e) else "") for v, e in zip(agg[c], agg[f"{c}_ci"])]
    for c in ("bytes_route", "bytes_fetch", "bytes_pd_transfer"):
        if c in t:
            t[c] = [f"{v / 1e9:.3f} GB" for v in t[c]]
    for c in ("fct_pd_mean_ms", "fct_pd_p95_ms"):
        if c in t:
            t[c] = [f"{v:.1f}" if np.isfinite(v) else "-" for v in t[c]]
    if "slo_attainment" in t:
        t["slo_attainment"] = [f"{100 * v:.1f}%" if np.isfinite(v) else "-" for v in t["slo_attainment"]]
    return t


def _plan_table(answer: Any, d: Path) -> pd.DataFrame:
    """One row per policy of a plan: fewest hosts, status, what binds below it."""
    if not isinstance(answer, dict) or not isinstance(answer.get("policies"), dict):
        raise ConfigurationError("is not a plan answer (no 'policies')", file=d / "plan.json")
    rows = []
    for name, p in answer["policies"].items():
        b = p.get("binding") or {}
        rows.append({"policy": name + (" (the answer)" if name == answer.get("policy") else ""),
                     "fewest hosts": p.get("hosts") if p.get("hosts") is not None else "none in range",
                     "status": p.get("status"), "SLO": " and ".join(answer.get("slo", [])),
                     "binding below it": (f"at {b.get('hosts')} hosts: {', '.join(b.get('violated', []))}; "
                                          f"{b.get('resource')}") if b else "-"})
    return pd.DataFrame(rows)


# ---- a single run ----------------------------------------------------------------------------------------
def _run_sections(s: dict[str, Any]) -> list[tuple[str, pd.DataFrame]]:
    cfg = s["config"]
    lat = pd.DataFrame([{"metric": m, **{k: v for k, v in s[m].items()}} for m in ("ttft_ms", "tpot_ms", "e2e_ms")])
    net = s.get("network", {})
    return [
        ("Run", pd.DataFrame([{"topology": Path(cfg["topology"]).name, "trace": Path(cfg["trace"]).name,
                               "calib": Path(cfg["calib"]).name, "policy": cfg["policy"], "routing": cfg["routing"],
                               "seed": s["seed"], "requests": s["requests"], "completed": s["completed"],
                               "dropped": s["dropped"], "SLO attainment": s["slo"]["attainment"]}])),
        ("Latency (ms)", lat),
        ("Primitives per (chunk, request)", pd.DataFrame([s["primitive_counts"]])),
        ("Bytes (GB)", pd.DataFrame([{k: round(v / 1e9, 4) for k, v in s["bytes"].items()}])),
        ("Network", pd.DataFrame([{"flows": net.get("flows"),
                                   "most saturated tier": _most_saturated(net.get("bottlenecks") or {}),
                                   "max link mean utilisation": net.get("max_link_utilisation"),
                                   "peak spine flows": max(net.get("peak_spine_concurrency", {}).values(),
                                                           default=0),
                                   **{f"{k} link bytes, all TP ranks (GB)": round(v / 1e9, 4)
                                      for k, v in net.get("bytes_by_tier", {}).items()}}])),
        *_bottleneck_sections(net.get("bottlenecks") or {}),
    ]


def _most_saturated(b: dict[str, Any]) -> str:
    """The bottleneck tier's name, or why none is named (no tier's p99 window utilisation reached the floor)."""
    if b.get("most_saturated_tier"):
        return str(b["most_saturated_tier"])
    floor = b.get("most_saturated_floor_p99")
    return f"none (no tier's p99 utilisation reached {100 * floor:.0f}%)" if floor is not None else "none"


def _bottleneck_sections(b: dict[str, Any]) -> list[tuple[str, pd.DataFrame]]:
    """Per-tier utilisation (peak / p99 over the stated window, mean over the run) and the hottest links."""
    if not b.get("tiers"):
        return []
    window = f"{b.get('window_s', 0) * 1e3:g} ms windows over {b.get('span_s', 0):.3g} s"
    tiers = pd.DataFrame([{"tier": t, "links": v.get("links"), "peak": v.get("peak_utilisation"),
                           "p99": v.get("p99_utilisation"), "mean": v.get("mean_utilisation"),
                           "saturated link-s": v.get("saturated_link_s"),
                           "bulk GB (one TP rank)": (v.get("bulk_bytes") or 0) / 1e9,
                           "message GB (one TP rank)": (v.get("message_bytes") or 0) / 1e9}
                          for t, v in b["tiers"].items()])
    hot = pd.DataFrame([{"tier": h.get("tier"), "link": f"{h.get('src')} -> {h.get('dst')}",
                         "peak": h.get("peak_utilisation"), "p99": h.get("p99_utilisation"),
                         "mean": h.get("mean_utilisation"), "saturated s": h.get("saturated_s"),
                         "bulk GB": (h.get("bulk_bytes") or 0) / 1e9,
                         "message GB": (h.get("message_bytes") or 0) / 1e9}
                        for h in b.get("hottest_links", [])])
    return [(f"Utilisation by tier ({window})", tiers), ("Hottest links", hot)]


# holders.parquet column -> the run report's heading, and the scale it is shown at
HOLDER_VIEW = {"holder": ("holder", 1), "gpu": ("GPU", 1), "queries": ("queries", 1),
               "queries_per_call": ("queries / call", 1), "mean_fan_in": ("mean fan-in", 1),
               "max_fan_in": ("max fan-in", 1), "work_share": ("partial work (% of time)", 100),
               "busy_share": ("busy (% of time)", 100), "mean_wait_s": ("mean wait (us)", 1e6)}
HOLDER_ROWS = 16


def _holder_sections(d: Path) -> tuple[list[tuple[str, pd.DataFrame]], list[str]]:
    """The busiest holders by partial-attention work (holders.parquet), or a note where the run's file is from
    before the engines' per-holder counters (the retired batching server's samples, zeros on the engine path)."""
    path = d / "holders.parquet"
    if not path.exists():
        return [], []
    t = _read_parquet(path)
    if "batch_size" in t and "work_s" not in t:
        return [], [f"{path.name} is from an older simroute (holder batch samples, zeros since requests run on "
                    "the instance engines): rerun the run for per-holder load."]
    for name in HOLDER_VIEW:
        if name not in t:
            raise ConfigurationError("missing column", file=path, field=name)
    busiest = t.sort_values(["work_s", "holder"], ascending=[False, True]).head(HOLDER_ROWS)
    view = pd.DataFrame({title: busiest[name].to_numpy() * scale if scale != 1 else busiest[name].to_numpy()
                         for name, (title, scale) in HOLDER_VIEW.items()})
    shown = f"the {HOLDER_ROWS} busiest of {len(t)}" if len(t) > HOLDER_ROWS else f"all {len(t)}"
    return [(f"Holders by partial-attention work ({shown})", view)], []


def _hbm_table(d: Path) -> pd.DataFrame | None:
    """The engine's per-instance iteration table with HBM columns, when the run wrote one."""
    for name in ("iterations", "engine", "hbm"):
        t = _read_parquet(d / f"{name}.parquet")
        if t is not None and "instance" in t and any(c in t for c, _ in figures.HBM_PARTS):
            return t
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
            if not isinstance(value, dict) or not all(_is_number(v) or (nullable and v is None)
                                                      for v in value.values()):
                raise ConfigurationError(f"must be {kind}", file=path, field=field)


def _run(d: Path) -> Report:
    s = load_json(d / "summary.json")
    check_summary(s, SUMMARY_FIELDS, d / "summary.json")
    for key in ("route", "fetch", "pd_transfer"):
        if key not in s["bytes"]:
            raise ConfigurationError("missing: not a simroute run summary (or a damaged one)",
                                     file=d / "summary.json", field=f"bytes.{key}")
    b = s["bytes"]
    agg = pd.DataFrame([{"config": "run", "bytes_route": b["route"], "bytes_fetch": b["fetch"],
                         "bytes_pd_transfer": b["pd_transfer"]}])
    req = _read_parquet(d / "requests.parquet", required=True, columns=RUN_REQUEST_COLUMNS)
    if not len(req):
        raise ConfigurationError("holds no requests (a run writes one row per request)", file=d / "requests.parquet")
    links = {"run": _read_parquet(d / "net_links.parquet", columns=LINK_COLUMNS)}
    spines = {"run": _read_parquet(d / "net_spines.parquet", columns=SPINE_COLUMNS)}
    hbm = _hbm_table(d)
    figs = [Figure("TTFT and TPOT distributions", lambda: figures.latency_cdf(req),
                   lambda o: plots.latency_cdf(req, o / "latency.png") if req is not None else None),
            Figure("TTFT breakdown per primitive", lambda: figures.ttft_breakdown(req)),
            Figure("Bytes per primitive", lambda: figures.bytes_per_primitive(agg, "config", over_seeds=False),
                   lambda o: plots.bytes_per_primitive(agg, "config", o / "bytes.png", over_seeds=False)),
            Figure("Link utilisation", lambda: figures.link_heatmap(links),
                   lambda o: plots.link_heatmap(links, o / "link_utilisation.png")),
            Figure("Per-spine concurrent flows (ARK Fig 3)", lambda: figures.spine_heatmap(spines),
                   lambda o: plots.spine_heatmap(spines, o / "spines.png")),
            Figure("HBM composition", lambda: figures.hbm_composition(hbm))]
    holders, notes = _holder_sections(d)
    return Report(f"simroute run: {d.name}", _run_sections(s) + holders, figs, notes)


# ---- rendering -------------------------------------------------------------------------------------------
def _cell(v: Any) -> str:
    if isinstance(v, float):
        return "-" if not np.isfinite(v) else f"{v:.4g}"
    return "-" if v is None else str(v)


def _md(t: pd.DataFrame) -> str:
    cols = [str(c) for c in t.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in t.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v).replace("|", "\\|").replace("\n", " ") for v in row) + " |")
    return "\n".join(lines)


def _html_table(t: pd.DataFrame) -> str:
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in r) + "</tr>"
                   for r in t.itertuples(index=False))
    cols = "".join(f"<th>{html.escape(str(c))}</th>" for c in t.columns)
    return f"<table><tr>{cols}</tr>{rows}</table>"
