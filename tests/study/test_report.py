"""Reports: a self-contained HTML page whose every image is a non-empty PNG; Markdown; single runs; the CLI."""

from __future__ import annotations

import base64
import io
import re
from html.parser import HTMLParser

import numpy as np
import pytest

from simroute.study import load_study, run_study, write_report


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("src", "href") and v is not None:
                self.refs.append((tag, k, v))


def _check_page(page) -> int:
    text = page.read_text()
    parser = _Refs()
    parser.feed(text)
    assert parser.refs, "no images"
    assert not re.search(r"<(script|link|iframe)\b", text)
    import matplotlib.image as mpimg
    n = 0
    for tag, attr, v in parser.refs:
        assert v.startswith("data:image/png;base64,"), f"external reference {tag} {attr}={v[:60]}"
        raw = base64.b64decode(v.split(",", 1)[1])
        assert raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) > 1000
        img = mpimg.imread(io.BytesIO(raw), format="png")
        assert img.shape[0] > 50 and img.shape[1] > 50 and float(np.std(img)) > 0.01   # not blank
        n += 1
    return n


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    from studyutil import GRID
    d = tmp_path_factory.mktemp("study")
    (d / "s.yaml").write_text(GRID.replace("seeds: 2", "seeds: 1"))
    run_study(load_study(d / "s.yaml"), d / "out", jobs=1, progress=False)
    return d / "out"


def test_study_html_is_self_contained_and_plots_nonempty(study_dir):
    page = write_report(study_dir)
    assert page.name == "report.html"
    assert _check_page(page) == 5           # latency, frontier, bytes, link heatmap, spine heatmap
    assert (page.parent / "latency.png").exists()


def test_markdown_tables(study_dir):
    md = write_report(study_dir, fmt="md")
    assert "| config |" in md and "policy=always-fetch @ trace.params.qps=40" in md
    assert "SLO frontier" in md


def test_single_run_report(tmp_path):
    from simroute.calib import default_profile_path
    from simroute.network import default_topology_path
    from simroute.sim import RunConfig, simulate
    from simroute.sim.config import default_trace_path
    simulate(RunConfig(topology=str(default_topology_path()), trace=str(default_trace_path()),
                       calib=str(default_profile_path())), tmp_path / "run")
    assert _check_page(write_report(tmp_path / "run")) >= 3
    assert "| metric |" in write_report(tmp_path / "run", fmt="md")


def test_cli_sweep_and_report(cli, tmp_path):
    from studyutil import GRID
    (tmp_path / "s.yaml").write_text(GRID.replace("seeds: 2", "seeds: 1").replace("[10, 40]", "[10]"))
    code, out, _ = cli("sweep", tmp_path / "s.yaml", "-o", tmp_path / "o", "-j", "1", "--no-progress")
    assert code == 0 and "2 run (0 failed)" in out
    code, out, _ = cli("sweep", tmp_path / "s.yaml", "-o", tmp_path / "o", "-j", "1", "--no-progress")
    assert code == 0 and "0 run" in out and "2 already stored" in out
    code, out, _ = cli("report", tmp_path / "o", "--format", "md")
    assert code == 0 and "| config |" in out
    code, out, _ = cli("report", tmp_path / "o")
    assert code == 0 and (tmp_path / "o" / "report" / "report.html").exists()
    (tmp_path / "bad.yaml").write_text("base: {policy: nope}\n")
    code, _, err = cli("sweep", tmp_path / "bad.yaml", "-o", tmp_path / "b")
    assert code == 2 and "bad.yaml" in err and "policy" in err


@pytest.mark.parametrize("name", ["fabrics-primitives", "ark-ecmp-vs-ark", "agent-replicas", "corpus-vs-instances"])
def test_shipped_study_quick_variant_runs_and_reports(name, tmp_path):
    from pathlib import Path
    f = Path(__file__).resolve().parents[2] / "studies" / f"{name}.yaml"
    run = run_study(load_study(f, quick=True), tmp_path / name, jobs=2, progress=False)
    assert run.failed == 0 and run.executed > 0
    assert _check_page(write_report(tmp_path / name)) >= 3
