"""The record of the shipped profiles' cost constants (calib/validated-profiles.json): current with the shipped
files, equal to what loading the profile gives, and used only while the files hash as recorded."""

from __future__ import annotations

import shutil

import pytest

from simroute.calib import load_profile
from simroute.calib import validated
from simroute.calib.profile import shipped_dir
from simroute.errors import UnknownNameError


def test_the_record_is_current_with_the_shipped_profiles():
    changed = validated.stale()
    assert not changed, (f"shipped profiles (or the code reading them) changed since calib/validated-profiles.json "
                         f"was written: {', '.join(changed)}; regenerate it with `{validated.REGENERATE}`")


def test_the_record_covers_the_default_profiles_and_is_read_without_loading_them(monkeypatch):
    assert validated.SHIPPED == shipped_dir().resolve()
    assert validated.recorded("h100-ibgda") is not None and validated.recorded("paper-all") is not None
    import simroute.calib.profile as profile
    monkeypatch.setattr(profile, "load_profile", lambda *a, **k: pytest.fail("the record was not used"))
    assert validated.cost_params("h100-ibgda", "deepseek-v3").geometry.name == "deepseek-v3"


@pytest.mark.parametrize("calib", ["h100-ibgda", "paper-all"])
@pytest.mark.parametrize("model", ["deepseek-v2-lite", "deepseek-v3", "deepseek-v4-flash", "llama-3.1-70b"])
@pytest.mark.parametrize("options", [{}, {"cache_dtype": "fp8", "route_exchanges": "once"},
                                     {"prefill_us": 0.7, "host_overhead": True, "dispatcher_batching": True}])
def test_the_record_gives_what_the_profile_gives(calib, model, options):
    expected = load_profile(calib).cost_params(model, **options)
    got = validated.cost_params(calib, model, **options)
    assert got == expected and got.holder_prefill_s == expected.holder_prefill_s
    assert got.float_rows == expected.float_rows


def test_an_edited_copy_or_a_bad_name_goes_through_the_profile(tmp_path, monkeypatch):
    copy = tmp_path / "calib"
    shutil.copytree(shipped_dir(), copy, ignore=shutil.ignore_patterns("ops", "measured"))
    monkeypatch.setattr(validated, "SHIPPED", copy)
    monkeypatch.setattr(validated, "RECORD", shipped_dir() / "validated-profiles.json")
    assert validated.recorded(copy / "h100-ibgda.yaml") is not None
    shared = copy / "shared.yaml"
    shared.write_text(shared.read_text().replace("value: 25", "value: 26", 1))
    assert validated.recorded(copy / "h100-ibgda.yaml") is None      # an included file changed: not trusted
    assert validated.recorded(tmp_path / "elsewhere.yaml") is None
    with pytest.raises(UnknownNameError):
        validated.cost_params("h100-ibgda", "no-such-model")
    with pytest.raises(UnknownNameError):
        validated.cost_params("h100-ibgda", "deepseek-v3", route_exchanges="twice")
