"""A routed first pass (one sequence's T > 1 query tokens on the holder) is charged in the prefill form, not by
stretching the decode-kernel holder curve to T x the key reads; decode (T = 1) keeps the paper's curve."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simroute.calib import load_profile
from simroute.model.cost import ARRAYS, FLOATS, holder_compute_s, holder_curve_s, holder_work, step_parts

PROF = load_profile("h100-ibgda")
P = PROF.cost_params("deepseek-v2-lite")          # 16 heads, MLA expanded 128 + 64 + 128 per head
STEP = PROF.step_model("deepseek-v2-lite")         # the engine's view of the same H100
H100_ATTN = 989e12 * 0.667                         # peak x the FlashMLA compute-bound fraction (h100-sxm entry)
H100_BW = 3350e9 * 0.896                        # datasheet x the FlashMLA memory-bound fraction


def test_a_first_pass_costs_its_prefill_flops_not_the_stretched_curve():
    rows, ct = 16 * 2048, 2048.0                   # a 2048-token prompt's first pass over a 2048-token chunk
    prefill = rows * ct * 2 * (128 + 64 + 128) / H100_ATTN          # 65.1 us, compute-bound
    keys = ct * 576 * 2 / H100_BW                                     # 0.78 us, the chunk read once
    assert P.holder_prefill_s == pytest.approx((576 * 2 / H100_BW, 2 * 320 / H100_ATTN))
    got = holder_compute_s(rows, ct, 0, P, FLOATS, 2048)
    assert got == pytest.approx(max(15e-6, keys, prefill), rel=1e-9)
    stretched = holder_compute_s(rows, ct, 0, P, FLOATS)             # the same rows read as 2048 decode requesters
    assert stretched == pytest.approx(400e-6 + (2048 - 256) * (400e-6 - 37e-6) / 240, rel=1e-9)   # 3.11 ms
    assert stretched / got > 40
    assert STEP.holder_partial_s(1, rows, ct) == pytest.approx(got, rel=1e-9)    # the engine charges the same


def test_decode_keeps_the_papers_curve_and_a_short_block_its_one_token_floor():
    assert holder_compute_s(256.0, 2048.0, 0, P, FLOATS) == pytest.approx(37e-6)     # Fig 4b, N = 16
    assert holder_compute_s(256.0, 2048.0, 0, P, FLOATS, 1) == pytest.approx(37e-6)
    # 16 tokens of one sequence read the chunk once: no faster than one decode step (15 us), not 16 of them
    assert holder_compute_s(256.0, 2048.0, 0, P, FLOATS, 16) == pytest.approx(15e-6)
    assert P.with_(holder_prefill_s=None) is not P and \
        holder_compute_s(256.0, 2048.0, 0, P.with_(holder_prefill_s=None), FLOATS, 16) == pytest.approx(37e-6)


def test_more_prompt_tokens_never_cost_less_and_cutting_the_block_costs_the_same():
    for ct in (512.0, 2048.0, 65536.0):
        costs = [holder_compute_s(16.0 * t, ct, 0, P, FLOATS, t) for t in range(1, 5000, 37)]
        assert all(b >= a for a, b in zip(costs, costs[1:])), ct
        engine = [STEP.holder_partial_s(1, 16 * t, ct) for t in range(1, 5000, 37)]
        assert all(b >= a for a, b in zip(engine, engine[1:])), ct
    whole = holder_compute_s(16.0 * 4096, 2048.0, 0, P, FLOATS, 4096)
    halves = 2 * holder_compute_s(16.0 * 2048, 2048.0, 0, P, FLOATS, 2048)
    assert whole == pytest.approx(halves, rel=1e-9)          # compute-bound: the work, however it is cut


def test_route_attend_and_floor_of_a_first_pass_use_the_block_form():
    """step_parts charges the block on the holder (route) and on the requester (fetch / local attend) alike."""
    f = P.fabric_id("h100-ibgda")
    block = step_parts(16.0 * 2048, 2048.0, f, 0, 1, 1, True, P, FLOATS, 2048)
    assert block.compute == block.attend == pytest.approx(holder_compute_s(16.0 * 2048, 2048.0, 0, P, FLOATS, 2048))
    stretched = step_parts(16.0 * 2048, 2048.0, f, 0, 1, 1, True, P, FLOATS)
    assert block.compute < stretched.compute / 40 and block.pull == stretched.pull


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4096), st.integers(1, 65536), st.sampled_from([0, 512, 2048]), st.integers(1, 16),
       st.sampled_from([1, 8]))
def test_block_form_floats_equal_arrays(tokens, ct, topk, heads, tp):
    rows = float(tokens * heads) / tp
    f = holder_compute_s(rows, float(ct), topk, P, FLOATS, float(tokens))
    a = holder_compute_s(np.array([rows]), np.array([float(ct)]), np.array([float(topk)]), P, ARRAYS,
                         np.array([float(tokens)]))[0]
    assert f == pytest.approx(a, rel=1e-12)
    attended = topk if topk else ct
    floor = holder_curve_s(holder_work(rows / tokens, attended), P.holder_n, P.holder_s)
    assert f >= floor * (1.0 if topk == 0 else min(P.sparse_premium)) * (1 - 1e-12)


def test_a_selections_first_pass_stays_on_the_curve_each_token_gathers_its_own():
    """Under selection each query token attends its own top-k entries: T tokens are T gathers (the curve at
    all rows, times the sparse premium), in the closed form and on the engine (`dense=False`)."""
    rows, k = 16.0 * 64, 2048.0
    decode_form = holder_compute_s(rows, 65536.0, k, P, FLOATS)
    assert holder_compute_s(rows, 65536.0, k, P, FLOATS, 64) == decode_form
    curve = holder_curve_s(holder_work(rows, k), P.holder_n, P.holder_s)
    assert STEP.holder_partial_s(1, rows, k, dense=False) == pytest.approx(curve, rel=1e-9)
    assert STEP.holder_partial_s(1, rows, k) < STEP.holder_partial_s(1, rows, k, dense=False)
