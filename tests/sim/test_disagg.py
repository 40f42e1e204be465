"""Disaggregated serving as a deployment (`--disagg P:D`, sim/pools.py): the pools' layout, and one request's
bytes, HBM and TTFT on a 1:1 pool of two hosts by hand counts."""

from __future__ import annotations

import pytest

from simroute.calib import default_profile_path
from simroute.errors import ConfigurationError
from simroute.network import shipped_topology
from simroute.scenarios.traces import write_trace
from simroute.sim import RunConfig, Simulation
from simroute.sim.engine.hbm import blocks_for
from simroute.sim.pools import parse_disagg, pool_layout

PROMPT = 1000


def test_a_ratio_names_both_pools_and_none_is_aggregated():
    assert parse_disagg("1:3") == (1, 3) and parse_disagg("none") is None
    for bad in ("1:0", "0:2", "3", "a:b", "1:-1"):
        with pytest.raises(ConfigurationError, match="disagg"):
            parse_disagg(bad)


def test_the_layout_keeps_the_ratio_and_never_splits_a_tp_group_across_hosts():
    layout = pool_layout((1, 3), total_gpus=40, tp=8, prefill_tp=8)   # one group of 32 GPUs, 8 idle
    assert layout.decode == (0, 8, 16) and layout.prefill == (24,) and layout.idle_gpus == 8
    mixed = pool_layout((1, 1), total_gpus=24, tp=8, prefill_tp=4)    # 2 groups of 8 + 4
    assert mixed.decode == (0, 8) and mixed.prefill == (16, 20) and mixed.idle_gpus == 0
    tp4 = pool_layout((1, 1), total_gpus=16, tp=4, prefill_tp=8)      # 12 per group: the prefill instance aligned
    assert tp4.decode == (0,) and tp4.prefill == (8,) and tp4.idle_gpus == 4
    assert all(first // 8 == (first + 7) // 8 for first in tp4.prefill)
    with pytest.raises(ConfigurationError, match="needs 16 GPUs"):
        pool_layout((1, 1), total_gpus=8, tp=8, prefill_tp=8)


def _one_request(tmp_path, **kw) -> Simulation:
    trace = write_trace(tmp_path / "t.parquet", [{"arrival_s": 0.0, "requester_hint": -1, "prompt_tokens": PROMPT,
                                                  "output_tokens": 4}], [], name="one")
    cfg = RunConfig(topology=str(shipped_topology("fattree")), trace=str(trace), calib=str(default_profile_path()),
                    hosts=2, engine="none", disagg="1:1", **kw)
    sim = Simulation(cfg)
    sim.run()
    return sim


def _prefill_s(step, tokens: float) -> float:
    pairs = tokens * (tokens + 1) / 2
    return step.iteration_s(tokens, 1, tokens, pairs, pairs)


def test_one_request_on_a_1_to_1_pool_of_two_hosts_by_hand(tmp_path):
    """Host 0 is the decode instance, host 1 the prefill one (TP 8 each). DeepSeek-V3's latent is replicated on
    every rank, so each of the 8 decode ranks receives the whole prompt's latent from its prefill rank (SGLang's
    rank mapping): 8 x prompt x KV bytes/token on the fabric, each rank's flow at the fabric's bulk rate on its
    own NIC. TTFT = the prefill iteration + one rank's bytes / bulk rate (the first token came with the KV)."""
    sim = _one_request(tmp_path)
    ctx = sim.ctx
    decode, prefill = ctx.cluster.instances
    assert (decode.prefill, prefill.prefill) == (False, True) and (decode.host, prefill.host) == (0, 1)
    kv = PROMPT * ctx.compute.kv_bytes_per_token
    assert sim.rec.bytes_pd[0] == pytest.approx(8 * kv)
    summary = sim._result(0.0).summary
    assert summary["network"]["bytes_by_tier"]["nic-leaf"] == pytest.approx(2 * 8 * kv)   # up to the leaf, down
    assert summary["pools"]["prefill"] == {"instances": 1, "tp": 8, "gpus": 8, "router": "least-tokens"}
    bulk = ctx.cluster.fabric(prefill, decode).bulk_Bps
    prefill_s = _prefill_s(ctx.engines[prefill.id].step, PROMPT)
    assert sim.rec.ttft[0] == pytest.approx(prefill_s + kv / bulk, rel=0.01)
    assert sim.rec.ttft[0] >= sim.rec.ttft_floor[0] - 1e-12
    # HBM: the prefill instance held the prompt's KV until it was shipped, then freed it; the decode one holds it
    assert ctx.engines[prefill.id].hbm.peak_kv_blocks == blocks_for(PROMPT)
    assert ctx.engines[prefill.id].hbm.kv_blocks == 0


@pytest.mark.parametrize("model, replicated", [("deepseek-v2-lite", True), ("llama-3.1-70b", False)])
def test_a_prefill_pool_of_another_tp_maps_the_ranks_as_sglang(tmp_path, model, replicated):
    """Prefill TP 4 -> decode TP 8, every rank's flow. An MLA latent (replicated on every rank): decode rank r
    receives the whole of it from prefill rank r // 2 (8 x the prompt's KV on the fabric). GQA heads (split over
    the ranks): 8 flows of 1/8, flow i from prefill rank i // 2 to decode rank i (the prompt's KV once)."""
    sim = _one_request(tmp_path, model=model, tp=8, prefill_tp=4, rank_flows="every")
    ctx = sim.ctx
    decode, prefill = ctx.cluster.instances
    assert len(prefill.gpus) == 4 and len(decode.gpus) == 8
    kv = PROMPT * ctx.compute.kv_bytes_per_token
    flows = [record for record in ctx.network.telemetry.records if record.tag == "pd"]
    assert sorted((record.src, record.dst) for record in flows) == sorted(
        (prefill.gpus[rank // 2], decode.gpus[rank]) for rank in range(8))
    each = kv if replicated else kv / 8
    assert all(record.nbytes == pytest.approx(each) for record in flows)
    assert sim.rec.bytes_pd[0] == pytest.approx(8 * each)
    assert ctx.engines[prefill.id].step.tp == 4 and ctx.engines[decode.id].step.tp == 8
    assert sim.rec.ttft[0] >= sim.rec.ttft_floor[0] - 1e-12      # the floor prefills at the prefill pool's TP


@pytest.mark.parametrize("args, field", [
    (("--disagg", "1:0"), "--disagg"), (("--disagg", "1:1", "--hosts", "1"), "disagg"),
    (("--disagg", "1:1", "--hosts", "2", "--prefill-tp", "3"), "prefill_tp"), (("--prefill-tp", "4"), "--prefill-tp"),
])
def test_an_impossible_pool_is_refused_naming_the_flag(cli, tmp_path, args, field):
    out = tmp_path / "o"
    code, stdout, err = cli("run", *args, "-o", str(out))
    assert code == 2 and not stdout.strip() and not out.exists()
    assert len(err.strip().splitlines()) == 1 and f"'{field}'" in err and "Traceback" not in err


def test_shared_chunks_live_on_the_decode_pool_and_every_prompt_is_prefilled_on_the_prefill_pool():
    """The shipped agent trace at 1:3 on 8 hosts (2 prefill + 6 decode instances): requesters, holders, copies
    and routed partials are the decode pool's; each request's PD bytes are its prompt's latent x 8 ranks."""
    from simroute.sim.runner import simulate
    from simroute.defaults import DEFAULT_TOPOLOGY, DEFAULT_TRACE
    cfg = RunConfig(topology=DEFAULT_TOPOLOGY, trace=DEFAULT_TRACE, calib=str(default_profile_path()), disagg="1:3",
                    max_requests=120, telemetry=False)
    res = simulate(cfg)
    import numpy as np
    from simroute.arrow import to_numpy
    requests = res.tables["requests"]
    col = lambda name: to_numpy(requests.column(name))
    done = col("status") == "completed"
    assert done.sum() > 100
    assert set(col("requester")[done].tolist()) <= set(range(6))
    decisions = res.tables["decisions"]
    assert set(to_numpy(decisions.column("holder")).tolist()) <= set(range(6))
    kv = res.summary["engine"]["kv_bytes_per_token_per_gpu"]      # DeepSeek-V3's whole latent per GPU (replicated)
    prompt = col("bytes_pd")[done] / (kv * 8)        # whole prompt tokens (input_tokens adds the attended chunks')
    assert np.allclose(prompt, np.round(prompt)) and (prompt >= 1).all() and (prompt < col("input_tokens")[done]).all()
    assert res.summary["pools"]["decode"] == {"instances": 6, "tp": 8, "gpus": 48}
    assert res.summary["holders"]["queries"] > 0
