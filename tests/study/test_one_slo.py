"""One SLO definition (simroute/sim/slo.py) reaching every report: a run's summary, a study's points and a plan's
memo measure attainment against the SLO the user gave, and an SLO that cannot be read is one line, exit 2.
Then a plan over a constructed (fake) evaluator whose host counts are not monotone: the answer is the smallest
count that meets, and the non-monotone edge is reported in plan.json, plan.md and the report."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

import numpy as np
import pandas as pd
import pytest

from simroute.sim import slo as slos
from studyutil import write_study

SLO = "p99 ttft_ms <= 400 and p99 tpot_ms <= 30"       # none of the commands' defaults


def _attainment_by_hand(run_dir, ttft_ms: float, tpot_ms: float) -> float:
    req = pd.read_parquet(run_dir / "requests.parquet")
    done = req[req.status == "completed"]
    ok = (done.ttft_s * 1e3 <= ttft_ms) & ((done.tpot_s * 1e3 <= tpot_ms) | (done.output_tokens <= 1))
    return float(ok.mean())


def test_parse_reads_and_joins_and_refuses_in_one_line():
    slo = slos.parse(["p99 ttft_ms <= 400", "p99 tpot_ms <= 30"])
    assert slo.text == SLO and slos.parse(SLO) == slo
    assert slos.parse("p99 e2e_ms <= 5").conditions[0].metric == "e2e_ms"     # a digit in the name: once unreadable
    assert {metric: [str(c) for c in cs] for metric, cs in slo.per_request().items()} == {
        "ttft_ms": ["ttft_ms_p99 <= 400"], "tpot_ms": ["tpot_ms_p99 <= 30"]}
    for bad, words in [("", "at least one condition"), ("p99 ttft_ms <= 1 and p99 ttft_ms <= 1", "given twice"),
                       ("slo_attainment >= 0.9", "give one too"), ("p99 ttfb_ms <= 5", "unknown SLO metric"),
                       ("p99 ttft_ms <= -5", "can never hold"), ("p99 ttft_ms <= 1 and", "cannot read")]:
        with pytest.raises(ValueError, match=words) as caught:
            slos.parse(bad)
        assert "\n" not in str(caught.value)


def test_attainment_is_per_request_against_each_latency_condition():
    slo = slos.parse("p99 ttft_ms <= 100 and mean e2e_ms <= 1000 and p99 tpot_ms <= 10")
    latencies = {"ttft_ms": np.array([50.0, 150.0, 50.0, 50.0]), "e2e_ms": np.array([500.0, 500.0, 2000.0, 900.0]),
                 "tpot_ms": np.array([5.0, 5.0, 5.0, np.nan])}
    # request 1 fails TTFT, 2 fails e2e; 3 has one output token (no TPOT): it meets
    assert slos.attainment(slo, latencies, np.array([4, 4, 4, 1])) == pytest.approx(2 / 4)
    assert slos.attainment(slos.parse("output_tokens_per_s_per_gpu >= 1"), latencies, np.array([4] * 4)) is None


def test_run_summary_is_judged_by_the_users_slo_not_a_default(cli, tmp_path):
    out = tmp_path / "r"
    code, stdout, err = cli("run", "--max-requests", 40, "--slo", "p99 ttft_ms <= 400", "--slo", "p99 tpot_ms <= 30",
                            "-o", out)
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["slo"] == SLO and summary["slo"]["text"] == SLO
    assert summary["slo"]["attainment"] == pytest.approx(_attainment_by_hand(out, 400, 30))
    row = slos.flatten(summary)
    served = summary["slo"]["served"]
    assert summary["slo"]["met"] == (row["ttft_ms_p99"] <= 400 and row["tpot_ms_p99"] <= 30 and served)
    assert f"SLO {SLO}: " in stdout
    default = slos.JOINER.join(slos.DEFAULT_SLO)
    assert default == "p99 ttft_ms <= 2000 and p99 tpot_ms <= 50"
    from simroute.sim import RunConfig
    assert RunConfig(topology="t", trace="t", calib="c").slo == default


@pytest.mark.parametrize("args, flag", [(("run", "--slo", "p99 ttfb_ms <= 5"), "'--slo'"),
                                        (("run", "--slo", "p99 ttft_ms <= 1 and"), "'--slo'"),
                                        (("plan", "--slo", "slo_attainment >= 0.9"), "'--slo'"),
                                        (("plan", "--slo", "p99 tpot_ms <= 5", "--slo", "p99 tpot_ms <= 5"),
                                         "'--slo'")])
def test_slo_errors_are_one_line_exit_2_before_any_output(cli, tmp_path, args, flag):
    code, out, err = cli(*args, "-o", tmp_path / "o")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and flag in err
    assert not (tmp_path / "o").exists()


STUDY = """
name: one-slo
base:
  topology: fattree
  model: deepseek-v2-lite
  tp: 1
  trace: {generate: corpus, params: {requests: 16, chunks: 8, instances: 64, output_tokens: 8}}
