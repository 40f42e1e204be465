"""One shape on floats (`costs_scalar`, `decide_scalar`: what `simroute predict` answers with, no numpy) equals
the vectorised term tables and predicate on that shape bit for bit, over thousands of shapes: the same
`step_parts` and term builder, and the clamped curves evaluated in the arrays' arithmetic
(`interp_clamped_as_array`). (Inside a batch of many shapes the array rule of the extrapolated curves,
`interp_extrap_array`, sums hinges and may differ in the last bit: tests/model/test_one_formula.py.)"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simroute.calib import load_profile
from simroute.model.cost import PRIMITIVES, TERMS, Shape, costs, costs_scalar
from simroute.model.curves import interp_clamped_array, interp_clamped_as_array
from simroute.model.predicate import decide
from simroute.model.scalar import decide_scalar

PROFILE = load_profile("paper-all")
PARAMS = [PROFILE.cost_params(), PROFILE.cost_params("deepseek-v4-flash"),
          PROFILE.cost_params("llama-3.1-70b", route_exchanges="once", cache_dtype="fp8"),
          PROFILE.cost_params(host_overhead=True), PROFILE.cost_params(host_overhead=True, collapsed_response=True,
                                                                       holder_amortisation=True,
                                                                       dispatcher_batching=True)]
FIELDS = ("mq", "ct", "fabric", "holders", "topk", "reuse", "cached", "tp", "query_tokens")


def _batch(rng: np.random.Generator, n: int, fabrics: int) -> dict[str, np.ndarray]:
    ct = rng.integers(1, 20000, n)
    topk = np.where(rng.random(n) < 0.5, 0, rng.integers(1, 4096, n))
    return {"mq": rng.integers(1, 8192, n), "ct": ct, "fabric": rng.integers(0, fabrics, n),
            "holders": rng.integers(1, 9, n), "topk": np.minimum(topk, ct), "reuse": rng.integers(0, 64, n),
            "cached": rng.random(n) < 0.5, "tp": rng.choice([1, 2, 4, 8], n),
            "query_tokens": np.where(rng.random(n) < 0.8, 1, rng.integers(2, 512, n))}


def _one(batch: dict[str, np.ndarray], i: int) -> Shape:
    return Shape(**{name: batch[name][i].item() for name in FIELDS})


def _agree(shape: Shape, p) -> None:
    choice, totals = decide_scalar(shape, p)
    vector = decide(shape, p)        # 0-d arrays: what `simroute predict` evaluated before
    assert choice == int(vector.choice) and totals == tuple(float(x) for x in vector.cost_s.reshape(3)), shape
    assert costs_scalar(shape, p) == {prim: {term: float(values) for term, values in terms.items()}
                                      for prim, terms in costs(shape, p).items()}, shape


def test_thousands_of_shapes_agree_bit_for_bit():
    rng = np.random.default_rng(2024)
    chosen = set()
    for p in PARAMS:
        batch = _batch(rng, 600, len(p.fabrics))
        for i in range(len(batch["mq"])):
            _agree(_one(batch, i), p)
            chosen.add(decide_scalar(_one(batch, i), p)[0])
    assert chosen == {0, 1, 2}           # every primitive won somewhere: the shapes span the crossovers


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 1 << 16), st.integers(1, 1 << 17), st.integers(0, 1 << 17), st.integers(1, 16),
       st.integers(0, 1000), st.booleans(), st.sampled_from([1, 2, 3, 8]), st.sampled_from([1, 1, 2, 4096]),
       st.sampled_from(range(len(PARAMS))))
def test_one_shape_agrees_with_the_arrays_on_it(mq, ct, topk, holders, reuse, cached, tp, query_tokens, which):
    p = PARAMS[which]
    shape = Shape(mq=mq, ct=ct, fabric=mq % len(p.fabrics), holders=holders, topk=min(topk, ct), reuse=reuse,
                  cached=cached, tp=tp, query_tokens=query_tokens)
    _agree(shape, p)
    table = costs_scalar(shape, p)
    assert set(table) == set(PRIMITIVES) and all(set(TERMS[prim]) < set(table[prim]) for prim in PRIMITIVES)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=2, max_size=5, unique=True),
       st.lists(st.floats(-10, 10, allow_nan=False), min_size=5, max_size=5), st.floats(-1e5, 1e5))
def test_the_clamped_curve_on_a_float_is_numpys(xs, ys, x):
    xp, fp = [float(x) for x in sorted(xs)], ys[:len(xs)]
    for point in (x, *xp):
        assert interp_clamped_as_array(point, xp, fp) == float(interp_clamped_array(np.array([point]), xp, fp)[0])
