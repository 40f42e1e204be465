"""A lone request on engines built from the shipped profile: TTFT and TPOT are the step-time model plus
the closed form (route's round trips) within 1%, on the real flow engine's message model."""

from __future__ import annotations

import pytest
import simpy

from simroute.calib import default_profile_path, load_profile
from simroute.model.scalar import ScalarModel
from simroute.network import FlowEngine, load_topology, shipped_topology
from simroute.model.steptime import BatchShape
from simroute.sim.engine import EngineOptions, RouteShare, Sequence
from simroute.sim.engine.build import EngineSet

MODEL = "deepseek-v2-lite"


def _engines(route_exchanges="per-layer", steps=8, tp=1):
    profile = load_profile(default_profile_path())
    params = profile.cost_params(MODEL, route_exchanges=route_exchanges)
    topo = load_topology(shipped_topology("fattree"))
    env = simpy.Environment()
    net = FlowEngine(env, topo, seed=0)
    gpus = topo.gpus[::tp]
    index = params.fabric_index
    fabric_id = lambda a, b: index[topo.fabric_between(gpus[a], gpus[b])]
    es = EngineSet(env, profile, model=MODEL, tp=tp, gpus=gpus, intra_host_fabric=topo.spec.intra.fabric,
                   network=net, fabric_of=lambda a, b: params.fabrics[fabric_id(a, b)],
                   options=EngineOptions(steps_per_event=steps, check_hbm=True, token_budget=8192,
                                         prefill_chunk=8192),
                   exchanges_per_step=params.exchanges, merge_s=params.merge_s)
    return env, es, ScalarModel(params), fabric_id


@pytest.mark.parametrize("exchanges", ["per-layer", "once"])
def test_lone_routed_request_is_step_model_plus_closed_form(exchanges):
    env, es, scalar, fabric_id = _engines(exchanges)
    req, holder = es[0], es[40]                 # different hosts: the IBGDA fabric
    prompt, output, ct, resident = 300, 65, 2048.0, 4096.0
    seq = Sequence(0, prompt, output, resident_tokens=resident, routes=(RouteShare(holder, ct),))
    req.submit(seq)
    env.run()
    step, fab, heads = es.step, fabric_id(0, 40), es.step.geometry.heads_q
    route_first = scalar.step(heads * prompt, ct, fab, True, query_tokens=prompt)[0]   # a prefill block
    pairs = prompt * resident + prompt * (prompt + 1) / 2
    ttft = step.iteration_s(prompt, 1, resident + prompt, pairs, prefill_pairs=pairs) + route_first
    assert seq.t_first_token == pytest.approx(ttft, rel=0.01)
    route_step = scalar.step(heads, ct, fab, True)[0]
    decode = sum(step.iteration_s(1, 1, resident + prompt + g, resident + prompt + g) for g in range(1, output))
    tpot = (seq.t_done - seq.t_first_token) / (output - 1)
    assert tpot == pytest.approx(decode / (output - 1) + route_step, rel=0.01)


