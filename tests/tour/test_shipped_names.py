"""Shipped inputs are taken by name wherever a file is (one copy of each: tests/test_packaging.py)."""

from __future__ import annotations

from pathlib import Path

from simroute.shipped import DATA, resolve_input
from simroute.defaults import PAPER_DEPLOYMENT


def test_names_resolve_and_paths_win(tmp_path, monkeypatch):
    assert resolve_input("topology", "fattree-1024") == str(DATA / "topologies" / "fattree-1024.yaml")
    assert resolve_input("trace", "agents-default").endswith("agents-default.parquet")
    assert resolve_input("study", "ark-ecmp-vs-ark").endswith("studies/ark-ecmp-vs-ark.yaml")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fattree").write_text("mine")
    assert resolve_input("topology", "fattree") == "fattree"            # an existing path always wins
    assert resolve_input("topology", "nope") == "nope"                  # the loader reports it


def test_unknown_name_lists_the_shipped_ones(cli):
    code, _, err = cli("topo", "show", "fattre")
    assert code == 2 and "fattree-1024" in err and "neither a file nor a shipped topology" in err


def test_topo_show_takes_a_name_and_draws_present_tiers_only(cli, tmp_path):
    code, out, err = cli("topo", "show", "paper-testbed", "--png", tmp_path / "t.png")
    assert code == 0 and "paper-testbed" in out, err
    assert (tmp_path / "t.png").stat().st_size > 5000


def test_legend_lists_only_drawn_tiers(tmp_path, monkeypatch):
    from simroute.cli import topo_cmd
    from simroute.network import load_topology
    labels = []
    import matplotlib.axes
    orig = matplotlib.axes.Axes.legend
    monkeypatch.setattr(matplotlib.axes.Axes, "legend",
                        lambda self, *a, **k: (labels.extend(self.get_legend_handles_labels()[1]), orig(self, *a, **k))[1])
    topo_cmd._draw(load_topology(resolve_input("topology", "fattree-1024")), tmp_path / "big.png")
    assert labels and all(l.split(" ")[0] in ("nic-leaf", "leaf-spine", "spine-core") for l in labels)
    assert any(l.startswith("nic-leaf (1024 links)") for l in labels)      # GPUs drawn as hosts, links counted


def test_run_accepts_names(tmp_path):
    from simroute.sim import RunConfig
    cfg = RunConfig(**PAPER_DEPLOYMENT, topology="paper-testbed", trace="agents-default", calib="h100-ibgda")
    assert Path(cfg.topology).exists() and Path(cfg.trace).exists() and Path(cfg.calib).exists()


def test_sample_import_by_name(cli, tmp_path):
    code, out, err = cli("trace", "import", "mooncake", "mooncake-sample", "-o", tmp_path / "m.parquet")
    assert code == 0, err
    code, out, err = cli("trace", "info", tmp_path / "m.parquet", "--json")
    import json
    assert code == 0 and json.loads(out)["requests"] == 300
