"""ECMP hashing switch by switch, and ARK's port search, counted over many flow keys (deterministic: SplitMix64).

Hop-by-hop ECMP (docs/NETWORK.md, "ECMP is hashed switch by switch"): every upward switch hashes the flow's
5-tuple with its own salt (seeded by the run's seed and the switch's id) modulo its next hops. So two switches
given the same key choose independently (they agree on a port about 1 time in `ports`, not always), a second seed
redraws every choice, a fat-tree's aggregation switch picks its core independently of the leaf's choice of
aggregation switch, and the key covers the whole 5-tuple. ARK's elephant keeps the source port its path hashes to."""

from __future__ import annotations

import pytest

from simroute.network import load_topology, shipped_topology
from simroute.network.hashing import ROCE_DPORT, SPORT_MAX, SPORT_MIN, flow_key, mix64
from simroute.network.paths import PathService
from simroute.network.routing import ArkRouting, ArkSettings, EcmpRouting

KEYS = 4000
PORTS = range(SPORT_MIN, SPORT_MIN + KEYS)


@pytest.fixture(scope="module")
def leafspine():
    """8 leaves of one 8-GPU host each, 4 spines."""
    return load_topology(shipped_topology("ark-leafspine"))


@pytest.fixture(scope="module")
def fat_tree():
    """k = 16: 8 aggregation switches per pod, 64 cores; one host (8 GPUs) per leaf."""
    return load_topology(shipped_topology("fattree-1024"))


def _share(pairs) -> float:
    pairs = list(pairs)
    return sum(a == b for a, b in pairs) / len(pairs)


def test_every_spine_takes_about_a_quarter_of_the_keys(leafspine):
    """4000 keys from leaf 0 to leaf 1 over 4 spines: 1000 each, give or take 5 standard deviations (27)."""
    counts = [0] * 4
    for port in PORTS:
        counts[leafspine.ecmp_choice(0, 8, flow_key(0, 8, port), 0)] += 1
    assert all(abs(count - 1000) < 5 * 27.4 for count in counts), counts


def test_two_leaves_hash_one_key_independently(leafspine):
    """The same key at leaf 0 (a flow from GPU 0) and at leaf 1 (from GPU 8), both to leaf 2: they pick the same
    spine for about 1/4 of the keys (each switch has its own salt), not for all of them."""
    keys = [flow_key(0, 16, port) for port in PORTS]
    agree = _share((leafspine.ecmp_choice(0, 16, key, 0), leafspine.ecmp_choice(8, 16, key, 0)) for key in keys)
    assert 0.2 < agree < 0.3, agree


def test_another_seed_redraws_the_choices(leafspine):
    keys = [flow_key(0, 16, port) for port in PORTS]
    agree = _share((leafspine.ecmp_choice(0, 16, key, 0), leafspine.ecmp_choice(0, 16, key, 1)) for key in keys)
    assert 0.2 < agree < 0.3, agree


def test_a_fat_tree_aggregation_switch_picks_its_core_independently_of_the_leafs_choice(fat_tree):
    """Across pods (GPU 0 in pod 0 to GPU 1016 in pod 15) a path is (aggregation switch a, core c), index
    a x 8 + c: the leaf hashes a, then aggregation switch a hashes c with its own salt. c == a for about 1/8 of
    the keys, and every one of the 64 paths is used."""
    assert fat_tree.n_choices(0, 1016) == 64
    choices = [fat_tree.ecmp_choice(0, 1016, flow_key(0, 1016, port), 0) for port in PORTS]
    assert 0.08 < _share(divmod(choice, 8) for choice in choices) < 0.17
    assert set(choices) == set(range(64))


def test_the_flow_key_covers_the_whole_5_tuple():
    """Source, destination, source port and destination port each change the key (UDP, RoCEv2's port by default)."""
    to_b = [flow_key(0, 9, port) for port in PORTS]
    to_c = [flow_key(0, 17, port) for port in PORTS]
    from_d = [flow_key(1, 9, port) for port in PORTS]
    other_dport = [flow_key(0, 9, port, dport=ROCE_DPORT + 1) for port in PORTS]
    assert to_b == [flow_key(0, 9, port, dport=ROCE_DPORT) for port in PORTS]
    for other in (to_c, from_d, other_dport):
        assert all(a != b for a, b in zip(to_b, other))
    assert len(set(to_b)) == KEYS


