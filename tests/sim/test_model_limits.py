"""Model limits (docs/MODEL.md, "Model limits"): a request past the model's context window is refused before any
output with one line naming the trace, the request and the window (or, with --over-window drop, dropped as the
engine would and counted); the feasibility checks every command shares (simroute.model.limits); a sparse model
selects its top-k whenever it is named, a trace's own topk overriding it."""

from __future__ import annotations

import json

import pytest

from simroute.calib import default_profile_path, load_profile
from simroute.errors import ConfigurationError
from simroute.model.geometry import MODELS, get_model
from simroute.model.limits import check_context, check_kv, check_shape, context_problem
from simroute.network import shipped_topology
from simroute.scenarios.traces import write_trace
from simroute.sim import RunConfig, simulate

V3_WINDOW = 163_840


def _long_trace(path):
    """Six requests; request 3's prompt + output is 200,032 tokens and request 4's (own 1,000 + a 410,000-token
    chunk + 32) 411,032: both past DeepSeek-V3's 163,840-token window."""
    reqs = [{"arrival_s": i * 0.01, "requester_hint": -1, "prompt_tokens": 1000, "output_tokens": 32}
            for i in range(6)]
    reqs[3]["prompt_tokens"] = 200_000
    reqs[4]["chunk_ids"] = [1]
    chunks = [{"chunk_id": 0, "tokens": 16, "canonical": True, "holder_hint": -1, "cached_offset": 0},
              {"chunk_id": 1, "tokens": 410_000, "canonical": True, "holder_hint": -1, "cached_offset": 0}]
    return write_trace(path, reqs, chunks, name="long")


def test_every_model_carries_its_window_and_where_it_comes_from():
    published = {"deepseek-v3": 163_840, "deepseek-r1": 163_840, "deepseek-v3.2": 163_840,
                 "deepseek-v2-lite": 163_840, "kimi-k2": 131_072, "llama-2-7b": 4096, "llama-2-70b": 4096,
                 "llama-3.1-8b": 131_072, "llama-3.1-70b": 131_072}
    for name, geometry in MODELS.items():
        source = geometry.sources["context_window"]
        assert geometry.context_window > 0 and source
        if name in published:
            assert geometry.context_window == published[name]
            assert source.startswith(f"max_position_embeddings {published[name]} (HF config.json of ")
        else:                                            # V4 and GLM-5.1: not verified, and said so
            assert source.startswith("assumed")
    assert "128K" in get_model("deepseek-v3").sources["context_window"]     # the model card's, beside the config's


def test_context_problem_by_hand():
    v3 = get_model("deepseek-v3")
    assert context_problem(v3, V3_WINDOW) is None and context_problem(v3, 1) is None
    assert context_problem(v3, V3_WINDOW + 1).startswith("163,841 tokens is past deepseek-v3's 163,840-token")
    with pytest.raises(ConfigurationError, match="field 'context'"):
        check_context(v3, V3_WINDOW + 1, what="x", field="context")


def test_check_shape_by_hand():
    profile = load_profile("paper-all")
    step = profile.step_model("deepseek-v3", tp=8, intra_host_fabric="h100-nvlink4",
                              gpu_spec=profile.find_gpu_spec("h200-sxm"))
    capacity = step.kv_capacity_tokens()                         # 794,938 tokens of bf16 KV beside the weights
    check_shape(step, tokens=1, decode_seqs=1, context=V3_WINDOW - 1, prefill_context=0)   # the last position
    check_kv(step, capacity, what="x", field="f")
    with pytest.raises(ConfigurationError, match="794,939 tokens of KV"):
        check_kv(step, capacity + 1, what="x", field="f")
    with pytest.raises(ConfigurationError, match="field 'context'"):
        check_shape(step, tokens=1, decode_seqs=1, context=V3_WINDOW, prefill_context=0)
    with pytest.raises(ConfigurationError, match="field 'decode-seqs'"):
        check_shape(step, tokens=8, decode_seqs=8, context=100_000, prefill_context=0)      # 800,000 > 794,938
    small = profile.step_model("deepseek-v3", tp=4, intra_host_fabric="h100-nvlink4",
                               gpu_spec=profile.find_gpu_spec("h200-sxm"))
    with pytest.raises(ConfigurationError, match="field 'tp'.*GB of weights per GPU"):
        check_shape(small, tokens=1, decode_seqs=0, context=0, prefill_context=0)