def test_resident_context_is_one_kernel_whatever_the_chunking():
    """The same 64k tokens attended as 512-, 2048- or 8192-token resident chunks cost the same TPOT: the
    attention is one kernel over the whole context (no per-chunk floor)."""
    tpots = []
    for chunk in (512, 2048, 8192):
        env, es, *_ = _engines()
        seq = Sequence(0, 100, 33, resident_tokens=float(chunk * (65536 // chunk)))
        es[0].submit(seq)
        env.run()
        tpots.append((seq.t_done - seq.t_first_token) / 32)
    assert max(tpots) == pytest.approx(min(tpots), rel=1e-9)


def test_routed_chunking_invariance():
    """A 64k-token document routed as 512 / 2048 / 8192-token chunks spread over holders: TPOT within 5%
    (one query per (request, holder) covering every chunk there; holders answer in parallel)."""
    tpots = []
    for chunk in (512, 2048, 8192):
        env, es, *_ = _engines()
        n = 65536 // chunk
        per_holder: dict[int, float] = {}
        for c in range(n):
            h = 8 + (c % 16) * 3                 # 16 holders on other hosts
            per_holder[h] = per_holder.get(h, 0.0) + chunk
        routes = tuple(RouteShare(es[h], keys) for h, keys in sorted(per_holder.items()))
        seq = Sequence(0, 100, 33, routes=routes)
        es[0].submit(seq)
        env.run()
        tpots.append((seq.t_done - seq.t_first_token) / 32)
    assert max(tpots) <= 1.05 * min(tpots)


class _StepSpy:
    """The real step-time model, recording every `iteration_s` call the engine makes."""

    def __init__(self, step):
        self.step, self.calls = step, []

    def iteration_s(self, *args):
        self.calls.append(args)
        return self.step.iteration_s(*args)

    def holder_partial_s(self, *args):
        return self.step.holder_partial_s(*args)


def _lone_prefill(prompt: int, chunk: int):
    """A lone prompt on engine 0, charged by the step model's roofline (these tests pin the prefill form's FLOPs
    by hand; the operator tables' prefill rows are pinned in tests/model/test_optables.py)."""
    env, es, *_ = _engines()
    es[0].options = EngineOptions(steps_per_event=8, check_hbm=True, token_budget=chunk, prefill_chunk=chunk)
    profile = load_profile(default_profile_path())
    roofline = profile.step_model(MODEL, gpu_spec=profile.gpu_spec(es.step.gpu.name, tables=False),
                                  intra_host_fabric=None)
    spy = es[0].step = _StepSpy(roofline)
    seq = Sequence(0, prompt, 1)
    es[0].submit(seq)
    env.run()
    return seq, spy, roofline


def test_lone_long_prefill_is_charged_in_the_prefill_form_by_hand_count():
    """A 16k-token prompt in one iteration: its TTFT is the step model's iteration with every pair in MLA's
    expanded prefill form, whose attention FLOPs are 2 x heads x (qk_nope + rope + v_head) per pair and layer
    (3.4x fewer than the absorbed decode form's 2 x heads x (d_qk + d_v))."""
    prompt = 16384
    seq, spy, step = _lone_prefill(prompt, prompt)
    g, gpu = step.geometry, step.gpu
    pairs = prompt * (prompt + 1) / 2
    assert spy.calls == [(prompt, 1, prompt, pairs, pairs, 0)]       # no sequence in the decode form
    assert seq.t_first_token == pytest.approx(step.iteration_s(prompt, 1, prompt, pairs, pairs), rel=1e-12)
    rate = gpu.peak_flops * gpu.attention_efficiency
    expanded = 2 * g.heads_q * (g.qk_nope_head_dim + g.rope_dims + g.v_head_dim) * pairs / rate
    absorbed = 2 * g.heads_q * (g.d_qk + g.d_v) * pairs / rate
    terms = step.iteration(BatchShape.uniform(prefill_tokens=prompt))
    assert terms.bounds["attention"] == "compute"
    assert terms.attention_s_per_layer == pytest.approx(expanded, rel=1e-9)
    assert absorbed / expanded == pytest.approx(3.4, abs=0.01)
    # what the engine charged before (every pair absorbed) is longer by exactly the FLOPs difference
    before = step.iteration_s(prompt, 1, prompt, pairs)
    assert before - seq.t_first_token == pytest.approx(g.layers * (absorbed - expanded), rel=1e-9)


def test_chunked_prefill_attention_costs_the_same_however_the_prompt_is_cut():
    """The same 16k-token prompt prefilled in 2048- or 512-token chunks: the attention the engine charges over
    its iterations is within 5% (the same pairs; each chunk reads its context once more, which the
    compute-bound kernel hides). The linear term legitimately differs: weights are read once per iteration."""
    prompt = 16384
    attention = {}
    for chunk in (2048, 512):
        seq, spy, step = _lone_prefill(prompt, chunk)
        assert len(spy.calls) == prompt // chunk and all(c[4] == c[3] > 0 for c in spy.calls)
        attention[chunk] = sum(step.attention_s(kv, pairs, prefill_pairs=pre) for _n, _s, kv, pairs, pre, _d in spy.calls)
    whole = step.attention_s(prompt, prompt * (prompt + 1) / 2, prefill_pairs=prompt * (prompt + 1) / 2)
    assert attention[512] == pytest.approx(attention[2048], rel=0.05)
    assert attention[2048] == pytest.approx(whole, rel=0.05)
