"""A lone request on engines built from the shipped profile: TTFT and TPOT are the step-time model plus
the closed form (route's round trips) within 1%, on the real flow engine's message model."""

from __future__ import annotations

import pytest
import simpy

from simroute.calib import default_profile_path, load_profile
from simroute.model.scalar import ScalarModel
from simroute.network import FlowEngine, load_topology, shipped_topology
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
    route_first = scalar.step(heads * prompt, ct, fab, True)[0]
    ttft = step.iteration_s(prompt, 1, resident + prompt, prompt * resident + prompt * (prompt + 1) / 2) + route_first
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
