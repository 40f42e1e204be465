"""Semantics the simulator must keep (the request semantics of Move the Query, Not the Cache, §2-§5): costs
equal the closed form when nothing contends, copies in use are never evicted, one copy per instance,
macro-steps stay faithful."""

from __future__ import annotations

import pytest

from simroute.calib import default_profile_path
from simroute.model.scalar import ScalarModel
from simroute.network import default_topology_path, shipped_topology
from simroute.sim import RunConfig, Simulation, simulate
from simroute.sim.config import default_trace_path
from simroute.scenarios.traces import single_chunk_trace, write_trace


def _testbed(trace, **kw) -> RunConfig:
    return RunConfig(topology=str(shipped_topology("paper-testbed")), trace=str(trace),
                     calib=str(default_profile_path()), batch_window_us=0.0, dispatch_window_us=0.0, **kw)


@pytest.mark.parametrize("policy", ["always-route", "always-fetch", "always-local"])
@pytest.mark.parametrize("prompt", [16, 2048])
@pytest.mark.parametrize("tp", [1, 2])
def test_uncontended_ttft_is_the_closed_form(tmp_path, policy, prompt, tp):
    """One request, one remote 2048-token chunk across the IB fabric: TTFT - own prefill is the model's
    first-pass cost of the primitive, the requester's own attention over a copy included; under tensor
    parallelism each rank pair moves 1/tp of the bytes."""
    requester = 4 // tp                                   # the first instance of the second host
    trace = single_chunk_trace(tmp_path / "t.parquet", requester=requester, holder=0, prompt_tokens=prompt)
    sim = Simulation(_testbed(trace, policy=policy, staging_copy_GBps=1e9, tp=tp))
    sim.run()
    m = ScalarModel(sim.ctx.params)
    r1, _, move, attend, pre = m.step(16 * prompt, 2048.0, sim.ctx.params.fabric_id("h100-ibgda"), False, tp=tp)
    want = {"always-route": r1, "always-fetch": move + attend, "always-local": pre + attend}[policy]
    got = sim.rec.ttft[0] - prompt * sim.prefill_s_per_token
    assert got == pytest.approx(want, rel=0.01)
    g, exchanges = sim.ctx.params.geometry, sim.ctx.params.exchanges
    assert sim.rec.bytes_route[0] == (16 * prompt * g.qp_bytes * exchanges if policy == "always-route" else 0.0)
    assert sim.rec.ttft[0] >= sim.rec.ttft_floor[0] - 1e-12


def _chunks(n, holder=0):
    return [{"chunk_id": i, "tokens": 2048, "canonical": True, "holder_hint": holder, "cached_offset": i * 2048}
            for i in range(n)]


def test_a_copy_in_use_is_never_evicted_and_a_refused_copy_is_counted(tmp_path):
    # One request attends two remote chunks but its instance has room for one copy only.
    reqs = [{"arrival_s": 0.0, "requester_hint": 4, "prompt_tokens": 16, "output_tokens": 8, "chunk_ids": [0, 1]}]
    trace = write_trace(tmp_path / "t.parquet", reqs, _chunks(2))
    sim = Simulation(_testbed(trace, policy="always-fetch", hbm_gb=0.1))   # 64 MB chunks, 100 MB of HBM
    res = sim.run()
    inst = sim.instances[4]
    assert res.summary["holders"]["copies_refused"] == 1 and res.summary["holders"]["evictions"] == 0
    assert len(inst.copies) == 1 and inst.copy_bytes <= inst.capacity_bytes
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


def test_macro_steps_keep_ttft_and_bound_the_tpot_error():
    """Mixed-weight holder batches run in segments: TTFT no longer depends on S; contended TPOT reads low by a
    bounded amount (documented in docs/MODEL.md)."""
    base = dict(topology=str(default_topology_path()), trace=str(default_trace_path()),
                calib=str(default_profile_path()), policy="always-route")
    exact = simulate(RunConfig(decode_steps_per_event=1, **base)).summary
    for s in (4, 16):
        macro = simulate(RunConfig(decode_steps_per_event=s, **base)).summary
        assert macro["ttft_ms"]["mean"] == pytest.approx(exact["ttft_ms"]["mean"], rel=0.1)
        assert 0.7 * exact["tpot_ms"]["mean"] <= macro["tpot_ms"]["mean"] <= 1.05 * exact["tpot_ms"]["mean"]


