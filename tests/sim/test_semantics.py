"""Semantics the simulator must keep (the request semantics of Move the Query, Not the Cache, §2-§5): costs
equal the closed form when nothing contends, copies in use are never evicted, one copy per instance,
macro-steps stay faithful."""

from __future__ import annotations

import pytest

from simroute.calib import default_profile_path
from simroute.model.scalar import ScalarModel
from simroute.network import default_topology_path, shipped_topology
from simroute.sim import RunConfig, Simulation, simulate
from simroute.scenarios.traces import single_chunk_trace, write_trace
from simroute.defaults import PAPER_DEPLOYMENT


def _testbed(trace, **kw) -> RunConfig:
    return RunConfig(topology=str(shipped_topology("paper-testbed")), trace=str(trace),
                     calib=str(default_profile_path()), **{**PAPER_DEPLOYMENT, **kw})


def _prefill_s(step, tokens: float, context: float = 0.0) -> float:
    """One prefill iteration of `tokens` new tokens after `context` attended ones (causal; its pairs in the
    prefill form unless it is one token)."""
    pairs = tokens * context + tokens * (tokens + 1) / 2
    return step.iteration_s(tokens, 1, context + tokens, pairs, pairs if tokens > 1 else 0.0)


@pytest.mark.parametrize("policy", ["always-route", "always-fetch", "always-local"])
@pytest.mark.parametrize("prompt", [16, 2048])
@pytest.mark.parametrize("tp", [1, 2])
def test_uncontended_ttft_is_the_closed_form(tmp_path, policy, prompt, tp):
    """One request, one remote 2048-token chunk across the IB fabric: TTFT is the step-time model's prefill
    iteration plus the closed form's first-pass cost of the primitive (route: the round trips; fetch: the
    holder's staging (simroute.model.staging, which the closed form leaves out), pull + splice, then the prompt
    attends the copy in its own kernel; local: the chunk's prefill iteration first);
    under tensor parallelism each rank pair moves 1/tp of the bytes."""
    requester = 4 // tp                                   # the first instance of the second host
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=requester, holder=0, prompt_tokens=prompt)
    sim = Simulation(_testbed(trace, policy=policy, staging_copy_GBps=1e9, tp=tp))
    sim.run()
    m = ScalarModel(sim.ctx.params)
    step = sim.ctx.engines.step
    r1, _, move, _, _ = m.step(16 * prompt, 2048.0, sim.ctx.params.fabric_id("h100-ibgda"), False, tp=tp,
                               query_tokens=prompt)
    staging = sim.ctx.cluster.instances[0].staging.stage_s(2048 * sim.ctx.compute.kv_bytes_per_token / tp)
    want = {"always-route": _prefill_s(step, prompt) + r1,
            "always-fetch": move + staging + _prefill_s(step, prompt, 2048.0),
            "always-local": _prefill_s(step, 2048.0) + _prefill_s(step, prompt, 2048.0)}[policy]
    assert sim.rec.ttft[0] == pytest.approx(want, rel=0.01)
    assert sim.rec.ttft[0] >= sim.rec.ttft_floor[0] - 1e-12


def _chunks(n, holder=0):
    return [{"chunk_id": i, "tokens": 2048, "canonical": True, "holder_hint": holder, "cached_offset": i * 2048}
            for i in range(n)]


