"""Calibration profiles: shipped files validate, composition works, bad files fail precisely."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simroute.calib import flatten, load_profile, shipped_dir
from simroute.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_dir_is_the_repo_calib():
    assert (shipped_dir() / "h100-ibgda.yaml").read_bytes() == (ROOT / "calib" / "h100-ibgda.yaml").read_bytes()


BOX_PROFILES = [p for p in sorted((ROOT / "calib").glob("*.yaml")) if "include" in yaml.safe_load(p.read_text())]


def test_box_profiles_found():
    assert {p.name for p in BOX_PROFILES} >= {"h100-ibgda.yaml", "paper-all.yaml"}


@pytest.mark.parametrize("path", BOX_PROFILES, ids=lambda p: p.name)
def test_every_box_profile_is_complete(path):
    prof = load_profile(path)
    prof.check_complete()
    cp = prof.cost_params()
    assert len(cp.fabrics) == len(prof.fabrics) >= 1


def test_every_constant_has_provenance():
    prof = load_profile("paper-all")
    rows = flatten(prof)
    assert len(rows) > 30
    for key, (_, prov) in rows.items():
        assert prov.split(":")[0] in ("paper", "datasheet", "fitted", "default", "measured", "loopback"), key
        if prov.startswith(("paper", "datasheet")):
            assert ":" in prov, f"{key} lacks a table/section reference"


def test_paper_all_has_the_five_fabrics():
    prof = load_profile("paper-all")
    assert set(prof.fabrics) == {"h100-ibgda", "h100-nvlink4", "a100-nvlink3", "rtxpro6000-pcie5", "a40-pcie4"}
    assert prof.fabric("a100-nvlink3").t_probe_us.value == 1.6


def _write(tmp_path: Path, doc: dict, name: str = "bad.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc))
    return p


def _fabric(**over):
    f = {"t_probe_us": {"value": 16, "provenance": {"kind": "paper", "ref": "Table 2"}},
         "single_block_GBps": {"value": 25, "provenance": {"kind": "paper", "ref": "Table 2"}},
         "link_peak_GBps": {"value": 25, "provenance": {"kind": "paper", "ref": "Table 2"}}}
    f.update(over)
    return f


@pytest.mark.parametrize("fabric, field, words", [
    ({k: v for k, v in _fabric().items() if k != "t_probe_us"}, "fabrics.x.t_probe_us", "missing"),
    (_fabric(t_probe_us={"value": -1, "provenance": {"kind": "paper", "ref": "T2"}}), "fabrics.x.t_probe_us",
     "non-negative"),
    (_fabric(t_probe_us={"value": "fast", "provenance": {"kind": "paper", "ref": "T2"}}), "fabrics.x.t_probe_us",
     "number"),
    (_fabric(t_probe_us={"value": 3, "provenance": {"kind": "measured"}}), "fabrics.x.t_probe_us.provenance",
     "box"),
    (_fabric(t_probe_us={"value": 3, "provenance": {"kind": "guess"}}), "fabrics.x.t_probe_us.provenance.kind",
     "paper"),
])
def test_bad_profile_names_file_field_reason(tmp_path, fabric, field, words):
    p = _write(tmp_path, {"schema": "simroute.calib/1", "name": "x", "fabrics": {"x": fabric}})
    with pytest.raises(ConfigurationError) as err:
        load_profile(p)
    msg = str(err.value)
    assert str(p) in msg and field in msg and words in msg, msg


def test_include_overrides_and_missing_include(tmp_path):
    base = ROOT / "calib" / "h100-ibgda.yaml"
    over = {"schema": "simroute.calib/1", "name": "mine", "include": [str(base)],
            "fabrics": {"h100-ibgda": _fabric(t_probe_us={"value": 10, "provenance": {"kind": "measured",
                                                                                      "box": "lab-1"}})}}
    prof = load_profile(_write(tmp_path, over, "mine.yaml"))
    assert prof.fabric("h100-ibgda").t_probe_us.value == 10
    assert prof.fabric("h100-nvlink4").t_probe_us.value == 1.2
    assert "splice_ms" in prof.constants
    with pytest.raises(ConfigurationError, match="not found"):
        load_profile(_write(tmp_path, {"schema": "simroute.calib/1", "name": "y", "include": ["nope.yaml"]}))


def test_incomplete_profile_cannot_simulate(tmp_path):
    p = _write(tmp_path, {"schema": "simroute.calib/1", "name": "x", "fabrics": {"x": _fabric()}})
    with pytest.raises(ConfigurationError, match="splice_ms"):
        load_profile(p).cost_params()


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200-sxm"])
@pytest.mark.parametrize("model", ["deepseek-v3", "deepseek-v2-lite"])
def test_the_prefill_form_does_not_read_the_operator_tables(gpu, model):
    """`Profile.cost_params` takes the prefill-form coefficients from a step model built without operator
    tables (loading them was most of `simroute predict`'s time): the coefficients are the GPU's rates, the
    same with the tables as without. If a table ever feeds them, this fails and `_prefill_form` must load them."""
    import dataclasses
    profile = load_profile("h100-ibgda")
    spec = profile.find_gpu_spec(gpu)
    assert spec.operator_tables is not None
    for tp in (1, 8):
        with_tables = profile.step_model(model, gpu_spec=spec, tp=tp).prefill_form_coeffs()
        roofline = profile.step_model(model, gpu_spec=dataclasses.replace(spec, operator_tables=None),
                                      tp=tp).prefill_form_coeffs()
        assert with_tables == roofline and all(c > 0 for c in roofline)


def test_cli_predict_json(cli):
    code, out, _ = cli("predict", "--json", "--mq", "256", "--ct", "2048")
    assert code == 0
    obj = json.loads(out)
    assert obj["choice"] in ("route", "fetch", "local")
    assert set(obj["cost_us"]) == set(obj["wire_bytes"]) == set(obj["terms_us"]) == {"route", "fetch", "local"}
    assert obj["choice"] == min(obj["cost_us"], key=obj["cost_us"].get)
    assert obj["inputs"]["model"] == "deepseek-v3" and obj["inputs"]["tp"] == 8     # the one default deployment
    assert obj["wire_bytes"]["fetch"] == 2048 * 1152 * 61       # its 576-wide bf16 latent over 61 layers


@pytest.mark.parametrize("args, words", [
    (("predict", "--model", "gpt-9"), "deepseek-v2-lite"),
    (("predict", "--fabric", "carrier-pigeon"), "h100-ibgda"),
    (("predict", "--calib", "/nonexistent.yaml"), "not found"),
])
def test_cli_user_errors_list_valid_names_without_traceback(cli, args, words):
    code, out, err = cli(*args)
    assert code != 0
    assert words in err and "Traceback" not in err + out


def test_cli_bad_profile_exit_code(cli, tmp_path):
    p = _write(tmp_path, {"schema": "simroute.calib/1", "name": "x", "fabrics": {"x": {"t_probe_us": 1}}})
    code, _, err = cli("calib", "validate", str(p))
    assert code == 2 and str(p) in err and "fabrics.x" in err


def test_cli_model_figures_write_csv_and_png(cli, tmp_path):
    for sub, stem in (("crossover", "crossover"), ("chunk", "chunk"), ("bandwidth", "bandwidth")):
        code, out, err = cli("model", sub, "-o", str(tmp_path))
        assert code == 0, err
        assert (tmp_path / f"{stem}.csv").stat().st_size > 100
        png = (tmp_path / f"{stem}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    import pandas as pd
    df = pd.read_csv(tmp_path / "crossover.csv")
    row = df[(df.mq == 256) & (df.ct == 2048)].iloc[0]
    assert row.winner == "route" and abs(row.route_saving - 0.763) < 0.01


def test_cli_calib_show_and_diff(cli):
    code, out, _ = cli("calib", "show", "paper-all")
    assert code == 0 and "paper: Table 2" in out
    code, out, _ = cli("calib", "diff", "h100-ibgda", "paper-all")
    assert code == 0 and "a100-nvlink3" in out


def test_unit_contradicting_the_name_is_an_error(tmp_path):
    doc = {"schema": "simroute.calib/1", "name": "x", "fabrics": {"x": _fabric(
        t_probe_us={"value": 16, "unit": "ms", "provenance": {"kind": "paper", "ref": "Table 2"}})}}
    with pytest.raises(ConfigurationError, match="fabrics.x.t_probe_us.unit"):
        load_profile(_write(tmp_path, doc))
    doc["fabrics"]["x"]["t_probe_us"]["unit"] = "us"
    load_profile(_write(tmp_path, doc, "ok.yaml"))
