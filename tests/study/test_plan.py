"""`simroute plan` and the study report's capacity answers: the fewest hosts is known by construction, labels
compare as numbers, unfinished and identical points are marked, a trace without reuse says so."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from simroute.scenarios.traces import write_trace
from simroute.study.report import frontier_goal, frontier_value, marks, no_reuse

REQUESTS = 64            # decode-only requests arriving together: each instance decodes ceil(64 / hosts) at once
TPOT_SLO_MS = 14.5       # between the step model's decode time at batch 8 and at batch 16 (DeepSeek-V3, TP 8, H200)


def _decode_trace(path):
    """64 short-prompt requests arriving within 1 ms that decode 64 tokens each, attending no chunk."""
    reqs = [{"arrival_s": i * 1e-5, "requester_hint": -1, "prompt_tokens": 16, "output_tokens": 64}
            for i in range(REQUESTS)]
    return write_trace(path, reqs, [{"chunk_id": 0, "tokens": 16, "canonical": True, "holder_hint": -1,
                                     "cached_offset": 0}], name="decode-bound")


def _step_ms(cli, batch: int) -> float:
    """The step model alone: one decode iteration of `batch` sequences at the mean context (16 + 32 tokens)."""
    code, out, err = cli("model", "step", "--tokens", batch, "--decode-seqs", batch, "--context", 48, "--json")
    assert code == 0, err
    return json.loads(out)["iteration_ms"]


def test_plan_finds_the_host_count_the_step_model_alone_implies(cli, tmp_path):
    """TPOT of a decode-bound burst is the step time of each instance's batch, ceil(64 / instances): the fewest
    hosts whose batch steps within the SLO is computed from `model step`, and `plan` and its report agree."""
    trace = _decode_trace(tmp_path / "decode.parquet")
    steps = {hosts: _step_ms(cli, math.ceil(REQUESTS / hosts)) for hosts in range(1, 9)}
    assert all(abs(ms / TPOT_SLO_MS - 1) > 0.04 for ms in steps.values()), steps     # no point on the edge
    expected = min(hosts for hosts, ms in steps.items() if ms <= TPOT_SLO_MS)
    assert 1 < expected < 8
    out = tmp_path / "plan"
    code, stdout, err = cli("plan", "--trace", trace, "--slo", f"p99 tpot_ms <= {TPOT_SLO_MS}", "--hosts-max", 8,
                            "--seeds", 1, "--compare", "", "-j", 1, "-o", out)
    assert code == 0, err
    answer = json.loads((out / "plan.json").read_text())
    assert answer["answer_hosts"] == expected and answer["status"] == "found"
    for summary in (out / "runs").glob("*/summary.json"):        # every run judged by the plan's SLO, no default
        assert json.loads(summary.read_text())["slo"]["text"] == f"p99 tpot_ms <= {TPOT_SLO_MS}"
    assert f"answer (paper): {expected} hosts" in stdout
    memo = (out / "plan.md").read_text()
    assert f"**Answer: {8 * expected} GPUs ({expected} hosts)** with paper" in memo
    binding = answer["deployments"]["paper"]["binding"]
    assert binding["hosts"] < expected and binding["violated"] == [f"tpot_ms_p99 <= {TPOT_SLO_MS:g}"]
    assert binding["resource"].startswith("compute")
    from simroute.study.report import write_report
    report = write_report(out, fmt="md")
    assert f"| paper (the answer) | {expected} | {8 * expected} | found | - |" in report
    frontier = _tpot_at(out)
    assert frontier[expected] <= TPOT_SLO_MS < frontier[binding["hosts"]]


def _tpot_at(out) -> dict[int, float]:
    from simroute.study.store import Store
    df = Store(out).read()
    return {int(h): float(v) for h, v in zip(df["axis:hosts"], df["tpot_ms_p99"])}


def test_plan_refuses_contradictory_load_and_workload_flags(cli, tmp_path):
    for args, words in [(("--qps", 1, "--time-scale", 2), "not both"), (("-p", "qps=3"), "give --workload too"),
                        (("--trace", "x", "--workload", "agents"), "not both"),
                        (("--hosts-min", 8, "--hosts-max", 4), "--hosts-min < --hosts-max")]:
        code, out, err = cli("plan", *args, "-o", tmp_path / "p")
        assert code == 2 and words in err and "Traceback" not in err
        assert not (tmp_path / "p").exists()


def test_host_labels_compare_as_numbers_and_cost_axes_take_the_smallest():
    """Regression: labels '8', '16', '32' compared as text made '8' the largest and the report named 32 hosts
    where 16 was the answer."""
    agg = pd.DataFrame({"hosts": ["8", "16", "32"], "meets": [False, True, True]})
    assert frontier_goal("hosts") == "min" and frontier_value(agg, "hosts", "min") == "16"
    load = pd.DataFrame({"qps": ["2", "16", "4"], "meets": [True, False, True]})
    assert frontier_goal("trace.params.qps") == "max" and frontier_value(load, "qps", "max") == "4"
    assert frontier_value(agg.assign(meets=False), "hosts", "min") == "none"


def test_unfinished_and_identical_points_are_marked():
    agg = pd.DataFrame({"config": ["a", "b", "c"], "finished": [True, True, False], "completion": [1.0, 1.0, 0.25],
                        "ttft_ms_p99": [10.0, 10.0, 3.0], "n_route": [1.0, 1.0, 0.0], "n_fetch": [0.0, 0.0, 2.0]})
    got = marks(agg)
    assert got[0] == "" and got[1] == "identical to a"
    assert got[2].startswith("did not finish (25% completed")


def test_no_reuse_is_named_only_when_nothing_crossed_instances():
    assert no_reuse(pd.DataFrame({"n_route": [0.0, 0.0], "n_fetch": [0.0, 0.0]}))
    assert not no_reuse(pd.DataFrame({"n_route": [0.0, 3.0], "n_fetch": [0.0, 0.0]}))


def test_unfinished_runs_never_meet_an_slo():
    from simroute.study.search import finished, meets
    row = {"status": "ok", "requests": 100.0, "completed": 25.0, "ttft_ms_p99": 1.0}
    assert not finished(row) and not meets([row], ("p99 ttft_ms <= 50",))
    assert meets([{**row, "completed": 100.0}], ("p99 ttft_ms <= 50",))
    assert not meets([{**row, "completed": float("nan")}], ("p99 ttft_ms <= 50",))


@pytest.mark.parametrize("hosts", [2, 12])
def test_instances_auto_sizes_a_generated_corpus_to_the_cluster(tmp_path, hosts):
    from simroute.study.resolve import cluster_instances, prepare
    cfg = {"topology": "fattree", "calib": "h100-ibgda", "tp": 4, "hosts": hosts, "seed": 0,
           "trace": {"generate": "corpus", "params": {"requests": 10, "instances": "auto"}}}
    assert cluster_instances(cfg, str(tmp_path / "s.yaml"), tmp_path) == hosts * 8 // 4
    payload, _ = prepare(cfg, str(tmp_path / "s.yaml"), tmp_path)
    assert payload["trace"]["params"]["instances"] == hosts * 2


def test_overload_is_a_queue_that_keeps_growing():
    from simroute.sim.metrics import OVERLOAD_MIN_REQUESTS, overload
    arrival = np.arange(100, dtype=float)
    steady = overload(arrival, np.full(100, 0.5))
    growing = overload(arrival, 0.2 * arrival + 0.1)          # each request waits longer than the last
    assert steady == {"ttft_growth": pytest.approx(1.0), "overloaded": False}
    assert growing["overloaded"] and growing["ttft_growth"] == pytest.approx(17.5 / 7.5, rel=0.02)
    fast = overload(arrival, 1e-3 * (arrival + 1))             # grows, but every TTFT is under 0.1 s
    assert not fast["overloaded"]
    assert overload(arrival[:OVERLOAD_MIN_REQUESTS - 1], arrival[:OVERLOAD_MIN_REQUESTS - 1])["overloaded"] is False
    from simroute.study.search import finished
    row = {"status": "ok", "requests": 100.0, "completed": 100.0}
    assert finished(row) and not finished({**row, "overloaded": 1.0})
    agg = pd.DataFrame({"config": ["a"], "finished": [False], "completion": [1.0], "overloaded": [1.0],
                        "ttft_growth": [9.0]})
    assert marks(agg) == ["arrivals above service (late TTFT x9 the early)"]


def test_plan_study_carries_the_deployment_and_sizes_generated_corpora():
    from simroute.study.plan import PlanRequest
    doc = PlanRequest(trace={"generate": "corpus", "params": {"requests": 10}}, gpu="h100-sxm", model="llama-3.1-8b",
                      tp=2, qps=3.0, compare=("always-fetch", "paper")).study_document()
    assert {k: doc["base"][k] for k in ("gpu", "model", "tp")} == {"gpu": "h100-sxm", "model": "llama-3.1-8b", "tp": 2}
    assert doc["base"]["trace"]["params"] == {"requests": 10, "instances": "auto", "qps": 3.0}
    assert "qps" not in doc["base"]          # the generator's own rate, not a rescaling of it
    assert doc["axes"] == {"policy": ["paper", "always-fetch"]}
    assert doc["search"]["field"] == "hosts" and doc["search"]["goal"] == "min"
    imported = PlanRequest(trace="agents-default", qps=2.0).study_document()
    assert imported["base"]["qps"] == 2.0 and imported["base"]["trace"] == "agents-default"


@pytest.mark.parametrize("args, field", [(("--policy", "bogus"), "--policy / --compare"),
                                         (("--compare", "nope"), "--policy / --compare"),
                                         (("--model", "gpt-9"), "--model"), (("--topology", "nowhere"), "--topology"),
                                         (("--slo", "fast please"), "--slo"), (("--gpu", "tpu-v9"), "--gpu"),
                                         (("--workload", "agents", "-p", "bogus=1"), "--workload / -p"),
                                         (("--trace", "/nonexistent/t.parquet"), "--trace")])
def test_plan_errors_name_the_flag_not_a_temporary_study(cli, tmp_path, args, field):
    code, out, err = cli("plan", *args, "--hosts-max", 2, "--seeds", 1, "-o", tmp_path / "p")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"field '{field}'" in err and "plan.yaml" not in err and "simroute-plan-" not in err
    assert not (tmp_path / "p").exists()
