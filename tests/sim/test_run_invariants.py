"""Simulation invariants (issue 5): completion or a drop reason, conservation, floors, determinism, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from simroute.calib import default_profile_path
from simroute.errors import ConfigurationError
from simroute.network import default_topology_path
from simroute.sim import RunConfig, Simulation, simulate
from simroute.scenarios.traces import single_chunk_trace, write_trace
from simroute.workload import generate
from simroute.defaults import PAPER_DEPLOYMENT


@pytest.fixture(scope="module")
def corpus_trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "corpus.parquet"
    return generate("corpus", path, seed=3, params={"requests": 400, "chunks": 300, "instances": 64,
                                                    "output_tokens": 48})


def _cfg(trace, **kw) -> RunConfig:
    return RunConfig(topology=str(default_topology_path()), trace=str(trace), calib=str(default_profile_path()),
                     **{**PAPER_DEPLOYMENT, **kw})


@pytest.mark.parametrize("policy", ["paper", "adaptive", "always-route", "always-fetch", "always-local"])
def test_every_request_completes_or_is_dropped_with_reason(corpus_trace, policy):
    res = simulate(_cfg(corpus_trace, policy=policy, hbm_gb=34.0))   # 2.6 GB beside 31.4 GB of weights
    req = res.tables["requests"].to_pandas()
    assert len(req) == 400
    assert set(req.status) <= {"completed", "dropped"}
    assert (req[req.status == "dropped"].drop_reason != "").all()
    assert res.summary["completed"] + res.summary["dropped"] == 400
    done = req[req.status == "completed"]
    assert (done.ttft_s > 0).all() and (done.e2e_s >= done.ttft_s).all()
    assert (done.ttft_s >= done.ttft_floor_s - 1e-12).all()     # never below the closed-form floor


def test_policies_pick_what_they_say(corpus_trace):
    for policy, prim in (("always-route", "route"), ("always-fetch", "fetch"), ("always-local", "local")):
        pc = simulate(_cfg(corpus_trace, policy=policy)).summary["primitive_counts"]
        others = [k for k in ("route", "fetch", "local") if k != prim]
        assert pc[prim] > 0 and all(pc[k] == 0 for k in others), (policy, pc)


def test_bytes_conserved(corpus_trace, tmp_path):
    res = simulate(_cfg(corpus_trace, policy="paper"), tmp_path / "out")
    req = res.tables["requests"].to_pandas()
    flows = res.tables["net_flows"].to_pandas()
    links = res.tables["net_links"].to_pandas()
    # Every bulk byte the requests account for rode a flow, and every flow byte is accounted for.
    assert flows.nbytes.sum() == pytest.approx(req.bytes_fetch.sum() + req.bytes_pd.sum(), rel=1e-9)
    # Each flow's bytes crossed each link of its path exactly once.
    assert links.bulk_bytes.sum() == pytest.approx((flows.nbytes * flows.n_links).sum(), rel=1e-6)
    assert res.summary["bytes"]["fetch"] == pytest.approx(req.bytes_fetch.sum())


def test_route_bytes_match_messages(corpus_trace):
    """The network carries one query and one partial message per (requester, holder) per engine event (each
    standing for that event's exchanges): their bytes are a share of the route bytes, never more."""
    sim = Simulation(_cfg(corpus_trace, policy="always-route"))
    res = sim.run()
    sent = sim.ctx.network.message_bytes
    assert 0 < sent <= res.summary["bytes"]["route"]
    assert res.summary["engine"]["holder_partials"]["queries"] > 0


def test_same_seed_identical_outputs_different_seed_differs(corpus_trace, tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    simulate(_cfg(corpus_trace, seed=5), a)
    simulate(_cfg(corpus_trace, seed=5), b)
    simulate(_cfg(corpus_trace, seed=6), c)
    for name in ("summary.json", "requests.parquet", "decisions.parquet", "net_flows.parquet"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    sa, sc = json.loads((a / "summary.json").read_text()), json.loads((c / "summary.json").read_text())
    assert sa["seed"] == 5 and sc["seed"] == 6 and sa["inputs"]["trace"] == sc["inputs"]["trace"]
    ra = pq.read_table(a / "requests.parquet").column("ttft_s").to_numpy()
    rc = pq.read_table(c / "requests.parquet").column("ttft_s").to_numpy()
    assert not np.allclose(ra, rc)   # hash placement and ECMP ports depend on the seed


def test_until_and_max_requests(corpus_trace):
    res = simulate(_cfg(corpus_trace, max_requests=50))
    assert res.summary["requests"] == 50 and res.summary["completed"] == 50
    res = simulate(_cfg(corpus_trace, until_s=2.0))
    s = res.summary
    assert s["dropped"] > 0 and "unfinished at --until" in s["dropped_by_reason"]
    assert s["sim_time_s"] <= 2.0 + 1e-9


def test_requester_out_of_range_is_dropped_with_reason(tmp_path):
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=999, holder=1)
    res = simulate(_cfg(trace))
    assert res.summary["dropped"] == 1 and "requester out of range" in res.summary["dropped_by_reason"]


def test_profile_without_the_topologys_fabric_is_a_clear_error(tmp_path):
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=0, holder=40)
    cfg = RunConfig(**PAPER_DEPLOYMENT, topology=str(default_topology_path()), trace=str(trace),
                    calib=str(Path(default_profile_path()).parent / "paper-all.yaml").replace("paper-all",
                                                                                           "paper-all"))
    simulate(cfg)  # paper-all has every fabric: fine
    bad = tmp_path / "only-nvlink.yaml"
    bad.write_text("schema: simroute.calib/1\nname: nv\ninclude: [%s, %s]\n" % (
        Path(default_profile_path()).parent / "shared.yaml", Path(default_profile_path()).parent / "fabrics" /
        "h100-nvlink4.yaml"))
    with pytest.raises(ConfigurationError, match="h100-ibgda"):
        simulate(RunConfig(**PAPER_DEPLOYMENT, topology=str(default_topology_path()), trace=str(trace), calib=str(bad)))


def test_closed_loop_requests_wait_for_their_parent(tmp_path):
    chunks = [{"chunk_id": 0, "tokens": 2048, "canonical": True, "holder_hint": 9, "cached_offset": 0}]
    reqs = [{"arrival_s": 0.0, "requester_hint": 0, "prompt_tokens": 64, "output_tokens": 32, "chunk_ids": [0],
             "after_id": -1, "think_s": 0.0},
            {"arrival_s": 0.0, "requester_hint": 1, "prompt_tokens": 64, "output_tokens": 32, "chunk_ids": [0],
             "after_id": 0, "think_s": 0.5}]
    trace = write_trace(tmp_path / "closed.parquet", reqs, chunks)
    req = simulate(_cfg(trace)).tables["requests"].to_pandas()
    assert req.arrival_s[1] == pytest.approx(req.arrival_s[0] + req.e2e_s[0] + 0.5)


def test_outputs_are_all_or_nothing(corpus_trace, tmp_path):
    out = tmp_path / "run"
    simulate(_cfg(corpus_trace), out)
    before = (out / "summary.json").read_bytes()
    with pytest.raises(ConfigurationError):
        simulate(_cfg(tmp_path / "missing.parquet"), out)
    assert (out / "summary.json").read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run")]


def test_cli_run_with_no_arguments(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("run")
    assert code == 0, err
    summary = json.loads((tmp_path / "results" / "run" / "summary.json").read_text())
    assert summary["requests"] == summary["completed"] > 0
    assert summary["inputs"]["trace"] and summary["seed"] == 0
    assert "ttft_ms" in out and "simulated" in out


def test_cli_run_bad_trace_exits_nonzero(cli, tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.mkdir()
    code, _, err = cli("run", "--trace", str(bad), "-o", str(tmp_path / "o"))
    assert code == 2 and "bad.parquet" in err and not (tmp_path / "o").exists()


def test_cli_run_json_and_timeline(cli, tmp_path):
    code, out, err = cli("run", "--json", "-o", str(tmp_path / "o"), "--timeline", str(tmp_path / "t.json"),
                         "--policy", "always-route")
    assert code == 0, err
    s = json.loads(out)
    assert s["primitive_counts"]["route"] > 0
    tl = json.loads((tmp_path / "t.json").read_text())
    cats = {e.get("cat") for e in tl["traceEvents"]}
    assert {"request", "iteration"} <= cats


@pytest.mark.parametrize("column, value, words", [
    ("prompt_tokens", -5, "prompt_tokens = -5"), ("arrival_s", "reverse", "not sorted"),
    ("output_tokens", -1, "output_tokens"), ("after_id", 10_000, "earlier request"),
])
def test_bad_trace_values_are_errors_in_run_and_info(tmp_path, column, value, words, cli):
    import pyarrow as pa
    src = generate("corpus", tmp_path / "ok.parquet", seed=1, params={"requests": 50, "chunks": 20,
                                                                      "instances": 8})
    table = pq.read_table(src / "requests.parquet")
    col = table.column(column).to_numpy().copy()
    if value == "reverse":
        col = col[::-1].copy()
    else:
        col[3] = value
    table = table.set_column(table.column_names.index(column), column, pa.array(col, type=table.schema.field(
        column).type))
    bad = tmp_path / "bad.parquet"
    bad.mkdir()
    pq.write_table(table, bad / "requests.parquet")
    (bad / "chunks.parquet").write_bytes((src / "chunks.parquet").read_bytes())
    with pytest.raises(ConfigurationError, match=words):
        simulate(_cfg(bad))
    code, _, err = cli("trace", "info", str(bad))
    assert code == 2 and words.split()[0] in err and "requests.parquet" in err


def test_both_holder_queues_are_observable_over_time(corpus_trace):
    res = simulate(_cfg(corpus_trace, policy="always-fetch", staging_streams=2))
    st = res.tables["staging"].to_pandas()
    assert len(st) > 0 and st.copying.max() <= 2 and st.waiting.min() >= 0
    assert st.waiting.max() == res.summary["holders"]["max_staging_queue"]
    # Routed partial attention is holder GPU work: it lengthens the holders' own engine iterations.
    routed = simulate(_cfg(corpus_trace, policy="always-route")).tables["iterations"].to_pandas()
    assert (routed.holder_work_s > 0).any() and (routed.holder_work_s >= 0).all()
