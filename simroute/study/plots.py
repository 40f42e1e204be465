"""The report's figures, each a function of DataFrames read from output files, saved as PNG (Agg backend).

Every function returns the PNG path, or None when its data is absent (e.g. no spine ever carried a flow),
so a report never embeds an empty picture.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simroute.plotting import pyplot, save_png



def _xs(values: pd.Series) -> tuple[np.ndarray, list[str] | None]:
    """Numeric x as is; categories as positions with tick labels."""
    try:
        return values.astype(float).to_numpy(), None
    except (TypeError, ValueError):
        cats = list(dict.fromkeys(values.astype(str)))
        return np.array([cats.index(value) for value in values.astype(str)], dtype=float), cats


def latency_vs_load(agg: pd.DataFrame, axis: str, out: Path) -> Path | None:
    """TTFT and TPOT p50 (dashed) and p99 (solid) against x, one colour per series, 95% CI over seeds."""
    if agg.empty:
        return None
    plt = pyplot()
    # A scenario with no cross-instance attention during decode (and no base step time) has TPOT 0: no panel.
    metrics = [("ttft_ms", "TTFT")] + ([("tpot_ms", "TPOT")] if agg["tpot_ms_p99"].fillna(0).abs().max() > 0
                                       else [])
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4), squeeze=False)
    axes = axes[0]
    for ax, (metric, title) in zip(axes, metrics):
        for index, (series, group) in enumerate(agg.groupby("series", sort=False)):
            group = group.sort_values(axis, key=lambda values: pd.to_numeric(values, errors="coerce")
                                      if values.dtype == object else values)
            positions, cats = _xs(group[axis])
            colour = f"C{index % 10}"
            for stat, style in (("p50", "--"), ("p99", "-")):
                col = f"{metric}_{stat}"
                ax.errorbar(positions, group[col], yerr=group[f"{col}_ci"].fillna(0), fmt=style + "o", color=colour,
                            ms=3,
                            capsize=2, label=f"{series} {stat}" if series else stat)
            if cats:
                ax.set_xticks(range(len(cats)), cats, rotation=30, ha="right")
        ax.set_xlabel(axis)
        ax.set_ylabel(f"{title} (ms)")
        ax.set_title(f"{title} p50 / p99 vs {axis}")
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7, loc="best")
    return save_png(fig, out)


def fct_vs_load(agg: pd.DataFrame, axis: str, out: Path) -> Path | None:
    """Mean (dashed) and P95 (solid) prefill -> decode transfer FCT against x, one colour per series."""
    if agg.empty or "fct_pd_mean_ms" not in agg or agg["fct_pd_mean_ms"].isna().all():
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for index, (series, group) in enumerate(agg.groupby("series", sort=False)):
        positions, cats = _xs(group[axis])
        order = np.argsort(positions)
        for col, style, stat in (("fct_pd_mean_ms", "--o", "mean"), ("fct_pd_p95_ms", "-o", "P95")):
            if col in group:
                ax.plot(positions[order], group[col].to_numpy()[order], style, color=f"C{index % 10}", ms=3,
                        label=f"{series} {stat}" if series else stat)
        if cats:
            ax.set_xticks(range(len(cats)), cats, rotation=30, ha="right")
    ax.set(xlabel=axis, ylabel="KV-transfer FCT (ms)", title=f"KV-transfer FCT vs {axis}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save_png(fig, out)


def frontier(agg: pd.DataFrame, axis: str, slo: list[str], searches: list[dict[str, Any]], out: Path) -> Path | None:
    """The SLO frontier: a search's answer per group, or each SLO condition's metric against x with its
    threshold (the study's SLO, not each run's own attainment)."""
    plt = pyplot()
    if searches:
        labels = [", ".join(f"{key}={value}" for key, value in search["labels"].items()) or "base"
                  for search in searches]
        vals = [np.nan if search["answer"] is None else float(search["answer"]) for search in searches]
        fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(vals) + 2), 4))
        bars = ax.bar(range(len(vals)), np.nan_to_num(vals), color="C0")
        for bar, search in zip(bars, searches):
            ax.annotate(search["status"] if search["answer"] is None else f"{search['answer']}",
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(vals)), labels, rotation=30, ha="right", fontsize=8)
        first = searches[0]
        ax.set_ylabel(f"{first['goal']} {first['field']}")
        ax.set_title(f"{first['goal']} {first['field']} meeting {' and '.join(first['slo'])}")
        return save_png(fig, out)
    from simroute.study.search import parse_slo
    conds = [condition for condition in (parse_slo(slo_text) for slo_text in slo) if condition.column in agg]
    if agg.empty or not conds or axis not in agg:
        return None
    fig, axes = plt.subplots(1, len(conds), figsize=(6.5 * len(conds), 4), squeeze=False)
    for ax, condition, text in zip(axes[0], conds, slo):
        for index, (series, group) in enumerate(agg.groupby("series", sort=False)):
            positions, cats = _xs(group[axis])
            order = np.argsort(positions)
            vals_y, met = group[condition.column].to_numpy(float)[order], group["meets"].astype(bool).to_numpy()[order]
            ax.plot(positions[order], vals_y, "-", color=f"C{index % 10}",
                    label=f"{series or 'all'} ({condition.column})")
            ax.scatter(positions[order][met], vals_y[met], color=f"C{index % 10}", zorder=3)
            ax.scatter(positions[order][~met], vals_y[~met], facecolors="none", edgecolors=f"C{index % 10}", zorder=3)
            if cats:
                ax.set_xticks(range(len(cats)), cats, rotation=30, ha="right")
        ax.axhline(condition.value, color="black", ls=":", lw=1, label=f"SLO {text}")
        ax.set_xlabel(axis)
        ax.set_ylabel(condition.column)
        ax.set_title("SLO frontier at the study's SLO (filled: every seed meets it)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return save_png(fig, out)


def plan_frontier(answer: dict[str, Any], out: Path) -> Path | None:
    """A plan's served probes: output tokens/s per GPU against TPOT p99 per deployment (filled: meets the SLO),
    the frontier dotted, each point labelled with its host count."""
    deployments = answer.get("deployments") or {}
    served = {name: [probe for probe in entry.get("probes", [])
                     if probe.get("served") and probe.get("tpot_ms_p99") is not None]
              for name, entry in deployments.items()}
    if not any(served.values()):
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for index, (name, probes) in enumerate(served.items()):
        colour = f"C{index % 10}"
        for probe in probes:
            met = probe["met"] == probe["seeds"]
            ax.scatter(probe["tpot_ms_p99"], probe["output_tokens_per_s_per_gpu"], color=colour if met else "none",
                       edgecolors=colour, zorder=3, label=name if probe is probes[0] else None)
            ax.annotate(str(probe["hosts"]), (probe["tpot_ms_p99"], probe["output_tokens_per_s_per_gpu"]),
                        fontsize=7, xytext=(3, 3), textcoords="offset points")
    line = answer.get("frontier") or []
    ax.plot([point["tpot_ms_p99"] for point in line], [point["output_tokens_per_s_per_gpu"] for point in line],
            ":", color="black", label="frontier")
    ax.set_xlabel("TPOT p99 (ms)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title("Throughput per GPU vs TPOT (labels: hosts; filled: meets the SLO)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save_png(fig, out)


def bytes_per_primitive(agg: pd.DataFrame, label_col: str, out: Path, *, over_seeds: bool = True) -> Path | None:
    """Stacked bytes moved per primitive (route messages, fetch copies, PD transfers) per configuration."""
    cols = [("bytes_route", "route"), ("bytes_fetch", "fetch"), ("bytes_pd_transfer", "pd transfer")]
    if agg.empty or not agg[[column for column, _ in cols]].fillna(0).to_numpy().any():
        return None
    plt = pyplot()
    agg = agg.head(60)
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(agg) + 2), 4))
    bottom = np.zeros(len(agg))
    for index, (column, name) in enumerate(cols):
        gigabytes = agg[column].fillna(0).to_numpy() / 1e9
        ax.bar(range(len(agg)), gigabytes, bottom=bottom, label=name, color=f"C{index}")
        bottom += gigabytes
    ax.set_xticks(range(len(agg)), agg[label_col], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("GB (mean over seeds)" if over_seeds else "GB")
    ax.set_title("bytes per primitive")
    ax.legend(fontsize=8)
    return save_png(fig, out)


def link_heatmap(links: dict[str, pd.DataFrame], out: Path) -> Path | None:
    """Mean utilisation of the busiest network links, named and grouped by tier (rows: runs)."""
    from simroute.study.figures import _named_links
    frames = {run: table for run, table in links.items() if table is not None and len(table)}
    if not frames:
        return None
    sel = _named_links(next(iter(frames.values()))).head(96)
    ids = sel["link"].to_numpy()
    mat = np.array([run_links.set_index("link").reindex(ids)["mean_utilisation"].to_numpy(dtype=float)
                    for run_links in frames.values()])
    if not len(ids) or not np.isfinite(mat).any():
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(min(18, 4 + 0.16 * len(ids)), 2.6 + 0.4 * len(frames)))
    image = ax.imshow(mat, aspect="auto", cmap="viridis", interpolation="nearest", vmin=0, vmax=1)
    ax.set_yticks(range(len(frames)), list(frames), fontsize=7)
    tiers = sel["tier"].to_numpy()
    for boundary in np.flatnonzero(tiers[1:] != tiers[:-1]) + 0.5:
        ax.axvline(boundary, color="w", lw=1.5)
    ax.set_xticks(range(len(ids)), [f"{tier}: {name}" for tier, name in zip(tiers, sel["name"])], rotation=90,
                  fontsize=5)
    ax.set_title("mean link utilisation (busiest links per tier, src -> dst)")
    fig.colorbar(image, ax=ax, fraction=0.03)
    return save_png(fig, out)


def spine_heatmap(spines: dict[str, pd.DataFrame], out: Path) -> Path | None:
    """Per-spine concurrent flows over time, one panel per run (the ARK paper's Fig 3)."""
    from simroute.study.figures import spine_matrix
    mats = {run: matrix for run, frame in spines.items() if (matrix := spine_matrix(frame)) is not None}
    if not mats:
        return None
    plt = pyplot()
    vmax = max(matrix[0].max() for matrix in mats.values()) or 1
    fig, axes = plt.subplots(len(mats), 1, figsize=(9, 0.6 + 1.6 * len(mats)), squeeze=False,
                             constrained_layout=True)
    for ax, (label, (mat, names, edges)) in zip(axes[:, 0], mats.items()):
        image = ax.imshow(mat, aspect="auto", cmap="magma", interpolation="nearest", vmin=0, vmax=vmax,
                       extent=(0, edges[-1], len(names) - 0.5, -0.5))
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.set_title(label, fontsize=8)
    axes[-1, 0].set_xlabel("simulated time (s)")
    fig.colorbar(image, ax=axes[:, 0].tolist(), fraction=0.02, label="concurrent flows")
    return save_png(fig, out)


def latency_cdf(requests: pd.DataFrame, out: Path) -> Path | None:
    """A single run's TTFT and TPOT distributions (CDFs over completed requests)."""
    done = requests[requests["status"] == "completed"]
    if done.empty:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, col, title in zip(axes, ("ttft_s", "tpot_s"), ("TTFT", "TPOT")):
        latency = np.sort(done[col].dropna().to_numpy() * 1e3)
        if latency.size:
            ax.plot(latency, np.arange(1, latency.size + 1) / latency.size, drawstyle="steps-post",
                    label=f"{title} CDF")
            for percentile, style in ((50, "--"), (99, ":")):
                mark = np.percentile(latency, percentile)
                ax.axvline(mark, ls=style, color="grey", label=f"p{percentile} = {mark:.3g} ms")
            ax.legend(fontsize=7, loc="lower right")
        ax.ticklabel_format(axis="x", useOffset=False, style="plain")
        ax.set_xlabel(f"{title} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
    return save_png(fig, out)
