"""Hosts and load as axes of a run: --hosts resizes the topology's family, --qps / --time-scale rescale the
open-loop arrivals and nothing else, an incomplete run says why and exits 1, tier bytes are whole instances."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from simroute.calib import default_profile_path
from simroute.defaults import PAPER_DEPLOYMENT
from simroute.network import shipped_topology
from simroute.network.schema import load_topology_spec
from simroute.scenarios.traces import write_trace
from simroute.sim import RunConfig, simulate
from simroute.sim.arrivals import arrival_load


def _open_loop_trace(path, n=20, gap_s=0.5, requester=-1):
    reqs = [{"arrival_s": i * gap_s, "requester_hint": requester, "prompt_tokens": 32, "output_tokens": 4}
            for i in range(n)]
    return write_trace(path, reqs, [{"chunk_id": 0, "tokens": 16, "canonical": True, "holder_hint": -1,
                                     "cached_offset": 0}], name="open-loop")


def _run(trace, **kw):
    cfg = RunConfig(topology=str(shipped_topology("fattree")), trace=str(trace), calib=str(default_profile_path()),
                    **{**PAPER_DEPLOYMENT, **kw})
    return simulate(cfg)


def test_hosts_resize_the_topology_family():
    spec = load_topology_spec(shipped_topology("fattree"), hosts=5)
    base = load_topology_spec(shipped_topology("fattree"))
    assert spec.hosts == 5 and base.hosts == 8
    assert (spec.gpus_per_host, spec.hosts_per_leaf, spec.spines, spec.gpu) == \
        (base.gpus_per_host, base.hosts_per_leaf, base.spines, base.gpu)


def test_a_run_at_other_hosts_has_their_instances(tmp_path):
    trace = _open_loop_trace(tmp_path / "t.parquet", n=4)
    s = _run(trace, hosts=3).summary
    assert s["hosts"] == 3 and s["instances"] == 3 * 8 and s["gpus"] == 24 and s["config"]["hosts"] == 3


@pytest.mark.parametrize("flag, value, scale", [("qps", 8.0, 0.25), ("time_scale", 0.5, 0.5), (None, None, 1.0)])
def test_load_rescales_open_loop_arrivals_only(tmp_path, flag, value, scale):
    """20 requests 0.5 s apart are 2 requests/s: --qps 8 is a time scale of 1/4, recorded in the summary."""
    trace = _open_loop_trace(tmp_path / "t.parquet")
    load = arrival_load(str(trace), 20, qps=value if flag == "qps" else None,
                        time_scale=value if flag == "time_scale" else None)
    assert load.trace_qps == pytest.approx(2.0) and load.time_scale == pytest.approx(scale)
    res = _run(trace, **({flag: value} if flag else {}))
    s = res.summary
    assert s["load"]["time_scale"] == pytest.approx(scale) and s["load"]["offered_qps"] == pytest.approx(2.0 / scale)
    arrivals = np.sort(res.tables["requests"].column("arrival_s").to_numpy())
    assert arrivals == pytest.approx(np.arange(20) * 0.5 * scale)
    assert s["completed"] == 20 and (s["config"].get(flag) == value if flag else True)


def test_qps_and_time_scale_together_are_refused(tmp_path):
    from simroute.errors import ConfigurationError
    with pytest.raises(ConfigurationError, match="not both"):
        RunConfig(topology="fattree", trace="agents-default", calib="h100-ibgda", qps=2.0, time_scale=0.5)


def test_an_incomplete_run_says_why_and_exits_1(cli, tmp_path):
    """A trace naming requester 100 on an 8-instance cluster: every request is dropped; the run keeps its outputs,
    prints the reason with what to change on one line, and exits 1 (0 with --min-completion 0)."""
    trace = _open_loop_trace(tmp_path / "t.parquet", n=5, requester=100)
    code, out, err = cli("run", "--trace", trace, "--max-requests", 5, "-o", tmp_path / "r")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and "Traceback" not in err
    assert lines[0].startswith("simroute run: completed 0 of 5 requests: 5 requester out of range (the trace names "
                               "more instances than the cluster has")
    assert (tmp_path / "r" / "summary.json").exists()
    code, _, err = cli("run", "--trace", trace, "--min-completion", 0, "-o", tmp_path / "r2")
    assert code == 0 and "completed 0 of 5" in err


def test_tier_bytes_are_whole_instances(tmp_path):
    """The network carries one TP rank pair's share; a tier's bytes are tp x that, the per-GPU share kept."""
    from simroute.scenarios.traces import single_chunk_trace
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=8, holder=0, output_tokens=1)
    s = _run(trace, tp=4, model="deepseek-v2-lite", policy="always-fetch").summary
    net = s["network"]
    assert net["bytes_by_tier_per_gpu"] and set(net["bytes_by_tier"]) == set(net["bytes_by_tier_per_gpu"])
    for tier, per_gpu in net["bytes_by_tier_per_gpu"].items():
        assert net["bytes_by_tier"][tier] == pytest.approx(4 * per_gpu)
    assert net["bytes_by_tier"]["nic-leaf"] == pytest.approx(2 * s["bytes"]["fetch"], rel=1e-6)   # up and down


def test_agents_at_a_qps_arrive_at_that_rate_in_order(tmp_path):
    from simroute.workload import generate
    trace = generate("agents", tmp_path / "a.parquet", seed=3,
                     params={"documents": 3, "subagents": 100, "requests_per_agent": 5, "qps": 40.0})
    r = pq.read_table(trace / "requests.parquet").to_pandas()
    a = r["arrival_s"].to_numpy()
    assert (r["after_id"] < 0).all() and np.all(np.diff(a) >= 0)
    assert (len(a) - 1) / (a[-1] - a[0]) == pytest.approx(40.0, rel=0.1)       # 1,503 Poisson arrivals
    for _, g in r.groupby("session"):
        assert np.all(np.diff(g["arrival_s"].to_numpy()) >= 0)
    roots = r[r["parent_id"] < 0]
    for root_pos, root in roots.iterrows():
        children = r[r["parent_id"] == root_pos]
        assert len(children) == 500 and (children["arrival_s"] >= root["arrival_s"]).all()
    again = generate("agents", tmp_path / "b.parquet", seed=3,
                     params={"documents": 3, "subagents": 100, "requests_per_agent": 5, "qps": 40.0})
    assert pq.read_table(again / "requests.parquet").equals(pq.read_table(trace / "requests.parquet"))


def test_a_run_without_cross_instance_reuse_says_policies_cannot_differ(cli, tmp_path):
    trace = _open_loop_trace(tmp_path / "t.parquet", n=3)
    code, out, err = cli("run", "--trace", trace, "--model", "deepseek-v2-lite", "--tp", 1, "-o", tmp_path / "r")
    assert code == 0, err
    assert "no policy can differ on this trace" in " ".join(out.split())
    fetch = tmp_path / "f.parquet"
    from simroute.scenarios.traces import single_chunk_trace
    single_chunk_trace(fetch, requester=8, holder=0)
    code, out, err = cli("run", "--trace", fetch, "--model", "deepseek-v2-lite", "--tp", 1, "-o", tmp_path / "r2")
    assert code == 0 and "no policy can differ" not in " ".join(out.split())


def test_an_idle_engine_breaks_a_hold_and_wait_deadlock():
    """The default trace on 2 hosts: one instance's waiting sub-agent requests hold the copies they fetched, which
    fill the HBM their document's 96k-token root needs to be admitted; with no event left, FCFS admission stalled
    26 of 100 requests. The idle engine admits the first waiting request that fits; all complete."""
    from simroute.sim import Simulation
    from simroute.sim.config import default_trace_path
    sim = Simulation(RunConfig(topology="fattree", trace=str(default_trace_path()), calib="h100-ibgda", hosts=2,
                               max_requests=100))
    s = sim.run().summary
    assert s["completed"] == 100 and s["dropped_by_reason"] == {}
    assert all(not engine.waiting and not engine.running for engine in sim.ctx.engines.engines)
