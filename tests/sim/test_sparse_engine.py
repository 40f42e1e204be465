"""Sparse selection requests on the instance engines: a lone request is the step-time model plus the closed
form, route bytes are the hand count, load lengthens TPOT, HBM is never over-committed, and a holder's
partials for others lengthen its own iterations."""

from __future__ import annotations

import numpy as np
import pytest

from simroute.calib import default_profile_path
from simroute.model.scalar import ScalarModel
from simroute.network import shipped_topology
from simroute.scenarios.traces import selection_trace, write_trace
from simroute.sim import RunConfig, Simulation, simulate
from simroute.sim.engine import RouteShare, Sequence
from simroute.workload import generate
from simroute.defaults import PAPER_DEPLOYMENT

# The holders on the requester's host: one NVLink link each (identical, independent legs; across hosts the
# M query messages would queue on the requester's one NIC, which the closed form does not model).
REQUESTER, HOLDERS, TOPK, FABRIC = 0, [1, 2, 3], 2048, "h100-nvlink4"


def _cfg(trace, topology="paper-testbed", **kw) -> RunConfig:
    return RunConfig(topology=str(shipped_topology(topology)), trace=str(trace), calib=str(default_profile_path()),
                     check_hbm=True, **{**PAPER_DEPLOYMENT, **kw})


def _lone(tmp_path, policy, prompt=200, output=33):
    trace = selection_trace(tmp_path / f"{policy}.parquet", requester=REQUESTER, holders=HOLDERS, topk=TOPK,
                            prompt_tokens=prompt, output_tokens=output)
    sim = Simulation(_cfg(trace, policy=policy))
    return sim, sim.run()


def _prefill_s(step, prompt, resident):
    pairs = prompt * resident + prompt * (prompt + 1) / 2          # in the prefill form (more than one token)
    return step.iteration_s(prompt, 1, resident + prompt, pairs, pairs if prompt > 1 else 0.0)


def _decode_s(step, prompt, output, resident):
    return float(np.mean([step.iteration_s(1, 1, resident + prompt + g, resident + prompt + g)
                          for g in range(1, output)]))


def test_lone_routed_selection_is_step_model_plus_closed_form(tmp_path):
    """TTFT = the prompt's prefill iteration + the closed form's route over M holders (each the k/M share, the
    sparse kernel); TPOT = the decode iteration + one step of it; within 1%."""
    prompt, output = 200, 33
    sim, res = _lone(tmp_path, "always-route", prompt, output)
    params, step, heads = sim.ctx.params, sim.ctx.engines.step, sim.ctx.params.geometry.heads_q
    scalar, fabric = ScalarModel(params), params.fabric_id(FABRIC)
    route = lambda rows: scalar.step(rows, 0.0, fabric, True, topk=TOPK, holders=len(HOLDERS)).route
    assert res.summary["primitive_counts"]["route"] == len(HOLDERS)
    assert sim.rec.ttft[0] == pytest.approx(_prefill_s(step, prompt, 0.0) + route(heads * prompt), rel=0.01)
    assert sim.rec.tpot[0] == pytest.approx(_decode_s(step, prompt, output, 0.0) + route(heads), rel=0.01)


def test_lone_fetched_selection_is_step_model_plus_the_gather(tmp_path):
    """fetch: every iteration gathers the k entries from the M holders (the closed form's gather) and attends
    them in the sequence's own kernel: TTFT and TPOT within 1%; the fetch bytes are k entries a step."""
    prompt, output = 200, 33
    sim, res = _lone(tmp_path, "always-fetch", prompt, output)
    params, step = sim.ctx.params, sim.ctx.engines.step
    gather = ScalarModel(params).step(16, 0.0, params.fabric_id(FABRIC), True, topk=TOPK,
                                      holders=len(HOLDERS)).fetch_move
    assert res.summary["primitive_counts"]["fetch"] == len(HOLDERS)
    entries = float(TOPK)                    # k/M from each of the M holders
    assert sim.rec.ttft[0] == pytest.approx(_prefill_s(step, prompt, entries) + gather, rel=0.01)
    assert sim.rec.tpot[0] == pytest.approx(_decode_s(step, prompt, output, entries) + gather, rel=0.01)
    kv = params.geometry.kv_bytes_per_token
    assert res.summary["bytes"]["fetch"] == pytest.approx(output * entries * kv, rel=1e-9)


def test_local_selection_reprefills_copies_in_hbm_then_attends_k_entries(tmp_path):
    """local: the selection's chunks are re-prefilled once on the requester (their KV becomes copies in its
    HBM budget); decoding then attends k entries of them in its own kernel."""
    prompt, output = 200, 33
    sim, res = _lone(tmp_path, "always-local", prompt, output)
    step = sim.ctx.engines.step
    assert res.summary["primitive_counts"]["local"] == len(HOLDERS)
    it = res.tables["iterations"].to_pandas()
    mine = it[it.instance == REQUESTER]
    assert mine.copy_bytes.max() >= len(HOLDERS) * 2048 * sim.ctx.params.geometry.kv_bytes_per_token
    assert sim.rec.tpot[0] == pytest.approx(_decode_s(step, prompt, output, float(TOPK)), rel=0.01)
    reprefill = sum(_prefill_s(step, 2048, 2048.0 * c) for c in range(len(HOLDERS)))   # 2048-token chunks
    assert sim.rec.ttft[0] > reprefill


