"""Every test directory collects in one run, in any combination (`pytest tests/network tests/sim/engine`).

The test directories are not packages: pytest imports each file under its bare name, and keeps one module
named `conftest` at a time. A test module that imports `conftest` gets whichever directory's conftest was
loaded last (given several directories, pytest loads all their conftests before collecting), and two files
of one name in different directories are one module to Python.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _sources() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_test_module_imports_a_conftest():
    found = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(TESTS)}:{node.lineno}" for name in names if name.split(".")[0] == "conftest"]
    assert found == [], f"import shared helpers from a uniquely named module, not conftest: {found}"


def test_every_module_name_is_unique_across_directories():
    names = Counter(p.name for p in _sources() if p.name != "conftest.py")
    assert len(names) > 50
    assert [name for name, count in names.items() if count > 1] == []
