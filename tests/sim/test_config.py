"""RunConfig checks come from its field metadata, and `simroute run` options are derived from the same."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from simroute.errors import ConfigurationError, UnknownNameError
from simroute.sim import RunConfig

BASE = dict(topology="t.yaml", trace="t.parquet", calib="c.yaml")


@pytest.mark.parametrize("field,value,problem", [
    ("tp", True, "must be an integer"), ("tp", 0, "must be >= 1"), ("staging_streams", 0, "must be >= 1"),
    ("hbm_gb", math.nan, "must be finite"), ("staging_copy_GBps", math.inf, "must be finite"),
    ("staging_copy_GBps", 0.0, "must be > 0"), ("hot_fraction", 1.5, "must be <= 1"), ("seed", -1, ">= 0"),
    ("until_s", 0.0, "must be > 0"), ("replicas", "2", "must be an integer"), ("telemetry", 1, "must be bool"),
    ("prefill_us", -1.0, "must be >= 0"), ("slo", "p99 latency <= 3", "unknown SLO metric"),
])
def test_bad_values_are_refused_naming_the_field(field, value, problem):
    with pytest.raises(ConfigurationError, match=problem) as err:
        RunConfig(**BASE, **{field: value})
    assert field in str(err.value)


@pytest.mark.parametrize("field", ["policy", "routing", "placement", "router", "route_exchanges"])
def test_names_are_checked_against_their_registry(field):
    with pytest.raises(UnknownNameError, match=field.replace("_", "[_ ]")):
        RunConfig(**BASE, **{field: "no-such"})


def test_an_integral_float_becomes_an_int_and_optional_fields_take_none():
    cfg = RunConfig(**BASE, tp=2.0, max_requests=None, until_s=None)
    assert cfg.tp == 2 and isinstance(cfg.tp, int)


def test_extra_is_gone():
    assert "extra" not in {f.name for f in dataclasses.fields(RunConfig)}
    with pytest.raises(TypeError):
        RunConfig(**BASE, extra={})


def test_every_field_is_a_run_option_with_its_help_and_default():
    from simroute.cli.run_cmd import run_options
    options = dict(run_options())
    assert list(options) == [f.name for f in dataclasses.fields(RunConfig)]
    for f in dataclasses.fields(RunConfig):
        option = options[f.name].default
        assert option.help.startswith(f.metadata["help"])
        if f.metadata.get("joiner"):                 # repeatable: unset means the config's default (_run)
            assert option.default is None and f.default
        elif f.default is not dataclasses.MISSING:   # the CLI's default is the config's: one place
            assert option.default == f.default
    assert options["until_s"].name == "until"
    assert "--staging-streams" in options["staging_streams"].default.param_decls
    assert "--staging-copy-GBps" in options["staging_copy_GBps"].default.param_decls


def test_run_passes_staging_streams_and_rate_through(cli, tmp_path):
    code, out, err = cli("run", "-o", str(tmp_path / "r"), "--max-requests", "3", "--staging-streams", "2",
                         "--staging-copy-GBps", "50", "--no-telemetry", "--json")
    assert code == 0, err
    config = json.loads(out)["config"]
    assert config["staging_streams"] == 2 and config["staging_copy_GBps"] == 50.0 and config["telemetry"] is False
    assert not (tmp_path / "r" / "holders.parquet").exists()


@pytest.mark.parametrize("args", [("--staging-streams", "0"), ("--staging-copy-GBps", "nan"), ("--policy", "x")])
def test_bad_run_options_exit_2_with_one_line(cli, tmp_path, args):
    code, _, err = cli("run", "-o", str(tmp_path / "r"), *args)
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_one_default_deployment_for_every_command():
    """run, predict, model step and RunConfig all default to the deployment of simroute/defaults.py."""
    import inspect
    from simroute import defaults
    from simroute.cli.model_cmd import model_step, predict
    cfg_fields = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    assert (cfg_fields["model"], cfg_fields["tp"]) == (defaults.DEFAULT_MODEL, defaults.DEFAULT_TP)
    for command in (predict, model_step):
        params = inspect.signature(command).parameters
        assert params["model"].default.default == defaults.DEFAULT_MODEL, command.__name__
        assert params["tp_size"].default.default == defaults.DEFAULT_TP, command.__name__
    assert inspect.signature(model_step).parameters["gpu"].default.default == defaults.DEFAULT_GPU
    from simroute.network import shipped_topology
    from simroute.network.schema import load_topology_spec
    assert load_topology_spec(shipped_topology(defaults.DEFAULT_TOPOLOGY)).gpu == defaults.DEFAULT_GPU
