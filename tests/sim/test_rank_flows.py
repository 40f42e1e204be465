"""Every rank's flow on the fabric (issue 36, item 5): a bulk transfer between TP instances goes as tp rank-pair
flows where the topology's kind says the ranks share links (`Topology.rank_planes`), one pair's flow standing for
all where each rank has its own plane; the summary's tier bytes count every rank either way."""

from __future__ import annotations

import pytest

from simroute.calib import default_profile_path
from simroute.defaults import PAPER_DEPLOYMENT
from simroute.network import load_topology, shipped_topology
from simroute.scenarios.traces import write_trace
from simroute.shipped import shipped_names
from simroute.sim import RunConfig, simulate

TP = 8


def _fetch_trace(path, *, requesters: list[int], holder: int):
    """One request per requester, each fetching its own 8k-token chunk from `holder` at t = 0."""
    chunks = [{"chunk_id": i, "tokens": 8192, "canonical": True, "holder_hint": holder, "cached_offset": 0}
              for i in range(len(requesters))]
    reqs = [{"arrival_s": 0.0, "requester_hint": r, "prompt_tokens": 16, "output_tokens": 1, "chunk_ids": [i],
             "chunk_at_cached_offset": [False]} for i, r in enumerate(requesters)]
    return write_trace(path, reqs, chunks, name="fetch-burst")


def _run(trace, topology: str, rank_flows: str):
    cfg = RunConfig(topology=str(shipped_topology(topology)), trace=str(trace), calib=str(default_profile_path()),
                    **{**PAPER_DEPLOYMENT, "tp": TP, "model": "deepseek-v2-lite", "policy": "always-fetch",
                       "rank_flows": rank_flows, "seed": 3})
    return simulate(cfg).summary


@pytest.fixture(scope="module")
def burst(tmp_path_factory):
    # fattree: 2 hosts per leaf; instances 0-1 on leaf 0, the holder (instance 4, host 4) on leaf 2
    return _fetch_trace(tmp_path_factory.mktemp("rank") / "t.parquet", requesters=[0, 1, 0, 1], holder=4)


def test_on_a_shared_leaf_every_rank_flows_and_the_bytes_are_the_same(burst):
    every, shortcut = _run(burst, "fattree", "auto"), _run(burst, "fattree", "shortcut")
    assert every["network"]["rank_flows"] == {"mode": "auto", "every_rank_within_domain": False,
                                              "every_rank_across_domains": True}
    assert every["network"]["flows"] == TP * shortcut["network"]["flows"] > 0
    # the same work cut into tp flows: every tier carries the same bytes
    assert every["network"]["bytes_by_tier"] == pytest.approx(shortcut["network"]["bytes_by_tier"], rel=1e-9)
    assert every["bytes"]["fetch"] == pytest.approx(shortcut["bytes"]["fetch"], rel=1e-12)
    # eight ranks' flows on their leaf's shared uplinks: never faster than one rank pair alone, here slower
    assert every["network"]["fct_ms"]["mean"] > shortcut["network"]["fct_ms"]["mean"]
    assert every["ttft_ms"]["mean"] >= shortcut["ttft_ms"]["mean"]


def test_where_each_rank_has_its_plane_auto_is_the_shortcut(tmp_path):
    t = load_topology(shipped_topology("rail-optimized"))
    per_host = t.spec.gpus_per_host
    trace = _fetch_trace(tmp_path / "t.parquet", requesters=[0, 0], holder=len(t.gpus) // per_host // 2)
    auto, shortcut, every = (_run(trace, "rail-optimized", mode) for mode in ("auto", "shortcut", "every"))
    assert auto["network"]["rank_flows"]["every_rank_across_domains"] is False
    for key in ("ttft_ms", "bytes"):
        assert auto[key] == shortcut[key]
    assert auto["network"]["bytes_by_tier"] == shortcut["network"]["bytes_by_tier"]
    # forced, every rank's flows ride their own rails: the same times and bytes, tp times the flows
    assert every["network"]["flows"] == TP * auto["network"]["flows"]
    assert every["ttft_ms"]["mean"] == pytest.approx(auto["ttft_ms"]["mean"], rel=1e-9)
    assert every["network"]["bytes_by_tier"] == pytest.approx(auto["network"]["bytes_by_tier"], rel=1e-9)


def test_no_shipped_topology_has_a_tier_both_transfer_classes_cross():
    """`Cluster.tier_planes` scales a tier by one class's choice: a tier crossed both within and across domains
    would mix them (no shipped kind has one)."""
    for name in shipped_names("topology"):
        t = load_topology(shipped_topology(name))
        tp = t.spec.gpus_per_host
        firsts = list(range(0, len(t.gpus), tp))
        first = firsts[0]
        same = [g for g in firsts[1:] if t.domain_of(g) == t.domain_of(first)]
        other = [g for g in firsts if t.domain_of(g) != t.domain_of(first)]
        tiers = [{t.links[link].tier for link in t.path_ids(first, g, 0)[0]} for g in same[:1] + other[-1:]]
        if len(tiers) == 2:
            assert not tiers[0] & tiers[1], name
