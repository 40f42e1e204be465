"""A run's flows replay as they ran: `simroute flows replay RUN -t TOPOLOGY` on the run's own net_flows.parquet.

What the comparison covers: every bulk flow the run finished (here prefill -> decode KV transfers; routed
queries and partials are latency-bound messages, not flows, and leave bulk rates alone), each replayed from
its recorded start (+ routing controller delay), bytes, pinned path and rate cap on the run's topology. Two
runs: ECMP on ark-paper, where most flows are slowed by sharing links (rates set by max-min alone, no cap
binds), and ARK on fattree, where every flow's cap binds and each waits for the controller first.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from simroute.calib import default_profile_path
from simroute.network import load_topology, shipped_topology
from simroute.network.routing import ARK_HASH_S, ARK_LOOKUP_S
from simroute.scenarios.ark import MODEL, disagg_trace
from simroute.sim import RunConfig, simulate

RUNS = {"network": ("ark-paper", "ecmp"), "capped": ("fattree", "ark")}


def _run(trace: Path, out: Path, topology: str, routing: str, **kw) -> Path:
    cfg = RunConfig(topology=str(shipped_topology(topology)), trace=str(trace), calib=str(default_profile_path()),
                    routing=routing, seed=1, model=MODEL, tp=1, decode_steps_per_event=64, **kw)
    simulate(cfg, out)
    return out


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return disagg_trace(tmp_path_factory.mktemp("flows") / "pd.parquet", qps=100, duration_s=1, seed=1)


@pytest.fixture(scope="module")
def runs(trace, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    return {name: _run(trace, root / name, *spec) for name, spec in RUNS.items()}


def _flows(run_dir: Path):
    return pq.read_table(run_dir / "net_flows.parquet").to_pandas()


def _replay(cli, flows: Path, topology: str, out: Path):
    code, stdout, err = cli("flows", "replay", str(flows), "-t", topology, "-o", str(out), "--json")
    assert code == 0, err
    return pq.read_table(out).to_pandas(), json.loads(stdout), err


def _alone_s(flows, topology) -> np.ndarray:
    """Each flow's FCT had it been alone: controller delay + bytes at min(cap, slowest link) + path latency."""
    links = topology.links
    slowest = np.array([min(links[i].capacity_Bps for i in path) for path in flows["links"]])
    latency = np.array([sum(links[i].latency_s for i in path) for path in flows["links"]])
    return flows["delay_s"] + flows["nbytes"] / np.minimum(flows["rate_cap_Bps"], slowest) + latency


@pytest.mark.parametrize("name", list(RUNS))
def test_each_flow_records_its_pinned_path_cap_and_delay(runs, name):
    topo_name, routing = RUNS[name]
    topology = load_topology(shipped_topology(topo_name))
    flows = _flows(runs[name])
    assert len(flows) == 100 and set(flows["tag"]) == {"pd"}
    links = topology.links
    for src, dst, path, n in zip(flows["src"], flows["dst"], flows["links"], flows["n_links"]):
        hops = [links[i] for i in path]
        assert len(hops) == n and hops[0].src == src and hops[-1].dst == dst
        assert all(a.dst == b.src for a, b in zip(hops, hops[1:]))       # a connected path, in order
    assert np.isfinite(flows["rate_cap_Bps"]).all() and (flows["rate_cap_Bps"] > 0).all()
    delays = set(flows["delay_s"])
    assert delays == ({0.0} if routing == "ecmp" else {0.0, ARK_HASH_S + ARK_LOOKUP_S})
    meta = pq.read_table(runs[name] / "net_flows.parquet").schema.metadata
    assert meta[b"simroute.topology"] == topo_name.encode() and meta[b"simroute.flows_unfinished"] == b"0"


@pytest.mark.parametrize("name", list(RUNS))
def test_replaying_a_runs_flows_gives_its_fcts(runs, cli, tmp_path, name):
    topo_name, _routing = RUNS[name]
    flows = _flows(runs[name])
    replayed, figures, _err = _replay(cli, runs[name], topo_name, tmp_path / "replayed.parquet")
    assert figures["flows"] == len(flows)
    np.testing.assert_allclose(replayed["fct_s"], flows["fct_s"], rtol=1e-12, atol=0)
    np.testing.assert_allclose(replayed["finish_s"], flows["end_s"], rtol=1e-12, atol=0)
    slowed = flows["fct_s"] > _alone_s(flows, load_topology(shipped_topology(topo_name))) * (1 + 1e-9)
    if name == "network":       # the agreement is max-min sharing's, not lone flows'
        assert slowed.mean() > 0.3