def test_run_refuses_a_request_past_the_window_before_any_output(cli, tmp_path):
    trace = _long_trace(tmp_path / "long.parquet")
    out = tmp_path / "run"
    code, stdout, err = cli("run", "--trace", trace, "-o", out)
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1 and not out.exists()
    assert f"{trace}, field 'requests': request 3 (prompt + chunks + output): 200,032 tokens is past " \
           "deepseek-v3's 163,840-token context window (max_position_embeddings 163840" in err
    assert "1 more request(s)" in err and "--over-window drop" in err
    # plan refuses it before its header
    code, stdout, err = cli("plan", "--trace", trace, "--hosts-max", 2, "--seeds", 1, "-o", tmp_path / "p")
    assert code == 2 and stdout == "" and "request 3" in err and not (tmp_path / "p").exists()
    # a model with a longer window runs it (V4's assumed million tokens)
    code, stdout, err = cli("run", "--trace", trace, "--model", "deepseek-v4-flash", "--weights", "fp8", "-o", out,
                            "--max-requests", 4, "--json")
    assert code == 0, err
    assert json.loads(stdout)["model_limits"]["longest_request_tokens"] == 200_032


def test_drop_counts_them_as_the_engine_refuses_them(tmp_path):
    trace = _long_trace(tmp_path / "long.parquet")
    s = simulate(RunConfig(topology=str(shipped_topology("fattree")), trace=str(trace),
                           calib=str(default_profile_path()), over_window="drop")).summary
    assert s["model_limits"] == {
        "context_window": V3_WINDOW, "context_window_source": get_model("deepseek-v3").sources["context_window"],
        "longest_request_tokens": 1000 + 410_000 + 32, "over_window": 2, "over_window_mode": "drop"}
    assert s["dropped_by_reason"] == {"past the model's context window": 2} and s["completed"] == 4


def _chunk_trace(path, topk=0, chunk_tokens=4096):
    """Four requests attending one 4,096-token chunk on instance 0 from other instances (2 with their own topk)."""
    reqs = [{"arrival_s": i * 0.05, "requester_hint": 1 + i, "prompt_tokens": 64, "output_tokens": 4,
             "chunk_ids": [0], "topk": topk if i < 2 else 0} for i in range(4)]
    return write_trace(path, reqs, [{"chunk_id": 0, "tokens": chunk_tokens, "canonical": True, "holder_hint": 0,
                                     "cached_offset": 0}], name="chunks")


@pytest.mark.parametrize("trace_topk", [0, 512])
def test_a_sparse_model_selects_whenever_it_is_named(tmp_path, trace_topk):
    trace = _chunk_trace(tmp_path / "c.parquet", topk=trace_topk)
    run = lambda model: simulate(RunConfig(topology=str(shipped_topology("fattree")), trace=str(trace),
                                           calib=str(default_profile_path()), model=model)).summary
    sparse, dense = run("deepseek-v3.2"), run("deepseek-v3")
    by_trace = 2 if trace_topk else 0
    assert sparse["sparse_attention"] == {"index_topk": 2048, "selections_at_model_topk": 4 - by_trace,
                                          "selections_at_trace_topk": by_trace}
    # a dense model selects only where the trace says so
    assert dense["sparse_attention"] == {"index_topk": 0, "selections_at_model_topk": 0,
                                         "selections_at_trace_topk": by_trace}
    assert sparse["completed"] == dense["completed"] == 4


def test_a_context_within_k_stays_dense(tmp_path):
    trace = _chunk_trace(tmp_path / "c.parquet", chunk_tokens=1024)       # 64 + 1,024 tokens <= 2,048
    s = simulate(RunConfig(topology=str(shipped_topology("fattree")), trace=str(trace),
                           calib=str(default_profile_path()), model="deepseek-v3.2")).summary
    assert s["sparse_attention"]["selections_at_model_topk"] == 0
