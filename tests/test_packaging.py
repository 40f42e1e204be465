"""What `pip install .` builds: a pure-Python wheel by default (no mypy, no compiler), every shipped file in the
wheel and the sdist (the package's data folders are links to the repository's one copy), and a compiled build
only on request (`SIMROUTE_COMPILE=1`), which fails loudly rather than falling back to Python."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from simroute import compiled
from simroute.shipped import DATA, KINDS, shipped_names

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["pyproject.toml", "setup.py", "build_backend.py", "MANIFEST.in", "README.md", "simroute"]


@pytest.mark.parametrize("folder", ["topologies", "studies", "calib"])
def test_the_package_data_is_the_repository_copy(folder):
    """One copy of each: `simroute/data/<folder>` links to `<folder>/` at the repository root (docs/ARCHITECTURE.md,
    "Shipped data": a file added there is shipped, by name, with nothing to keep equal)."""
    assert (DATA / folder).is_symlink() and (DATA / folder).resolve() == (ROOT / folder).resolve()


def _backend(tree: Path, code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `code` with `b` the project's build backend, in `tree` (setup.py writes its egg-info there)."""
    env = {k: v for k, v in (env or os.environ).items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", f"import build_backend as b\n{code}"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def source_tree(tmp_path_factory) -> Path:
    """The files a build reads, links kept as links (the data folders and what they point to)."""
    tree = tmp_path_factory.mktemp("tree")
    for name in SOURCES + [p.name for p in (ROOT / "simroute" / "data").iterdir() if p.is_symlink()]:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, tree / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy2(src, tree / name)
    return tree


PLAIN = """
import json
from setuptools._distutils.core import run_setup
dist = run_setup("setup.py", ["-q", "build_py", "--build-lib", {lib!r}])
print(json.dumps([b.get_requires_for_build_wheel(), bool(dist.has_ext_modules()), b.build_sdist({out!r})]))
"""


def test_a_plain_build_is_pure_python_and_ships_every_shipped_name(source_tree, tmp_path):
    """The wheel holds what `build_py` collects (bdist_wheel packs build/lib; building the wheel itself needs
    the `wheel` package, which setuptools < 70.1 lacks); the sdist is built whole."""
    env = {k: v for k, v in os.environ.items() if k != compiled.COMPILE_ENV}
    lib = tmp_path / "lib"
    done = _backend(source_tree, PLAIN.format(lib=str(lib), out=str(tmp_path)), env)
    assert done.returncode == 0, done.stderr[-3000:]
    requires, has_ext_modules, sdist = json.loads(done.stdout.strip().splitlines()[-1])
    assert not any(r.startswith("mypy") for r in requires) and has_ext_modules is False
    with tarfile.open(tmp_path / sdist) as tar:
        members = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if "/" in m.name}
    assert {"build_backend.py", "setup.py", "pyproject.toml", "MANIFEST.in"} <= set(members)
    for kind, (folder, suffix) in KINDS.items():
        names = shipped_names(kind)
        assert names, kind
        for name in names:
            shipped = DATA / folder / f"{name}{suffix}"         # a file, or a folder of files (a trace)
            for file in [shipped] if shipped.is_file() else sorted(p for p in shipped.rglob("*") if p.is_file()):
                path = f"simroute/data/{folder}/{file.relative_to(DATA / folder)}"
                assert (lib / path).is_file() and not (lib / path).is_symlink(), path
                assert members[path].isfile(), path             # the file itself, not a link out of the sdist
    assert not any(p.suffix in (".so", ".pyd", ".c") for p in lib.rglob("*"))


def test_the_compiled_build_asks_for_mypy_and_fails_without_it(source_tree, tmp_path):
    """Asked for, the compiled build puts mypy in the build environment; where mypyc does not import, the build
    stops with a line naming SIMROUTE_COMPILE, and writes no wheel (no quiet plain-Python install)."""
    env = {**os.environ, compiled.COMPILE_ENV: "1"}
    asked = _backend(source_tree, "print(b.get_requires_for_build_wheel())", env)
    assert asked.returncode == 0 and "mypy==" in asked.stdout, asked.stderr[-2000:]
    no_mypyc = _backend(source_tree, f"import sys\nsys.modules['mypyc'] = None\nb.build_wheel({str(tmp_path)!r})",
                        env)
    assert no_mypyc.returncode != 0 and f"{compiled.COMPILE_ENV}=1" in no_mypyc.stderr, no_mypyc.stderr[-2000:]
    assert list(tmp_path.glob("*.whl")) == []


@pytest.mark.parametrize("hook", ["get_requires_for_build_editable", "prepare_metadata_for_build_editable",
                                  "build_editable"])
def test_an_editable_install_refuses_the_compiled_build(monkeypatch, tmp_path, hook):
    monkeypatch.syspath_prepend(str(ROOT))
    import build_backend
    monkeypatch.setenv(compiled.COMPILE_ENV, "1")
    with pytest.raises(SystemExit, match="editable install cannot be compiled"):
        getattr(build_backend, hook)(str(tmp_path))
    assert list(tmp_path.iterdir()) == []