def _without(run_dir: Path, column: str, tmp_path: Path) -> Path:
    table = pq.read_table(run_dir / "net_flows.parquet")
    path = tmp_path / f"without-{column}.parquet"
    pq.write_table(table.drop_columns([column]), path)
    return path


@pytest.mark.parametrize("column", ["rate_cap_Bps", "delay_s"])
def test_the_cap_and_the_delay_are_what_make_it_agree(runs, cli, tmp_path, column):
    flows = _flows(runs["capped"])
    replayed, *_ = _replay(cli, _without(runs["capped"], column, tmp_path), "fattree", tmp_path / "r.parquet")
    rel = np.abs(replayed["fct_s"] - flows["fct_s"]) / flows["fct_s"]
    assert rel.max() > 1e-6          # the controller's microseconds of ~80 ms transfers; the match is 1e-12


def test_flows_of_another_topology_fail_with_one_line(runs, cli):
    code, _out, err = cli("flows", "replay", str(runs["network"]), "-t", "fattree")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "net_flows.parquet" in err and "links" in err and "ark-paper" in err


def test_an_older_runs_flows_without_link_ids_fail_with_one_line(runs, cli, tmp_path):
    code, _out, err = cli("flows", "replay", str(_without(runs["network"], "links", tmp_path)), "-t", "ark-paper")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "'links'" in err and "before link ids were recorded" in err


def test_a_bad_delay_and_a_directory_without_flows_fail_with_one_line(runs, cli, tmp_path):
    table = pq.read_table(runs["capped"] / "net_flows.parquet")
    delay = table.column("delay_s").to_numpy().copy()
    delay[3] = -1.0
    bad = tmp_path / "bad.parquet"
    pq.write_table(table.set_column(table.column_names.index("delay_s"), "delay_s", [delay]), bad)
    code, _out, err = cli("flows", "replay", str(bad), "-t", "fattree")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'delay_s'" in err and "row 3" in err
    code, _out, err = cli("flows", "replay", str(tmp_path), "-t", "fattree")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "without net_flows.parquet" in err


def test_a_run_stopped_with_flows_running_says_so(trace, cli, tmp_path):
    out = _run(trace, tmp_path / "stopped", "ark-paper", "ecmp", until_s=0.5)
    unfinished = int(pq.read_table(out / "net_flows.parquet").schema.metadata[b"simroute.flows_unfinished"])
    assert unfinished > 0
    _replayed, _figures, err = _replay(cli, out, "ark-paper", tmp_path / "r.parquet")
    assert f"{unfinished} flows still running" in err


def test_a_telemetry_exports_flows_replay_too(cli, tmp_path):
    """The flow engine alone: three transfers sharing a NIC (one capped), exported with `to_parquet`."""
    import simpy

    from simroute.network import FlowEngine
    topology = load_topology(shipped_topology("fattree"))
    env = simpy.Environment()
    engine = FlowEngine(env, topology, seed=3)
    for i, cap in enumerate((None, 5e9, None)):
        env.timeout(i * 1e-3).callbacks.append(lambda _e, cap=cap: engine.transfer("h0.g0", "h1.g0", 2e8,
                                                                                  rate_cap_Bps=cap))
    env.run()
    engine.telemetry.to_parquet(tmp_path / "export")
    flows = pq.read_table(tmp_path / "export" / "flows.parquet").to_pandas()
    assert sorted(flows["rate_cap_Bps"]) == [5e9, np.inf, np.inf]
    replayed, *_ = _replay(cli, tmp_path / "export", "fattree", tmp_path / "r.parquet")
    np.testing.assert_allclose(replayed["fct_s"], flows["fct_s"], rtol=1e-12, atol=0)
    slowest = min(topology.links[i].capacity_Bps for i in flows["links"][0])
    assert flows.loc[flows["rate_cap_Bps"] == np.inf, "fct_s"].max() > 1.2 * 2e8 / slowest   # they shared
