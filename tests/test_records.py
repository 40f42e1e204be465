"""The shipped files read without pydantic (simroute/records.py): the record is current with the models and the
files, the plain reading gives what validation gives for every shipped file (value types included), and a file
that no longer hashes as recorded is validated again, with the validating reader's errors."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from simroute import records
from simroute.calib import engines
from simroute.calib.profile import load_profile
from simroute.errors import ConfigurationError
from simroute.ioutil import load_yaml
from simroute.network.kinds import KINDS
from simroute.network.schema import load_topology_spec, parse_topology

SHIPPED = sorted(json.loads(records.RECORD.read_text())["files"].items())


def _validated(model: str, raw: object) -> records.Record:
    return records.to_record(records.import_model(model).model_validate(raw))


def test_the_record_is_current_with_the_models_and_the_shipped_files():
    changed = records.stale()
    assert not changed, (f"the schemas' models or the shipped files changed since simroute/data/shipped-files.json "
                         f"was written: {', '.join(changed)}; regenerate it with `{records.REGENERATE}`")


def test_the_record_covers_every_file_the_default_run_reads():
    keys = {key for key, _ in SHIPPED}
    assert {"calib/h100-ibgda.yaml", "calib/shared.yaml", "calib/fabrics/h100-ibgda.yaml", "calib/gpus/h100-sxm.yaml",
            "calib/engines/sglang-0.5.14.yaml", "topologies/fattree.yaml"} <= keys
    assert {entry["model"] for _, entry in SHIPPED} == set(records.SHIPPED)


@pytest.mark.parametrize("key,entry", SHIPPED, ids=[key for key, _ in SHIPPED])
def test_the_plain_reading_of_a_shipped_file_is_the_validated_one(key, entry):
    path = records.DATA / key
    raw = load_yaml(path)
    plain = records.read_shipped(path, entry["model"], raw)
    assert plain is not None, f"{key} hashes as recorded but does not fit its field table"
    validated = _validated(entry["model"], raw)
    assert plain == validated
    assert repr(plain) == repr(validated)        # the same types too (25.0, not 25; tuples, not lists)


@pytest.mark.parametrize("key", [key for key, entry in SHIPPED if entry["model"].endswith(":TopologyModel")])
def test_a_shipped_topology_reads_alike_either_way(key, monkeypatch):
    """The kind's `network:` section included (its model picked by the kind, its defaults filled by the kind's
    `network_input` on the plain path, by the model's own validator on the other)."""
    path = records.DATA / key
    raw = load_yaml(path)
    plain = parse_topology(raw, file=path, shipped=True)
    assert plain == parse_topology(raw, file=path) and repr(plain) == repr(parse_topology(raw, file=path))
    assert records.is_record(plain.network, KINDS.get(plain.kind).network_key())


@pytest.mark.parametrize("key", [key for key, entry in SHIPPED if entry["model"].endswith(":ProfileFile")])
def test_a_shipped_profile_loads_alike_either_way(key, monkeypatch):
    plain = load_profile(records.DATA / key)
    monkeypatch.setattr(records, "read_shipped", lambda *args: None)
    validated = load_profile(records.DATA / key)
    assert plain == validated and repr(plain) == repr(validated)


@pytest.mark.parametrize("key", [key for key, entry in SHIPPED if entry["model"].endswith(":EnginePresetFile")])
def test_a_shipped_preset_loads_alike_either_way(key, monkeypatch):
    plain = engines._load.__wrapped__(str(records.DATA / key))
    monkeypatch.setattr(records, "read_shipped", lambda *args: None)
    validated = engines._load.__wrapped__(str(records.DATA / key))
    assert plain == validated and repr(plain) == repr(validated)


@pytest.fixture
def shipped_copy(tmp_path, monkeypatch) -> Path:
    """A copy of the shipped folders standing in for them (the record itself unchanged)."""
    for name in ("calib", "topologies"):
        shutil.copytree(records.DATA / name, tmp_path / name, ignore=shutil.ignore_patterns("ops", "measured"))
    monkeypatch.setattr(records, "DATA", tmp_path)
    return tmp_path


