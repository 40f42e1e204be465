"""The report's interactive figures (plotly), each a function of DataFrames read from output files.

Every function returns a `plotly.graph_objects.Figure`, or None when its data is absent, so a page never shows
an empty plot. Percentile curves are labelled with their statistic (p50 / p99, mean / P95) in the legend and
at the markers; links are named `src -> dst` and grouped by tier. `page()` assembles one self-contained HTML
document: plotly.js is inlined once, so the page works offline.
"""

from __future__ import annotations

import html
import re
from typing import Any

import numpy as np
import pandas as pd

PERCENTILES = (50, 90, 99)
NET_TIERS = ("nic-leaf", "leaf-spine", "spine-core", "pcie", "xsocket", "nvlink")
LINK_METRICS = (("mean_utilisation", "mean"), ("p99_utilisation", "p99"), ("peak_utilisation", "peak"))
HBM_PARTS = (("weights_bytes", "weights"), ("kv_bytes", "KV of running requests"), ("pinned_bytes", "pinned chunks"),
             ("copy_bytes", "fetched copies"), ("free_bytes", "free"))
MAX_LINKS_PER_TIER = 48


def _go():
    import plotly.graph_objects as go
    return go


def _subplots(**options):
    from plotly.subplots import make_subplots
    return make_subplots(**options)


def _layout(fig, title: str, height: int = 420):
    fig.update_layout(title=title, height=height, template="plotly_white", margin=dict(l=60, r=30, t=60, b=50),
                      legend=dict(font=dict(size=11)))
    return fig


# ---- a single run ----------------------------------------------------------------------------------------
def latency_cdf(requests: pd.DataFrame | None) -> Any:
    """TTFT and TPOT CDFs over completed requests, p50 / p90 / p99 marked and labelled with their values."""
    if requests is None:
        return None
    done = requests[requests["status"] == "completed"]
    cols = [(key, heading) for key, heading in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"))
            if key in done and done[key].abs().sum() > 0]
    if done.empty or not cols:
        return None
    go = _go()
    fig = _subplots(rows=1, cols=len(cols), subplot_titles=[f"{heading} CDF" for _, heading in cols])
    for panel, (col, title) in enumerate(cols, start=1):
        latency = np.sort(done[col].dropna().to_numpy(float) * 1e3)
        cdf = np.arange(1, latency.size + 1) / latency.size
        fig.add_trace(go.Scatter(x=latency, y=cdf, mode="lines", name=f"{title} CDF", line=dict(shape="hv")), 1, panel)
        marks = np.percentile(latency, PERCENTILES)
        fig.add_trace(go.Scatter(x=marks, y=np.array(PERCENTILES) / 100, mode="markers+text",
                                 name=f"{title} p50/p90/p99",
                                 text=[f"p{pct}: {mark:.3g} ms" for pct, mark in zip(PERCENTILES, marks)],
                                 textposition="middle right", marker=dict(size=9, symbol="diamond")), 1, panel)
        fig.update_xaxes(title_text=f"{title} (ms)", tickformat=".3~g", exponentformat="none", row=1, col=panel)
        fig.update_yaxes(title_text="fraction of requests", range=[0, 1.05], row=1, col=panel)
    return _layout(fig, "Latency distributions (completed requests)")


def request_class(requests: pd.DataFrame) -> pd.Series:
    """Each request's primitive class: the primitives its remote chunks used (resident / first-touch only: 'own')."""
    parts = [(requests.get(f"n_{prim}", 0) > 0).map({True: prim, False: ""}) for prim in ("route", "fetch", "local")]
    label = parts[0].str.cat(parts[1:], sep="+").str.strip("+").str.replace(r"\++", "+", regex=True)
    return label.replace("", "own chunks only")


def ttft_parts(requests: pd.DataFrame) -> list[str]:
    """The per-request TTFT components a run wrote (`ttft_<part>_s` columns other than the floor)."""
    return [col for col in requests.columns if re.fullmatch(r"ttft_[a-z_]+_s", col) and col != "ttft_floor_s"]