axes:
  policy: [always-fetch, always-route]
seeds: 1
slo: "p99 ttft_ms <= 400 and p99 tpot_ms <= 30"
"""


def test_a_studys_slo_reaches_every_run_and_its_attainment_column(tmp_path):
    from simroute.study import Store, load_study, run_study, write_report
    study = load_study(write_study(tmp_path, STUDY))
    assert study.base["slo"] == SLO
    run = run_study(study, tmp_path / "out", jobs=1, progress=False)
    assert run.failed == 0
    frame = Store(tmp_path / "out").read()
    for row in frame.to_dict("records"):
        run_dir = tmp_path / "out" / "runs" / row["key"]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["slo"]["text"] == SLO
        assert row["slo_attainment"] == pytest.approx(_attainment_by_hand(run_dir, 400, 30))
    assert f"SLO of this study: {SLO}" in write_report(tmp_path / "out", fmt="md")


ONE_SLO_CASES = [
    (STUDY.replace("axes:\n  policy: [always-fetch, always-route]\n", "").replace(
        "seeds: 1", "seeds: 1\nsearch: {field: hosts, goal: min, lo: 1, hi: 2, slo: 'p99 ttft_ms <= 1'}"), "search.slo"),
    (STUDY.replace("  tp: 1", "  tp: 1\n  slo: 'p99 ttft_ms <= 1'"), "base.slo"),
    (STUDY.replace("  policy: [always-fetch, always-route]", "  slo: ['p99 ttft_ms <= 1', 'p99 ttft_ms <= 2']"),
     "axes.slo")]


@pytest.mark.parametrize("text, field", ONE_SLO_CASES)
def test_a_study_has_one_slo(cli, tmp_path, text, field):
    code, out, err = cli("sweep", write_study(tmp_path, text), "-o", tmp_path / "out", "-j", 1)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"field '{field}'" in err and "a study has one SLO" in err
    assert not (tmp_path / "out").exists()


# ---- a plan over a constructed evaluator ---------------------------------------------------------------------
def _fake_summary(hosts: int, policy: str) -> dict:
    """A run summary as the simulator writes it, with TPOT p99 set by the constructed case: always-route meets
    30 ms at 1 host and from 6 hosts, not at 2-5 (a dip); paper meets from 3 hosts on."""
    meets = (hosts == 1 or hosts >= 6) if policy == "always-route" else hosts >= 3
    tpot = 20.0 if meets else 45.0
    stats = lambda value: {"mean": value, "p50": value, "p95": value, "p99": value, "max": value}
    summary = {"requests": 10, "completed": 10, "dropped": 0, "ttft_ms": stats(100.0), "tpot_ms": stats(tpot),
               "e2e_ms": stats(500.0), "bytes": {"route": 0.0, "fetch": 0.0, "local": 0.0, "pd_transfer": 0.0},
               "primitive_counts": {"route": 0, "fetch": 0, "local": 0, "resident": 0, "first-touch": 0},
               "serving": {"throughput_per_gpu": {"output_tokens_per_s": 800.0 / hosts}},
               "network": {"max_link_utilisation": 0.1 * hosts, "bottlenecks": {"most_saturated_tier": None}},
               "engine": {"hbm": {"capacity_gb_per_gpu": 141.0, "weights_gb_per_gpu": 41.0,
                                  "at_peak": {"running_kv_gb": 50.0}}, "preemptions": 0},
               "holders": {"max_busy_share": 0.3}, "load": {"overloaded": False}, "gpus": 8 * hosts, "hosts": hosts}
    summary["slo"] = {"attainment": 1.0 if meets else 0.0}
    return summary


class FakeBackend:
    """Answers every point from `_fake_summary` (no simulation): the plan's search, answer and memo alone."""

    name = "fake"

    def map_unordered(self, tasks: Iterable[dict]) -> Iterator[dict]:
        for task in tasks:
            payload = task["payload"]
            yield {"key": task["key"], "summary": _fake_summary(int(payload["hosts"]), payload["policy"]),
                   "perf": None, "tables": {}, "error": None}

    def close(self) -> None:
        pass


