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


def _rotate(cp: Any, kern: Any, buf: Any, ct: int, cos: Any, sin: Any) -> None:
    threads_y = 8
    kern(((ct + threads_y - 1) // threads_y,), (32, threads_y), (buf, np.int32(ct), cos, sin))


def _check_splice(cp: Any, rot: Any, scat: Any, cos: Any, sin: Any, delta: int) -> None:
    """Correctness before timing: rotation == numpy delta-rotation; scatter lands rows on their pages."""
    rng = np.random.default_rng(0)
    ct = 130
    raw = rng.standard_normal((ct, D)).astype(np.float32)
    cached = ref.encode(raw, np.arange(ct) + 7)
    bits = to_bf16_bits(cached)
    buf = cp.asarray(bits)
    _rotate(cp, rot, buf, ct, cos, sin)
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
    deadline = Deadline.for_probe(args, 240)
    quick = bool(args.get("quick"))
    delta = int(args.get("delta", 1000))               # the chunk moves 1000 positions (not the identity)
    theta = ref.yarn_theta()
    cos = cp.asarray((np.cos(delta * theta) * ref.yarn_cos_scale()).astype(np.float32))
    sin = cp.asarray((np.sin(delta * theta) * ref.yarn_cos_scale()).astype(np.float32))
    rot, scat = _splice_kernels(cp)
    _check_splice(cp, rot, scat, cos, sin, delta)
    rng = np.random.default_rng(1)
    samples, splice_ms, parts = [], {}, {}
    for ct in deadline.points("splice chunk sizes", CTS):
        recv = cp.asarray(to_bf16_bits(rng.standard_normal((LAYERS, ct, D)).astype(np.float32)))  # pulled chunk
        work = cp.empty_like(recv)
        pages = (ct + PAGE - 1) // PAGE
        pool = cp.zeros((LAYERS * pages * 2 + 16, PAGE, D), dtype=cp.uint16)
        tables = [cp.asarray(rng.choice(pool.shape[0], pages, replace=False).astype(np.int32)) for _ in range(LAYERS)]

        def gather() -> None:
            cp.copyto(work, recv)

        def rotate() -> None:
            for layer in range(LAYERS):
                _rotate(cp, rot, work[layer], ct, cos, sin)

        def scatter() -> None:
            for layer in range(LAYERS):
                scat((ct,), (64,), (work[layer], pool, tables[layer], np.int32(ct)))

        def splice() -> None:
            gather()
            rotate()
            scatter()
        warm, reps = (2, 5) if quick else (5, 30)
        timings = {name: time_events(cp, call, warm=warm, reps=reps, deadline=deadline)
             for name, call in (("gather", gather), ("rotate", rotate), ("scatter", scatter), ("splice", splice))}
        for name, times in timings.items():
            samples += [{"series": name, "x": float(ct), "value": seconds, "unit": "s", "layers": LAYERS}
                        for seconds in times]
        splice_ms[str(ct)] = summary(timings["splice"]) * 1e3
        parts[str(ct)] = {step: summary(seconds) * 1e6 for step, seconds in timings.items()}
    rot_share = float(np.mean([part["rotate"] / part["splice"] for part in parts.values()]))
    gather_us = float(np.median([part["gather"] for part in parts.values()]))
    if not splice_ms:
        raise TimeoutError("probe deadline reached before the first chunk size was timed")
    return {"results": {"splice_ms": splice_ms, "parts_us": parts, "rotation_share": rot_share,
                        "gather_us": gather_us, "layers": LAYERS, "delta": delta, "sweep": deadline.note(),
                        "backend": backend_name(cp),
                        "kernel": f"{backend_name(cp)}: RawKernel rope_delta + scatter_pages (bf16 bits, YaRN theta)"},
            "samples": samples,
            "message": "splice " + ", ".join(f"ct {chunk}: {millis:.2f} ms" for chunk, millis in splice_ms.items())
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
    deadline = Deadline.for_probe(args, 180)
    quick = bool(args.get("quick"))
    warm, reps = (2, 5) if quick else (5, 30)
    layer_bytes = 2048 * D * 2
    src = cp.ones(LAYERS * layer_bytes // 2, dtype=cp.uint16)
    dst = cp.zeros_like(src)
    per = layer_bytes // 2
    samples, staging = [], {}
    for count in deadline.points("staging streams", (1, 4, 8, 16)):
        streams = [cp.cuda.Stream(non_blocking=True) for _ in range(count)]
        main = cp.cuda.Stream(non_blocking=True)

        def stage() -> None:
            start = cp.cuda.Event()
            start.record(main)
            for stream in streams:
                stream.wait_event(start)
            for layer in range(LAYERS):
                with streams[layer % count]:
                    cp.copyto(dst[layer * per:(layer + 1) * per], src[layer * per:(layer + 1) * per])
            for stream in streams:
                event = cp.cuda.Event()
                event.record(stream)
                main.wait_event(event)
        times = time_events(cp, stage, warm=warm, reps=reps, deadline=deadline, stream=main)
        staging[str(count)] = summary(times) * 1e6
        samples += [{"series": "staging", "x": float(count), "value": seconds, "unit": "s"} for seconds in times]
    if not staging:
        raise TimeoutError("probe deadline reached before K = 1 was timed")
    if not np.array_equal(cp.asnumpy(dst[:8]), np.ones(8, np.uint16)):
        raise AssertionError("staging copies did not land")
    best = min(staging.values())
    elbow = min(int(count) for count, seconds in staging.items() if seconds <= best * 1.02)
    gain = 1 - staging[str(elbow)] / staging["1"]
    copy = cp.RawKernel(COPY_CUDA, "copy_blocks")
    nbytes = 64 * 2 ** 20
    src_buf, dst_buf = cp.ones(nbytes // 2, dtype=cp.uint16), cp.zeros(nbytes // 2, dtype=cp.uint16)
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    rates = {}
    for blocks in deadline.points("copy CTA sweep", sorted({1, 2, 4, 8, 16, 32, sms // 2, sms, 2 * sms, 4 * sms})):
        times = time_events(cp, lambda: copy((blocks,), (1024,), (src_buf, dst_buf, np.uint64(nbytes // 16))),
                            warm=warm, reps=reps, deadline=deadline)
        rates[str(blocks)] = nbytes / summary(times) / 1e9
        samples += [{"series": "copy_rate", "x": float(blocks), "value": nbytes / seconds / 1e9, "unit": "GB/s"}
                    for seconds in times]
    if rates and not bool((dst_buf[:: 4096] == 1).all()):
        raise AssertionError("copy kernel did not copy")
    copy_rates = ({"copy_GBps": rates, "single_block_GBps": rates["1"], "multi_block_GBps": max(rates.values()),
                   "blocks": sorted(map(int, rates))} if rates else {})
    copy_line = (f"; copy 1 CTA {rates['1']:.1f} GB/s, best {max(rates.values()):.0f} GB/s" if rates
                 else "; copy sweep not reached")
    return {"results": {"staging_us": staging, "elbow_streams": elbow, "gain_at_elbow": gain, "sweep": deadline.note(),
                        "backend": backend_name(cp),
                        **copy_rates},
            "samples": samples,
            "message": f"staging elbow K={elbow} ({gain:.0%} vs K=1; paper K=8, 7%)" + copy_line}
