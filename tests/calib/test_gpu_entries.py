"""GPU entries (`gpus:`): every shipped entry validates with datasheet peaks, a measured file overrides the
shipped one, and bad entries fail naming the file, the field and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simroute.calib import load_profile, shipped_dir
from simroute.errors import ConfigurationError
from simroute.model.steptime import BatchShape

GPU_FILES = sorted((shipped_dir() / "gpus").glob("*.yaml"))


def test_nine_gpus_shipped():
    assert {p.stem for p in GPU_FILES} == {"h100-sxm", "h200-sxm", "a100-80gb", "a40", "rtxpro6000",
                                           "b200-sxm", "gb200", "b300-sxm", "gb300"}


# GPUs per NVLink domain and NVLink GB/s per GPU each way, from the datasheets (HGX boards of 8; NVL72 racks)
NVLINK = {"h100-sxm": (8, 450), "h200-sxm": (8, 450), "a100-80gb": (8, 300), "b200-sxm": (8, 900),
          "b300-sxm": (8, 900), "gb200": (72, 900), "gb300": (72, 900)}


@pytest.mark.parametrize("path", GPU_FILES, ids=lambda p: p.stem)
def test_nvlink_domain_with_provenance(path):
    """Every NVLink GPU says how many GPUs its NVLink domain connects and its NVLink rate, from a datasheet; the
    PCIe GPUs (A40, RTX PRO 6000) say nothing (no NVLink domain)."""
    entry = load_profile(path).gpu_entry(path.stem)
    spec = load_profile(path).gpu_spec(path.stem, tables=False)
    if path.stem not in NVLINK:
        assert entry.nvlink_domain_gpus is None and spec.nvlink_domain_gpus is None
        return
    gpus, rate = NVLINK[path.stem]
    assert (spec.nvlink_domain_gpus, spec.nvlink_Bps) == (gpus, rate * 1e9)
    for key in ("nvlink_domain_gpus", "nvlink_GBps"):
        prov = getattr(entry, key).provenance
        assert prov.kind == "datasheet" and prov.ref.startswith("NVIDIA"), key
        assert spec.sources[key].startswith("datasheet: NVIDIA"), key
    assert str(gpus) in entry.nvlink_domain_gpus.provenance.ref


@pytest.mark.parametrize("bad", [0, 7.5])
def test_nvlink_domain_must_be_whole_gpus(tmp_path, bad):
    entry = _entry(nvlink_domain_gpus={"value": bad, "provenance": {"kind": "datasheet", "ref": "x"}})
    p = _write(tmp_path, {"schema": "simroute.calib/1", "name": "x", "gpus": {"g": entry}})
    with pytest.raises(ConfigurationError) as err:
        load_profile(p)
    assert "gpus.g.nvlink_domain_gpus" in str(err.value) and "whole number of GPUs" in str(err.value)


@pytest.mark.parametrize("path", GPU_FILES, ids=lambda p: p.stem)
def test_shipped_entry_loads_with_datasheet_peaks(path):
    prof = load_profile(path)
    entry = prof.gpu_entry(path.stem)
    for key in ("peak_bf16_TFLOPs", "hbm_GBps", "hbm_GB"):
        prov = getattr(entry, key).provenance
        if path.stem == "rtxpro6000" and key == "peak_bf16_TFLOPs":   # its datasheet states only FP4 sparse
            assert prov.kind == "fitted" and "datasheet" in prov.ref and "4,000 AI TOPS" in prov.ref
            continue
        assert prov.kind == "datasheet" and prov.ref.startswith("NVIDIA"), key
    for key in ("hbm_efficiency", "gemm_efficiency", "attention_efficiency", "iteration_overhead_us"):
        prov = getattr(entry, key).provenance
        assert prov.kind in ("paper", "default", "fitted") and prov.ref, key
        if prov.kind == "default":      # a default says what it stands in for
            assert "stands in" in prov.ref, key
        if prov.kind == "fitted":       # fitted to this GPU's shipped measured rows, which it names
            assert f"calib/ops/{path.stem}/" in prov.ref, key


def _entry(**over) -> dict:
    data = yaml.safe_load((shipped_dir() / "gpus" / "h100-sxm.yaml").read_text())["gpus"]["h100-sxm"]
    data.update(over)
    return data


def _write(tmp_path: Path, doc: dict, name: str = "g.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc))
    return p


def test_measured_entry_overrides_the_shipped_one(tmp_path):
    measured = {"value": 0.61, "provenance": {"kind": "measured", "box": "h200box", "ref": "probe hbm"}}
    doc = {"schema": "simroute.calib/1", "name": "box", "include": [str(shipped_dir() / "h100-ibgda.yaml")],
           "gpus": {"h100-sxm": _entry(hbm_efficiency=measured)}}
    prof = load_profile(_write(tmp_path, doc))
    assert prof.gpu_spec("h100-sxm").hbm_efficiency == 0.61
    assert prof.gpu_spec("h100-sxm").sources["hbm_efficiency"] == "measured: probe hbm on h200box"
    # the roofline of each (the entry copied here names the shipped operator tables, which would answer first):
    # a weight-bound decode's linear term scales with 1 / hbm_efficiency
    ship_prof = load_profile("h100-ibgda")
    shipped = ship_prof.step_model("llama-3.1-8b", gpu_spec=ship_prof.gpu_spec("h100-sxm", tables=False))
    ours = prof.step_model("llama-3.1-8b", gpu_spec=prof.gpu_spec("h100-sxm", tables=False))
    decode = BatchShape.uniform(1, 1000)
    ratio = ours.iteration(decode).linear_s_per_layer / shipped.iteration(decode).linear_s_per_layer
    assert ratio == pytest.approx(ship_prof.gpu_spec("h100-sxm").hbm_efficiency / 0.61, rel=1e-3)


@pytest.mark.parametrize("over, field, words", [
    ({"hbm_efficiency": {"value": 1.4, "provenance": {"kind": "default", "ref": "x"}}}, "gpus.g.hbm_efficiency",
     "(0, 1]"),
    ({"peak_bf16_TFLOPs": {"value": 0, "provenance": {"kind": "datasheet", "ref": "x"}}},
     "gpus.g.peak_bf16_TFLOPs", "positive"),
    ({"hbm_GBps": {"value": 3350, "provenance": {"kind": "datasheet"}}}, "gpus.g.hbm_GBps.provenance",
     "vendor document"),
    ({"hbm_GBps": {"value": 3350, "unit": "TB/s", "provenance": {"kind": "datasheet", "ref": "x"}}},
     "gpus.g.hbm_GBps.unit", "GB/s"),
    ({"gemm_efficiency": {"points": [[16, 0.2], [8, 0.5]], "provenance": {"kind": "default", "ref": "x"}}},
     "gpus.g.gemm_efficiency", "increase"),
    ({"peak_fp8_TFLOPs": {"value": 0, "provenance": {"kind": "datasheet", "ref": "x"}}},
     "gpus.g.peak_fp8_TFLOPs", "positive"),
])
def test_bad_gpu_entry_names_file_field_reason(tmp_path, over, field, words):
    p = _write(tmp_path, {"schema": "simroute.calib/1", "name": "x", "gpus": {"g": _entry(**over)}})
    with pytest.raises(ConfigurationError) as err:
        load_profile(p)
    msg = str(err.value)
    assert str(p) in msg and field in msg and words in msg, msg


def test_fp8_peak_is_optional_and_read_when_given(tmp_path):
    entry = _entry()
    del entry["peak_fp8_TFLOPs"]                      # as the A100 and A40 entries: no FP8 tensor cores
    plain = load_profile(_write(tmp_path, {"schema": "simroute.calib/1", "name": "x", "gpus": {"g": entry}}))
    assert plain.gpu_spec("g").peak_fp8_flops is None and not plain.gpu_spec("g").has_fp8
    fp8 = {"peak_fp8_TFLOPs": {"value": 1979, "unit": "TFLOP/s", "provenance": {"kind": "datasheet", "ref": "x"}}}
    prof = load_profile(_write(tmp_path, {"schema": "simroute.calib/1", "name": "x", "gpus": {"g": _entry(**fp8)}},
                               "fp8.yaml"))
    assert prof.gpu_spec("g").peak_fp8_flops == 1979e12 and prof.gpu_spec("g").sources["peak_fp8_TFLOPs"] == \
        "datasheet: x"


def test_a_gpu_name_must_exist(tmp_path):
    p = _write(tmp_path, {"schema": "simroute.calib/1", "name": "x", "gpu": "b300", "gpus": {"g": _entry()}})
    with pytest.raises(ConfigurationError, match="b300"):
        load_profile(p)
    prof = load_profile(_write(tmp_path, {"schema": "simroute.calib/1", "name": "x", "gpus": {"g": _entry()}},
                               "ok.yaml"))
    assert prof.instance_gpu() == "g"                 # a lone entry is the instance GPU
    with pytest.raises(ConfigurationError, match="names no instance GPU"):
        load_profile("paper-all").instance_gpu()      # five GPUs and no `gpu:`: ambiguous


def test_flatten_lists_gpu_constants_once_per_file(tmp_path):
    from simroute.calib import flatten
    prof = load_profile("h100-ibgda")
    rows = flatten(prof)
    assert rows["gpus.h100-sxm.hbm_GBps"][1].startswith("datasheet: NVIDIA H100")
    assert len(prof.files) == len(set(prof.files))
