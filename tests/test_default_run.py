"""The default `simroute run` is the regime the tool exists for: a frontier MLA model (DeepSeek-V3, FP8) at TP 8
on HGX H200 hosts, documents large enough that copies compete in HBM, and both route and fetch chosen, with
the reason in the summary."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from simroute.calib import default_profile_path, load_profile
from simroute.calib.profile import shipped_dir
from simroute.model.scalar import ScalarModel
from simroute.sim.config import default_trace_path
from simroute.sim.policies.base import horizon_costs_scalar
from simroute.workload.reader import read_trace_meta

GB = 1e9


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The default run twice: once checking the HBM invariant at every iteration, once as a user runs it."""
    from simroute.cli.main import main
    out = tmp_path_factory.mktemp("default")
    assert main(["run", "--check-hbm", "-o", str(out / "checked")]) == 0
    assert main(["run", "-o", str(out / "plain")]) == 0
    return out


def _summary(path):
    return json.loads((path / "summary.json").read_text())


def test_the_default_is_a_frontier_mla_model_at_tp8_on_h200(default_run):
    s = _summary(default_run / "plain")
    assert s["config"]["model"] == "deepseek-v3" and s["config"]["tp"] == 8
    e = s["engine"]
    assert e["gpu"] == "h200-sxm" and e["weight_dtype"] == "fp8" and e["fp8_rate"]
    assert s["instances"] == s["gpus"] // 8 == 8
    assert any(f.endswith("gpus/h200-sxm.yaml") for f in s["inputs"]["calib_files"])    # hashed as an input
    hbm = e["hbm"]
    h200 = load_profile(shipped_dir() / "gpus" / "h200-sxm.yaml").gpu_spec()
    step = load_profile(default_profile_path()).step_model("deepseek-v3", gpu_spec=h200, tp=8)
    assert hbm["capacity_gb_per_gpu"] == 141.0 and hbm["weights_gb_per_gpu"] == pytest.approx(
        step.weight_bytes_per_gpu / GB)
    block = 64 * 576 * 2 * 61                          # 64 tokens of c_KV over 61 layers, latent on every rank
    # the KV pool SGLang 0.5.14 allocates without --mem-fraction-static: its default 0.886 of the 138.09 GiB free at
    # start-up less the weights (hand count in tests/sim/test_frameworks.py); the rest of the HBM holds no KV
    pool = 0.886 * 138.09 * 2**30 - step.weight_bytes_per_gpu
    assert hbm["kv_capacity_tokens"] == int(pool // block) * 64
    assert hbm["outside_pool_gb_per_gpu"] == pytest.approx((141e9 - step.weight_bytes_per_gpu - pool) / GB)


def test_both_route_and_fetch_are_chosen_and_the_policy_chose_routes(default_run):
    s = _summary(default_run / "plain")
    pc, why = s["primitive_counts"], s["why"]
    assert pc["route"] > 0 and pc["fetch"] > 0
    assert why["route_by_policy"] > 0 and why["route_by_policy"] + why["route_fetch_did_not_fit"] == pc["route"]
    assert why["route_fetch_did_not_fit"] == s["holders"]["fetch_fell_back_to_route"]
    med = why["median_output_tokens"]
    assert med["routing_requests"] < med["fetching_requests"]     # short horizons route, long ones fetch
    d = pq.read_table(default_run / "plain" / "decisions.parquet").column("primitive").to_pylist()
    assert d.count("route") == pc["route"] and d.count("fetch") == pc["fetch"]
    assert s["bytes"]["route"] > 0 and s["bytes"]["fetch"] > 0 and s["engine"]["holder_partials"]["queries"] > 0


def test_the_reason_is_the_predicates_horizon():
    """Over the default's 64k-token chunk and a ~16-token instruction on the cross-host fabric, a 2-token
    answer is cheaper routed and a 64-token one cheaper fetched: per-layer round trips every decode step
    against one pull of 4.6 GB (0.58 GB per TP rank)."""
    prof = load_profile(default_profile_path())
    m = ScalarModel(prof.cost_params("deepseek-v3", route_exchanges="per-layer"))
    cross = [f.name for f in m.p.fabrics].index("h100-ibgda")
    costs = lambda out: horizon_costs_scalar(m, mq_first=128 * 16, mq_step=128, steps=out - 1, ct=65536,
                                             fabric=cross, cached=True, tp=8)
    route, fetch, _ = costs(2)
    assert route < fetch
    route, fetch, _ = costs(64)
    assert fetch < route
    params = read_trace_meta(str(default_trace_path()))["params"]
    assert params["chunk_tokens"] == 65536 and params["output_sigma"] > 0 and params["suffix_tokens"] == 16


def test_copies_compete_in_hbm_and_it_never_over_commits(default_run):
    s = _summary(default_run / "checked")          # --check-hbm asserted the invariant at every iteration
    hbm = s["engine"]["hbm"]
    peak = hbm["at_peak"]
    parts = (peak["weights_gb"] + hbm["outside_pool_gb_per_gpu"] + peak["running_kv_gb"] + peak["pinned_chunks_gb"]
             + peak["copies_gb"])
    assert parts <= hbm["capacity_gb_per_gpu"] + 1e-9
    block_gb = 64 * 576 * 2 * 61 / GB
    assert parts + peak["free_gb"] == pytest.approx(hbm["capacity_gb_per_gpu"], abs=block_gb)   # rounding: < 1 block
    assert peak["copies_gb"] > 0 and peak["pinned_chunks_gb"] > 0 and peak["running_kv_gb"] > 0
    assert peak["free_gb"] < 65536 * 576 * 2 * 61 / GB      # at the peak a 64k-token copy (4.6 GB) no longer fits
    assert hbm["evictions"] > 0                     # copies made room for others
    it = pq.read_table(default_run / "checked" / "iterations.parquet").to_pandas()
    used = it["weights_bytes"] + it["kv_bytes"] + it["pinned_bytes"] + it["copy_bytes"]
    assert (used + hbm["outside_pool_gb_per_gpu"] * GB <= hbm["capacity_gb_per_gpu"] * GB + 1).all()
    assert float(used.max() - it["weights_bytes"].max()) / GB == pytest.approx(
        peak["running_kv_gb"] + peak["pinned_chunks_gb"] + peak["copies_gb"])


def test_deterministic_and_the_printout_says_why(default_run, cli):
    a, b = _summary(default_run / "checked"), _summary(default_run / "plain")
    a["config"].pop("check_hbm"), b["config"].pop("check_hbm")
    assert a == b
    for name in ("requests.parquet", "decisions.parquet"):
        assert pq.read_table(default_run / "checked" / name).equals(pq.read_table(default_run / "plain" / name))
    code, out, _ = cli("run", "-o", str(default_run / "printed"))
    assert code == 0
    for words in ("deepseek-v3 (fp8 weights)", "8 x h200-sxm", "why: route", "chosen by the policy",
                  "fetches that did not fit", "HBM per GPU 141 GB", "pinned chunks", "copies evicted",
                  "memory fraction 0.886", "outside the KV pool 9.6 GB"):
        assert words in " ".join(out.split()), words


def test_default_requests_do_not_run_away():
    """The regime is loaded, not overloaded: the default's figures stay those of a healthy cluster."""
    s = _summary_of_default()
    assert s["completed"] == s["requests"] and s["slo"]["attainment"] > 0.9
    assert s["ttft_ms"]["p50"] < 200 and s["tpot_ms"]["p50"] < 50


_CACHE: dict = {}


def _summary_of_default():
    if "s" not in _CACHE:
        from simroute.network import default_topology_path
        from simroute.sim import RunConfig, simulate
        cfg = RunConfig(topology=str(default_topology_path()), trace=str(default_trace_path()),
                        calib=str(default_profile_path()))
        _CACHE["s"] = simulate(cfg).summary
    return _CACHE["s"]


def test_library_and_cli_defaults_agree_on_the_default_run(default_run):
    s = _summary_of_default()
    plain = _summary(default_run / "plain")
    assert s["primitive_counts"] == plain["primitive_counts"] and s["ttft_ms"] == plain["ttft_ms"]
    assert np.isfinite(s["tpot_ms"]["p99"])


def test_bf16_weights_do_not_fit_the_default_and_say_so(cli, tmp_path):
    code, out, err = cli("run", "--weights", "bf16", "-o", str(tmp_path / "out"))
    msg = (err or out).strip()
    assert code == 2 and "Traceback" not in out + err and len(msg.splitlines()) == 1
    h200 = load_profile(shipped_dir() / "gpus" / "h200-sxm.yaml").gpu_spec()
    bf16 = load_profile(default_profile_path()).step_model("deepseek-v3", gpu_spec=h200, tp=8, weight_dtype="bf16")
    assert f"{bf16.weight_bytes_per_gpu / 1e9:.1f} GB of weights per GPU" in msg and "141.0 GB" in msg
    assert "h200-sxm" in msg and bf16.weight_bytes_per_gpu > 141.0e9
    assert not (tmp_path / "out").exists()


def _default_cfg(trace, **kw):
    from simroute.network import default_topology_path
    from simroute.sim import RunConfig
    return RunConfig(topology=str(default_topology_path()), trace=str(trace), calib=str(default_profile_path()),
                     **{**kw})


def test_on_the_default_model_resident_is_never_slower_than_fetch_then_attend(tmp_path):
    """DeepSeek-V3 at TP 8: the second request finds the first one's fetched 64k-token copy resident."""
    from simroute.scenarios.traces import write_trace
    from simroute.sim import simulate
    chunks = [{"chunk_id": 0, "tokens": 65536, "canonical": True, "holder_hint": 0, "cached_offset": 0}]
    reqs = [{"arrival_s": t, "requester_hint": 5, "prompt_tokens": 300, "output_tokens": 16, "chunk_ids": [0]}
            for t in (0.0, 2.0)]
    res = simulate(_default_cfg(write_trace(tmp_path / "two.parquet", reqs, chunks), policy="always-fetch"))
    req = res.tables["requests"].to_pandas()
    assert req.n_fetch[0] == 1 and req.n_resident[1] == 1
    assert req.ttft_s[1] <= req.ttft_s[0] and req.tpot_s[1] <= req.tpot_s[0] * (1 + 1e-9)


def _one_document(tmp_path, chunk: int):
    """64k tokens on instance 1 cut into `chunk`-token chunks; two requesters on other hosts attend it all."""
    from simroute.scenarios.traces import write_trace
    ids = range(65536 // chunk)
    return write_trace(tmp_path / f"doc{chunk}.parquet",
                       [dict(arrival_s=0.5 * j, requester_hint=4 + j, prompt_tokens=64, output_tokens=32,
                             chunk_ids=list(ids)) for j in (0, 1)],
                       [dict(chunk_id=i, tokens=chunk, canonical=True, holder_hint=1, cached_offset=i * chunk)
                        for i in ids])


@pytest.mark.parametrize("policy", ["always-fetch", "always-route"])
def test_on_the_default_model_chunking_is_invariant(tmp_path, policy):
    """One 64k-token document on one holder cut into 8k / 16k / 64k-token chunks: TPOT within 5%."""
    from simroute.sim import simulate
    tpot = {chunk: simulate(_default_cfg(_one_document(tmp_path, chunk), policy=policy)).summary["tpot_ms"]["p50"]
            for chunk in (8192, 16384, 65536)}
    assert max(tpot.values()) <= 1.05 * min(tpot.values()), tpot


def test_kv_layout_one_story_per_layout(default_run, tmp_path):
    """replicated (the default): every fetched copy is all-gathered inside the host, 7 x its bytes over NVLink at
    TP 8; tpla: no fan-out, and a rank holds 1/8 of the latent, so 8x the KV room."""
    from simroute.cli.main import main
    s = _summary(default_run / "plain")
    assert s["engine"]["kv_layout"] == "replicated" and s["config"]["kv_layout"] == "replicated"
    requests = pq.read_table(default_run / "plain" / "requests.parquet").to_pandas()
    fetched = requests[requests["bytes_fetch"] > 0]
    assert len(fetched) > 0
    assert np.allclose(fetched["bytes_fetch_fanout"], 7 * fetched["bytes_fetch"])
    assert s["bytes"]["fetch_fanout_nvlink"] == pytest.approx(7 * s["bytes"]["fetch"])
    assert main(["run", "--kv-layout", "tpla", "--max-requests", "300", "-o", str(tmp_path / "tpla")]) == 0
    t = _summary(tmp_path / "tpla")
    assert t["engine"]["kv_layout"] == "tpla" and t["bytes"]["fetch_fanout_nvlink"] == 0.0
    block_tpla = 64 * 576 * 2 * 61 / 8
    assert t["engine"]["hbm"]["kv_capacity_tokens"] == int(       # the same SGLang pool, an eighth of a latent each
        (0.886 * 138.09 * 2**30 - t["engine"]["hbm"]["weights_gb_per_gpu"] * GB) // block_tpla) * 64


def test_the_default_run_serves_with_the_preset_of_the_framework_whose_tables_it_reads(default_run):
    """H200's tables are SGLang 0.5.14's: the default engine is that preset (docs/ENGINES.md), each setting with
    its source, and the preset file is an input of the run."""
    s = _summary(default_run / "plain")
    preset = s["engine"]["preset"]
    assert preset["engine"] == s["config"]["engine"] == "sglang@0.5.14"
    assert preset["tables"] == "h200-sxm sglang 0.5.14" and preset["preset_file"] == "calib/engines/sglang-0.5.14.yaml"
    settings = preset["settings"]
    assert (s["config"]["scheduler"], s["config"]["prefill_chunk"], s["config"]["token_budget"]) == ("sglang", 8192,
                                                                                                     16384)
    assert "server_args.py _handle_gpu_memory_settings" in settings["prefill_chunk"]["source"]
    assert settings["overlap_scheduling"]["value"] is True and settings["cuda_graph_max_batch"]["value"] == 512
    assert any(f.endswith("engines/sglang-0.5.14.yaml") for f in s["inputs"]["calib_files"])
    requests = pq.read_table(default_run / "plain" / "requests.parquet").to_pandas()
    done = requests[requests.status == "completed"]
    assert np.allclose(done.ttft_frontend_s, 1550e-6 + 300e-6)
