"""One-GPU probes: the splice (gather + YaRN delta-rotation of the 64 RoPE dims + scatter into the paged
pool, all 27 layers, bf16 c_KV) and the K-stream staging pool's mechanisms (per-copy host issue, per-stream
join, one copy's device time, copy engines, work queues; the K = 1/4/8/16 sweep against what they predict) with
the single- vs multi-block copy rate ("Move the Query, Not the Cache" §6.2, §7). Each kernel is checked
against `reference` before it is timed."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from simroute.model.staging import CUDA_DEFAULT_CONNECTIONS
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
HOLD_CUDA = BF16_CUDA + r"""
// Keep a stream busy for `ns` nanoseconds: the work queued behind it then runs back to back, without the host.
extern "C" __global__ void hold_ns(unsigned long long ns) {
    unsigned long long t0 = now_ns();
    while (now_ns() - t0 < ns) { }
}
"""
STAGING_STREAMS = (1, 4, 8, 16)
HOLD_NS = 2_000_000          # 2 ms: longer than issuing 27 copies and their events from Python


def staging_constants(dispatch_s: list[float], join_s: list[float], copy_s: list[float], layer_bytes: float,
                      copy_engines: int, hw_queues: int, *, parallel_s: list[float]) -> dict[str, float]:
    """The staging mechanisms' constants (simroute.model.staging) from the probe's raw timings: host seconds to
    issue one copy and to join one stream (medians of per-call samples), one copy's device seconds (median),
    the device seconds of `copy_engines` copies started together (their aggregate rate: what the copies share),
    the GPU's asyncEngineCount and the CUDA_DEVICE_MAX_CONNECTIONS the probe ran with."""
    if not (dispatch_s and join_s and copy_s and parallel_s):
        raise ValueError("the staging constants need dispatch, join, copy and parallel-copy samples")
    if min(copy_s) <= 0 or min(parallel_s) <= 0 or min(dispatch_s) < 0 or min(join_s) < 0:
        raise ValueError("staging timings must be positive")
    copy, engines = summary(copy_s), max(1, int(copy_engines))
    return {"dispatch_us": summary(dispatch_s) * 1e6, "join_us": summary(join_s) * 1e6,
            "copy_us": copy * 1e6, "copy_GBps": layer_bytes / copy / 1e9,
            "parallel_GBps": engines * layer_bytes / summary(parallel_s) / 1e9, "copy_engines": int(copy_engines),
            "hw_queues": int(hw_queues)}


def staging_prediction(constants: dict[str, float], layers: int, layer_bytes: float,
                       streams: tuple[int, ...] = STAGING_STREAMS) -> dict[str, float]:
    """What the mechanisms predict for one chunk at each K with the measured constants (microseconds), to set
    beside the measured sweep: the check that the mechanisms explain the box."""
    from simroute.model.staging import StagingParams, stage_s
    one = constants["copy_GBps"] * 1e9
    params = StagingParams(dispatch_s=constants["dispatch_us"] * 1e-6, join_s=constants["join_us"] * 1e-6,
                           copy_Bps=one, hbm_copy_Bps=max(one, constants.get("parallel_GBps", 0.0) * 1e9),
                           copy_engines=max(1, int(constants["copy_engines"])), hw_queues=int(constants["hw_queues"]))
    return {str(count): stage_s(layers, layer_bytes, count, params) * 1e6 for count in streams}


