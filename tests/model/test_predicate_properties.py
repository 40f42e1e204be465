"""Property tests of the cost model and the predicate (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simroute.calib import load_profile
from simroute.model import PRIMITIVES, Shape, costs, decide
from simroute.model.predicate import totals

P = load_profile("paper-all").cost_params()
P_ONCE = P.with_(route_exchanges="once")
NF = len(P.fabrics)

shapes = st.fixed_dictionaries({
    "mq": st.integers(1, 8192), "ct": st.integers(1, 65536), "fabric": st.integers(0, NF - 1),
    "holders": st.integers(1, 16), "topk": st.sampled_from([0, 0, 512, 1024, 2048]),
    "reuse": st.integers(0, 1000), "cached": st.booleans(), "tp": st.sampled_from([1, 2, 4, 8]),
})


@settings(max_examples=200, deadline=None)
@given(shapes, st.sampled_from([P, P_ONCE]))
def test_costs_non_negative_and_choice_is_minimum(s, p):
    shape = Shape(**s)
    c = costs(shape, p)
    for prim in PRIMITIVES:
        for term, v in c[prim].items():
            assert np.all(np.asarray(v) >= 0), (prim, term)
    d = decide(shape, p)
    reported = np.array([float(np.asarray(c[prim]["total"]).ravel()[0]) for prim in PRIMITIVES])
    assert np.allclose(d.cost_s.ravel(), reported, rtol=1e-12)
    assert reported[int(d.choice[()])] == reported.min()


@settings(max_examples=100, deadline=None)
@given(shapes, st.integers(1, 4096))
def test_route_grows_with_mq(s, extra):
    a, b = dict(s), dict(s)
    b["mq"] = a["mq"] + extra
    assert costs(Shape(**b), P)["route"]["total"] > costs(Shape(**a), P)["route"]["total"]


@settings(max_examples=100, deadline=None)
@given(shapes, st.integers(1, 4096))
def test_local_grows_with_ct(s, extra):
    a, b = dict(s), dict(s)
    b["ct"] = a["ct"] + extra
    assert costs(Shape(**b), P)["local"]["total"] > costs(Shape(**a), P)["local"]["total"]


def test_vectorised_equals_elementwise_and_blocked():
    rng = np.random.default_rng(7)
    n = 200_000   # above the block size, so the blocked path runs
    shape = Shape(mq=rng.integers(1, 4096, n).astype(float), ct=rng.integers(1, 8192, n).astype(float),
                  fabric=rng.integers(0, NF, n), reuse=rng.integers(0, 50, n), cached=rng.random(n) < 0.5,
                  topk=np.where(rng.random(n) < 0.3, 2048, 0), holders=rng.integers(1, 8, n))
    d = decide(shape, P)
    ref = totals(shape, P)
    assert np.allclose(d.cost_s, ref) and np.array_equal(d.choice, np.argmin(ref, axis=0))
    full = costs(shape, P)
    for i, prim in enumerate(PRIMITIVES):
        assert np.allclose(full[prim]["total"], ref[i])
    for i in rng.integers(0, n, 20):
        one = Shape(mq=shape.mq[i], ct=shape.ct[i], fabric=int(shape.fabric[i]), reuse=int(shape.reuse[i]),
                    cached=bool(shape.cached[i]), topk=int(shape.topk[i]), holders=int(shape.holders[i]))
        assert int(decide(one, P).choice[()]) == int(d.choice[i])


@settings(max_examples=200, deadline=None)
@given(shapes, st.sampled_from([P, P_ONCE, P.with_(host_overhead=True), P.with_(host_overhead=True,
       collapsed_response=True, holder_amortisation=True, dispatcher_batching=True)]), st.integers(0, 500))
def test_scalar_fast_path_equals_vectorised(s, p, steps):
    from simroute.model.scalar import ScalarModel
    from simroute.sim.policies.base import horizon_costs, horizon_costs_scalar
    m = ScalarModel(p)
    kw = dict(mq_first=float(s["mq"]), mq_step=16.0, steps=steps, topk=s["topk"], holders=s["holders"])
    vec = horizon_costs(p, ct=np.array([float(s["ct"])]), fabric=np.array([s["fabric"]]),
                        cached=np.array([s["cached"]]), **kw)[:, 0]
    sca = horizon_costs_scalar(m, ct=float(s["ct"]), fabric=s["fabric"], cached=s["cached"], **kw)
    assert np.allclose(vec, sca, rtol=1e-9, atol=0)
