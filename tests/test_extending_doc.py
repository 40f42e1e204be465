"""docs/EXTENDING.md's recipes stay valid: each example on the page (a model's line, a GPU entry, a topology
file of the example kind) is taken from the page itself and checked against hand counts."""

from __future__ import annotations

import importlib
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "EXTENDING.md"


def example(name: str) -> str:
    """The fenced block after `<!-- example: NAME -->` on the page."""
    found = re.search(rf"<!-- example: {name} -->\n```\w*\n(.*?)```", PAGE.read_text(), re.S)
    assert found, f"docs/EXTENDING.md has no example '{name}'"
    return found.group(1)


def test_the_model_line_builds_the_geometry_its_config_gives(cli, monkeypatch):
    from simroute.model import geometry
    model = eval(example("model").strip().rstrip(","), vars(geometry))      # the line as it goes into MODELS
    # K and V x 4 KV heads x head_dim 128 x 28 layers x 2 bytes (bf16)
    assert model.name == "qwen2.5-7b" and model.kv_bytes_per_token == 2 * 4 * 128 * 28 * 2 == 57_344
    assert model.active_params == pytest.approx(model.published_active_params, rel=0.01)
    assert model.context_window == 131_072 and "Qwen/Qwen2.5-7B" in model.sources["layers"]
    monkeypatch.setitem(geometry.MODELS, model.name, model)
    code, out, err = cli("model", "step", "--model", model.name, "--gpu", "h100-sxm", "--tp", "1", "--tokens", "2048")
    assert code == 0, err
    assert "KV 57,344 B per token per GPU" in out


def test_the_gpu_entry_is_a_valid_fragment_with_its_datasheet_figures(cli, tmp_path):
    from simroute.calib import default_profile_path, load_profile
    path = tmp_path / "l40s.yaml"
    path.write_text(example("gpu"))
    code, out, err = cli("calib", "validate", path)
    assert code == 0 and "1 GPU entry" in out, err
    spec = load_profile(path).gpu_spec("l40s")
    assert (spec.peak_flops, spec.peak_fp8_flops, spec.hbm_Bps, spec.hbm_bytes) == (362.05e12, 733e12, 864e9, 48e9)
    assert all(spec.sources[key].startswith("datasheet: NVIDIA L40S datasheet") for key in ("hbm_GB", "hbm_GBps"))
    step = load_profile(default_profile_path()).step_model("llama-3.1-8b", gpu_spec=spec)
    assert step.gpu is spec and step.gpu.hbm_bytes - step.weight_bytes_per_gpu > 30e9   # 16 GB of bf16 weights


def test_the_topology_file_loads_with_the_example_kind_dropped_in(tmp_path, monkeypatch):
    from simroute.network import KINDS, load_topology
    from simroute.registry import discover
    package = importlib.import_module("simroute.network.kinds")
    folder = tmp_path / "kinds"
    folder.mkdir()
    shutil.copy(ROOT / "tests" / "network" / "example" / "star.py", folder / "star.py")     # the recipe's `cp`
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
    discover(package.__name__, package.__path__)
    try:
        path = tmp_path / "star-4.yaml"
        path.write_text(example("topology"))
        topology = load_topology(path)
        # 4 hosts x 8 GPUs: each GPU's NVSwitch link and NIC link, both directions
        assert topology.summary()["kind"] == "star" and len(topology.gpus) == 32
        assert topology.summary()["links_per_tier"] == {"nvlink": 64, "nic-leaf": 64}
    finally:
        KINDS.unregister("star")
        sys.modules.pop("simroute.network.kinds.star", None)
