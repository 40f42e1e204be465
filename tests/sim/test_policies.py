"""Policies: the registry, each built-in on its own, one DecisionContext for dense and sparse requests,
and adding a policy as one file."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from simroute.calib import default_profile_path, load_profile
from simroute.errors import UnknownNameError
from simroute.model.scalar import ScalarModel
from simroute.network import shipped_topology
from simroute.scenarios.traces import selection_trace, single_chunk_trace
from simroute.sim import RunConfig, Simulation, simulate
from simroute.sim.engine.exchange import DemandEntry
from simroute.sim.policies import POLICIES, adaptive
from simroute.sim.policies.base import DecisionContext, HorizonCosts, LiveState, Policy, RequestShape
from simroute.sim.vocab import Primitive
from simroute.defaults import PAPER_DEPLOYMENT

PARAMS = load_profile("h100-ibgda").cost_params()
MODEL = ScalarModel(PARAMS)
IB = PARAMS.fabric_id("h100-ibgda")


def _ctx(live=None, **shape):
    kw = dict(mq_first=16 * 16, mq_step=16, steps=1, tokens=2048.0, fabric=IB, cached=False)
    return DecisionContext(RequestShape(**{**kw, **shape}), live, PARAMS, MODEL)


def test_registry_lists_the_built_ins_with_their_help():
    assert {"paper", "always-route", "always-fetch", "always-local", "adaptive"} <= set(POLICIES.names())
    assert "adaptive: Predicate plus live state" in POLICIES.help()
    with pytest.raises(UnknownNameError, match="unknown policy 'magic'; valid: adaptive, always-fetch"):
        POLICIES.get("magic")


def test_a_second_class_under_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        POLICIES.register("paper")(type("Other", (Policy,), {"choose": lambda self, ctx: Primitive.ROUTE}))


def test_horizon_ties_go_to_route_then_fetch():
    assert HorizonCosts(1.0, 1.0, 1.0).cheapest() == Primitive.ROUTE
    assert HorizonCosts(2.0, 1.0, 1.0).cheapest() == Primitive.FETCH
    assert HorizonCosts(2.0, 3.0, 1.0).cheapest() == Primitive.LOCAL


@pytest.mark.parametrize("steps,mq_first", [(0, 16), (0, 16 * 4096), (200, 16 * 16), (0, 16 * 512)])
def test_paper_picks_the_cheapest_horizon(steps, mq_first):
    ctx = _ctx(steps=steps, mq_first=mq_first)
    costs = ctx.horizon()
    assert POLICIES.get("paper")().choose(ctx) == min(Primitive.ROUTE, Primitive.FETCH, Primitive.LOCAL,
                                                      key=lambda p: (costs[p], p))


def test_horizon_adds_decode_steps_and_a_selection_gathers_every_step():
    one, many = _ctx(steps=0).horizon(), _ctx(steps=100).horizon()
    assert many.route > one.route and many.fetch > one.fetch and many.local > one.local
    dense = _ctx(steps=100).horizon()
    sparse = _ctx(steps=100, topk=2048, holders=4).horizon()
    # a dense copy is attended locally after one pull; a selection pays its gather again every step
    assert sparse.fetch - _ctx(steps=0, topk=2048, holders=4).horizon().fetch > dense.fetch - one.fetch


@pytest.mark.parametrize("name,primitive", [("always-route", Primitive.ROUTE), ("always-fetch", Primitive.FETCH),
                                            ("always-local", Primitive.LOCAL)])
def test_forced_policies_ignore_costs(name, primitive):
    for ctx in (_ctx(), _ctx(steps=500, mq_first=16 * 8192), _ctx(topk=2048, holders=4)):
        assert POLICIES.get(name)().choose(ctx) == primitive


def test_adaptive_equals_paper_without_pressure_and_reacts_to_each_signal():
    idle = LiveState(0.0, None, True)
    paper, adaptive_policy = POLICIES.get("paper")(), POLICIES.get("adaptive")()
    assert adaptive_policy.choose(_ctx(idle)) == paper.choose(_ctx(idle)) == Primitive.ROUTE
    assert adaptive.AdaptivePolicy.adjusted(_ctx(idle)) == _ctx(idle).horizon()
    assert adaptive_policy.choose(_ctx(LiveState(5e-3, None, True))) != Primitive.ROUTE     # long holder queue
    assert adaptive_policy.choose(_ctx(LiveState(0.0, 0.05e9, True))) != Primitive.ROUTE    # crowded path
    full = adaptive.AdaptivePolicy.adjusted(_ctx(LiveState(0.0, None, False), steps=10))
    base = _ctx(steps=10).horizon()
    assert full.fetch == pytest.approx(base.fetch * 11) and full.local == pytest.approx(base.local * 11)


def test_adaptive_for_a_selection_keeps_the_gather_and_slows_it_on_a_crowded_path():
    sparse = dict(topk=2048, holders=4, steps=10, cached=True)
    base = _ctx(**sparse).horizon()
    full = adaptive.AdaptivePolicy.adjusted(_ctx(LiveState(0.0, None, False), **sparse))
    assert full.fetch == base.fetch and full.local == pytest.approx(base.local * 11)  # a gather keeps no copy
    crowded = adaptive.AdaptivePolicy.adjusted(_ctx(LiveState(0.0, 1e8, True), **sparse))
    assert crowded.fetch > base.fetch and crowded.route > base.route
    queued = POLICIES.get("adaptive")().choose(_ctx(LiveState(2e-3, None, True), **sparse))
    assert queued != POLICIES.get("paper")().choose(_ctx(LiveState(2e-3, None, True), **sparse))


def test_tensor_parallelism_shrinks_the_path_penalty():
    crowded = LiveState(0.0, 1e8, True)
    tp1 = adaptive.AdaptivePolicy.adjusted(_ctx(crowded, tp=1))
    tp2 = adaptive.AdaptivePolicy.adjusted(_ctx(crowded, tp=2))
    assert tp2.route < tp1.route and tp2.fetch < tp1.fetch


# ---- one DecisionContext for dense and sparse requests ---------------------------------------------------
class _Spy(Policy):
    """Routes everything and keeps every context it was asked about."""

    needs_live_state = True
    seen: list[DecisionContext] = []

    def choose(self, ctx: DecisionContext) -> Primitive:
        type(self).seen.append(ctx)
        return Primitive.ROUTE


@pytest.fixture
def spy():
    POLICIES.register("spy")(_Spy)
    _Spy.seen = []
    yield _Spy
    POLICIES.unregister("spy")


def _testbed(trace, **kw):
    return RunConfig(topology=str(shipped_topology("paper-testbed")), trace=str(trace),
                     calib=str(default_profile_path()), **{**PAPER_DEPLOYMENT, **kw})


def test_sparse_and_dense_requests_both_give_the_policy_live_state(tmp_path, spy):
    simulate(_testbed(selection_trace(tmp_path / "s.parquet", requester=0, holders=[4, 5, 6], output_tokens=4),
                      policy="spy"))
    simulate(_testbed(single_chunk_trace(tmp_path / "d.parquet", requester=4, holder=0), policy="spy"))
    sparse, dense = spy.seen
    assert sparse.shape.topk == 2048 and sparse.shape.holders == 3 and sparse.live is not None
    assert dense.shape.topk == 0 and dense.live is not None
    assert sparse.live.path_share_Bps > 0 and sparse.live.hbm_free


def test_live_state_reflects_a_busy_holder(tmp_path, spy):
    sim = Simulation(_testbed(selection_trace(tmp_path / "s.parquet", requester=0, holders=[4, 5, 6]),
                              policy="spy"))
    # another requester keeps holder 5's GPU half busy with partial attention (M/D/1 at rho = 0.5)
    # from, until, rate, requester, charge
    sim.ctx.engines[5].partials.demand.append(DemandEntry(0.0, 1e9, 0.5, 7, 0.0))
    sim.run()
    assert spy.seen[0].live.holder_wait_s == pytest.approx(0.5 * sim.ctx.compute.batch_s(1.0))


def test_policies_without_live_state_are_not_given_any(tmp_path):
    seen = []

    class Blind(Policy):
        """Records and routes."""

        def choose(self, ctx):
            seen.append(ctx)
            return Primitive.ROUTE
    POLICIES.register("blind")(Blind)
    try:
        simulate(_testbed(single_chunk_trace(tmp_path / "d.parquet", requester=4, holder=0), policy="blind"))
    finally:
        POLICIES.unregister("blind")
    assert seen and seen[0].live is None


# ---- adding a policy: one new file ---------------------------------------------------------------------------
def test_adding_a_policy_is_one_file(tmp_path):
    from simroute.cli.run_cmd import run_options
    path = Path(__file__).parent / "example" / "never_local.py"
    spec = importlib.util.spec_from_file_location("never_local", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)                # what discovery does: the decorator runs
        assert "never-local" in POLICIES
        trace = single_chunk_trace(tmp_path / "d.parquet", requester=4, holder=0, prompt_tokens=4096)
        forced = simulate(_testbed(trace, policy="always-local")).summary["primitive_counts"]
        res = simulate(_testbed(trace, policy="never-local")).summary["primitive_counts"]
        assert forced["local"] == 1 and res["local"] == 0 and res["route"] + res["fetch"] == 1
        policy_option = dict(run_options())["policy"].default
        assert "never-local: Route or fetch" in policy_option.help   # the CLI help comes from the registry
    finally:
        POLICIES.unregister("never-local")
    with pytest.raises(UnknownNameError):
        _testbed(trace, policy="never-local")


@pytest.mark.parametrize("scheduler", ["sarathi", "vllm"])
def test_local_is_priced_at_what_the_engine_charges_for_the_re_prefill(tmp_path, scheduler):
    """A 5000-token re-prefill alone on an idle engine takes `engine_reprefill_s` (three chunks of at most
    2048 tokens under sarathi, one under vllm), the price a run's DecisionContext gives local; a context
    without it keeps the closed form's ct L c."""
    from simroute.sim.policies.base import engine_reprefill_s
    from simroute.sim.request import reprefill_price
    from simroute.scenarios.traces import write_trace
    chunks = [{"chunk_id": 0, "tokens": 5000, "canonical": True, "holder_hint": 5, "cached_offset": 0}]
    reqs = [{"arrival_s": 100.0, "requester_hint": 0, "prompt_tokens": 16, "output_tokens": 2, "chunk_ids": [0]}]
    trace = write_trace(tmp_path / "t.parquet", reqs, chunks)       # its request arrives after the check
    sim = Simulation(RunConfig(**PAPER_DEPLOYMENT, topology=str(shipped_topology("paper-testbed")), trace=str(trace),
                               calib=str(default_profile_path()), scheduler=scheduler))
    requester = sim.ctx.cluster.instances[0]
    done = sim.ctx.copies.reprefill([0], requester.id, 0)
    sim.env.run(until=done)
    price = reprefill_price(sim.ctx, requester)
    assert sim.env.now == pytest.approx(price(5000.0), rel=1e-12)
    step = sim.ctx.engines.step
    chunked, whole = engine_reprefill_s(step, 2048.0, 5000.0), engine_reprefill_s(step, float("inf"), 5000.0)
    assert chunked != whole and price(5000.0) == (chunked if scheduler == "sarathi" else whole)
    closed = _ctx(tokens=5000.0).horizon()
    priced = DecisionContext(_ctx(tokens=5000.0).shape, None, PARAMS, MODEL, reprefill_s=price).horizon()
    assert (priced.route, priced.fetch) == (closed.route, closed.fetch)
    assert priced.local - closed.local == pytest.approx(price(5000.0) - 5000.0 * PARAMS.geometry.layers
                                                        * PARAMS.prefill_s_per_token_layer, rel=1e-9)