def ttft_breakdown(requests: pd.DataFrame | None) -> Any:
    """Mean TTFT per primitive class, stacked by component: the run's own TTFT parts where it wrote them,
    else the contention-free floor and what queueing and contention added."""
    if requests is None or not (ttft_parts(requests) or "ttft_floor_s" in requests):
        return None
    done = requests[requests["status"] == "completed"].copy()
    if done.empty:
        return None
    done["class"] = request_class(done)
    parts = ttft_parts(done)
    if parts:
        comps = {col.removeprefix("ttft_").removesuffix("_s").replace("_", " "): done[col] * 1e3 for col in parts}
    else:
        floor = done["ttft_floor_s"].clip(lower=0) * 1e3
        comps = {"contention-free floor": floor, "queueing and contention": (done["ttft_s"] * 1e3 - floor).clip(lower=0)}
    frame = pd.DataFrame(comps).assign(cls=done["class"].to_numpy())
    grouped = frame.groupby("cls", sort=True)
    means, counts = grouped.mean(), grouped.size()
    go = _go()
    labels = [f"{col} ({count} req)" for col, count in zip(means.index, counts)]
    fig = go.Figure([go.Bar(x=labels, y=means[name], name=name) for name in comps])
    fig.update_layout(barmode="stack", yaxis_title="mean TTFT (ms)", xaxis_title="primitives of the request's chunks")
    return _layout(fig, "TTFT breakdown per primitive")


def _named_links(frame: pd.DataFrame) -> pd.DataFrame:
    """Links sorted by tier (network tiers first) then busiest first, at most MAX_LINKS_PER_TIER a tier."""
    named = frame.copy()
    tiers = [tier for tier in NET_TIERS if (named["tier"] == tier).any()]
    named = named[named["tier"].isin(tiers)]
    named["name"] = named["src"].astype(str) + " -> " + named["dst"].astype(str)
    named["_t"] = named["tier"].map({tier: rank for rank, tier in enumerate(tiers)})
    named = named.sort_values(["_t", "mean_utilisation"], ascending=[True, False], kind="stable")
    return named.groupby("tier", sort=False).head(MAX_LINKS_PER_TIER)


def link_heatmap(links: dict[str, pd.DataFrame | None]) -> Any:
    """Utilisation of named links grouped by tier (columns); rows: runs x available statistics."""
    frames = {run: table for run, table in links.items() if table is not None and len(table)}
    if not frames:
        return None
    sel = _named_links(next(iter(frames.values())))
    if sel.empty:
        return None
    rows, mat = [], []
    for label, run_links in frames.items():
        run_links = run_links.set_index("link").reindex(sel["link"])
        for col, stat in LINK_METRICS:
            if col in run_links:
                rows.append(stat if list(frames) == ["run"] else f"{label} · {stat}")
                mat.append(run_links[col].to_numpy(float))
    go = _go()
    tiers = sel["tier"].tolist()
    link_names = [f"{tier} | {name}" for tier, name in zip(tiers, sel["name"])]
    values = np.array(mat)
    top = float(np.nanmax(values)) if np.isfinite(values).any() else 1.0
    fig = go.Figure(go.Heatmap(z=values, x=link_names, y=rows, colorscale="Viridis", zmin=0,
                               zmax=min(1.0, max(top, 1e-6)),
                               colorbar=dict(title=f"utilisation<br>(scale 0-{min(1.0, max(top, 1e-6)):.2g})"),
                               hovertemplate="%{x}<br>%{y}: %{z:.3f}<extra></extra>"))
    for boundary in np.flatnonzero(np.array(tiers[1:]) != np.array(tiers[:-1])):
        fig.add_vline(x=boundary + 0.5, line=dict(color="white", width=2))
    fig.update_xaxes(tickangle=60, tickfont=dict(size=8), title_text="link (tier | src -> dst; busiest "
                     f"{MAX_LINKS_PER_TIER} per tier)")
    fig.update_yaxes(title_text="utilisation statistic (per run)")
    return _layout(fig, "Link utilisation by tier", height=380 + 18 * len(rows))


def spine_matrix(spines: pd.DataFrame | None, bins: int = 120) -> tuple[np.ndarray, list[str], np.ndarray] | None:
    """Max concurrent flows per spine per time bin (rows: spines; with the bin edges), from the step series
    (t_s, spine, active_flows); None when no spine ever carried a flow."""
    if spines is None or spines.empty or not (spines["active_flows"] > 0).any():
        return None
    names = sorted(spines["spine"].unique(), key=lambda spine: (len(str(spine)), str(spine)))
    t_end = float(spines["t_s"].max()) or 1.0
    edges = np.linspace(0.0, t_end, bins + 1)
    mat = np.zeros((len(names), bins))
    for row, name in enumerate(names):
        group = spines[spines["spine"] == name].sort_values("t_s", kind="stable")
        times, flows = group["t_s"].to_numpy(float), group["active_flows"].to_numpy(float)
        start = np.searchsorted(times, edges[:-1], side="right") - 1
        base = np.where(start >= 0, flows[np.maximum(start, 0)], 0.0)
        idx = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, bins - 1)
        inbin = np.zeros(bins)
        np.maximum.at(inbin, idx, flows)
        mat[row] = np.maximum(base, inbin)
    return mat, [str(spine_name) for spine_name in names], edges