def test_a_fetch_that_does_not_fit_is_routed_and_no_copy_in_use_is_evicted(tmp_path):
    """One request fetches two remote 2048-token chunks, but its instance's HBM beside the weights holds 64 KV
    blocks: the first copy takes 32, the second does not fit beside it and the prompt, so it is routed."""
    reqs = [{"arrival_s": 0.0, "requester_hint": 4, "prompt_tokens": 16, "output_tokens": 8, "chunk_ids": [0, 1]}]
    trace = write_trace(tmp_path / "t.parquet", reqs, _chunks(2))
    probe = Simulation(_testbed(trace, policy="always-fetch"))
    step = probe.ctx.engines.step
    hbm_gb = (step.weight_bytes_per_gpu + 64 * 64 * step.kv_bytes_per_token_per_gpu + 1) / 1e9
    sim = Simulation(_testbed(trace, policy="always-fetch", hbm_gb=hbm_gb, chunk_hbm_share=1.0, check_hbm=True))
    res = sim.run()
    hbm = sim.ctx.engines[4].hbm
    assert res.summary["holders"]["fetch_fell_back_to_route"] == 1 and res.summary["holders"]["evictions"] == 0
    assert res.summary["primitive_counts"]["fetch"] == 1 and res.summary["primitive_counts"]["route"] == 1
    assert len(hbm.copies) == 1 and hbm.copy_blocks == 32 and hbm.kv_blocks == 0
    assert not sim.ctx.cluster.chunks.pins      # every pin released when the request ended


def test_one_copy_per_instance_even_when_two_requests_fetch_at_once(tmp_path):
    reqs = [{"arrival_s": 0.0, "requester_hint": 4, "prompt_tokens": 16, "output_tokens": 4, "chunk_ids": [0]},
            {"arrival_s": 0.0, "requester_hint": 4, "prompt_tokens": 16, "output_tokens": 4, "chunk_ids": [0]}]
    trace = write_trace(tmp_path / "t.parquet", reqs, _chunks(1))
    res = simulate(_testbed(trace, policy="always-fetch"))
    flows = res.tables["net_flows"].to_pandas()
    assert len(flows[flows.tag == "fetch"]) == 1
    assert res.summary["bytes"]["fetch"] == pytest.approx(2048 * 1152 * 27)
    assert res.summary["completed"] == 2


def test_macro_steps_keep_ttft_and_bound_the_tpot_error(tmp_path):
    """An engine event standing for S identical decode iterations (cut at arrivals and completions) keeps
    TTFT and contended TPOT within a few percent of S = 1 (documented in docs/MODEL.md)."""
    from simroute.workload.generators import generate
    trace = generate("agents", tmp_path / "a.parquet", seed=0, params={      # 2 x 16 sub-agents on 8k documents
        "documents": 2, "doc_tokens": 8192, "chunk_tokens": 2048, "subagents": 16, "requests_per_agent": 3,
        "suffix_tokens": 256, "output_tokens": 128, "think_s": 1.0})
    h100 = tmp_path / "fattree-h100.yaml"       # the default fat-tree with the fabric's H100s (as measured before)
    h100.write_text(default_topology_path().read_text().replace("gpu: h200-sxm", "gpu: h100-sxm"))
    base = dict(topology=str(h100), trace=str(trace), calib=str(default_profile_path()), policy="always-route",
                **PAPER_DEPLOYMENT)
    exact = simulate(RunConfig(decode_steps_per_event=1, **base)).summary
    for s in (4, 16):
        macro = simulate(RunConfig(decode_steps_per_event=s, **base)).summary
        assert macro["ttft_ms"]["mean"] == pytest.approx(exact["ttft_ms"]["mean"], rel=0.1)
        assert 0.95 * exact["tpot_ms"]["mean"] <= macro["tpot_ms"]["mean"] <= 1.05 * exact["tpot_ms"]["mean"]


def test_staging_streams_end_to_end(tmp_path):
    """32 requesters fetch one chunk from one holder at once, its copies slow (20 GB/s a copy): the holder's
    staging pool sets the TTFT. Streams help up to the copy engines (3 on H100: K = 4 beats K = 1) and past
    them add only their joins (simroute.model.staging; what this says of the paper's Fig 5b is `simroute
    validate`'s staging rows)."""
    from simroute.scenarios.traces import fanin_trace
    trace = fanin_trace(tmp_path / "f.parquet", 32, holder=0, output_tokens=1)
    p50 = {}
    for k in (1, 4, 8, 16):
        cfg = RunConfig(**PAPER_DEPLOYMENT,
                        topology=str(default_topology_path()), trace=str(trace), calib=str(default_profile_path()),
                        policy="always-fetch", staging_streams=k, staging_copy_GBps=20.0)
        p50[k] = simulate(cfg).summary["ttft_ms"]["p50"]
    assert p50[4] < 0.9 * p50[1] and p50[4] <= p50[8] <= p50[16]


