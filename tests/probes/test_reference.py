"""Correctness before timing: the identities the GPU probes' kernels are checked against (numpy, CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from simroute.probes import reference as ref


@pytest.mark.parametrize("holders", [1, 2, 3, 7])
def test_merge_of_partials_equals_single_instance_fp32(holders: int) -> None:
    rng = np.random.default_rng(holders)
    q, kv = ref.random_case(64, 2048, rng)
    out, lse = ref.attention(q, kv)
    parts = [ref.partial_attention(q, share) for share in ref.split_cache(kv, holders, rng)]
    merged = ref.merge(parts)
    online = None
    for p in parts:
        online = ref.merge_online(online, p)
    assert merged.o.shape == (64, 512)
    scale = np.max(np.abs(out))                       # errors relative to the output's magnitude
    assert np.max(np.abs(merged.o - out)) <= 1e-6 * scale
    assert np.max(np.abs(online.o - out)) <= 1e-6 * scale
    assert np.max(np.abs(merged.lse - lse)) <= 1e-6 * np.max(np.abs(lse))
    # ...and it is fp32 round-off: no further from the fp64 truth than single-instance fp32 itself (x2)
    truth, _ = ref.attention(q.astype(np.float64), kv.astype(np.float64))
    assert np.max(np.abs(merged.o - truth)) <= 2 * np.max(np.abs(out - truth)) + 1e-7


def test_merge_with_bf16_wire_stays_within_wire_noise() -> None:
    rng = np.random.default_rng(3)
    q, kv = ref.random_case(32, 1024, rng)
    q, kv = ref.to_bf16(q), ref.to_bf16(kv)          # bf16 inputs, as cached and routed
    out, _ = ref.attention(q, kv)
    parts = [ref.wire_partial(ref.partial_attention(q, s)) for s in ref.split_cache(kv, 4, rng)]
    merged = ref.merge(parts)
    err = np.max(np.abs(merged.o - out))
    assert err <= 2.0 ** -8 * np.max(np.abs(out))     # one bf16 ulp of the largest output
    assert err > 0                                     # the wire does round


def test_bf16_rounding_is_nearest_even() -> None:
    x = np.array([1.0, 1.0 + 2 ** -9, 1.0 + 3 * 2 ** -9, -2.5], dtype=np.float32)
    assert ref.to_bf16(x).tolist() == [1.0, 1.0, 1.0 + 2 ** -7, -2.5]


def test_yarn_theta_blends_interpolated_and_extrapolated() -> None:
    plain, yarn = ref.yarn_theta(yarn=None), ref.yarn_theta()
    assert plain.shape == yarn.shape == (32,)
    assert yarn[0] == pytest.approx(plain[0])               # fast dims extrapolate (unchanged)
    assert yarn[-1] == pytest.approx(plain[-1] / 40.0)      # slow dims interpolate by the factor
    assert np.all(np.diff(yarn) < 0)
    assert ref.yarn_cos_scale() == pytest.approx(1.0)
    assert ref.softmax_scale() == pytest.approx((0.1 * 0.707 * np.log(40) + 1) ** 2 / np.sqrt(192))


@pytest.mark.parametrize("delta", [1, 55, -300, 4096, 100_000])
def test_delta_rotation_equals_encoding_at_new_position(delta: int) -> None:
    rng = np.random.default_rng(0)
    raw = rng.standard_normal((128, 576))
    pos = np.arange(128) + 17
    cached = ref.encode(raw, pos)
    spliced = ref.delta_rotate(cached, delta)
    np.testing.assert_allclose(spliced, ref.encode(raw, pos + delta), atol=1e-9)
    np.testing.assert_array_equal(spliced[:, :512], raw[:, :512])    # latent copied unchanged


def test_rehoming_a_scattered_selection_diverges() -> None:
    """Sparse selection: entries kept at their cached positions are right; re-homing them to contiguous
    offsets changes their relative positions to the query and the output diverges (paper: 25-56%)."""
    rng = np.random.default_rng(1)
    store, k, qpos = 32768, 512, 40000
    raw_kv = rng.standard_normal((k, 576)) * 1.0
    raw_kv[:, 512:] *= 4.0                          # RoPE dims carry position signal
    raw_q = rng.standard_normal((16, 576))
    raw_q[:, 512:] *= 4.0
    sel = np.sort(rng.choice(store, size=k, replace=False))
    q = ref.encode(raw_q, np.full(16, qpos))
    right, _ = ref.attention(q, ref.encode(raw_kv, sel))
    rehomed, _ = ref.attention(q, ref.encode(raw_kv, qpos - k + np.arange(k)))
    rel = np.linalg.norm(rehomed - right) / np.linalg.norm(right)
    assert rel > 0.05
    # ...while a contiguous chunk moved as a whole by the splice keeps exactly what encoding there gives
    moved = ref.delta_rotate(ref.encode(raw_kv, np.arange(k)), qpos - k)
    exact, _ = ref.attention(q, ref.encode(raw_kv, qpos - k + np.arange(k)))
    np.testing.assert_allclose(ref.attention(q, moved)[0], exact, atol=1e-9)