def test_staging_elbow_end_to_end(tmp_path):
    """32 requesters fetch one chunk from one holder at once: the holder's staging pool sets the TTFT
    (Move the Query, Not the Cache, §6.2 / Fig 5b: K = 8 is the elbow, K = 1 no help, K = 16 regresses)."""
    from simroute.scenarios.traces import fanin_trace
    trace = fanin_trace(tmp_path / "f.parquet", 32, holder=0, output_tokens=1)
    p50 = {}
    for k in (1, 4, 8, 16):
        cfg = RunConfig(topology=str(default_topology_path()), trace=str(trace), calib=str(default_profile_path()),
                        policy="always-fetch", staging_streams=k, staging_copy_GBps=20.0)
        p50[k] = simulate(cfg).summary["ttft_ms"]["p50"]
    assert p50[8] < p50[4] < p50[1] and p50[16] > p50[8]


@pytest.mark.parametrize("policy", ["always-route", "always-fetch"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("output", [2, 9])
def test_decode_base_time_adds_to_every_step(tmp_path, policy, sparse, output):
    """`decode_base_ms` is the non-attention time of each decode step: TPOT rises by exactly that much."""
    from simroute.scenarios.traces import selection_trace
    if sparse:
        trace = selection_trace(tmp_path / "t.parquet", requester=4, holders=[0, 1], output_tokens=output)
    else:
        trace = single_chunk_trace(tmp_path / "t.parquet", requester=4, holder=0, output_tokens=output)
    tpot = {base: simulate(_testbed(trace, policy=policy, decode_base_ms=base,
                                    decode_steps_per_event=1)).summary["tpot_ms"]["mean"] for base in (0.0, 2.0)}
    assert tpot[2.0] - tpot[0.0] == pytest.approx(2.0, rel=1e-6)


def test_a_sparse_fanout_waits_for_its_slowest_holder(tmp_path):
    """route fans a selection's query out to M holders and merges M partials: one holder across the IB fabric
    takes as long as its IB leg alone (the same k/M share), not as its NVLink neighbour's."""
    from simroute.scenarios.traces import selection_trace

    def ttft(holders, topk):
        trace = selection_trace(tmp_path / f"s{'-'.join(map(str, holders))}.parquet", requester=0, holders=holders,
                                topk=topk, output_tokens=1)
        return simulate(_testbed(trace, policy="always-route")).summary["ttft_ms"]["mean"]
    mixed, ib_leg, nvlink_leg = ttft([1, 4], 2048), ttft([4], 1024), ttft([1], 1024)
    assert mixed == pytest.approx(ib_leg, rel=1e-6) and mixed > nvlink_leg * 1.05


def test_a_resident_copy_costs_only_the_requesters_own_attention(tmp_path):
    """The second request on an instance finds the first one's fetched copy resident: its TTFT is its own
    prefill plus its attention over the copy, no transfer."""
    reqs = [{"arrival_s": 0.0, "requester_hint": 4, "prompt_tokens": 16, "output_tokens": 1, "chunk_ids": [0]},
            {"arrival_s": 1.0, "requester_hint": 4, "prompt_tokens": 16, "output_tokens": 1, "chunk_ids": [0]}]
    trace = write_trace(tmp_path / "t.parquet", reqs, _chunks(1))
    sim = Simulation(_testbed(trace, policy="always-fetch"))
    res = sim.run()
    assert res.summary["primitive_counts"]["resident"] == 1
    attend = sim.ctx.compute.attend_s(16 * 16, 2048.0, 0)
    assert sim.rec.ttft[1] - 16 * sim.prefill_s_per_token == pytest.approx(attend, rel=1e-9)


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
