"""The simulator's tensor-parallel shortcut against every rank's flows, per shipped topology (issue 36, item 5).

A run puts a transfer between two instances of tp GPUs on the fabric as one flow of 1/tp of its bytes between
the instances' first GPUs and takes the other rank pairs to ride parallel links. `Topology.rank_planes(tp)`
says, per kind, whether that holds within an NVLink domain and across domains. Here both are built through the
FlowEngine on every shipped topology: the shortcut (rank 0's flows) and every rank's flows (rank r of one
instance to rank r of the other, 1/tp of the bytes each), each transfer's ranks pinned to one path index (the
same for all its ranks, different across transfers). Where `rank_planes` says it holds, every rank's flow
finishes when the shortcut's does and the links carry the shortcut's loads tp times over (each on its own
plane); where it says it does not, the busiest shared link carries tp times the shortcut's bytes.

On the shipped topologies: within a domain it holds everywhere (NVSwitch ports, NVLink pairs, the NVL72 rack's
switch); across domains it holds on paper-testbed (one leaf), rail-optimized and gb200-nvl72 (a rail per rank),
and not on fattree, fattree-1024, ark-leafspine and ark-paper (a host's GPUs share their leaf's uplinks).
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from simroute.network import FlowEngine, load_topology, shipped_topology
from simroute.shipped import shipped_names

HOLDS_ACROSS = {"paper-testbed": True, "rail-optimized": True, "gb200-nvl72": True, "fattree": False,
                "fattree-1024": False, "ark-leafspine": False, "ark-paper": False}
TRANSFER_BYTES = 64e6
MAX_TRANSFERS = 16


@pytest.fixture(scope="module", params=shipped_names("topology"))
def topology(request):
    return load_topology(shipped_topology(request.param))


def _transfers(t, tp: int, across: bool) -> list[tuple[int, int]]:
    """(source, destination) first GPUs of instance pairs. Across: each instance to the one at the same place
    half the domains further on (another leaf or rail group where there are several). Within: each instance to
    the next one of its domain."""
    firsts = list(range(0, len(t.gpus), tp))
    if across:
        domains = sorted({t.domain_of(g) for g in firsts})
        per_domain = len(t.gpus) // len(domains)
        shift = per_domain * max(1, len(domains) // 2)
        pairs = [(g, (g + shift) % len(t.gpus)) for g in firsts if len(domains) > 1]
    else:
        pairs = [(a, b) for a, b in zip(firsts, firsts[1:]) if t.domain_of(a) == t.domain_of(b)]
    return pairs[:MAX_TRANSFERS]


def _run(t, flows: list[tuple[int, int, int]], tp: int) -> tuple[list[float], np.ndarray]:
    """FCT of each flow (src, dst, path index) of TRANSFER_BYTES / tp, and every link's bytes."""
    env = simpy.Environment()
    engine = FlowEngine(env, t, mode="objects")      # the max-min rates of every mode; no compiled kernel to load
    events = [engine.transfer(t.gpus[src], t.gpus[dst], TRANSFER_BYTES / tp, path_index=index)
              for src, dst, index in flows]
    env.run()
    engine.telemetry.flush(env.now)
    return [event.value.end - event.value.start for event in events], engine.telemetry.link_bytes


def _loads_by_tier(t, link_bytes: np.ndarray) -> dict[str, list[float]]:
    loads: dict[str, list[float]] = {}
    for link in t.links:
        if link_bytes[link.id] > 0:
            loads.setdefault(link.tier, []).append(float(link_bytes[link.id]))
    return {tier: sorted(values) for tier, values in loads.items()}


@pytest.mark.parametrize("across", [True, False], ids=["across-domains", "within-a-domain"])
@pytest.mark.parametrize("half", [False, True], ids=["tp-host", "tp-half-host"])
def test_one_rank_pair_against_every_rank(topology, across, half):
    t = topology
    tp = t.spec.gpus_per_host // (2 if half else 1)
    transfers = _transfers(t, tp, across)
    if not transfers:
        pytest.skip(f"{t.name}: no instance pair of tp {tp} {'across domains' if across else 'in one domain'}")
    planes = t.rank_planes(tp)
    holds = planes.across_domains if across else planes.within_domain
    if across:
        assert holds == HOLDS_ACROSS[t.name], planes.why
    indices = [k % t.n_choices(src, dst) for k, (src, dst) in enumerate(transfers)]
    shortcut_fct, shortcut_bytes = _run(t, [(src, dst, i) for (src, dst), i in zip(transfers, indices)], tp)
    every_fct, every_bytes = _run(t, [(src + rank, dst + rank, i) for (src, dst), i in zip(transfers, indices)
                                      for rank in range(tp)], tp)
    shortcut, every = _loads_by_tier(t, shortcut_bytes), _loads_by_tier(t, every_bytes)
    assert every_bytes.sum() == pytest.approx(tp * shortcut_bytes.sum(), rel=1e-9)   # every byte crosses somewhere
    if holds:
        assert every_fct == pytest.approx([fct for fct in shortcut_fct for _rank in range(tp)], rel=1e-9)
        assert every.keys() == shortcut.keys()
        for tier, loads in shortcut.items():        # tp planes, each loaded as rank 0's
            assert every[tier] == pytest.approx(sorted(loads * tp), rel=1e-9), tier
    else:
        # each transfer's ranks leave their host's leaf on one uplink (the pinned path's), which the shortcut
        # loads with one rank's bytes: the busiest switch link carries tp times as much, and the flows take longer
        switch_tier = "leaf-spine"
        assert max(every[switch_tier]) == pytest.approx(tp * max(shortcut[switch_tier]), rel=1e-9)
        assert max(every_fct) > max(shortcut_fct)


def test_the_report_covers_every_shipped_topology():
    assert set(HOLDS_ACROSS) == set(shipped_names("topology"))
    for name, holds in HOLDS_ACROSS.items():
        t = load_topology(shipped_topology(name))
        planes = t.rank_planes(t.spec.gpus_per_host)
        assert planes.within_domain and planes.across_domains == holds and planes.why, name
    with pytest.raises(ValueError, match="does not divide"):
        t.rank_planes(3)
