"""Public engine API: registries (routing strategies, topology kinds), pinned paths, path_share, ARK's threshold."""

from __future__ import annotations

import pytest
import simpy

from simroute.network import (KINDS, ROUTING_STRATEGIES, FlowEngine, RoutingStrategy, load_topology,
                              register_routing)
from simroute.network.routing import ARK_ELEPHANT_BYTES, RouteChoice
from simroute.network.topology import FatTreeFabric, LeafSpineFabric

from simroute.network import DATA_DIR as TOPO_DIR


@pytest.fixture(scope="module")
def ark_topo():
    return load_topology(TOPO_DIR / "ark-leafspine.yaml")


def test_a_new_routing_strategy_is_one_class(ark_topo):
    @register_routing
    class LastSpine(RoutingStrategy):
        """Every multi-path flow on the last equal-cost path."""

        name = "last-spine"

        def choose(self, src_index, dst_index, nbytes, sport):
            return RouteChoice(self.paths.choices(src_index, dst_index) - 1, sport, None, 0.0)

    try:
        env = simpy.Environment()
        eng = FlowEngine(env, ark_topo, routing="last-spine")
        event = eng.transfer("h0.g0", "h1.g0", 1e6)
        env.run()
        assert event.value.spine == f"spine{ark_topo.n_spines - 1}"
        register_routing(LastSpine)                 # the same class again: no change

        class Impostor(LastSpine):
            """Another class under a taken name."""

        with pytest.raises(ValueError, match="'last-spine' is already registered by"):
            register_routing(Impostor)
    finally:
        del ROUTING_STRATEGIES["last-spine"]


def test_a_fat_tree_stands_on_the_switch_layer_of_its_tiers():
    assert KINDS.get("fattree").__name__ == "FatTree"
    assert isinstance(load_topology(TOPO_DIR / "fattree-1024.yaml").fabric, FatTreeFabric)
    assert isinstance(load_topology(TOPO_DIR / "ark-leafspine.yaml").fabric, LeafSpineFabric)


def test_pinned_spine_and_pinned_links(ark_topo):
    env = simpy.Environment()
    eng = FlowEngine(env, ark_topo, routing="ark", ark_elephant_bytes=1.0)
    by_index = eng.transfer("h0.g0", "h1.g0", 1e6, path_index=2)
    links, spine = ark_topo.path_ids(ark_topo.index("h0.g1"), ark_topo.index("h1.g1"), 3)
    by_links = eng.transfer("h0.g1", "h1.g1", 1e6, path=links)
    env.run()
    assert by_index.value.spine == "spine2" and by_links.value.links == links and by_links.value.spine == spine
    assert sum(eng.reserved) == 0                          # pinned flows reserve nothing, even under ARK


def test_path_share_is_what_a_new_flow_would_get(ark_topo):
    env = simpy.Environment()
    eng = FlowEngine(env, ark_topo)
    cap = ark_topo.link("h0.g0", "leaf0").capacity_Bps
    assert eng.path_share("h0.g0", "h1.g0") == cap
    for gpu in ("h1.g0", "h1.g1", "h1.g2"):
        eng.transfer("h0.g0", gpu, 1e12)
    env.run(until=1e-4)
    assert eng.path_share("h0.g0", "h1.g3") == pytest.approx(cap / 4)     # a fourth flow's fair share
    assert eng.path_share("h0.g1", "h1.g3") == pytest.approx(cap)         # another uplink: idle
    assert eng.path_share("h0.g0", "h0.g0") == float("inf")


def test_ark_elephant_threshold_catches_chunk_pulls(ark_topo):
    assert 1e6 < ARK_ELEPHANT_BYTES < 15.9e6
    env = simpy.Environment()
    eng = FlowEngine(env, ark_topo, routing="ark")
    pull = eng.transfer("h0.g0", "h1.g0", 15.9e6)
    mouse = eng.transfer("h0.g1", "h1.g1", 1e5)
    env.run()
    controller = eng.ark.delay_s
    lat = sum(link.latency_s for link in ark_topo.path("h0.g0", "h1.g0"))
    assert pull.value.end == pytest.approx(15.9e6 / 25e9 + controller + lat, rel=1e-9)
    assert mouse.value.end == pytest.approx(1e5 / 25e9 + lat, rel=1e-9)


def test_routing_and_messages_use_the_engine_only_through_its_public_interface():
    """Strategies and the message model read paths through `PathService` and bulk state through the fields
    `MessageHost` declares (`topology`, `paths`, `bulk`, `telemetry`): no private attribute of the engine,
    and not the reservation table or solver state directly."""
    import ast
    from pathlib import Path

    import simroute.network as network
    root = Path(network.__file__).parent
    # MessageHost's fields, read from its source (a compiled module's Protocol keeps no __annotations__)
    host = next(node for node in ast.walk(ast.parse((root / "messages.py").read_text()))
                if isinstance(node, ast.ClassDef) and node.name == "MessageHost")
    allowed = {item.target.id for item in host.body if isinstance(item, ast.AnnAssign)}
    assert allowed == {"topology", "paths", "bulk", "telemetry"}
    for name in ("routing.py", "messages.py", "paths.py"):
        tree = ast.parse((root / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "engine":
                assert node.attr in allowed, f"network/{name}:{node.lineno} reads engine.{node.attr}"
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "engine":
                assert node.attr in allowed, f"network/{name}:{node.lineno} reads self.engine.{node.attr}"