def test_a_plan_reports_the_non_monotone_host_counts_of_a_constructed_case(tmp_path):
    import yaml

    from simroute.study import load_study, run_study
    from simroute.study.plan import PlanRequest, write_plan
    request = PlanRequest(trace={"generate": "corpus", "params": {"requests": 10}}, model="deepseek-v2-lite", tp=1,
                          policy=("always-route", "paper"), compare=(), slo=("p99 tpot_ms <= 30",), hosts_max=8,
                          seeds=1)
    doc = request.study_document(name="fake")
    out = tmp_path / "plan"
    study = load_study(out / "plan.yaml", document=doc)
    assert study.search.coarse == 5 and study.base["slo"] == "p99 tpot_ms <= 30"
    run_study(study, out, backend=FakeBackend(), progress=False)
    answer, memo = write_plan(out, yaml.safe_dump(doc))
    route, paper = answer["deployments"]["always-route"], answer["deployments"]["paper"]
    # always-route: the grid 1, 2, 3, 5, 8 sees 1 met, 2-5 not, 8 met; refinement finds 6 met and stops at 5
    assert {probe["hosts"]: probe["met"] for probe in route["probes"]} == {1: 1, 2: 0, 3: 0, 5: 0, 6: 1, 8: 1}
    assert (route["hosts"], route["status"], route["nonmonotone"]) == (1, "bound", [{"meets": 1, "fails": 2}])
    assert (paper["hosts"], paper["status"], paper["nonmonotone"]) == (3, "found", [])
    assert (answer["deployment"], answer["answer_gpus"]) == ("always-route", 8)
    assert answer["nonmonotone"] == [{"deployment": "always-route", "meets": 1, "fails": 2}]
    text = memo.read_text()
    assert "**Answer: 8 GPUs (1 host)** with always-route" in text
    assert "always-route: meets at 1 host, fails at 2" in text
    assert "| always-route | 1 | 8 | bound | 1 meets, 2 fails" in text
    # the frontier: throughput per GPU against TPOT, none beaten on both; the met points all at 20 ms
    assert [(point["deployment"], point["hosts"]) for point in answer["frontier"]] == [("always-route", 1)]
    assert answer["frontier"][0]["busiest"] == "HBM 50%"          # 50 GB of KV in 141 - 41 GB of room


def test_paper_only_candidates_pick_papers_fewest(tmp_path):
    import yaml

    from simroute.study import load_study, run_study
    from simroute.study.plan import PlanRequest, write_plan
    request = PlanRequest(trace={"generate": "corpus", "params": {"requests": 10}}, model="deepseek-v2-lite", tp=1,
                          policy="paper", compare=("always-route",), slo=("p99 tpot_ms <= 30",), hosts_max=8,
                          seeds=1)
    doc = request.study_document(name="fake")
    out = tmp_path / "plan"
    run_study(load_study(out / "plan.yaml", document=doc), out, backend=FakeBackend(), progress=False)
    answer, _ = write_plan(out, yaml.safe_dump(doc))
    assert answer["deployment"] == "paper" and answer["answer_hosts"] == 3       # always-route's 1 is compared only
    assert answer["deployments"]["always-route"]["candidate"] is False
