"""`simroute topo show` through the real CLI entry point."""

from __future__ import annotations

from simroute.cli.main import main

from simroute.network import DATA_DIR as TOPO_DIR


def test_topo_show_and_png(tmp_path, capsys):
    png = tmp_path / "t.png"
    assert main(["topo", "show", str(TOPO_DIR / "ark-leafspine.yaml"), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "bisection" in out and "64" in out and "leaf-spine" in out
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"


def test_topo_show_bad_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nhosts: {count: 2}\n")
    assert main(["topo", "show", str(bad)]) == 2
    assert "bad.yaml" in capsys.readouterr().err
