"""One-GPU probes: the splice (gather + YaRN delta-rotation of the 64 RoPE dims + scatter into the paged
pool, all 27 layers, bf16 c_KV) and K-stream device-to-device staging with the single- vs multi-block copy
rate ("Move the Query, Not the Cache" §6.2, §7). Each kernel is checked against `reference` before it is timed."""

from __future__ import annotations

from typing import Any

import numpy as np

from simroute.probes import reference as ref
from simroute.probes.gpu_common import (BF16_CUDA, Deadline, backend_name, from_bf16_bits, import_cupy, summary,
                                        time_events, to_bf16_bits)

LAYERS, D, PAGE = 27, ref.D_QK, 64
CTS = (55, 1024, 2048, 4096)

SPLICE_CUDA = BF16_CUDA + r"""
// Rotate the 64 decoupled-RoPE dims (pairs 2i, 2i+1) of `ct` c_KV rows in place by delta x theta_i.
extern "C" __global__ void rope_delta(unsigned short* kv, int ct, const float* cs, const float* sn) {
    int t = blockIdx.x * blockDim.y + threadIdx.y;     // token
    int i = threadIdx.x;                               // pair 0..31
    if (t >= ct) return;
    unsigned short* r = kv + (size_t)t * 576 + 512 + 2 * i;
    float a = bf2f(r[0]), b = bf2f(r[1]);
    r[0] = f2bf(a * cs[i] - b * sn[i]);
    r[1] = f2bf(a * sn[i] + b * cs[i]);
}
// Scatter `ct` rows into the paged pool [pages, 64, 576]: row t goes to page table[t / 64], slot t % 64.
extern "C" __global__ void scatter_pages(const unsigned short* src, unsigned short* pool, const int* table, int ct) {
    int t = blockIdx.x;
    if (t >= ct) return;
    const uint4* s = (const uint4*)(src + (size_t)t * 576);
    uint4* d = (uint4*)(pool + ((size_t)table[t / 64] * 64 + (t % 64)) * 576);
    for (int k = threadIdx.x; k < 576 * 2 / 16; k += blockDim.x) d[k] = s[k];
}
"""


def _splice_kernels(cp: Any) -> tuple[Any, Any]:
    mod = cp.RawModule(code=SPLICE_CUDA)
    return mod.get_function("rope_delta"), mod.get_function("scatter_pages")


