"""Network layer: topologies, equal-cost paths, a max-min flow engine with ECMP / ARK, telemetry.

Knows nothing of LLMs: flows have bytes, paths and optional rate caps; messages have bytes.

Shipped topologies are the files of `topologies/` at the repository root; `simroute/data/topologies` links
there, so the wheel carries them and `default_topology_path()` finds them installed (docs/ARCHITECTURE.md,
"Shipped data").
"""

from __future__ import annotations

from pathlib import Path

from typing import Any

# Public names and the module that defines each: loaded on first use (PEP 562), so that importing a light
# submodule (`simroute.network.hashing`, `.routing`) or the package for `shipped_topology` does not pull in the
# flow engine, networkx, pydantic and numpy (the CLI's `--help` and `predict` stay fast).
_LAZY: dict[str, str] = {
    "FlowEngine": "engine", "FlowRecord": "flows", "BulkState": "bulk",
    "SolverMode": "solvers", "SOLVERS": "solvers", "Solver": "solvers", "register_solver": "solvers",
    "mix64": "hashing",
    "maxmin_rates": "maxmin",
    "MessageModel": "messages", "MessageModelParams": "messages", "MessageRoute": "messages",
    "ROUTING_STRATEGIES": "routing", "ROUTINGS": "routing", "RoutingStrategy": "routing",
    "register_routing": "routing",
    "Telemetry": "telemetry",
    "TIERS": "topology", "EngineTopology": "topology", "Fabric": "switches",
    "Link": "topology", "Topology": "topology", "load_topology": "topology",
    "KINDS": "kinds", "TopologyKind": "kinds", "RankPlanes": "kinds",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'simroute.network' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f"simroute.network.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "topologies"


def default_topology_path() -> Path:
    """The shipped default topology (fattree.yaml), found inside the installed package."""
    return DATA_DIR / "fattree.yaml"


def shipped_topology(name: str) -> Path:
    """Path of a shipped topology by name (`fattree`, `paper-testbed`, `ark-leafspine`, `ark-paper`, `fattree-1024`,
    `rail-optimized`, `gb200-nvl72`)."""
    from simroute.errors import UnknownNameError
    p = DATA_DIR / f"{name.removesuffix('.yaml')}.yaml"
    if not p.exists():
        raise UnknownNameError("topology", name, sorted(x.stem for x in DATA_DIR.glob("*.yaml")))
    return p


__all__ = ["KINDS", "SOLVERS", "TIERS", "BulkState", "EngineTopology", "Fabric", "FlowEngine", "FlowRecord", "Link",
           "MessageModel", "RankPlanes", "TopologyKind", "MessageModelParams", "MessageRoute", "ROUTINGS", "ROUTING_STRATEGIES", "RoutingStrategy",
           "Solver", "SolverMode", "Telemetry", "Topology", "default_topology_path", "load_topology", "maxmin_rates",
           "mix64", "register_routing", "register_solver", "shipped_topology"]