def spine_heatmap(spines: dict[str, pd.DataFrame | None]) -> Any:
    """Per-spine concurrent flows over time, one panel per run (the ARK paper's Fig 3)."""
    mats = {run: matrix for run, frame in spines.items() if (matrix := spine_matrix(frame)) is not None}
    if not mats:
        return None
    go = _go()
    vmax = max(matrix[0].max() for matrix in mats.values()) or 1
    fig = _subplots(rows=len(mats), cols=1, subplot_titles=list(mats), vertical_spacing=0.12 / max(len(mats), 1))
    for index, (mat, names, edges) in enumerate(mats.values(), start=1):
        fig.add_trace(go.Heatmap(z=mat, x=(edges[:-1] + edges[1:]) / 2, y=names, zmin=0, zmax=vmax, colorscale="Magma",
                                 colorbar=dict(title="flows"), showscale=index == 1,
                                 hovertemplate="t %{x:.3f} s<br>%{y}: %{z:.0f} flows<extra></extra>"), index, 1)
    fig.update_xaxes(title_text="simulated time (s)", row=len(mats), col=1)
    fig.update_yaxes(title_text="spine")
    return _layout(fig, "Concurrent flows per spine (ARK Fig 3)", height=220 + 160 * len(mats))


def hbm_composition(iterations: pd.DataFrame | None) -> Any:
    """HBM of the instance with the highest peak use, stacked by what holds it, over time."""
    if iterations is None or iterations.empty or "instance" not in iterations:
        return None
    parts = [(column, name) for column, name in HBM_PARTS if column in iterations]
    if not parts:
        return None
    used = iterations[[column for column, _ in parts if column != "free_bytes"]].sum(axis=1)
    inst = int(iterations.loc[used.idxmax(), "instance"])
    group = iterations[iterations["instance"] == inst].sort_values("t_start_s", kind="stable")
    go = _go()
    fig = go.Figure([go.Scatter(x=group["t_start_s"], y=group[column] / 1e9, name=name, stackgroup="hbm", mode="lines",
                                line=dict(shape="hv")) for column, name in parts])
    fig.update_layout(xaxis_title="simulated time (s)", yaxis_title="GB")
    return _layout(fig, f"HBM composition of instance {inst} (highest peak use)")


def bytes_per_primitive(agg: pd.DataFrame, label_col: str, *, over_seeds: bool) -> Any:
    """Stacked bytes per primitive (route messages, fetch copies, PD transfers) per configuration."""
    cols = [("bytes_route", "route"), ("bytes_fetch", "fetch"), ("bytes_pd_transfer", "PD transfer")]
    if agg.empty or not agg[[column for column, _ in cols if column in agg]].fillna(0).to_numpy().any():
        return None
    go = _go()
    fig = go.Figure([go.Bar(x=agg[label_col].astype(str), y=agg[column].fillna(0) / 1e9, name=name)
                     for column, name in cols
                     if column in agg])
    fig.update_layout(barmode="stack", yaxis_title="GB" + (" (mean over seeds)" if over_seeds else ""),
                      xaxis_title="configuration" if label_col != "primitive" else "primitive")
    return _layout(fig, "Bytes per primitive")


# ---- a study ---------------------------------------------------------------------------------------------
def _sorted(group: pd.DataFrame, axis: str) -> pd.DataFrame:
    num = pd.to_numeric(group[axis], errors="coerce")
    return group.assign(_x=num if num.notna().all() else group[axis].astype(str)).sort_values("_x", kind="stable")


def _band(fig, go, group, axis, col, name, colour, dash, row=None, column=None):
    """A curve with its 95% confidence band (shaded) when the band exists."""
    mid = group[col].to_numpy(float)
    half = group.get(f"{col}_ci", pd.Series(np.nan, index=group.index)).to_numpy(float)
    options = dict(row=row, col=column) if row else {}
    if np.isfinite(half).any():
        half = np.nan_to_num(half)
        x_band = list(group[axis]) + list(group[axis])[::-1]
        fig.add_trace(go.Scatter(x=x_band, y=list(mid + half) + list(mid - half)[::-1], fill="toself", fillcolor=colour,
                                 opacity=0.15, line=dict(width=0), hoverinfo="skip", showlegend=False,
                                 legendgroup=name), **options)
    order = PALETTE.index(colour) if colour in PALETTE else 0
    fig.add_trace(go.Scatter(x=group[axis], y=mid, mode="lines+markers", name=name, legendgroup=name,
                             line=dict(color=colour, dash=dash, width=max(1.0, 3.0 - 0.5 * order)),
                             marker=series_marker(order)), **options)


PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
SYMBOLS = ("circle", "square-open", "diamond-open", "x", "triangle-up-open", "cross", "star-open", "hexagon-open")


def series_marker(order: int) -> dict:
    """Each series its own marker symbol and a size that shrinks with its order, and later lines are thinner:
    two series with identical results (one policy equal to another) stay visible one inside the other."""
    return dict(symbol=SYMBOLS[order % len(SYMBOLS)], size=max(5, 12 - 2 * (order % 4)))


def latency_vs_load(agg: pd.DataFrame, axis: str) -> Any:
    """TTFT and TPOT p50 (dashed) and p99 (solid) against x per series, shaded 95% CI over seeds."""
    if agg.empty or axis not in agg:
        return None
    metrics = [(column, heading) for column, heading in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"))
               if agg[f"{column}_p99"].fillna(0).abs().max() > 0]
    if not metrics:
        return None
    go = _go()
    fig = _subplots(rows=1, cols=len(metrics),
                    subplot_titles=[f"{heading} p50 / p99 vs {axis}" for _, heading in metrics])
    for panel, (metric, title) in enumerate(metrics, start=1):
        for index, (series, group) in enumerate(agg.groupby("series", sort=False)):
            group = _sorted(group, axis)
            for stat, dash in (("p50", "dash"), ("p99", "solid")):
                name = f"{series} · {title} {stat}" if series else f"{title} {stat}"
                _band(fig, go, group, axis, f"{metric}_{stat}", name, PALETTE[index % len(PALETTE)], dash, 1, panel)
        fig.update_xaxes(title_text=axis, row=1, col=panel)
        fig.update_yaxes(title_text=f"{title} (ms)", tickformat=".3~g", row=1, col=panel)
    return _layout(fig, "Latency vs load (shaded: 95% CI over seeds)")


def fct_vs_load(agg: pd.DataFrame, axis: str) -> Any:
    """Mean (dashed) and P95 (solid) prefill -> decode KV-transfer FCT against x (the ARK paper's Fig 2)."""
    if agg.empty or axis not in agg or "fct_pd_mean_ms" not in agg or agg["fct_pd_mean_ms"].isna().all():
        return None
    go = _go()
    fig = go.Figure()
    for index, (series, group) in enumerate(agg.groupby("series", sort=False)):
        group = _sorted(group, axis)
        for col, dash, stat in (("fct_pd_mean_ms", "dash", "mean"), ("fct_pd_p95_ms", "solid", "P95")):
            name = f"{series} · FCT {stat}" if series else f"FCT {stat}"
            fig.add_trace(go.Scatter(x=group[axis], y=group[col], mode="lines+markers", name=name,
                                     line=dict(color=PALETTE[index % len(PALETTE)], dash=dash)))
    fig.update_layout(xaxis_title=axis, yaxis_title="KV-transfer FCT (ms)")
    return _layout(fig, f"KV-transfer FCT vs {axis} (ARK Fig 2)")