def _rotate(cp: Any, kern: Any, buf: Any, ct: int, cs: Any, sn: Any) -> None:
    ty = 8
    kern(((ct + ty - 1) // ty,), (32, ty), (buf, np.int32(ct), cs, sn))


def _check_splice(cp: Any, rot: Any, scat: Any, cs: Any, sn: Any, delta: int) -> None:
    """Correctness before timing: rotation == numpy delta-rotation; scatter lands rows on their pages."""
    rng = np.random.default_rng(0)
    ct = 130
    raw = rng.standard_normal((ct, D)).astype(np.float32)
    cached = ref.encode(raw, np.arange(ct) + 7)
    bits = to_bf16_bits(cached)
    buf = cp.asarray(bits)
    _rotate(cp, rot, buf, ct, cs, sn)
    got = from_bf16_bits(cp.asnumpy(buf))
    want = ref.delta_rotate(from_bf16_bits(bits), delta)
    err = np.max(np.abs(got - want))
    if err > 2 ** -7 * np.max(np.abs(want)):
        raise AssertionError(f"rotation kernel disagrees with the numpy reference (max err {err:.3g})")
    if not np.array_equal(got[:, :512], from_bf16_bits(bits)[:, :512]):
        raise AssertionError("rotation kernel touched the latent dims")
    pool = cp.zeros((8, PAGE, D), dtype=cp.uint16)
    table = cp.asarray(np.array([5, 2, 7], dtype=np.int32))
    scat((ct,), (64,), (buf, pool, table, np.int32(ct)))
    host = cp.asnumpy(pool)
    if not (np.array_equal(host[5, :64], cp.asnumpy(buf)[:64]) and np.array_equal(host[7, :2], cp.asnumpy(buf)[128:])):
        raise AssertionError("scatter kernel put rows on the wrong pages")


def probe_splice(args: dict[str, Any]) -> dict:
    cp = import_cupy()
    dl = Deadline.for_probe(args, 240)
    quick = bool(args.get("quick"))
    delta = int(args.get("delta", 1000))               # the chunk moves 1000 positions (not the identity)
    theta = ref.yarn_theta()
    cs = cp.asarray((np.cos(delta * theta) * ref.yarn_cos_scale()).astype(np.float32))
    sn = cp.asarray((np.sin(delta * theta) * ref.yarn_cos_scale()).astype(np.float32))
    rot, scat = _splice_kernels(cp)
    _check_splice(cp, rot, scat, cs, sn, delta)
    rng = np.random.default_rng(1)
    samples, splice_ms, parts = [], {}, {}
    for ct in dl.points("splice chunk sizes", CTS):
        recv = cp.asarray(to_bf16_bits(rng.standard_normal((LAYERS, ct, D)).astype(np.float32)))  # pulled chunk
        work = cp.empty_like(recv)
        pages = (ct + PAGE - 1) // PAGE
        pool = cp.zeros((LAYERS * pages * 2 + 16, PAGE, D), dtype=cp.uint16)
        tables = [cp.asarray(rng.choice(pool.shape[0], pages, replace=False).astype(np.int32)) for _ in range(LAYERS)]

        def gather() -> None:
            cp.copyto(work, recv)

        def rotate() -> None:
            for layer in range(LAYERS):
                _rotate(cp, rot, work[layer], ct, cs, sn)

        def scatter() -> None:
            for layer in range(LAYERS):
                scat((ct,), (64,), (work[layer], pool, tables[layer], np.int32(ct)))

        def splice() -> None:
            gather()
            rotate()
            scatter()
        warm, reps = (2, 5) if quick else (5, 30)
        t = {name: time_events(cp, fn, warm=warm, reps=reps, deadline=dl)
             for name, fn in (("gather", gather), ("rotate", rotate), ("scatter", scatter), ("splice", splice))}
        for name, xs in t.items():
            samples += [{"series": name, "x": float(ct), "value": v, "unit": "s", "layers": LAYERS} for v in xs]
        splice_ms[str(ct)] = summary(t["splice"]) * 1e3
        parts[str(ct)] = {k: summary(v) * 1e6 for k, v in t.items()}
    rot_share = float(np.mean([p["rotate"] / p["splice"] for p in parts.values()]))
    gather_us = float(np.median([p["gather"] for p in parts.values()]))
    if not splice_ms:
        raise TimeoutError("probe deadline reached before the first chunk size was timed")
    return {"results": {"splice_ms": splice_ms, "parts_us": parts, "rotation_share": rot_share,
                        "gather_us": gather_us, "layers": LAYERS, "delta": delta, "sweep": dl.note(),
                        "backend": backend_name(cp),
                        "kernel": f"{backend_name(cp)}: RawKernel rope_delta + scatter_pages (bf16 bits, YaRN theta)"},
            "samples": samples,
            "message": "splice " + ", ".join(f"ct {k}: {v:.2f} ms" for k, v in splice_ms.items())
                       + f" (paper H100: 2.77-3.06 ms); rotation {rot_share:.0%}"}


COPY_CUDA = r"""
extern "C" __global__ void copy_blocks(const uint4* src, uint4* dst, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
"""


def probe_staging(args: dict[str, Any]) -> dict:
    """K-stream D2D staging of a 2048-token chunk (27 per-layer copies) and the copy rate vs CTA count."""
    cp = import_cupy()
    dl = Deadline.for_probe(args, 180)
    quick = bool(args.get("quick"))
    warm, reps = (2, 5) if quick else (5, 30)
    layer_bytes = 2048 * D * 2
    src = cp.ones(LAYERS * layer_bytes // 2, dtype=cp.uint16)
    dst = cp.zeros_like(src)
    per = layer_bytes // 2
    samples, staging = [], {}
    for k in dl.points("staging streams", (1, 4, 8, 16)):
        streams = [cp.cuda.Stream(non_blocking=True) for _ in range(k)]
        main = cp.cuda.Stream(non_blocking=True)

        def stage() -> None:
            start = cp.cuda.Event()
            start.record(main)
            for s in streams:
                s.wait_event(start)
            for layer in range(LAYERS):
                with streams[layer % k]:
                    cp.copyto(dst[layer * per:(layer + 1) * per], src[layer * per:(layer + 1) * per])
            for s in streams:
                ev = cp.cuda.Event()
                ev.record(s)
                main.wait_event(ev)
        xs = time_events(cp, stage, warm=warm, reps=reps, deadline=dl, stream=main)
        staging[str(k)] = summary(xs) * 1e6
        samples += [{"series": "staging", "x": float(k), "value": v, "unit": "s"} for v in xs]
    if not staging:
        raise TimeoutError("probe deadline reached before K = 1 was timed")
    if not np.array_equal(cp.asnumpy(dst[:8]), np.ones(8, np.uint16)):
        raise AssertionError("staging copies did not land")
    best = min(staging.values())
    elbow = min(int(k) for k, v in staging.items() if v <= best * 1.02)
    gain = 1 - staging[str(elbow)] / staging["1"]
    copy = cp.RawKernel(COPY_CUDA, "copy_blocks")
    nbytes = 64 * 2 ** 20
    a, b = cp.ones(nbytes // 2, dtype=cp.uint16), cp.zeros(nbytes // 2, dtype=cp.uint16)
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    rates = {}
    for blocks in dl.points("copy CTA sweep", sorted({1, 2, 4, 8, 16, 32, sms // 2, sms, 2 * sms, 4 * sms})):
        xs = time_events(cp, lambda: copy((blocks,), (1024,), (a, b, np.uint64(nbytes // 16))), warm=warm,
                         reps=reps, deadline=dl)
        rates[str(blocks)] = nbytes / summary(xs) / 1e9
        samples += [{"series": "copy_rate", "x": float(blocks), "value": nbytes / v / 1e9, "unit": "GB/s"} for v in xs]
    if rates and not bool((b[:: 4096] == 1).all()):
        raise AssertionError("copy kernel did not copy")
    copy_rates = ({"copy_GBps": rates, "single_block_GBps": rates["1"], "multi_block_GBps": max(rates.values()),
                   "blocks": sorted(map(int, rates))} if rates else {})
    copy_line = (f"; copy 1 CTA {rates['1']:.1f} GB/s, best {max(rates.values()):.0f} GB/s" if rates
                 else "; copy sweep not reached")
    return {"results": {"staging_us": staging, "elbow_streams": elbow, "gain_at_elbow": gain, "sweep": dl.note(),
                        "backend": backend_name(cp),
                        **copy_rates},
            "samples": samples,
            "message": f"staging elbow K={elbow} ({gain:.0%} vs K=1; paper K=8, 7%)" + copy_line}
