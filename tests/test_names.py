"""Issue 23, item 6: no one- and two-character names outside tight numeric loops in study/, model/ and probes/.

A name counts once per scope (function, lambda or comprehension's enclosing function, or the module) where it
is bound: a parameter, an assignment, `for`, comprehension, `with ... as`, `except ... as` or `:=` target
(a module-level UPPER_CASE assignment is a constant, not a local; class fields and attributes are not counted).
A short name is allowed only where ALLOWED says why (a conventional name in a tight numeric loop or formula).
`python tests/test_names.py` prints the share of short names per package (sim/ and network/ for information).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "simroute"
CHECKED = ("study", "model", "probes")            # packages held at zero short names outside ALLOWED
INFORMATIVE = ("sim", "network")                  # reported, not checked (other branches own them)
THROWAWAY = {"_", "__"}                           # the conventional unused name is not a name a reader must learn

# the papers' own symbols, used as names across the code base (Shape's and RunConfig's fields, the CLI's flags):
# tp the tensor-parallel degree, mq the routed query rows (Mq, "Move the Query, Not the Cache" §4), ct a
# chunk's tokens; a longer local name for the same quantity would give one thing two names
VOCABULARY = {"tp", "mq", "ct"}

# (file relative to simroute/, function's qualified name) -> short names allowed there, each with why
_NUMPY_INTERP = {"x", "xp", "fp"}   # numpy.interp's own signature (x, xp, fp), which these functions mirror
ALLOWED: dict[tuple[str, str], set[str]] = {
    # i: the segment index of the bisection over xp; y: the values built segment by segment in a tight loop
    ("model/curves.py", "interp_extrap"): _NUMPY_INTERP | {"i"},
    ("model/curves.py", "interp_extrap_array"): _NUMPY_INTERP | {"i", "y"},
    ("model/curves.py", "interp_clamped"): _NUMPY_INTERP | {"i"},
    ("model/curves.py", "interp_clamped_array"): _NUMPY_INTERP,
    ("model/curves.py", "_segment"): _NUMPY_INTERP,
    ("model/curves.py", "interp_clamped_as_array"): _NUMPY_INTERP | {"i"},
    # "*": every function of the file. The plotting libraries' documented names, as common as np and pd:
    # go is plotly.graph_objects (imported lazily, so bound by a call), ax a matplotlib Axes
    ("study/figures.py", "*"): {"go"},
    ("study/plots.py", "*"): {"ax"},
    # cp is CuPy as np is NumPy: the module, bound by `import_cupy()` so a dry run can stand refcupy in for it
    ("probes/gpu_attn.py", "*"): {"cp"},
    ("probes/gpu_common.py", "*"): {"cp"},
    ("probes/gpu_single.py", "*"): {"cp"},
    ("probes/nvshmem_probes.py", "*"): {"cp"},
    ("probes/nic_probes.py", "*"): {"cp"},
}



def _targets(node: ast.AST) -> list[ast.Name]:
    """The plain names bound by an assignment target (tuples, lists and starred unpacked; attributes skipped)."""
    if isinstance(node, ast.Name):
        return [node]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [name for element in node.elts for name in _targets(element)]
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return []


class _Binder(ast.NodeVisitor):
    """Every (scope, name, line) bound in a module; scope is the enclosing function's qualified name."""

    def __init__(self) -> None:
        self.scope: list[str] = []
        self.bound: dict[tuple[str, str], int] = {}

    def _bind(self, name: str, line: int) -> None:
        self.bound.setdefault((".".join(self.scope) or "<module>", name), line)

    def _bind_assigned(self, name: str, line: int) -> None:
        """An assignment's name; at module level an UPPER_CASE one is a constant (PEP 8), not a local."""
        if self.scope or not name.lstrip("_").isupper():
            self._bind(name, line)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, name: str) -> None:
        self.scope.append(name)
        arguments = node.args
        for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                    *filter(None, (arguments.vararg, arguments.kwarg))]:
            self._bind(arg.arg, arg.lineno)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._function(node, node.name)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._function(node, node.name)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._function(node, "<lambda>")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        # class attributes are fields, not locals: only the methods' scopes are walked
        self.scope.append(node.name)
        for child in node.body:
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.visit(child)
        self.scope.pop()

    def _bind_targets(self, targets: list[ast.AST], assigned: bool = False) -> None:
        for target in targets:
            for name in _targets(target):
                (self._bind_assigned if assigned else self._bind)(name.id, name.lineno)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._bind_targets(node.targets, assigned=True)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._bind_targets([node.target], assigned=True)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._bind_targets([node.target])
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self._bind_targets([node.target])
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        self._bind_targets([node.target])
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self._bind_targets([node.target])
        self.generic_visit(node)

    def visit_withitem(self, node: ast.withitem) -> None:
        if node.optional_vars is not None:
            self._bind_targets([node.optional_vars])
        self.generic_visit(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._bind(node.name, node.lineno)
        self.generic_visit(node)


def bindings(source: str) -> dict[tuple[str, str], int]:
    """(scope, name) -> first line, for every parameter and local bound in `source`."""
    binder = _Binder()
    binder.visit(ast.parse(source))
    return binder.bound


def short_names(source: str) -> list[tuple[int, str, str]]:
    """(line, scope, name) of every one- or two-character name bound in `source`, the throwaway `_` aside."""
    return sorted((line, scope, name) for (scope, name), line in bindings(source).items()
                  if len(name) <= 2 and name not in THROWAWAY)


def _files(package: str) -> list[Path]:
    return sorted((PACKAGE / package).rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def unexplained(rel: str, source: str) -> list[tuple[int, str, str]]:
    """The short names of one file that ALLOWED does not explain."""
    return [(line, scope, name) for line, scope, name in short_names(source)
            if name not in VOCABULARY and name not in ALLOWED.get((rel, scope), set())
            and name not in ALLOWED.get((rel, "*"), set())]


def share(package: str) -> tuple[int, int]:
    """(short, all) bound names in one package, ALLOWED entries counted as short (the raw figure)."""
    short = total = 0
    for path in _files(package):
        bound = bindings(path.read_text())
        total += sum(name not in THROWAWAY for _, name in bound)
        short += sum(len(name) <= 2 and name not in THROWAWAY for _, name in bound)
    return short, total


@pytest.mark.parametrize("package", CHECKED)
def test_no_short_names_outside_the_allow_list(package: str) -> None:
    found = []
    for path in _files(package):
        rel = _rel(path)
        found += [f"simroute/{rel}:{line}: {name} (in {scope})" for line, scope, name in
                  unexplained(rel, path.read_text())]
    assert not found, "one- or two-character names (rename, or add to ALLOWED with why):\n  " + "\n  ".join(found)


def test_allow_list_entries_are_used() -> None:
    """An allow-list entry whose function or name is gone would silently allow a later short name there."""
    stale = []
    for (rel, scope), names in ALLOWED.items():
        present = {name for _, found_scope, name in short_names((PACKAGE / rel).read_text())
                   if scope in (found_scope, "*")}
        stale += [f"simroute/{rel} {scope}: {name}" for name in sorted(names - present)]
    assert not stale, "ALLOWED entries no longer needed:\n  " + "\n  ".join(stale)


def test_counter_finds_every_binding_kind() -> None:
    """Each binding site the rule covers is found, attributes and class fields are not, `_` is ignored."""
    source = (
        "class K:\n"
        "    ab = 1\n"                                      # class field: not a local
        "    def method(self, p, *vs, kw=0, **kx):\n"        # parameters of every kind
        "        q, [r, *s] = 1, [2, 3]\n"                  # tuple, list and starred targets
        "        self.zz = 4\n"                             # an attribute: not a local
        "        t: int = 0\n"
        "        u += 1\n"
        "        for v in range(2):\n"
        "            pass\n"
        "        w = [x for x in range(3) if (y := x)]\n"
        "        with open('f') as fh:\n"
        "            pass\n"
        "        try:\n"
        "            pass\n"
        "        except ValueError as ex:\n"
        "            pass\n"
        "        _ = lambda la: la\n"
        "        long_name = 0\n"
        "NS = (1, 2)\n"                                    # a module constant (PEP 8 caps): not a local
        "xs = [ix for ix in NS]\n"                          # a module-level name and comprehension: counted
    )
    found = {(scope, name) for _, scope, name in short_names(source)}
    expected = {"p", "vs", "kw", "kx", "q", "r", "s", "t", "u", "v", "w", "x", "y", "fh", "ex"}
    assert found == ({("K.method", name) for name in expected} | {("K.method.<lambda>", "la")}
                     | {("<module>", "xs"), ("<module>", "ix")})
    assert short_names("def f(value):\n    return value\n") == []      # a function's own name is not a local


def test_failure_names_file_line_and_name() -> None:
    """An unexplained name is reported with its line; an allowed one only in its own file and function, the
    papers' symbols anywhere."""
    source = "def interp_extrap(x, xp, fp, tp):\n    i = 0\n    k = 2\n    return i, k\n"
    assert unexplained("model/curves.py", source) == [(3, "interp_extrap", "k")]
    assert unexplained("model/other.py", source) == [(1, "interp_extrap", "fp"), (1, "interp_extrap", "x"),
                                                     (1, "interp_extrap", "xp"), (2, "interp_extrap", "i"),
                                                     (3, "interp_extrap", "k")]


def main() -> None:
    for package in CHECKED + INFORMATIVE:
        short, total = share(package)
        print(f"simroute/{package + '/':9s} {short:5d} of {total:5d} bound names are 1-2 characters "
              f"({100 * short / max(total, 1):.1f}%)")


if __name__ == "__main__":
    sys.exit(main())
