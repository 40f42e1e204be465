"""The Blackwell GPU entries end to end (issue 35 item 6): each name runs a small replay from the CLI on its own
entry (HBM, weights, step time from its measured tables), and the GB200 NVL72 topology runs on its shipped
profile (calib/gb200-nvl72.yaml), its NVLink domain of 72 GPUs across 18 trays being the GPU entry's. `model step`
on every name: tests/model/test_gpu_tables.py."""

from __future__ import annotations

import json

import pytest

from simroute.calib import load_profile, shipped_dir
from simroute.network import DATA_DIR, load_topology

BLACKWELL = {"b200-sxm": 180, "gb200": 186, "b300-sxm": 288, "gb300": 288}      # datasheet HBM per GPU, GB


def _run(cli, tmp_path, *args):
    code, out, err = cli("run", "--max-requests", 3, "-o", tmp_path / "run", "--json", *args)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("gpu", BLACKWELL)
def test_each_blackwell_name_runs_on_its_own_entry(cli, tmp_path, gpu):
    summary = _run(cli, tmp_path, "--gpu", gpu)
    engine = summary["engine"]
    assert summary["completed"] == summary["requests"] == 3
    assert engine["gpu"] == gpu and engine["hbm"]["capacity_gb_per_gpu"] == BLACKWELL[gpu]
    # DeepSeek-V3's FP8 weights at TP 8 on Blackwell's FP8 tensor cores
    assert engine["weight_dtype"] == "fp8" and engine["fp8_rate"] is True
    assert any(path.endswith(f"gpus/{gpu}.yaml") for path in summary["inputs"]["calib_files"])
    # the KV room is what the HBM leaves beside the weights: more HBM, more tokens (64-token blocks)
    hbm = engine["hbm"]
    room_gb = hbm["capacity_gb_per_gpu"] - hbm["weights_gb_per_gpu"]
    assert hbm["kv_capacity_tokens"] % 64 == 0
    assert 0 < hbm["kv_capacity_tokens"] * engine["kv_bytes_per_token_per_gpu"] <= room_gb * 1e9


def test_gb200_nvl72_runs_on_its_shipped_profile_and_keeps_a_rack_on_nvlink(cli, tmp_path):
    """Four-GPU instances (one compute tray each) on two NVL72 racks: fetches between trays of a rack ride the
    rack's NVLink switch, not the NICs (at seed 0 the 3 requests fetch over both)."""
    summary = _run(cli, tmp_path, "--topology", "gb200-nvl72", "--calib", "gb200-nvl72", "--tp", 4)
    assert summary["engine"]["gpu"] == "gb200" and summary["completed"] == 3
    assert summary["topology"]["gpus_per_domain"] == 72 and summary["topology"]["nvlink_domains"] == 2
    assert summary["network"]["bytes_by_tier"]["nvlink"] > 0


def test_a_gb200_tp_group_stays_inside_a_tray(cli, tmp_path):
    """A tensor-parallel group lives inside one host (a compute tray of 4 GPUs): TP 8 across two trays of the
    NVLink domain is not modelled (docs/STEP_TIME.md, "GPU entries"), and is refused naming --tp."""
    code, out, err = cli("run", "--topology", "gb200-nvl72", "--calib", "gb200-nvl72", "--max-requests", 3,
                         "-o", tmp_path / "run")
    assert code == 2 and out == "" and "field '--tp'" in err and not (tmp_path / "run").exists()


def test_shipped_topologies_agree_with_their_gpu_entries_nvlink_domain():
    """One description of an NVLink domain: where a shipped topology's hosts.gpu names a shipped GPU entry, its
    NVLink domain holds the entry's nvlink_domain_gpus GPUs at the entry's nvlink_GBps per GPU, over a fabric a
    shipped fabric file calibrates (GB200 NVL72: 18 trays x 4 = 72 GPUs at 900 GB/s, gb200-nvlink5)."""
    fabrics = {name for path in (shipped_dir() / "fabrics").glob("*.yaml") for name in load_profile(path).fabrics}
    checked = []
    for path in sorted(DATA_DIR.glob("*.yaml")):
        topology = load_topology(path)
        spec = topology.spec
        entry_file = shipped_dir() / "gpus" / f"{spec.gpu}.yaml"
        assert spec.intra.fabric in fabrics, path.name
        if not entry_file.is_file():
            continue                                     # a label ("h100"): the fabric's GPU is the instances'
        entry = load_profile(entry_file).gpu_spec(spec.gpu)
        domains: dict[int, int] = {}
        for gpu in topology.gpus:
            domains[topology.domain_of(gpu)] = domains.get(topology.domain_of(gpu), 0) + 1
        assert set(domains.values()) == {entry.nvlink_domain_gpus}, path.name
        if spec.intra.kind == "nvswitch":
            assert spec.intra.link_Bps == entry.nvlink_Bps, path.name
        checked.append((path.stem, entry.nvlink_domain_gpus))
    assert ("gb200-nvl72", 72) in checked and ("fattree", 8) in checked
