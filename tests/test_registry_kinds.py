"""One registry mechanism for every kind of named variant (simroute/registry.py): the network's solvers and
replay backends, the trace generators and importers and the CLI's command groups are found, listed and refused
through it as the simulator's policies and routers are; a kind's package may be a pattern of modules."""

from __future__ import annotations

import sys

import pytest

from simroute.errors import UnknownNameError
from simroute.registry import PACKAGES, Registry, registry


@pytest.mark.parametrize("kind, built_ins", [
    ("solver", {"objects", "arrays", "online"}),
    ("replay", {"numba", "engine", "engine-numpy"}),
    ("generator", {"agents", "corpus", "sparse", "disagg", "serving"}),
    ("importer", {"agent", "azure", "burstgpt", "mooncake"}),
    ("command", {"run", "topo", "trace", "calib", "flows", "model", "report", "study", "validate"}),
])
def test_each_kind_finds_its_variants_through_the_one_registry(kind, built_ins):
    assert kind in PACKAGES
    assert built_ins <= set(registry(kind).variants)


def test_the_old_names_are_the_registrys_own_tables():
    from simroute.network import SOLVERS, SolverMode
    from simroute.network.replay import REPLAY_BACKENDS
    from simroute.workload.generators import GENERATORS
    from simroute.workload.importers import IMPORTERS, _registry
    assert SOLVERS is registry("solver").variants and SOLVERS[SolverMode.ARRAYS] is SOLVERS["arrays"]
    assert REPLAY_BACKENDS is registry("replay").variants
    assert GENERATORS is registry("generator").variants and GENERATORS["corpus"].name == "corpus"
    assert _registry() is registry("importer").variants and tuple(sorted(_registry())) == IMPORTERS


@pytest.mark.parametrize("kind, words", [("generator", "unknown trace generator 'nope'; valid: agents, corpus"),
                                         ("importer", "unknown trace format 'nope'; valid: agent, azure"),
                                         ("replay", "unknown replay backend 'nope'; valid: engine")])
def test_an_unknown_name_is_one_line_naming_the_kind_and_the_known_names(kind, words):
    with pytest.raises(UnknownNameError) as err:
        registry(kind).get("nope")
    assert str(err.value).startswith(words) and "\n" not in str(err.value)


def test_an_unknown_generator_on_the_command_line_is_one_line(cli, tmp_path):
    code, out, err = cli("trace", "gen", "nope", "-o", tmp_path / "t.parquet")
    assert code == 2 and err.strip().splitlines() == [
        "error: unknown trace generator 'nope'; valid: agents, corpus, disagg, serving, sparse"]
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """A package `plugs` on the path: two `*_cmd` modules with a `register` function, one module that files a
    variant in the package's own registry, and modules the patterns leave out."""
    package = tmp_path / "plugs"
    package.mkdir()
    (package / "__init__.py").write_text("from simroute.registry import Registry\nFOUND = Registry('thing')\n")
    for name in ("alpha_cmd", "beta_cmd"):
        (package / f"{name}.py").write_text(f"def register(app):\n    app.append('{name}')\n")
    (package / "gen_one.py").write_text("from plugs import FOUND\n\n@FOUND.register('one')\nclass One:\n"
                                        "    '''The first.'''\n")
    (package / "helpers.py").write_text("raise RuntimeError('a pattern must not import this module')\n")
    (package / "_private_cmd.py").write_text("raise RuntimeError('nor this one')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "plugs"
    for name in [m for m in sys.modules if m == "plugs" or m.startswith("plugs.")]:
        sys.modules.pop(name)


def test_a_pattern_with_an_attribute_files_each_matching_modules_function_under_its_name(plugins):
    commands = Registry("command", f"{plugins}.*_cmd:register", "command group")
    app: list[str] = []
    for register in commands.variants.values():
        register(app)
    assert list(commands.variants) == ["alpha", "beta"] and app == ["alpha_cmd", "beta_cmd"]
    with pytest.raises(UnknownNameError, match="unknown command group 'gamma'; valid: alpha, beta"):
        commands.get("gamma")


def test_a_pattern_imports_the_matching_modules_which_register_themselves(plugins):
    import plugs
    plugs.FOUND.package, plugs.FOUND._loaded = f"{plugins}.gen_*", False     # as `registry(kind)` would make it
    assert list(plugs.FOUND.variants) == ["one"] and plugs.FOUND.help() == "one: The first"


def test_a_second_variant_under_one_name_is_refused():
    things = Registry("thing")
    things.add("a", len)
    things.add("a", len)                        # the same one again: no harm
    with pytest.raises(ValueError, match="thing 'a' is already registered"):
        things.add("a", max)
