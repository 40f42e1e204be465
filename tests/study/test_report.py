"""Reports: one self-contained interactive page (checked in a headless browser where Chromium is installed), PNG
exports, Markdown, single runs, search studies drawn at the answer, and the fixed labelling bugs."""

from __future__ import annotations

import os
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simroute.study import figures, load_study, run_study, write_report
from simroute.defaults import PAPER_DEPLOYMENT

CHROMIUM = Path("/usr/bin/chromium")


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("src", "href") and v is not None:
                self.refs.append((tag, k, v))


def static_plots(page: Path) -> int:
    """Plot divs in the page; fails on any external reference (the page must work offline)."""
    text = page.read_text()
    parser = _Refs()
    parser.feed(text)
    assert not [r for r in parser.refs if not r[2].startswith(("data:", "#"))], parser.refs[:3]
    assert "Plotly.newPlot" in text
    return len(re.findall(r"class=\"plotly-graph-div\"", text))


def browser_plots(page: Path, screenshot: Path | None = None) -> int:
    """Load the page in headless Chromium: no console message, every rendered plot has a title and labelled x
    and y axes; returns the number of plots it rendered, and saves a screenshot when asked. Without Chromium the
    check skips, except under CI=true where it fails (.ci/run installs Chromium from the Debian packages)."""
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} not installed under CI=true: .ci/run installs it (apt-get install chromium)")
        pytest.skip(f"{CHROMIUM} not installed (Debian: apt-get install chromium): browser check skipped")
    flags = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
             "--virtual-time-budget=10000"]
    if screenshot is not None:          # the same launch renders the page, dumps its DOM and saves the screenshot
        flags += ["--window-size=1280,2400", f"--screenshot={screenshot.resolve()}"]
    res = subprocess.run(flags + ["--dump-dom", page.resolve().as_uri()], capture_output=True, text=True,
                         timeout=1800)                   # a hang guard (a loaded box slows Chromium tenfold)
    console = [line for line in res.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console[:5]
    rendered = res.stdout.split('class="plotly-graph-div js-plotly-plot"')[1:]
    for panel in rendered:
        title = re.findall(r'class="gtitle"[^>]*>(.*?)</text>', panel)
        xs = [t for t in re.findall(r'class="x\d*title"[^>]*>(.*?)</text>', panel) if t.strip()]
        ys = [t for t in re.findall(r'class="y\d*title"[^>]*>(.*?)</text>', panel) if t.strip()]
        assert title and xs and ys, f"panel {title[:1]} lacks a labelled axis: x {xs[:1]}, y {ys[:1]}"
    if screenshot is not None:
        assert res.returncode == 0, res.stderr[-2000:]
        assert screenshot.stat().st_size > 20_000       # a blank page is a few KB
    return len(rendered)


def test_browser_check_catches_console_errors(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    with pytest.raises(AssertionError, match="undefinedFunction"):
        browser_plots(bad)


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    from studyutil import GRID
    d = tmp_path_factory.mktemp("study")
    (d / "s.yaml").write_text(GRID.replace("seeds: 2", "seeds: 1"))
    run_study(load_study(d / "s.yaml"), d / "out", jobs=1, progress=False)
    return d / "out"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from simroute.calib import default_profile_path
    from simroute.network import default_topology_path
    from simroute.sim import RunConfig, simulate
    from simroute.sim.config import default_trace_path
    d = tmp_path_factory.mktemp("run") / "run"   # always-fetch: its bulk copies saturate a NIC-leaf link,
    simulate(RunConfig(**PAPER_DEPLOYMENT,
                       topology=str(default_topology_path()), trace=str(default_trace_path()),   # a bottleneck
                       calib=str(default_profile_path()), policy="always-fetch"), d)             # to name
    return d


def test_study_page_is_self_contained_and_renders(study_dir):
    page = write_report(study_dir)
    assert page.name == "report.html"
    n = static_plots(page)
    assert n == 5           # latency, frontier, bytes, link heatmap, spine heatmap
    assert browser_plots(page, screenshot=study_dir / "study.png") == n
    for png in ("latency.png", "slo_frontier.png", "bytes.png"):
        assert (page.parent / png).stat().st_size > 1000        # PNG export kept


def test_run_page_renders(run_dir):
    page = write_report(run_dir)
    n = static_plots(page)
    assert n >= 4           # CDFs, TTFT breakdown, bytes, links (+ spines when a spine carried a flow)
    assert browser_plots(page, screenshot=run_dir / "run.png") == n


def test_plan_page_renders(cli, tmp_path):
    """A plan's directory: its study page opens with the plan table and every panel renders with labelled axes."""
    out = tmp_path / "plan"
    code, _, err = cli("plan", "--workload", "agents", "-p", "documents=1", "-p", "doc_tokens=8192", "-p",
                       "subagents=8", "-p", "requests_per_agent=1", "--qps", "4", "--hosts-max", "4", "--seeds", "1",
                       "--compare", "always-fetch", "-j", "1", "-o", out)
    assert code == 0, err
    page = out / "report" / "report.html"
    assert "Capacity plan (plan.md)" in page.read_text()
    n = static_plots(page)
    assert n >= 2 and browser_plots(page, screenshot=tmp_path / "plan.png") == n


def test_markdown_tables(study_dir, run_dir):
    md = write_report(study_dir, fmt="md")
    assert "| config |" in md and "policy=always-fetch @ trace.params.qps=40" in md
    assert "SLO frontier" in md and "(one seed each)" in md and "mean over seeds" not in md
    assert "| metric |" in write_report(run_dir, fmt="md")


def test_cdf_percentiles_are_labelled_and_axis_plain(run_dir):
    req = pd.read_parquet(run_dir / "requests.parquet")
    fig = figures.latency_cdf(req)
    marks = [t for t in fig.data if t.mode == "markers+text"]
    assert {t.name for t in marks} == {"TTFT p50/p90/p99", "TPOT p50/p90/p99"}
    done = req[req.status == "completed"]
    assert marks[0].text[2] == f"p99: {np.percentile(done.ttft_s * 1e3, 99):.3g} ms"
    assert fig.layout.xaxis.exponentformat == "none"


def test_single_run_bytes_do_not_claim_seeds():
    agg = pd.DataFrame([{"config": "run", "bytes_route": 1e9, "bytes_fetch": 2e9, "bytes_pd_transfer": 0.0}])
    assert figures.bytes_per_primitive(agg, "config", over_seeds=False).layout.yaxis.title.text == "GB"
    assert "seeds" in figures.bytes_per_primitive(agg, "config", over_seeds=True).layout.yaxis.title.text


def test_study_legend_tells_p50_from_p99(study_dir):
    from simroute.study.report import aggregate
    from simroute.study.store import Store
    agg = aggregate(Store(study_dir).read(), "trace.params.qps", ["policy"], ["p99 ttft_ms <= 60"])
    names = {t.name for t in figures.latency_vs_load(agg, "trace.params.qps").data if t.showlegend is not False}
    assert "policy=paper · TTFT p50" in names and "policy=paper · TTFT p99" in names


def test_link_heatmap_names_links_grouped_by_tier(run_dir):
    links = pd.read_parquet(run_dir / "net_links.parquet")
    fig = figures.link_heatmap({"run": links})
    x = list(fig.data[0].x)
    tiers = [label.split(" | ")[0] for label in x]
    assert all(" -> " in label for label in x)
    assert tiers == sorted(tiers, key=[t for t in figures.NET_TIERS if t in tiers].index)   # contiguous groups


def test_frontier_uses_the_study_slo_not_the_runs():
    agg = pd.DataFrame({"series": ["a"] * 3, "x": [1, 2, 3], "ttft_ms_p99": [10.0, 30.0, 90.0],
                        "slo_attainment": [1.0, 1.0, 1.0], "meets": [True, True, False]})
    fig = figures.frontier(agg, "x", ["p99 ttft_ms <= 50"], [])
    curve = fig.data[0]
    assert list(curve.y) == [10.0, 30.0, 90.0] and list(curve.marker.symbol) == ["circle", "circle", "circle-open"]
    assert any(s.y0 == 50.0 for s in fig.layout.shapes)


def test_search_figures_are_drawn_at_the_answer():
    from simroute.study.report import _answer_runs
    df = pd.DataFrame({"status": ["ok"] * 4, "seed": [0] * 4, "key": ["k1", "k2", "k3", "k4"],
                       "axis:replicas": [1, 2, 4, 8], "axis:policy": ["paper"] * 4})
    searches = [{"labels": {"policy": "paper"}, "field": "replicas", "answer": 2, "goal": "min", "slo": []}]
    assert _answer_runs(df, searches) == {"policy=paper @ replicas=2": "k2"}


def test_tpot_left_out_when_never_modelled():
    from simroute.study.report import _tpot_modelled
    assert not _tpot_modelled(pd.DataFrame({"tpot_ms_p99": [0.0, 0.0]}))
    assert _tpot_modelled(pd.DataFrame({"tpot_ms_p99": [0.0, 1.5]}))


def test_cli_sweep_and_report(cli, tmp_path):
    from studyutil import GRID
    (tmp_path / "s.yaml").write_text(GRID.replace("seeds: 2", "seeds: 1").replace("[10, 40]", "[10]"))
    code, out, _ = cli("sweep", tmp_path / "s.yaml", "-o", tmp_path / "o", "-j", "1", "--no-progress")
    assert code == 0 and "2 run (0 failed)" in out
    code, out, _ = cli("sweep", tmp_path / "s.yaml", "-o", tmp_path / "o", "-j", "1", "--no-progress")
    assert code == 0 and "0 run" in out and "2 already stored" in out
    code, out, _ = cli("report", tmp_path / "o", "--format", "md")
    assert code == 0 and "| config |" in out
    code, out, _ = cli("report", tmp_path / "o", "--no-png")
    assert code == 0 and (tmp_path / "o" / "report" / "report.html").exists()
    assert not list((tmp_path / "o" / "report").glob("*.png"))
    (tmp_path / "bad.yaml").write_text("base: {policy: nope}\n")
    code, _, err = cli("sweep", tmp_path / "bad.yaml", "-o", tmp_path / "b")
    assert code == 2 and "bad.yaml" in err and "policy" in err


@pytest.mark.parametrize("name", ["fabrics-primitives", "ark-ecmp-vs-ark", "agent-replicas", "corpus-vs-instances"])
def test_shipped_study_quick_variant_runs_and_reports(name, tmp_path):
    f = Path(__file__).resolve().parents[2] / "studies" / f"{name}.yaml"
    run = run_study(load_study(f, quick=True), tmp_path / name, jobs=2, progress=False)
    assert run.failed == 0 and run.executed > 0
    assert static_plots(write_report(tmp_path / name, png=False)) >= 3


def test_ttft_breakdown_stacks_the_runs_own_parts():
    req = pd.DataFrame({"status": ["completed"] * 3, "ttft_s": [0.003, 0.004, 0.010], "n_route": [1, 1, 0],
                        "n_fetch": [0, 0, 2], "n_local": [0, 0, 0], "ttft_queueing_s": [0.001, 0.002, 0.004],
                        "ttft_transfer_s": [0.002, 0.002, 0.006], "ttft_floor_s": [0.002, 0.002, 0.005]})
    fig = figures.ttft_breakdown(req)
    assert [t.name for t in fig.data] == ["queueing", "transfer"]
    assert list(fig.data[0].x) == ["fetch (1 req)", "route (2 req)"]
    assert list(fig.data[0].y) == pytest.approx([4.0, 1.5]) and list(fig.data[1].y) == pytest.approx([6.0, 2.0])


def test_run_report_names_the_bottleneck(run_dir):
    md = write_report(run_dir, fmt="md")
    import json
    b = json.loads((run_dir / "summary.json").read_text())["network"]["bottlenecks"]
    named = b["most_saturated_tier"] or "none (no tier's p99 utilisation reached 50%)"
    assert f"| {named} |" in md and "## Hottest links" in md
    hot = b["hottest_links"][0]
    assert f"{hot['src']} -> {hot['dst']}" in md and "ms windows over" in md