def test_a_sparse_fanout_waits_for_its_slowest_holder(tmp_path):
    """route fans a selection's query out to M holders and merges M partials: one holder across the IB fabric
    takes as long as its IB leg alone (the same k/M share), not as its NVLink neighbour's."""
    from simroute.scenarios.traces import selection_trace

    def ttft(holders, topk):
        trace = selection_trace(tmp_path / f"s{'-'.join(map(str, holders))}.parquet", requester=0, holders=holders,
                                topk=topk, output_tokens=1)
        return simulate(_testbed(trace, policy="always-route")).summary["ttft_ms"]["mean"]
    mixed, ib_leg, nvlink_leg = ttft([1, 4], 2048), ttft([4], 1024), ttft([1], 1024)
    assert mixed == pytest.approx(ib_leg, rel=1e-6) and mixed - nvlink_leg > 1e-4   # 27 layers' IB vs NVLink legs


def test_a_resident_copy_costs_only_the_requesters_own_attention(tmp_path):
    """The second request on an instance finds the first one's fetched copy resident: its TTFT is its own
    prefill iteration attending the copy in the same kernel, no transfer."""
    reqs = [{"arrival_s": 0.0, "requester_hint": 4, "prompt_tokens": 16, "output_tokens": 1, "chunk_ids": [0]},
            {"arrival_s": 1.0, "requester_hint": 4, "prompt_tokens": 16, "output_tokens": 1, "chunk_ids": [0]}]
    trace = write_trace(tmp_path / "t.parquet", reqs, _chunks(1))
    sim = Simulation(_testbed(trace, policy="always-fetch"))
    res = sim.run()
    assert res.summary["primitive_counts"]["resident"] == 1
    assert sim.rec.ttft[1] == pytest.approx(_prefill_s(sim.ctx.engines.step, 16, 2048.0), rel=1e-9)


def test_requests_in_flight_are_counted_per_requester(tmp_path):
    """The least-loaded router sees each running request: three requests a microsecond apart (each still
    running when the next arrives) land on three instances, and every count returns to zero at the end."""
    reqs = [{"arrival_s": k * 1e-6, "requester_hint": -1, "prompt_tokens": 16, "output_tokens": 4,
             "chunk_ids": [0]} for k in range(3)]
    trace = write_trace(tmp_path / "t.parquet", reqs, _chunks(1))
    sim = Simulation(_testbed(trace, policy="always-route", router="least-loaded"))
    seen = []
    pick = sim.ctx.router.pick
    sim.ctx.router.pick = lambda spec, cluster: seen.append(int(cluster.active.sum())) or pick(spec, cluster)
    sim.run()
    assert seen == [0, 1, 2] and len(set(sim.rec.requester.tolist())) == 3
    assert not sim.ctx.cluster.active.any()


def test_a_hint_naming_a_missing_instance_drops_the_request(tmp_path):
    reqs = [{"arrival_s": 0.0, "requester_hint": 4, "prefill_hint": 99, "prompt_tokens": 16, "output_tokens": 2,
             "chunk_ids": [0]},
            {"arrival_s": 0.0, "requester_hint": 99, "prefill_hint": -1, "prompt_tokens": 16, "output_tokens": 2,
             "chunk_ids": [0]},
            {"arrival_s": 0.0, "requester_hint": 4, "prefill_hint": 0, "prompt_tokens": 16, "output_tokens": 2,
             "chunk_ids": [0]}]
    res = simulate(_testbed(write_trace(tmp_path / "t.parquet", reqs, _chunks(1)), policy="always-route"))
    assert res.summary["dropped_by_reason"] == {"requester out of range": 2} and res.summary["completed"] == 1
