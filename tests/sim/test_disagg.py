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
    (("--disagg", "1:0"), "--disagg"), (("--disagg", "1:1", "--hosts", "1"), "--disagg"),
    (("--disagg", "1:1", "--hosts", "2", "--prefill-tp", "3"), "--prefill-tp"), (("--prefill-tp", "4"), "--prefill-tp"),
    (("--disagg", "1:1", "--hosts", "2", "--tp", "16", "--dp-attention", "16", "--ep", "16"), "--disagg"),
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


def _dp_run(tmp_path, requests: list[tuple[float, int]], **kw) -> Simulation:
    rows = [{"arrival_s": arrival, "requester_hint": rank, "prompt_tokens": PROMPT, "output_tokens": 4}
            for arrival, rank in requests]
    trace = write_trace(tmp_path / "dp.parquet", rows, [], name="dp")
    cfg = RunConfig(topology=str(shipped_topology("fattree")), trace=str(trace), calib=str(default_profile_path()),
                    **{"hosts": 2, "engine": "none", "disagg": "1:1", "model": "deepseek-v2-lite", "tp": 8, "ep": 8,
                       **kw})
    sim = Simulation(cfg)
    sim.run()
    return sim


def test_a_dp_attention_decode_pool_receives_each_latent_once_on_its_rank_by_hand(tmp_path):
    """Decode DP 8 + EP 8 on host 0 (8 attention instances of one GPU, one lockstep group), prefill TP 8 on host 1.
    Requests on decode ranks 0 and 5, the second after the first is done. Each rank holds its own latent: SGLang's
    MLA path (decode attn_tp 1 < prefill attn_tp 8) takes it whole from prefill rank (0 % 1) x 8 = 0, so each
    request is one flow of prompt x KV bytes/token, prefill GPU 0 -> the rank's GPU (1/8 of TP 8 decode's bytes).
    TTFT = the TP 8 prefill iteration + those bytes / bulk rate; the KV lands on that rank's HBM only."""
    sim = _dp_run(tmp_path, [(0.0, 0), (1.0, 5)], dp_attention=8)
    ctx = sim.ctx
    *decode, prefill = ctx.cluster.instances
    gpus = ctx.topology.gpus
    assert [inst.gpus for inst in decode] == [(gpu,) for gpu in gpus[:8]] and prefill.gpus == tuple(gpus[8:16])
    assert len(ctx.engines.groups) == 1 and [e.eid for e in ctx.engines.groups[0].ranks] == list(range(8))
    kv = PROMPT * ctx.compute.kv_bytes_per_token
    flows = sorted((r.src, r.dst, r.nbytes) for r in ctx.network.telemetry.records if r.tag == "pd")
    assert flows == [(gpus[8], gpus[0], pytest.approx(kv)), (gpus[8], gpus[5], pytest.approx(kv))]
    assert list(sim.rec.bytes_pd[:2]) == pytest.approx([kv, kv])
    summary = sim._result(0.0).summary
    assert summary["network"]["bytes_by_tier"]["nic-leaf"] == pytest.approx(2 * 2 * kv)   # each: up, down
    assert summary["pools"]["decode"] == {"instances": 1, "tp": 8, "gpus": 8, "dp_attention": 8, "ep": 8,
                                          "attention_instances": 8}
    bulk = ctx.cluster.fabric(prefill, decode[0]).bulk_Bps
    prefill_s = _prefill_s(ctx.engines[prefill.id].step, PROMPT)
    assert ctx.engines[prefill.id].step.tp == 8
    assert list(sim.rec.ttft[:2]) == pytest.approx([prefill_s + kv / bulk] * 2, rel=0.01)
    assert (sim.rec.ttft[:2] >= sim.rec.ttft_floor[:2] - 1e-12).all()
    peaks = [ctx.engines[inst.id].hbm.peak_kv_blocks for inst in decode]
    assert peaks[0] >= blocks_for(PROMPT) and peaks[5] >= blocks_for(PROMPT)
    assert [peak for rank, peak in enumerate(peaks) if rank not in (0, 5)] == [0] * 6
    assert ctx.engines[prefill.id].hbm.kv_blocks == 0


def test_dp_ranks_of_two_gpus_take_the_latent_from_the_prefill_ranks_sglang_maps(tmp_path):
    """Decode DP 4 on TP 8 (attn_tp 2, every rank's flow): decode rank r of an attention instance receives the
    whole latent from prefill rank r x (8 // 2), i.e. prefill GPUs 0 and 4: 2 x the prompt's KV per request."""
    sim = _dp_run(tmp_path, [(0.0, 2)], dp_attention=4, rank_flows="every")
    ctx = sim.ctx
    decode, prefill = ctx.cluster.instances[2], ctx.cluster.instances[4]
    assert len(decode.gpus) == 2 and prefill.prefill and len(prefill.gpus) == 8
    kv = PROMPT * ctx.compute.kv_bytes_per_token
    flows = sorted((r.src, r.dst, r.nbytes) for r in ctx.network.telemetry.records if r.tag == "pd")
    assert flows == sorted([(prefill.gpus[0], decode.gpus[0], pytest.approx(kv)),
                            (prefill.gpus[4], decode.gpus[1], pytest.approx(kv))])
    assert sim.rec.bytes_pd[0] == pytest.approx(2 * kv)


def test_a_dp_group_spanning_hosts_beside_a_prefill_host(tmp_path):
    """DP 16 over hosts 0-1 and a prefill TP instance on host 2 (3 hosts: the decode group need not tile every
    host); the prefill TP defaults to a host's 8 GPUs, --tp 16 being the decode group's."""
    sim = _dp_run(tmp_path, [(0.0, 11)], dp_attention=16, **{"tp": 16, "ep": 16, "hosts": 3})
    pools = sim._result(0.0).summary["pools"]
    assert pools["prefill"]["tp"] == 8 and pools["decode"]["attention_instances"] == 16 and pools["idle_gpus"] == 0
    assert sim.rec.bytes_pd[0] == pytest.approx(PROMPT * sim.ctx.compute.kv_bytes_per_token)