def _switch_hash(topology, switch: str, key: int, seed: int, ports: int) -> int:
    """One switch's ECMP hash as written out: the key mixed with the switch's salt, SplitMix64 of the seed XOR the
    switch's id, modulo its next hops."""
    return mix64(key ^ mix64(seed ^ topology.switch_id(switch))) % ports


@pytest.mark.parametrize("seed", [0, 7])
def test_each_switch_on_the_way_up_hashes_the_key_with_its_own_salt(leafspine, fat_tree, seed):
    """Leaf-spine: the source leaf picks the spine (4 ports). Fat-tree across pods (leaf 0 in pod 0 to leaf 127 in
    pod 15, 8 ports a switch): the source leaf picks aggregation switch a, then the source pod's aggregation switch
    agg0.a picks core c: path a x 8 + c. Inside a pod (leaf 0 to leaf 1): the source leaf's pick alone."""
    for port in range(SPORT_MIN, SPORT_MIN + 200):
        key = flow_key(0, 16, port)
        assert leafspine.ecmp_choice(0, 16, key, seed) == _switch_hash(leafspine, "leaf0", key, seed, 4)
        key = flow_key(0, 1016, port)
        agg = _switch_hash(fat_tree, "leaf0", key, seed, 8)
        core = _switch_hash(fat_tree, f"agg0.{agg}", key, seed, 8)
        assert fat_tree.ecmp_choice(0, 1016, key, seed) == agg * 8 + core
        key = flow_key(0, 8, port)
        assert fat_tree.ecmp_choice(0, 8, key, seed) == _switch_hash(fat_tree, "leaf0", key, seed, 8)


def test_a_pairs_message_port_is_drawn_from_the_runs_seed(leafspine):
    """Messages of a pair share one queue pair's port: in range, fixed for the run, another for another seed."""
    first, second = PathService(leafspine, seed=0), PathService(leafspine, seed=1)
    pairs = [(a, b) for a in range(0, 64, 3) for b in range(1, 64, 5) if a != b]
    ports = [first.message_sport(a, b) for a, b in pairs]
    assert all(SPORT_MIN <= port <= SPORT_MAX for port in ports)
    assert ports == [first.message_sport(a, b) for a, b in pairs]
    assert sum(port != second.message_sport(a, b) for port, (a, b) in zip(ports, pairs)) > 0.9 * len(pairs)


def test_ark_elephants_keep_the_port_their_path_hashes_to_and_fill_the_spines_evenly(leafspine):
    """16 elephants from leaf 0 to leaf 1, each with a freshly drawn port: ARK searches ports until the hash lands
    on a least-reserved spine, so the returned port hashes to the returned path, the spines take 4 each, and
    releasing every reservation leaves the table empty. ECMP's choice is the drawn port's hash as is."""
    paths = PathService(leafspine, seed=2)
    ark = ArkRouting(paths, ArkSettings(elephant_bytes=1.0))
    ecmp = EcmpRouting(paths, ArkSettings())
    per_spine, reserved = [0] * 4, []
    for flow in range(16):
        src, dst, port = flow % 8, 8 + (3 * flow) % 8, SPORT_MIN + 7919 * flow % (SPORT_MAX - SPORT_MIN)
        plain = ecmp.choose(src, dst, 1e9, port)
        assert plain.path_index == paths.ecmp(src, dst, port) and plain.sport == port and plain.reserved is None
        choice = ark.choose(src, dst, 1e9, port)
        assert paths.ecmp(src, dst, choice.sport) == choice.path_index
        per_spine[choice.path_index] += 1
        reserved.append(choice.reserved)
    assert per_spine == [4, 4, 4, 4]
    for links in reserved:
        paths.release(links)
    assert not any(paths.reservations)
