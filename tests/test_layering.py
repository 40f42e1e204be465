"""docs/ARCHITECTURE.md's layering rule, enforced on the import graph of every module under simroute/.

The rule is read from the document itself (the ```layers and ```third-party blocks), so the document and
the code cannot drift apart. Every import counts, including imports inside functions (a lazy import is
still a dependency). The last tests show the check failing on synthetic modules with forbidden imports.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "simroute"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"


def _block(kind: str) -> dict[str, set[str]]:
    text = ARCHITECTURE.read_text()
    match = re.search(rf"```{kind}\n(.*?)```", text, re.S)
    assert match, f"docs/ARCHITECTURE.md has no ```{kind} block"
    rules = {}
    for line in match.group(1).splitlines():
        if line.strip():
            name, _, allowed = line.partition(":")
            rules[name.strip()] = set(allowed.split())
    return rules


LAYERS = _block("layers")
THIRD_PARTY = _block("third-party")
BASE = LAYERS.pop("base")


def layer_of(module: str) -> str:
    """'simroute.sim.policies.paper' -> 'sim'; a module of the package root ('simroute.errors') -> 'errors'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "simroute"


def imports_of(module: str, source: str) -> list[tuple[int, str]]:
    """(line, imported module) for every import in `source`, relative ones resolved against `module`."""
    package = module.split(".")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


def violations(module: str, source: str) -> list[str]:
    """Every import of `module` that the documented rule forbids."""
    own = layer_of(module)
    allowed = BASE | ({own} if own in BASE else {own} | LAYERS.get(own, set()))
    out = []
    for line, name in imports_of(module, source):
        top = name.split(".")[0]
        if top == "simroute":
            target = layer_of(name)
            if target not in allowed:
                out.append(f"{module}:{line} imports {name} ({own} may import {' '.join(sorted(allowed))})")
        elif own in THIRD_PARTY and top not in sys.stdlib_module_names and top not in THIRD_PARTY[own] \
                and top != "__future__":
            out.append(f"{module}:{line} imports {name} ({own} may use only {' '.join(sorted(THIRD_PARTY[own]))} "
                       f"beyond the standard library)")
    return out


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((".".join(parts), path))
    return out


def test_every_package_has_a_place_in_the_layers():
    declared = set(LAYERS) | BASE
    found = {layer_of(module) for module, _ in _modules()} - {"__main__"}
    assert found <= declared, f"undeclared in docs/ARCHITECTURE.md: {sorted(found - declared)}"


def test_no_import_points_upward():
    bad = [v for module, path in _modules() if layer_of(module) != "__main__"
           for v in violations(module, path.read_text())]
    assert not bad, "\n".join(bad)


# ---- the check itself fails on forbidden imports (synthetic modules, never written to disk) -------------
def test_network_importing_the_simulator_is_caught():
    assert violations("simroute.network.synthetic", "from simroute.sim import RunConfig\n")
    assert violations("simroute.network.synthetic", "def f():\n    import simroute.sim.cluster\n")   # lazy too


def test_model_importing_a_higher_layer_or_a_library_beyond_numpy_is_caught():
    assert violations("simroute.model.synthetic", "from simroute.calib import load_profile\n")
    assert violations("simroute.model.synthetic", "import pandas as pd\n")
    assert not violations("simroute.model.synthetic", "import math\nimport numpy as np\nfrom simroute.errors import"
                                                      " ConfigurationError\n")


def test_relative_imports_are_resolved_before_checking():
    assert violations("simroute.workload.synthetic", "from ..sim import runner\n")
    assert not violations("simroute.sim.synthetic", "from ..network import FlowEngine\nfrom . import cluster\n")


def test_the_simulator_may_not_reach_into_studies_or_the_cli():
    assert violations("simroute.sim.synthetic", "from simroute.study import runner\n")
    assert violations("simroute.sim.synthetic", "import simroute.cli.run_cmd\n")
    assert violations("simroute.errors", "from simroute.sim import config\n")   # base modules import only base


# ---- no import circle inside the simulator (type-only and function-level imports count) -----------------


