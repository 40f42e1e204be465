"""`simroute plan --disagg`: aggregated vs disaggregated serving as one more axis of the same search, on a
constructed case where disaggregation wins for a reason the step model alone states."""

from __future__ import annotations

import json

import pytest

PROMPT, OUTPUT, CONCURRENCY = 8192, 16, 4
TPOT_SLO_MS = 30.0


def _step_ms(cli, *args) -> float:
    code, out, err = cli("model", "step", *args, "--json")
    assert code == 0, err
    return json.loads(out)["iteration_ms"]


@pytest.mark.slow
def test_a_decode_pool_meets_a_tpot_slo_that_prefill_interference_breaks(cli, tmp_path):
    """A closed loop of 4 clients sending 8k-token prompts for 16 tokens each (DeepSeek-V3, TP 8, H200). By the
    step model alone: a decode iteration of all 4 sequences takes under the 30 ms TPOT SLO, and one 8k-token
    prefill iteration spread over a request's 15 decode steps adds more than the SLO's slack. Aggregated, every
    instance that decodes a request also prefills the next ones that land there, so some request's TPOT takes a
    prefill stall at every host count up to 4; a 1:1 pool on 2 hosts decodes in prefill-free batches and meets
    it. The plan answers the disaggregated deployment at 2 hosts and names prefill interference for the other."""
    decode_ms = _step_ms(cli, "--tokens", CONCURRENCY, "--decode-seqs", CONCURRENCY, "--context", PROMPT + OUTPUT)
    prefill_ms = _step_ms(cli, "--tokens", PROMPT, "--decode-seqs", 0)
    assert decode_ms < TPOT_SLO_MS < decode_ms + prefill_ms / (OUTPUT - 1)      # the case as constructed
    trace = tmp_path / "long.parquet"
    code, _, err = cli("trace", "gen", "serving", "-p", f"input_tokens={PROMPT}", "-p", f"output_tokens={OUTPUT}",
                       "-p", f"concurrency={CONCURRENCY}", "-p", "requests=16", "-o", trace, "--seed", 1)
    assert code == 0, err
    out = tmp_path / "plan"
    code, stdout, err = cli("plan", "--trace", trace, "--disagg", "none,1:1", "--slo", "p99 ttft_ms <= 2000",
                            "--slo", f"p99 tpot_ms <= {TPOT_SLO_MS:g}", "--hosts-max", 4, "--seeds", 1,
                            "--compare", "", "-j", 1, "-o", out)
    assert code == 0, err
    answer = json.loads((out / "plan.json").read_text())
    deployments = answer["deployments"]
    pooled, aggregated = deployments["P:D 1:1, paper"], deployments["aggregated, paper"]
    assert answer["deployment"] == "P:D 1:1, paper" and pooled["hosts"] == 2 and pooled["gpus"] == 16
    assert aggregated["hosts"] is None and aggregated["status"] == "infeasible"
    at_two = next(probe for probe in pooled["probes"] if probe["hosts"] == 2)
    assert at_two["tpot_ms_p99"] <= 1.1 * decode_ms          # decode-only batches of at most 4 sequences
    assert all(probe["tpot_ms_p99"] > TPOT_SLO_MS for probe in aggregated["probes"] if probe["served"])
    assert "prefill interference" in aggregated["binding"]["resource"]
    one_host = next(probe for probe in pooled["probes"] if probe["hosts"] == 1)   # 1:1 at TP 8 needs 2 hosts
    assert one_host["served"] == 0 and "needs 16 GPUs" in pooled["binding"]["resource"]


@pytest.mark.parametrize("args, field", [(("--disagg", "1:0"), "--disagg"), (("--disagg", "none,x"), "--disagg"),
                                         (("--disagg", "1:1,1:1"), "--disagg"),
                                         (("--prefill-tp", "4"), "--prefill-tp"),
                                         (("--disagg", "none,1:1", "--prefill-tp", "3"), "--prefill-tp")])
def test_plan_refuses_an_impossible_pool_naming_the_flag(cli, tmp_path, args, field):
    code, out, err = cli("plan", *args, "--hosts-max", 2, "--seeds", 1, "-o", tmp_path / "p")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"'{field}'" in err and "Traceback" not in err
    assert not (tmp_path / "p").exists()


def test_parallel_and_disagg_are_two_axes_of_one_plan():
    """--parallel tp8,dp8ep8 with --disagg none,1:1: four deployments, every choice of one with every choice of
    the other (a P:D point takes the parallel choice as its decode pool's)."""
    from simroute.study.plan import PlanRequest, deployment_name
    doc = PlanRequest(parallel=("tp8", "dp8ep8"), disagg=("none", "1:1")).study_document()
    assert doc["axes"]["disagg"] == ["none", "1:1"] and set(doc["axes"]["parallel"]) == {"tp8", "dp8ep8"}
    labels = {"parallel": "dp8ep8", "disagg": "1:1", "policy": "paper"}
    assert deployment_name(labels, ["parallel", "disagg", "policy"]) == "dp8ep8, P:D 1:1, paper"


@pytest.mark.slow
def test_a_plan_searches_dp_attention_decode_pools_beside_tp_and_aggregated(cli, tmp_path):
    """A small plan (DeepSeek-V2-Lite, 16 requests of 2k tokens): each of the four deployments is searched; the
    DP 8 + EP 8 decode pool at 1:1 is served at 2 hosts (16 GPUs) and refused at 1, naming --disagg's need."""
    trace = tmp_path / "t.parquet"
    code, _, err = cli("trace", "gen", "serving", "-p", "input_tokens=2048", "-p", "output_tokens=16", "-p",
                       "concurrency=8", "-p", "requests=16", "-o", trace, "--seed", 1)
    assert code == 0, err
    out = tmp_path / "plan"
    code, _, err = cli("plan", "--model", "deepseek-v2-lite", "--trace", trace, "--parallel", "tp8,dp8ep8",
                       "--disagg", "none,1:1", "--hosts-max", 2, "--seeds", 1, "--compare", "", "-j", 1, "-o", out)
    assert code == 0, err
    deployments = json.loads((out / "plan.json").read_text())["deployments"]
    assert set(deployments) == {"tp8, aggregated, paper", "tp8, P:D 1:1, paper", "dp8ep8, aggregated, paper",
                                "dp8ep8, P:D 1:1, paper"}
    pooled = deployments["dp8ep8, P:D 1:1, paper"]
    at_two = next(probe for probe in pooled["probes"] if probe["hosts"] == 2)
    assert at_two["served"] == 1 and at_two["gpus"] == 16
    one = next(probe for probe in pooled["probes"] if probe["hosts"] == 1)
    assert one["served"] == 0 and "needs 16 GPUs" in one["error"]
