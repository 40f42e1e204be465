"""Every output goes through `simroute.ioutil` (docs/ARCHITECTURE.md, conventions): no module writes a file
and renames it into place by hand, and the package keeps its names importable from `simroute.ioutil`."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "simroute"


def _hand_renames(source: str) -> list[int]:
    """Lines calling os.replace / os.rename / Path.rename: a writer doing by hand what `atomic_path` does."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("replace",
                                                                                                       "rename"):
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == "os" or node.func.attr == "rename":
                lines.append(node.lineno)
    return lines


def test_no_writer_outside_ioutil_renames_its_own_temporary():
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
             if "ioutil" not in path.relative_to(PACKAGE).parts for line in _hand_renames(path.read_text())]
    assert found == [], f"write through simroute.ioutil.atomic_path / write_text_atomic instead: {found}"


def test_the_check_sees_a_hand_written_rename():
    assert _hand_renames("import os\ntmp.write_text('x')\nos.replace(tmp, out)\n") == [3]
    assert _hand_renames("tmp.rename(out)\n") == [1]
    assert _hand_renames("text.replace('a', 'b')\n") == []


def test_the_package_keeps_its_names():
    import simroute.ioutil as ioutil
    for name in ioutil.__all__:
        assert getattr(ioutil, name) is not None, name
    from simroute.ioutil import atomic, locks, manifests, paths, reading, temps
    assert ioutil.atomic_path is atomic.atomic_path and ioutil.claim_output is locks.claim_output
    assert ioutil.MANIFEST == manifests.MANIFEST and ioutil.check_output_path is paths.check_output_path
    assert ioutil.load_yaml is reading.load_yaml and ioutil.clean_stale_temps is temps.clean_stale_temps
