"""Numpy reference of what the GPU probes time: YaRN theta, decoupled-RoPE delta-rotation, absorbed-MLA
attention with natural-log lse, and the online-softmax merge of holders' partials ("Move the Query, Not the Cache" §4.2).

Correctness before timing: every GPU probe checks its kernel against these functions on a small slice before
it times anything, and the CPU tests check the identities themselves (merge == single instance; delta-rotation
== encoding at the new position). Dimensions are DeepSeek-V2-Lite's (DeepSeek-V2-Lite HF config.json).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

D_LATENT = 512          # kv_lora_rank: the latent part of c_KV, copied unchanged by the splice
D_ROPE = 64             # qk_rope_head_dim: the decoupled-RoPE part, rotated by the splice
D_QK = D_LATENT + D_ROPE
QK_HEAD_DIM = 128 + 64  # qk_nope + qk_rope: the softmax scale's head dim


@dataclass(frozen=True)
class Yarn:
    """V2-Lite's rope scaling (DeepSeek-V2-Lite HF config.json)."""

    base: float = 10000.0
    factor: float = 40.0
    original_max_position: int = 4096
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 0.707
    mscale_all_dim: float = 0.707


V2_LITE_YARN = Yarn()


def _yarn_mscale(scale: float, mscale: float) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _correction_dim(rotations: float, dim: int, base: float, max_pos: int) -> float:
    return dim * math.log(max_pos / (rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_theta(dim: int = D_ROPE, yarn: Yarn | None = V2_LITE_YARN) -> np.ndarray:
    """theta_i (rad per position) of the dim/2 rotary pairs; YaRN blends interpolated and extrapolated freqs."""
    base = yarn.base if yarn else 10000.0
    extra = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    if yarn is None or yarn.factor <= 1:
        return extra
    inter = extra / yarn.factor
    low = max(math.floor(_correction_dim(yarn.beta_fast, dim, base, yarn.original_max_position)), 0)
    high = min(math.ceil(_correction_dim(yarn.beta_slow, dim, base, yarn.original_max_position)), dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    keep_extra = 1.0 - ramp
    return inter * (1 - keep_extra) + extra * keep_extra


def yarn_cos_scale(yarn: Yarn = V2_LITE_YARN) -> float:
    """Multiplier on cos/sin (1.0 for V2-Lite: mscale == mscale_all_dim)."""
    return _yarn_mscale(yarn.factor, yarn.mscale) / _yarn_mscale(yarn.factor, yarn.mscale_all_dim)


def softmax_scale(yarn: Yarn = V2_LITE_YARN) -> float:
    """1/sqrt(192) x mscale^2, as DeepSeek-V2's attention applies it under YaRN."""
    mscale = _yarn_mscale(yarn.factor, yarn.mscale_all_dim)
    return mscale * mscale / math.sqrt(QK_HEAD_DIM)


def rotate_pairs(pairs: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """Rotate consecutive pairs (2i, 2i+1) of the last axis of x [..., D_ROPE] by angle [..., D_ROPE/2]."""
    pairs = np.asarray(pairs)
    even, odd = pairs[..., 0::2], pairs[..., 1::2]
    cos, sin = np.cos(angle).astype(pairs.dtype), np.sin(angle).astype(pairs.dtype)
    out = np.empty_like(pairs)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def encode(entries: np.ndarray, positions, theta: np.ndarray | None = None) -> np.ndarray:
    """c_KV entries [n, 576] with the RoPE dims encoded at `positions` (latent dims unchanged)."""
    theta = yarn_theta() if theta is None else theta
    pos = np.asarray(positions, dtype=np.float64).reshape(-1, 1)
    out = np.array(entries, copy=True)
    out[:, D_LATENT:] = rotate_pairs(entries[:, D_LATENT:].astype(np.float64), pos * theta).astype(entries.dtype)
    return out


def delta_rotate(cached: np.ndarray, delta, theta: np.ndarray | None = None) -> np.ndarray:
    """The splice's rotation: move cached entries by `delta` positions (scalar or per entry)."""
    theta = yarn_theta() if theta is None else theta
    deltas = np.broadcast_to(np.asarray(delta, dtype=np.float64), (cached.shape[0],)).reshape(-1, 1)
    out = np.array(cached, copy=True)
    out[:, D_LATENT:] = rotate_pairs(cached[:, D_LATENT:].astype(np.float64), deltas * theta).astype(cached.dtype)
    return out


@dataclass(frozen=True)
class Partial:
    """A holder's answer for its share of the cache: o normalised [rows, 512], running max m and sum l [rows]."""

    o: np.ndarray
    m: np.ndarray
    l: np.ndarray  # noqa: E741

    @property
    def lse(self) -> np.ndarray:
        return self.m + np.log(self.l)


def partial_attention(query: np.ndarray, cache: np.ndarray, scale: float | None = None) -> Partial:
    """Absorbed MLA as MQA: scores over d_qk = 576, values are the 512 latent dims; all in q's dtype."""
    scale = softmax_scale() if scale is None else scale
    dtype = query.dtype
    scores = (query @ cache.T) * dtype.type(scale)
    row_max = scores.max(axis=1)
    weights = np.exp(scores - row_max[:, None])
    row_sum = weights.sum(axis=1)  # noqa: E741
    out = (weights @ cache[:, :D_LATENT]) / row_sum[:, None]
    return Partial(out.astype(dtype), row_max.astype(dtype), row_sum.astype(dtype))


def attention(query: np.ndarray, cache: np.ndarray, scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Single-instance attention over the whole cache: (out [rows, 512], natural-log lse [rows])."""
    partial = partial_attention(query, cache, scale)
    return partial.o, partial.lse


def merge(partials: list[Partial]) -> Partial:
    """Merge M holders' partials at once (what the requester does after the last partial arrives)."""
    row_max = np.max(np.stack([partial.m for partial in partials]), axis=0)
    weights = [partial.l * np.exp(partial.m - row_max) for partial in partials]
    row_sum = np.sum(np.stack(weights), axis=0)  # noqa: E741
    weighted = np.stack([weight[:, None] * partial.o for weight, partial in zip(weights, partials)])
    out = np.sum(weighted, axis=0) / row_sum[:, None]
    return Partial(out.astype(partials[0].o.dtype), row_max, row_sum)


def merge_online(acc: Partial | None, new: Partial) -> Partial:
    """Fold one more partial into a running one (online softmax: partials merged as they arrive)."""
    if acc is None:
        return new
    row_max = np.maximum(acc.m, new.m)
    acc_weight, new_weight = acc.l * np.exp(acc.m - row_max), new.l * np.exp(new.m - row_max)
    row_sum = acc_weight + new_weight  # noqa: E741
    out = (acc_weight[:, None] * acc.o + new_weight[:, None] * new.o) / row_sum[:, None]
    return Partial(out.astype(acc.o.dtype), row_max, row_sum)


def to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 to bf16 (nearest-even) and back: what a value looks like after the wire."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).reshape(np.shape(values))


def wire_partial(partial: Partial) -> Partial:
    """A partial as it travels: o in bf16, m and l in fp32 (the 1032 B row of "Move the Query, Not the Cache" §3.2)."""
    return Partial(to_bf16(partial.o), partial.m.astype(np.float32), partial.l.astype(np.float32))


def split_cache(cache: np.ndarray, holders: int, rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """Split a cache into `holders` contiguous shares of uneven length (every share non-empty)."""
    tokens = cache.shape[0]
    rng = rng or np.random.default_rng(0)
    cuts = np.sort(rng.choice(np.arange(1, tokens), size=holders - 1, replace=False)) if holders > 1 else []
    return np.split(cache, cuts)


def random_case(rows: int, ct: int, rng: np.random.Generator, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """A query batch and a c_KV cache of realistic scale (unit-variance rows over 576 dims)."""
    query = rng.standard_normal((rows, D_QK)).astype(dtype)
    cache = rng.standard_normal((ct, D_QK)).astype(dtype)
    return query, cache
