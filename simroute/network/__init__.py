"""Network layer: topologies, equal-cost paths, a max-min flow engine with ECMP / ARK, telemetry.

Knows nothing of LLMs: flows have bytes, paths and optional rate caps; messages have bytes.

Shipped topologies live twice: `topologies/` (the user-facing copy at the repo root) and
`simroute/data/topologies/` (inside the wheel, what `default_topology_path()` finds); they are kept
byte-identical and tests/network/test_topology.py fails if they drift.
"""

from __future__ import annotations

from pathlib import Path

from simroute.network.engine import FlowEngine, FlowRecord
from simroute.network.hashing import mix64
from simroute.network.maxmin import maxmin_rates
from simroute.network.messages import MessageModel, MessageModelParams, MessageRoute
from simroute.network.routing import ROUTING_STRATEGIES, ROUTINGS, RoutingStrategy, register_routing
from simroute.network.telemetry import Telemetry
from simroute.network.topology import FABRICS, TIERS, EngineTopology, Fabric, Link, Topology, load_topology

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "topologies"


def default_topology_path() -> Path:
    """The shipped default topology (fattree.yaml), found inside the installed package."""
    return DATA_DIR / "fattree.yaml"


def shipped_topology(name: str) -> Path:
    """Path of a shipped topology by name (`fattree`, `paper-testbed`, `ark-leafspine`, `ark-paper`, `fattree-1024`)."""
    from simroute.errors import UnknownNameError
    p = DATA_DIR / f"{name.removesuffix('.yaml')}.yaml"
    if not p.exists():
        raise UnknownNameError("topology", name, sorted(x.stem for x in DATA_DIR.glob("*.yaml")))
    return p


__all__ = ["FABRICS", "EngineTopology", "Fabric", "FlowEngine", "FlowRecord", "Link", "MessageModel",
           "MessageModelParams", "MessageRoute", "ROUTINGS", "ROUTING_STRATEGIES", "RoutingStrategy", "TIERS",
           "Telemetry", "Topology", "default_topology_path", "load_topology", "maxmin_rates", "mix64",
           "register_routing", "shipped_topology"]