def test_an_unchanged_copy_is_trusted_and_an_edited_file_is_not(shipped_copy):
    topology = shipped_copy / "topologies" / "fattree.yaml"
    model = "simroute.network.schema_models:TopologyModel"
    assert records.recorded_model(topology) == model
    topology.write_text(topology.read_text() + "\n# an edit\n")
    assert records.recorded_model(topology) is None
    assert records.read_shipped(topology, model, load_yaml(topology)) is None
    assert records.recorded_model(shipped_copy / "elsewhere.yaml") is None


def test_an_edited_shipped_topology_is_validated_again(shipped_copy):
    """An edit the field table alone would take (a negative rate) is refused, as for a file of the user's."""
    topology = shipped_copy / "topologies" / "fattree.yaml"
    text = topology.read_text()
    assert "rate_GBps: 50" in text
    topology.write_text(text.replace("rate_GBps: 50", "rate_GBps: -25", 1))
    assert records.read_plain("simroute.network.schema_models:TopologyModel", load_yaml(topology)) is not None
    with pytest.raises(ConfigurationError) as error:
        load_topology_spec(topology)
    assert error.value.field == "nic.rate_GBps" and "greater than 0" in str(error.value)


def test_an_edited_shipped_profile_is_validated_again(shipped_copy):
    gpu = shipped_copy / "calib" / "gpus" / "h100-sxm.yaml"
    text = gpu.read_text()
    gpu.write_text(text.replace("value: 3350", "value: -3350", 1))
    with pytest.raises(ConfigurationError) as error:
        load_profile(gpu)
    assert error.value.field == "gpus.h100-sxm.hbm_GBps" and "non-negative" in str(error.value)


def test_an_edited_shipped_preset_is_validated_again(shipped_copy):
    preset = shipped_copy / "calib" / "engines" / "sglang-0.5.14.yaml"
    preset.write_text(preset.read_text().replace("schema: simroute.engine/1", "schema: simroute.engine/1\nextra: 1", 1))
    with pytest.raises(ConfigurationError) as error:
        engines._load.__wrapped__(str(preset))
    assert error.value.field == "extra" and "not permitted" in str(error.value)


def test_records_are_frozen_picklable_and_keep_their_model():
    profile = load_profile("h100-ibgda")
    constant = profile.constant("merge_us")
    with pytest.raises(AttributeError):
        constant.value = 1.0                # type: ignore[misc]
    assert pickle.loads(pickle.dumps(profile)) == profile
    assert constant.replace(value=2.0).value == 2.0 and constant.value != 2.0
    assert constant.as_dict(exclude_none=True)["provenance"] == constant.provenance.as_dict(exclude_none=True)
    assert records.is_record(constant, "simroute.calib.schema:Constant")
    assert not records.is_record(profile.fabric(next(iter(profile.fabrics))), "simroute.calib.schema:Constant")


def test_the_record_refuses_a_shipped_topology_whose_network_section_its_kind_refuses(shipped_copy):
    """The root model holds `network:` as a mapping; the kind's model checks it when the record is made, since
    the plain reader takes a recorded file's section as it is."""
    topology = shipped_copy / "topologies" / "fattree.yaml"
    text = topology.read_text()
    assert "  tiers: 2\n" in text
    topology.write_text(text.replace("  tiers: 2\n", "  tiers: 3\n", 1))      # 3 tiers and no k: refused
    assert records.read_plain(KINDS.get("fattree").network_key(), load_yaml(topology)["network"]) is not None
    with pytest.raises(ConfigurationError) as error:
        records.build_record()
    assert error.value.field == "network" and "needs an even 'k'" in str(error.value)


def test_the_regenerate_command_checks_and_helps_without_writing(capsys):
    """`python -m simroute.records --check` / `--help` write nothing (the bare command rewrites the record)."""
    before = records.RECORD.stat().st_mtime_ns
    with pytest.raises(SystemExit) as exit_help:
        records.main(["--help"])
    with pytest.raises(SystemExit) as exit_check:
        records.main(["--check"])
    assert exit_help.value.code == 0 and exit_check.value.code == 0
    assert "current" in capsys.readouterr().out and records.RECORD.stat().st_mtime_ns == before
