"""Path selection: ECMP collisions follow balls-in-bins; ARK spreads elephants; least-loaded oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from simroute.network import FlowEngine, load_topology
from simroute.network.hashing import flow_key, mix64
from simroute.scenarios.network import ark_vs_ecmp

from simroute.network import DATA_DIR as TOPO_DIR


@pytest.fixture(scope="module")
def ark_topo():
    return load_topology(TOPO_DIR / "ark-leafspine.yaml")


def expected_max_load(balls: int, bins: int) -> float:
    """Exact E[max bin] of uniform balls-in-bins: P(max <= m) = balls!/bins^balls [x^balls] (sum_{j<=m} x^j/j!)^bins."""
    def p_le(m: int) -> float:
        poly = [1.0]
        base = [1.0 / math.factorial(j) for j in range(m + 1)]
        for _ in range(bins):
            nxt = [0.0] * min(len(poly) + m, balls + 1)
            for i, a in enumerate(poly):
                for j, b in enumerate(base):
                    if i + j <= balls:
                        nxt[i + j] += a * b
            poly = nxt
        return poly[balls] * math.factorial(balls) / bins ** balls if len(poly) > balls else 0.0
    return sum(1.0 - p_le(m) for m in range(balls))


def _busiest_spine(topo, routing: str, seed: int, n: int = 32) -> int:
    env = simpy.Environment()
    eng = FlowEngine(env, topo, routing=routing, seed=seed)
    rng = np.random.default_rng(seed + 1000)
    src = [g for g in topo.gpus if topo.leaf_of(g) == 0]
    dst = [g for g in topo.gpus if topo.leaf_of(g) == 1]
    for _ in range(n):
        eng.transfer(src[rng.integers(len(src))], dst[rng.integers(len(dst))], 1e9)
    env.run(until=1e-3)
    counts = eng.spine_counts()
    assert sum(counts.values()) == n
    return max(counts.values())


def test_balls_in_bins_theory():
    assert expected_max_load(32, 4) == pytest.approx(11.1, abs=0.15)     # "~11 on average; balance is 8"


def test_ecmp_collisions_match_balls_in_bins(ark_topo):
    maxima = [_busiest_spine(ark_topo, "ecmp", s) for s in range(300)]
    mean = float(np.mean(maxima))
    theory = expected_max_load(32, 4)
    # 300 trials: standard error ~0.08; the band is ~5 standard errors
    assert abs(mean - theory) < 0.4, (mean, theory)
    assert 10.0 <= mean <= 12.0


def test_ecmp_hash_is_deterministic_and_uses_ports():
    assert flow_key(1, 2, 50000) == flow_key(1, 2, 50000)
    assert flow_key(1, 2, 50000) != flow_key(1, 2, 50001)
    assert mix64(0) == 0xE220A8397B1DCDAF          # splitmix64 reference value: no salted hash()


def test_ark_and_least_loaded_balance_32_elephants(ark_topo):
    assert _busiest_spine(ark_topo, "ark", 0) == 8
    assert _busiest_spine(ark_topo, "least-loaded", 0) == 8


def test_ark_charges_controller_and_releases(ark_topo):
    env = simpy.Environment()
    eng = FlowEngine(env, ark_topo, routing="ark", ark_elephant_bytes=1e6)
    big = eng.transfer("h0.g0", "h1.g0", 25e6)          # 1 ms alone at 25 GB/s
    small = eng.transfer("h0.g1", "h1.g1", 1e5)         # a mouse: plain ECMP, no controller
    env.run()
    lat = sum(l.latency_s for l in ark_topo.path("h0.g0", "h1.g0"))
    assert big.value.end == pytest.approx(25e6 / 25e9 + 4.97e-6 + lat, rel=1e-9)
    assert small.value.end == pytest.approx(1e5 / 25e9 + lat, rel=1e-9)
    assert sum(eng.reserved) == 0                     # every reservation released on completion


def test_ark_beats_ecmp_at_moderate_load(ark_topo, capsys):
    out = ark_vs_ecmp([2500], topology=ark_topo, n_flows=1200, seed=3)
    e, a = out["ecmp"][0], out["ark"][0]
    assert a.mean_fct_s < e.mean_fct_s and a.p95_fct_s < e.p95_fct_s
    assert a.spine_mean_max < e.spine_mean_max                  # busiest spine nearer the average
    assert a.spine_mean_max - a.spine_mean < 0.6 * (e.spine_mean_max - e.spine_mean)
    assert "ARK vs ECMP at qps 2500" in capsys.readouterr().out