def import_graph(prefix: str) -> dict[str, set[str]]:
    """Module -> the modules under `prefix` it imports, by any import statement (under `if TYPE_CHECKING:`
    and inside functions too). `from package import module` is an edge to that module."""
    modules = {module: path for module, path in _modules()}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        if not (module == prefix or module.startswith(prefix + ".")):
            continue
        # a package's relative imports resolve against the package itself, a module's against its package
        own = module + ".__init__" if path.name == "__init__.py" else module
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = imports_of(own, f"from {'.' * node.level}{node.module or ''} import x\n")[0][1]
                named = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            edges |= {name for name in named if name in modules and name != module
                      and (name == prefix or name.startswith(prefix + "."))}
        graph[module] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            child = next(successors, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_no_import_circle_in_the_simulator():
    found = circles(import_graph("simroute.sim"))
    assert not found, "import circles in simroute/sim: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


def test_the_run_config_imports_no_plug_in_package():
    """`RunConfig` names plug-in kinds (sim/registry.py); importing it loads no router, policy, placement,
    scheduler or framework module."""
    reachable = _reachable(import_graph("simroute.sim"), "simroute.sim.config")
    plug_ins = {name for name in reachable
                if name.split(".")[2:3] in (["routers"], ["policies"], ["placements"], ["schedulers"], ["frameworks"])}
    assert not plug_ins, f"simroute.sim.config reaches {sorted(plug_ins)}"


# ---- network/: the flow engine's roles in their own modules (issue 23, item 4) ----------------------------
def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others (type-only and lazy imports included)."""
    reachable, todo = set(), [start]
    while todo:
        for name in graph.get(todo.pop(), ()):
            if name not in reachable:
                reachable.add(name)
                todo.append(name)
    return reachable


def test_no_import_circle_in_the_network():
    found = circles(import_graph("simroute.network"))
    assert not found, "import circles in simroute/network: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


def test_the_flow_types_are_a_leaf():
    """engine, solvers, messages and telemetry share the flow types through network/flows.py, which imports
    nothing of simroute (not even for a type)."""
    source = (PACKAGE / "network" / "flows.py").read_text()
    assert [name for _, name in imports_of("simroute.network.flows", source) if name.split(".")[0] == "simroute"] == []
    graph = import_graph("simroute.network")
    users = {module for module, edges in graph.items() if "simroute.network.flows" in edges}
    assert {"simroute.network.engine", "simroute.network.solvers.base", "simroute.network.telemetry"} <= users


def test_the_solvers_and_their_readers_reach_no_engine():
    """A solver sees the engine only as a `SolverHost`; the message model, telemetry and the bulk state see
    it not at all: none of them imports simroute/network/engine.py, directly or through another module."""
    graph = import_graph("simroute.network")
    solvers = [module for module in graph if module.startswith("simroute.network.solvers")]
    assert {"simroute.network.solvers.base", "simroute.network.solvers.objects", "simroute.network.solvers.arrays",
            "simroute.network.solvers.online"} <= set(solvers)
    for module in solvers + ["simroute.network.messages", "simroute.network.telemetry", "simroute.network.bulk",
                             "simroute.network.paths", "simroute.network.routing"]:
        assert "simroute.network.engine" not in _reachable(graph, module), f"{module} reaches the engine"


def test_a_type_only_import_of_the_engine_from_a_solver_is_caught():
    graph = import_graph("simroute.network")
    graph["simroute.network.solvers.synthetic"] = {"simroute.network.solvers.base", "simroute.network.engine"}
    assert "simroute.network.engine" in _reachable(graph, "simroute.network.solvers.synthetic")
    graph["simroute.network.flows"] = {"simroute.network.engine"}         # a flow type naming the engine: a circle
    assert any("simroute.network.flows" in circle for circle in circles(graph))


def test_the_circle_check_finds_a_type_only_circle():
    graph = {"simroute.sim.a": {"simroute.sim.b"}, "simroute.sim.b": {"simroute.sim.c"},
             "simroute.sim.c": {"simroute.sim.a"}, "simroute.sim.d": {"simroute.sim.a"}}
    assert circles(graph) == [{"simroute.sim.a", "simroute.sim.b", "simroute.sim.c"}]
    assert not circles({"simroute.sim.a": {"simroute.sim.b"}, "simroute.sim.b": set()})


def test_a_type_checking_import_is_an_edge():
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from simroute.sim.cluster import Cluster\n"
              "def f():\n    from simroute.sim import context\n")
    assert [name for _, name in imports_of("simroute.sim.router", source)] == \
        ["typing", "simroute.sim.cluster", "simroute.sim"]
