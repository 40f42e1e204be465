"""One cost formula, one holder-compute function: the float path, the array path, the term tables, the
predicate (split or not) and the step-time model's holder floor all agree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simroute.calib import load_profile
from simroute.model import Shape, costs
from simroute.model import predicate
from simroute.model.cost import ARRAYS, FLOATS, holder_compute_s, holder_curve_s, holder_work, step_parts
from simroute.model.scalar import ScalarModel

P = load_profile("paper-all").cost_params()
P_V4 = load_profile("paper-all").cost_params("deepseek-v4-flash")     # token compression: fraction != 1
NF = len(P.fabrics)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8192), st.integers(1, 65536), st.sampled_from([0, 0, 256, 512, 2048, 4096]),
       st.sampled_from([P, P_V4]))
def test_holder_compute_floats_equal_arrays(rows, ct, topk, p):
    f = holder_compute_s(float(rows), float(ct), topk, p, FLOATS)
    a = holder_compute_s(np.array([float(rows)]), np.array([float(ct)]), np.array([float(topk)]), p, ARRAYS)[0]
    assert f == pytest.approx(a, rel=1e-12)
    assert ScalarModel(p).compute(rows, ct, topk) == f
    attended = topk if topk > 0 else ct
    dense = holder_curve_s(holder_work(rows, attended, p.geometry.token_fraction), p.holder_n, p.holder_s)
    assert f >= dense * (1.0 if topk == 0 else min(p.sparse_premium)) * (1 - 1e-12)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8192), st.integers(1, 65536), st.integers(0, NF - 1), st.sampled_from([0, 512, 2048]),
       st.integers(1, 16), st.sampled_from([1, 2, 8]), st.booleans(),
       st.sampled_from([P, P.with_(host_overhead=True), P_V4]))
def test_step_parts_floats_equal_arrays(mq, ct, fabric, topk, holders, tp, cached, p):
    f = step_parts(float(mq), float(ct), fabric, topk, holders, tp, cached, p, FLOATS)
    a = step_parts(np.array([float(mq)]), np.array([float(ct)]), np.array([fabric]), np.array([float(topk)]),
                   np.array([float(holders)]), np.array([float(tp)]), np.array([cached]), p, ARRAYS)
    for name, fv, av in zip(f._fields, f, a):
        if fv is None or av is None:
            assert fv is None and av is None, name
        elif name != "sparse":
            assert fv == pytest.approx(float(np.asarray(av).ravel()[0]), rel=1e-12), name


def test_split_mixed_batch_equals_unsplit(monkeypatch):
    rng = np.random.default_rng(3)
    n = 5000
    shape = Shape(mq=rng.integers(1, 4096, n).astype(float), ct=rng.integers(1, 8192, n).astype(float),
                  fabric=rng.integers(0, NF, n), reuse=rng.integers(0, 50, n), cached=rng.random(n) < 0.5,
                  topk=np.where(rng.random(n) < 0.4, 2048, 0), holders=rng.integers(1, 8, n))
    split = predicate.totals(shape, P)
    monkeypatch.setattr(predicate, "MIN_SPLIT", n + 1)
    whole = predicate.totals(shape, P)
    assert np.allclose(split, whole, rtol=1e-12, atol=0)
    ref = costs(shape, P)
    assert np.allclose(split[predicate.FETCH], ref["fetch"]["total"], rtol=1e-12)


def test_step_time_holder_floor_is_the_holder_compute_function():
    from simroute.model.steptime import StepTimeModel
    prof = load_profile("h100-ibgda")
    m = prof.step_model("deepseek-v2-lite")
    roof_only = StepTimeModel(m.geometry, m.gpu, m.tp)
    p = prof.cost_params("deepseek-v2-lite")
    for rows, ct in ((16, 2048), (256, 2048), (16 * 64, 4096), (16, 100_000)):
        # one query is one sequence: rows / 16 heads are its tokens (> 1: a first pass, the prefill form)
        floor = holder_compute_s(float(rows), float(ct), 0, p, FLOATS, rows / 16)   # what the predicate charges
        assert m.holder_partial_s(1, rows, ct) == pytest.approx(max(floor, roof_only.holder_partial_s(1, rows, ct)),
                                                                rel=1e-12)
    # 16 one-token decodes (16 queries, each reading the chunk) are the paper's Mq = 256 decode point
    assert m.holder_partial_s(16, 16, 2048) == pytest.approx(holder_compute_s(256.0, 2048.0, 0, p, FLOATS), rel=1e-12)
    assert m.holder_partial_s(1, 256, 2048) < m.holder_partial_s(16, 16, 2048)    # one 16-token block reads it once