def frontier(agg: pd.DataFrame, axis: str, slo: list[str], searches: list[dict[str, Any]]) -> Any:
    """The SLO frontier at the study's own SLO: each condition's metric against x with its threshold, the points
    that meet every condition (all seeds) filled; for a search study, the answer per group."""
    go = _go()
    if searches:
        labels = [", ".join(f"{key}={value}" for key, value in search["labels"].items()) or "base"
                  for search in searches]
        vals = [None if search["answer"] is None else float(search["answer"]) for search in searches]
        first = searches[0]
        fig = go.Figure(go.Bar(x=labels, y=[value or 0 for value in vals],
                               text=[search["status"] if value is None else f"{value:g}"
                                                                         for search, value in zip(searches, vals)],
                               textposition="outside", name="answer"))
        fig.update_layout(yaxis_title=f"{first['goal']} {first['field']}", xaxis_title="search group")
        return _layout(fig, f"{first['goal']} {first['field']} meeting {' and '.join(first['slo'])}")
    if agg.empty or not slo or axis not in agg:
        return None
    from simroute.study.search import parse_slo
    conds = [parse_slo(search) for search in slo]
    fig = _subplots(rows=1, cols=len(conds), subplot_titles=list(slo))
    for panel, (condition, text) in enumerate(zip(conds, slo), start=1):
        col = condition.column
        if col not in agg:
            continue
        for index, (series, group) in enumerate(agg.groupby("series", sort=False)):
            group = _sorted(group, axis)
            colour = PALETTE[index % len(PALETTE)]
            met = group["meets"].astype(bool).to_numpy()
            fig.add_trace(go.Scatter(x=group[axis], y=group[col], mode="lines+markers",
                                     name=f"{series or 'all'} · {col}",
                                     line=dict(color=colour), showlegend=panel == 1, legendgroup=str(series),
                                     marker=dict(size=10, symbol=np.where(met, "circle", "circle-open")),
                                     hovertemplate="%{x}: %{y:.4g}<extra></extra>"), 1, panel)
        fig.add_hline(y=condition.value, line=dict(dash="dot", color="black"), annotation_text=f"SLO {text}",
                      row=1, col=panel)
        fig.update_xaxes(title_text=axis, row=1, col=panel)
        fig.update_yaxes(title_text=col, row=1, col=panel)
    return _layout(fig, "SLO frontier at the study's SLO (filled: every seed meets every condition)")


def plan_frontier(answer: dict[str, Any]) -> Any:
    """A plan's every served probe as output tokens/s per GPU against TPOT p99, one colour per deployment (filled:
    every seed meets the SLO), the frontier joined, the busiest resource and the host count on hover."""
    go = _go()
    deployments = answer.get("deployments") or {}
    if not any(probe.get("served") and probe.get("tpot_ms_p99") is not None
               for entry in deployments.values() for probe in entry.get("probes", [])):
        return None
    fig = go.Figure()
    for index, (name, entry) in enumerate(deployments.items()):
        probes = [probe for probe in entry.get("probes", [])
                  if probe.get("served") and probe.get("tpot_ms_p99") is not None]
        met = [probe["met"] == probe["seeds"] for probe in probes]
        fig.add_trace(go.Scatter(
            x=[probe["tpot_ms_p99"] for probe in probes], y=[probe["output_tokens_per_s_per_gpu"] for probe in probes],
            mode="markers", name=name, marker=dict(size=10, color=PALETTE[index % len(PALETTE)],
                                                   symbol=["circle" if every else "circle-open" for every in met]),
            text=[f"{probe['hosts']} hosts ({probe.get('gpus')} GPUs), busiest {probe.get('busiest')}"
                  for probe in probes],
            hovertemplate="%{text}<br>TPOT p99 %{x:.4g} ms, %{y:.4g} tokens/s per GPU<extra></extra>"))
    line = answer.get("frontier") or []
    fig.add_trace(go.Scatter(x=[point["tpot_ms_p99"] for point in line],
                             y=[point["output_tokens_per_s_per_gpu"] for point in line], mode="lines",
                             name="frontier", line=dict(color="black", dash="dot")))
    fig.update_layout(xaxis_title="TPOT p99 (ms)", yaxis_title="output tokens/s per GPU")
    return _layout(fig, f"Throughput per GPU vs TPOT, every probe (filled: meets {' and '.join(answer['slo'])})")


# ---- the page --------------------------------------------------------------------------------------------
CSS = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px}table{border-collapse:collapse;"
       "font-size:13px;margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
       "th{background:#f3f3f3}td:first-child{text-align:left}.note{color:#555;font-size:13px}")


def page(title: str, tables: list[tuple[str, str]], figures: list[tuple[str, Any]], notes: list[str]) -> str:
    """One document, no external references: CSS and plotly.js inline, each figure a div drawn on load."""
    from plotly.offline import get_plotlyjs
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{CSS}</style><script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
             f"<h1>{html.escape(title)}</h1>"]
    parts += [f"<p class='note'>{html.escape(note)}</p>" for note in notes]
    parts += [f"<h2>{html.escape(head)}</h2>{body}" for head, body in tables]
    for index, (cap, fig) in enumerate(figures):
        parts.append(f"<h2>{html.escape(cap)}</h2>" + fig.to_html(full_html=False, include_plotlyjs=False,
                                                                   div_id=f"fig{index}", config={"responsive": True}))
    parts.append("</body></html>\n")
    return "".join(parts)
