"""bench/bench_plan_aiconfigurator.py's own logic, without aiconfigurator: the load-match that turns aiconfigurator's
sweep rows into the plan's answer (fewest GPUs at a load), reading its CSV, the experiments it asks for, the
equivalent ISL / OSL of a workload, and the detection of the plan flags a build offers."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_plan_aiconfigurator",
                                                  ROOT / "bench" / "bench_plan_aiconfigurator.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # its dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def _agg(parallel: str, seq_s: float, tok_s_gpu: float, ttft: float = 700.0, tpot: float = 45.0, gpus: int = 8):
    return {"parallel": parallel, "bs": 16.0, "seq/s": seq_s, "tokens/s/gpu": tok_s_gpu, "ttft": ttft, "tpot": tpot,
            "num_total_gpus": float(gpus), "concurrency": 64.0}


def test_load_match_takes_the_fewest_gpus_by_replicas(bench):
    rows = [_agg("tp8", 1.74, 222.0),                              # ceil(4 / 1.74) = 3 replicas: 24 GPUs
            _agg("dep8", 3.79, 485.0, tpot=48.0),                  # ceil(4 / 3.79) = 2 replicas: 16 GPUs
            _agg("dep8-big", 5.8, 700.0, tpot=60.0),               # 1 replica, but over the TPOT SLO
            _agg("tp8-slow-ttft", 9.0, 999.0, ttft=2500.0)]        # over the TTFT SLO
    best = bench.load_match(rows, 4.0, 2000.0, 50.0)
    assert (best["parallel"], best["replicas"], best["gpus"]) == ("dep8", 2, 16)
    only_tp = bench.load_match(rows[:1], 4.0, 2000.0, 50.0)
    assert (only_tp["replicas"], only_tp["gpus"]) == (3, 24)


def test_load_match_ties_go_to_throughput_and_an_exact_fit_needs_no_extra_replica(bench):
    rows = [_agg("a", 2.0, 300.0), _agg("b", 2.5, 310.0), _agg("c", 1.0, 500.0, gpus=16)]
    best = bench.load_match(rows, 4.0, 2000.0, 50.0)
    assert best["parallel"] == "b" and best["gpus"] == 16      # a: 2 x 8, b: 2 x 8, c: 4 x 16 = 64
    assert bench.load_match([_agg("a", 2.0, 300.0)], 4.0, 2000.0, 50.0)["replicas"] == 2


def test_load_match_none_within_the_slos(bench):
    assert bench.load_match([_agg("x", 9.0, 900.0, tpot=51.0)], 1.0, 2000.0, 50.0) is None
    assert bench.load_match([], 1.0, 2000.0, 50.0) is None


def test_read_rows_and_describe(bench, tmp_path):
    path = tmp_path / "pareto.csv"
    path.write_text("parallel,bs,seq/s,tokens/s/gpu,ttft,tpot,num_total_gpus,concurrency\n"
                    "tp1pp1dp8etp1ep8,24,3.792,484.945,1664.4,47.98,8,192\n")
    rows = bench.read_rows(path)
    assert rows[0]["seq/s"] == pytest.approx(3.792) and rows[0]["parallel"] == "tp1pp1dp8etp1ep8"
    assert bench.describe_row(rows[0]) == "agg tp1pp1dp8etp1ep8 bs 24"
    disagg = {"(p)workers": 1.0, "(p)parallel": "tp1pp1dp8etp8ep1", "(p)bs": 1.0, "(d)workers": 2.0,
              "(d)parallel": "tp1pp1dp8etp1ep8", "(d)bs": 44.0}
    assert bench.describe_row(disagg) == "disagg 1P tp1pp1dp8etp8ep1 bs 1 : 2D tp1pp1dp8etp1ep8 bs 44"


def test_experiments_restrict_the_sweep_to_the_column(bench):
    tp8 = bench.aic_experiment("tp8", 4096, 1024, 2000.0, 50.0)
    assert (tp8["serving_mode"], tp8["total_gpus"], tp8["kvcache_quant_mode"]) == ("agg", 8, "bfloat16")
    assert (tp8["agg_tp_candidates"], tp8["agg_dp_candidates"], tp8["agg_moe_tp_candidates"],
            tp8["agg_moe_ep_candidates"]) == ([8], [1], [8], [1])
    dep8 = bench.aic_experiment("dep8", 4096, 1024, 2000.0, 50.0, prefix=32768)
    assert (dep8["agg_tp_candidates"], dep8["agg_dp_candidates"], dep8["agg_moe_ep_candidates"]) == ([1], [8], [8])
    assert (dep8["kvcache_quant_mode"], dep8["prefix"]) == ("fp8", 32768)
    disagg = bench.aic_experiment("disagg", 4096, 1024, 2000.0, 50.0)
    assert "model_path" not in disagg and disagg["prefill_model_path"] == disagg["decode_model_path"]
    assert (disagg["decode_tp_candidates"], disagg["prefill_moe_ep_candidates"], disagg["total_gpus"]) == ([8], [1], 16)
    with pytest.raises(StopIteration):
        bench.aic_experiment("tp16", 4096, 1024, 2000.0, 50.0)


def test_plan_flags_follow_the_help_text(bench):
    bare = "│ --tp   <str>  GPUs per instance │\n│ --kv-cache <str> │"
    assert bench.plan_flags(bare, "tp8") == ["--tp", "8", "--kv-cache", "bf16"]
    assert bench.plan_flags(bare, "dep8") is None and bench.plan_flags(bare, "disagg") is None
    richer = bare + "\n│ --parallel <str> tp<N>dp<N>ep<M> │\n│ --disagg <str> P:D ratios │"
    assert bench.plan_flags(richer, "dep8") == ["--parallel", "dp8ep8", "--kv-cache", "fp8"]
    assert bench.plan_flags(richer, "disagg") == ["--tp", "8", "--disagg", "1:1", "--kv-cache", "bf16"]


def test_equivalent_lengths_by_hand(bench, tmp_path):
    """Fixed suffixes and outputs: every sub-agent request reads the 4096-token document and its own 256 tokens
    (ISL 4352); the root decodes 512 and the 8 x 2 sub-agent requests 256 each: OSL (512 + 16 x 256) / 17."""
    workload = bench.Workload("agents", "agents", {"documents": 1, "doc_tokens": 4096, "subagents": 8,
                                                   "requests_per_agent": 2, "suffix_sigma": 0.0},
                              qps=4.0, hosts_max=1)
    isl, osl = bench.equivalent_lengths(workload, tmp_path)
    assert isl == 4096 + 256
    assert osl == round((512 + 16 * 256) / 17)


def test_carried_load(bench):
    assert bench.carried(4.0, 1024, 24) == pytest.approx(4 * 1024 / 24)
    assert bench.carried(4.0, 1024, None) is None and not math.isnan(bench.carried(1.0, 1, 1))


def test_a_skipped_column_names_the_missing_flag(bench):
    assert "--disagg" in bench.skip_reason("disagg") and "--parallel" in bench.skip_reason("dep8")
    rows = bench.table_rows(bench.Workload("serving", "serving", {}, qps=4.0, hosts_max=1), 4096, 1024, {},
                            {"disagg": {"skipped": True, "reason": bench.SKIP_REASONS["disagg"]}})
    assert rows == [f"| serving | disagg | simroute plan | {bench.NOT_AVAILABLE} | - | - | - | - | - "
                    f"| {bench.SKIP_REASONS['disagg']} |"]