def test_route_bytes_of_a_selection_are_the_hand_count(tmp_path):
    """rows x (q + p) x exchanges per (request, holder): 16 heads x (prompt + decode steps) rows to each of the
    M holders, 27 layers."""
    prompt, output = 200, 33
    sim, res = _lone(tmp_path, "always-route", prompt, output)
    g = sim.ctx.params.geometry
    rows = 16 * (prompt + output - 1) * len(HOLDERS)
    assert res.summary["bytes"]["route"] == pytest.approx(rows * (g.q_bytes + g.p_bytes) * g.layers, rel=1e-9)


def _sparse_trace(tmp_path, qps, requests=120, **params):
    return generate("sparse", tmp_path / f"s{qps}.parquet", seed=1, params={
        "requests": requests, "qps": qps, "holders": 8, "spanned": 4, "output_tokens": 48, **params})


def test_selection_tpot_rises_with_qps(tmp_path):
    """Sparse requests batch on their requesters' engines and contend for the holders: TPOT rises with load."""
    tpot = [simulate(_cfg(_sparse_trace(tmp_path, qps), "fattree", policy="always-route"))
            .summary["tpot_ms"]["mean"] for qps in (5.0, 500.0, 20000.0)]
    assert tpot[0] < tpot[1] < tpot[2], tpot


def test_hbm_holds_with_selections_and_fetches_that_do_not_fit_route(tmp_path):
    """On GPUs with 31.6 GB of HBM (94 KV blocks beside the weights) the gathered entries (32 blocks each) of
    concurrent fetches do not all fit: those requests route instead, every request completes, the gathered
    entries are held as KV while their requests run, and the invariant holds at every iteration."""
    trace = generate("sparse", tmp_path / "hbm.parquet", seed=1, params={
        "requests": 100, "qps": 2000.0, "holders": 8, "spanned": 4, "output_tokens": 48, "chunk_tokens": 256,
        "chunks_per_holder": 4})
    res = simulate(_cfg(trace, policy="always-fetch", hbm_gb=31.6))
    s = res.summary
    assert s["completed"] == 100 and s["dropped"] == 0
    assert s["holders"]["fetch_fell_back_to_route"] > 0 and s["primitive_counts"]["fetch"] > 0
    assert s["engine"]["hbm"]["peak_kv_blocks"] >= 2 * 32          # two requests' gathered entries at once
    it = res.tables["iterations"].to_pandas()
    used = it.kv_bytes + it.pinned_bytes + it.copy_bytes
    assert (it.free_bytes >= -1e-6).all() and (used + it.weights_bytes <= 31.6e9 + 1).all()


def _holder_own_tpot(tmp_path, name, fanout):
    """Holder 4 decodes a request of its own (no chunks) while `fanout` selections route to it."""
    chunks = [{"chunk_id": i, "tokens": 2048, "canonical": True, "holder_hint": 4 + i % 2, "cached_offset": 0}
              for i in range(2)]
    reqs = [{"arrival_s": 0.0, "requester_hint": 4, "prompt_tokens": 64, "output_tokens": 200, "chunk_ids": [],
             "topk": 0, "holders_spanned": 0}]
    reqs += [{"arrival_s": 1e-4 * j, "requester_hint": j % 4, "prompt_tokens": 64, "output_tokens": 200,
              "chunk_ids": [0, 1], "topk": TOPK, "holders_spanned": 2} for j in range(fanout)]
    sim = Simulation(_cfg(write_trace(tmp_path / f"{name}.parquet", reqs, chunks), policy="always-route"))
    res = sim.run()
    own = sim.ctx.recorder.tpot[[i for i, r in enumerate(sim.ctx.recorder.requester) if r == 4][0]]
    return own, res


def test_a_holder_serving_selections_has_longer_own_iterations(tmp_path):
    idle, _ = _holder_own_tpot(tmp_path, "idle", 0)
    busy, res = _holder_own_tpot(tmp_path, "busy", 12)
    assert res.summary["engine"]["holder_partials"]["charged_to_own_iterations_s"] > 0
    assert busy > idle * 1.02, (busy, idle)