def probe_staging(args: dict[str, Any]) -> dict:
    """The staging pool's mechanisms on this GPU (simroute.model.staging): host time to issue one per-layer copy
    and to join one stream, one copy's device time (queued behind a hold kernel, so back to back without the
    host), asyncEngineCount, CUDA_DEVICE_MAX_CONNECTIONS; then a 2048-token chunk's 27 copies over K = 1/4/8/16
    streams end to end (host clock, issue to synchronize) against what those constants predict; and the copy
    rate vs CTA count."""
    cp = import_cupy()
    deadline = Deadline.for_probe(args, 180)
    quick = bool(args.get("quick"))
    warm, reps = (2, 5) if quick else (5, 30)
    layer_bytes = 2048 * D * 2
    src = cp.ones(LAYERS * layer_bytes // 2, dtype=cp.uint16)
    dst = cp.zeros_like(src)
    per = layer_bytes // 2
    props = cp.cuda.runtime.getDeviceProperties(0)
    engines = int(props.get("asyncEngineCount", 0))
    queues = int(os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", CUDA_DEFAULT_CONNECTIONS))
    hold = cp.RawModule(code=HOLD_CUDA).get_function("hold_ns")
    main = cp.cuda.Stream(non_blocking=True)
    pool = [cp.cuda.Stream(non_blocking=True) for _ in range(max(STAGING_STREAMS))]

    def copy_layer(layer: int) -> None:
        cp.copyto(dst[layer * per:(layer + 1) * per], src[layer * per:(layer + 1) * per])

    samples: list[dict[str, Any]] = []
    dispatch, join, copies, parallel = [], [], [], []
    stream = pool[0]
    for rep in range(warm + reps):                   # the per-call costs, and one copy's device time
        deadline.check("staging per-call timings")
        with stream:                                 # host: issuing the 27 copies (the stream held meanwhile)
            hold((1,), (1,), (np.uint64(HOLD_NS),))
            started = time.perf_counter()
            for layer in range(LAYERS):
                copy_layer(layer)
            issued = time.perf_counter()
        stream.synchronize()
        events = [cp.cuda.Event() for _ in range(LAYERS + 1)]
        with stream:                                 # device: the copies back to back behind the hold kernel
            hold((1,), (1,), (np.uint64(HOLD_NS),))
            events[0].record(stream)
            for layer in range(LAYERS):
                copy_layer(layer)
                events[layer + 1].record(stream)
        stream.synchronize()
        lanes = pool[:max(1, engines)]               # device: one copy per engine, released together
        with stream:
            hold((1,), (1,), (np.uint64(HOLD_NS),))
            release = cp.cuda.Event()
            release.record(stream)
        ends = []
        for lane, other in enumerate(lanes):
            other.wait_event(release)
            with other:
                copy_layer(lane)
                ends.append(cp.cuda.Event())
                ends[-1].record(other)
        for other in lanes:
            other.synchronize()
        joined = time.perf_counter()                 # host: joining every pool stream into `main`
        for other in pool:
            done = cp.cuda.Event()
            done.record(other)
            main.wait_event(done)
        join_end = time.perf_counter()
        main.synchronize()
        if rep >= warm:
            dispatch.append((issued - started) / LAYERS)
            join.append((join_end - joined) / len(pool))
            copies += [cp.cuda.get_elapsed_time(events[layer], events[layer + 1]) * 1e-3 for layer in range(LAYERS)]
            parallel.append(max(cp.cuda.get_elapsed_time(release, end) for end in ends) * 1e-3)
    if not np.array_equal(cp.asnumpy(dst[:8]), np.ones(8, np.uint16)):
        raise AssertionError("staging copies did not land")
    constants = staging_constants(dispatch, join, copies, layer_bytes, engines, queues, parallel_s=parallel)
    samples += [{"series": "dispatch", "x": 1.0, "value": seconds, "unit": "s"} for seconds in dispatch]
    samples += [{"series": "join", "x": 1.0, "value": seconds, "unit": "s"} for seconds in join]
    samples += [{"series": "copy", "x": 1.0, "value": seconds, "unit": "s"} for seconds in copies]
    samples += [{"series": "parallel_copies", "x": float(max(1, engines)), "value": seconds, "unit": "s"}
                for seconds in parallel]

    staging = {}
    for count in deadline.points("staging streams", STAGING_STREAMS):
        streams = pool[:count]

        def stage() -> None:
            start = cp.cuda.Event()
            start.record(main)
            for stream in streams:
                stream.wait_event(start)
            for layer in range(LAYERS):
                with streams[layer % count]:
                    copy_layer(layer)
            for stream in streams:
                event = cp.cuda.Event()
                event.record(stream)
                main.wait_event(event)
        times = []
        for rep in range(warm + reps):
            main.synchronize()
            started = time.perf_counter()
            stage()
            main.synchronize()
            if rep >= warm:
                times.append(time.perf_counter() - started)
            if deadline.expired():
                break
        staging[str(count)] = summary(times) * 1e6
        samples += [{"series": "staging", "x": float(count), "value": seconds, "unit": "s"} for seconds in times]
    if not staging:
        raise TimeoutError("probe deadline reached before K = 1 was timed")
    predicted = staging_prediction(constants, LAYERS, layer_bytes, tuple(int(count) for count in staging))
    best = min(staging.values())
    elbow = min(int(count) for count, seconds in staging.items() if seconds <= best * 1.02)
    copy = cp.RawKernel(COPY_CUDA, "copy_blocks")
    nbytes = 64 * 2 ** 20
    src_buf, dst_buf = cp.ones(nbytes // 2, dtype=cp.uint16), cp.zeros(nbytes // 2, dtype=cp.uint16)
    sms = props["multiProcessorCount"]
    rates = {}
    for blocks in deadline.points("copy CTA sweep", sorted({1, 2, 4, 8, 16, 32, sms // 2, sms, 2 * sms, 4 * sms})):
        times = time_events(cp, lambda: copy((blocks,), (1024,), (src_buf, dst_buf, np.uint64(nbytes // 16))),
                            warm=warm, reps=reps, deadline=deadline)
        rates[str(blocks)] = nbytes / summary(times) / 1e9
        samples += [{"series": "copy_rate", "x": float(blocks), "value": nbytes / seconds / 1e9, "unit": "GB/s"}
                    for seconds in times]
    if rates and not bool((dst_buf[:: 4096] == 1).all()):
        raise AssertionError("copy kernel did not copy")
    copy_rates = ({"copy_GBps_by_blocks": rates, "single_block_GBps": rates["1"],
                   "multi_block_GBps": max(rates.values()), "blocks": sorted(map(int, rates))} if rates else {})
    copy_line = (f"; copy kernel 1 CTA {rates['1']:.1f} GB/s, best {max(rates.values()):.0f} GB/s" if rates
                 else "; copy sweep not reached")
    sweep = ", ".join(f"K={count}: {staging[count]:.0f} us (model {predicted[count]:.0f})" for count in staging)
    return {"results": {**constants, "staging_us": staging, "model_us": predicted, "elbow_streams": elbow,
                        "sweep": deadline.note(), "backend": backend_name(cp), **copy_rates},
            "samples": samples,
            "message": f"issue {constants['dispatch_us']:.1f} us/copy, join {constants['join_us']:.1f} us/stream, "
                       f"copy {constants['copy_GBps']:.0f} GB/s, {engines} copy engines, {queues} queues; {sweep}"
                       f" (paper: elbow K=8, -7% of a 6 ms fetch)" + copy_line}
