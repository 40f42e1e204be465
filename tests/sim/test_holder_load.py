"""Per-holder load of a run (holders.parquet, the summary's `holders` block) from the engines' counters, and
what reads it: the run report, the study store; older run directories read or fail with one line."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from simroute.calib import default_profile_path
from simroute.network import default_topology_path
from simroute.sim import RunConfig, simulate
from simroute.sim.config import default_trace_path
from simroute.sim.metrics import HOLDER_COLUMNS, holder_summary


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("holders") / "run"
    cfg = RunConfig(topology=str(default_topology_path()), trace=str(default_trace_path()),
                    calib=str(default_profile_path()), policy="always-route", max_requests=48)
    res = simulate(cfg, out)
    return out, res, pq.read_table(out / "holders.parquet").to_pandas()


def test_holders_table_is_one_row_per_holder_from_the_engines(run):
    out, res, holders = run
    s = res.summary
    assert list(holders.columns) == list(HOLDER_COLUMNS)
    assert list(holders["holder"]) == list(range(s["instances"]))
    partials = s["engine"]["holder_partials"]
    assert holders["queries"].sum() > 0
    assert holders["queries"].sum() == pytest.approx(partials["queries"], rel=1e-12)
    assert holders["calls"].sum() == pytest.approx(partials["kernel_calls"], rel=1e-12)
    assert holders["work_s"].sum() == pytest.approx(partials["work_s"], rel=1e-12)
    assert holders["work_s"].max() == pytest.approx(partials["busiest_holder_work_s"], rel=1e-12)
    assert holders["charged_s"].sum() == pytest.approx(partials["charged_to_own_iterations_s"], rel=1e-12)
    assert (holders["work_share"] == holders["work_s"] / s["sim_time_s"]).all()


def test_busy_time_and_wait_agree_with_the_iteration_log(run):
    out, res, holders = run
    it = pq.read_table(out / "iterations.parquet").to_pandas()
    busy = it.groupby("instance")["duration_s"].sum().reindex(holders["holder"], fill_value=0.0)
    np.testing.assert_allclose(holders["busy_s"], busy.to_numpy(), rtol=1e-12)
    assert ((holders["busy_share"] > 0) & (holders["busy_share"] <= 1)).all()
    # a requester's iteration is charged the slowest of its holders' waits (its exchanges run in parallel),
    # each holder counts its own: the holders' total is at least the requesters'
    logged = float((it["holder_wait_s"] * it["iterations"]).sum())
    assert logged > 0 and holders["wait_s"].sum() >= logged * (1 - 1e-12)
    answered = holders["calls"] > 0
    assert (holders.loc[answered, "mean_fan_in"] >= 1).all()
    assert (holders.loc[answered, "max_fan_in"] >= holders.loc[answered, "mean_fan_in"]).all()
    assert holders.loc[~answered, "mean_wait_s"].isna().all()


def test_summary_block_is_the_tables_totals_and_its_busiest_row(run):
    out, res, holders = run
    block = res.summary["holders"]
    assert "dispatcher" not in res.summary
    assert not {"batches", "mean_batch", "max_queue", "routed_queries"} & set(block)
    busiest = holders.sort_values(["work_s", "holder"], ascending=[False, True]).iloc[0]
    assert block["busiest"]["holder"] == busiest["holder"]
    assert block["busiest"]["mean_wait_us"] == pytest.approx(busiest["mean_wait_s"] * 1e6)
    assert block["queries_per_call"] == pytest.approx(holders["queries"].sum() / holders["calls"].sum())
    assert block["max_fan_in"] == holders["max_fan_in"].max()
    assert block["mean_wait_us"] == pytest.approx(holders["wait_s"].sum() / holders["calls"].sum() * 1e6)
    assert json.loads((out / "summary.json").read_text())["holders"] == json.loads(json.dumps(block))
    assert res.perf["routed_queries_per_wall_s"] == pytest.approx(block["queries"] / res.perf["wall_s"])


def test_a_run_nobody_routed_in_has_no_busiest_holder():
    table = pa.table({"holder": np.arange(2, dtype=np.int32), **{name: np.zeros(2) for name in
                      ("queries", "calls", "mean_fan_in", "work_s", "work_share", "busy_share", "wait_s",
                       "mean_wait_s")}, "max_fan_in": np.zeros(2, np.int32)})
    block = holder_summary(table)
    assert block["busiest"] is None and block["queries_per_call"] is None and block["mean_fan_in"] is None


def test_report_shows_the_busiest_holders(run, cli):
    out, _res, holders = run
    code, md, err = cli("report", str(out), "--format", "md")
    assert code == 0, err
    section = md.split("## Holders by partial-attention work")[1]
    first = section.splitlines()[4]                        # header, rule, then the busiest holder
    top = holders.sort_values(["work_s", "holder"], ascending=[False, True]).iloc[0]
    assert first.startswith(f"| {int(top['holder'])} | {top['gpu']} |")


def _copy_run(out, tmp_path, holders_table):
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    for name in ("summary.json", "requests.parquet"):
        (run_dir / name).write_bytes((out / name).read_bytes())
    pq.write_table(holders_table, run_dir / "holders.parquet")
    return run_dir


def test_an_older_runs_holders_file_is_read_with_a_note(run, cli, tmp_path):
    """Before the engine counters holders.parquet held the batching server's samples (zeros)."""
    out, _res, _holders = run
    old = pa.table({"holder": np.zeros(1, np.int32), "time_s": [0.0], "queue": np.zeros(1, np.int32),
                    "batch_size": np.zeros(1, np.int32), "batch_duration_s": [0.0]})
    code, md, err = cli("report", str(_copy_run(out, tmp_path, old)), "--format", "md")
    assert code == 0, err
    assert "holders.parquet is from an older simroute" in md and "## Holders" not in md


def test_a_holders_file_missing_a_column_fails_with_one_line(run, cli, tmp_path):
    out, _res, holders = run
    broken = pa.Table.from_pandas(holders.drop(columns=["busy_share"]), preserve_index=False)
    code, _md, err = cli("report", str(_copy_run(out, tmp_path, broken)), "--format", "md")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "holders.parquet" in err and "busy_share" in err and "missing column" in err


def test_study_rows_carry_the_holder_figures_and_old_summaries_give_nan(run):
    from simroute.study.store import flatten
    _out, res, holders = run
    row = flatten(res.summary)
    assert row["holder_max_fan_in"] == holders["max_fan_in"].max()
    assert row["busiest_holder_work_share"] == pytest.approx(holders["work_share"].max())
    old = json.loads(json.dumps(res.summary))
    old["holders"] = {"batches": 0, "routed_queries": 0, "mean_batch": 0.0, "max_queue": 0, "evictions": 0}
    row = flatten(old)
    assert math.isnan(row["holder_queries_per_call"]) and math.isnan(row["busiest_holder_work_share"])
    assert row["evictions"] == 0