def test_the_selection_spans_trace_holders_and_counts_the_requester(tmp_path):
    """A selection spanning fewer chunk holders than `holders_spanned` is filled with other instances; a
    requester holding some of its chunks is one of the span (no extra holder for it)."""
    chunks = [{"chunk_id": i, "tokens": 2048, "canonical": True, "holder_hint": h, "cached_offset": 0}
              for i, h in enumerate([0, 4])]
    reqs = [{"arrival_s": 0.0, "requester_hint": 0, "prompt_tokens": 16, "output_tokens": 2, "chunk_ids": [0, 1],
             "topk": TOPK, "holders_spanned": 2},
            {"arrival_s": 1.0, "requester_hint": 1, "prompt_tokens": 16, "output_tokens": 2, "chunk_ids": [1],
             "topk": TOPK, "holders_spanned": 3}]
    sim = Simulation(_cfg(write_trace(tmp_path / "span.parquet", reqs, chunks), policy="always-route"))
    seen = []
    from simroute.sim import selection
    original = selection.SelectionRequest.decide

    def spy(self, remote):
        original(self, remote)
        seen.append((self.remote, dict(self.routes), self.resident_tokens))
    selection.SelectionRequest.decide = spy
    try:
        sim.run()
    finally:
        selection.SelectionRequest.decide = original
    (remote0, routes0, here0), (remote1, routes1, here1) = seen
    assert remote0 == [4] and routes0 == {4: TOPK / 2} and here0 == TOPK / 2      # k split over {0 (here), 4}
    assert remote1[0] == 4 and len(set(remote1)) == 3 and 1 not in remote1 and here1 == 0
    assert all(keys == pytest.approx(TOPK / 3) for keys in routes1.values())


# ---- the engine hooks a selection uses ---------------------------------------------------------------------
def _engine_pair(tmp_path):
    trace = selection_trace(tmp_path / "e.parquet", requester=REQUESTER, holders=HOLDERS)
    sim = Simulation(_cfg(trace))
    return sim.ctx.env, sim.ctx.engines


def test_a_route_share_premium_scales_the_holder_kernel(tmp_path):
    """The sparse kernel's premium over dense lengthens the routed round trip by exactly the extra kernel."""
    times = {}
    for premium in (1.0, 2.5):
        env, es = _engine_pair(tmp_path)
        seq = Sequence(0, 16, 9, routes=(RouteShare(es[4], 1024.0, premium),))
        es[0].submit(seq)
        env.run()
        times[premium] = seq.t_done - seq.t_first_token
    kernel = es.step.holder_partial_s(1, 16, 1024.0)
    layers = es.step.geometry.layers
    assert times[2.5] - times[1.0] == pytest.approx(8 * layers * 1.5 * kernel, rel=1e-6)


def test_a_step_wait_is_on_every_iteration_and_runs_beside_exchanges(tmp_path):
    """`Sequence.step_wait`: each iteration waits for it (asked once per event with its k iterations); a
    batch waits for its slowest sequence's wait, not their sum."""
    asked: list[int] = []
    waits = {}
    for wait_s in (0.0, 1e-3):
        env, es = _engine_pair(tmp_path)
        seq = Sequence(0, 16, 17, step_wait=lambda k, w=wait_s: (asked.append(k) if w else None) or w)
        other = Sequence(1, 16, 17, step_wait=lambda k, w=wait_s: w / 2)
        es[0].submit(seq)
        es[0].submit(other)
        env.run()
        waits[wait_s] = seq.t_done - seq.t_submit
    assert waits[1e-3] - waits[0.0] == pytest.approx(17 * 1e-3, rel=1e-6)   # 1 prefill + 16 decode iterations
    assert sum(asked) == 17 and max(asked) > 1              # one call per event, macro-events with k > 1


def test_fanout_over_four_cross_host_holders_is_flat_at_the_nic_capacity(tmp_path, monkeypatch):
    """The validate row fig4a: a first pass over M = 7 holders (4 on the other host: 4 queue pairs on the
    requester's NIC) costs what one over M = 1 does at the NIC's default context capacity, as Fig 4a draws it;
    a NIC that held only 3 contexts (a value only the nic-qp-sweep probe could set) would miss on every
    message to them (a Python subclass of the compiled MessageModel sets it)."""
    import dataclasses

    import simroute.network.engine as network_engine
    from simroute.network.messages import MessageModel, MessageModelParams

    def fanout_ratio(tag):
        bare = write_trace(tmp_path / f"bare{tag}.parquet", [{"arrival_s": 0.0, "requester_hint": 0,
                                                              "prompt_tokens": 16, "output_tokens": 1,
                                                              "chunk_ids": []}], [])
        ttft = {m: simulate(_cfg(selection_trace(tmp_path / f"f{tag}{m}.parquet", requester=0,
                                                 holders=list(range(1, m + 1))), policy="always-route"))
                .summary["ttft_ms"]["mean"] for m in (1, 7)}
        base = simulate(_cfg(bare, policy="always-route")).summary["ttft_ms"]["mean"]
        return (ttft[7] - base) / (ttft[1] - base)

    default = fanout_ratio("default")

    class ThreeContexts(MessageModel):
        def __init__(self, params=None):
            super().__init__(dataclasses.replace(params or MessageModelParams(), nic_context_slots=3,
                                                 nic_miss_s=20e-6))
    monkeypatch.setattr(network_engine, "MessageModel", ThreeContexts)
    three = fanout_ratio("three")
    assert 0.8 <= default <= 1.2 and three > 1.2, (default, three)
