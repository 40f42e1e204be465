"""What every GPU probe shares: the lazy cupy import, CUDA-event timing under a wall deadline, bf16 as
uint16 (cupy has no bf16 dtype; the kernels convert by bit operations), and a spin-wait with a deadline."""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from simroute.probes.framework import MissingDependency, ProbeSkipped

BF16_CUDA = r"""
__device__ __forceinline__ float bf2f(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }
__device__ __forceinline__ unsigned short f2bf(float f) {
    unsigned int u = __float_as_uint(f);
    u += 0x7FFFu + ((u >> 16) & 1u);          // round to nearest even
    return (unsigned short)(u >> 16);
}
__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}
"""


def import_cupy() -> Any:
    """cupy, with a GPU present; raises MissingDependency / ProbeSkipped with the reason otherwise."""
    try:
        import cupy as cp
    except ImportError as exc:
        raise MissingDependency("cupy", str(exc)) from None
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # driver missing or too old
        raise ProbeSkipped(f"cupy cannot reach a GPU: {exc}") from None
    if n < 1:
        raise ProbeSkipped("no GPU visible to cupy")
    return cp


class Deadline:
    """Wall-clock budget of a probe: sweeps stop (and say so) instead of being killed mid-write."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def check(self, what: str) -> None:
        if self.left() <= 0:
            raise TimeoutError(f"probe deadline reached during {what}")


def time_events(cp: Any, fn: Callable[[], None], *, warm: int, reps: int, deadline: Deadline | None = None,
                stream: Any = None) -> list[float]:
    """Seconds per call of `fn`, each between two CUDA events on `stream` (warm-up calls first)."""
    stream = stream or cp.cuda.get_current_stream()
    for _ in range(warm):
        fn()
    stream.synchronize()
    out = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(stream)
        fn()
        b.record(stream)
        b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b) * 1e-3)
        if deadline is not None:
            deadline.check("timing")
    return out


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (uint16), nearest-even, the layout the kernels read."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (np.asarray(b, dtype=np.uint32) << 16).view(np.float32)


SPIN_WAIT_CUDA = BF16_CUDA + r"""
// Wait until *sig >= want, or until the deadline; on timeout set *err = 1 (a lost signal cannot hang).
extern "C" __global__ void spin_wait(volatile unsigned long long* sig, unsigned long long want,
                                     unsigned long long timeout_ns, int* err) {
    unsigned long long t0 = now_ns();
    while (*sig < want) {
        if (now_ns() - t0 > timeout_ns) { *err = 1; return; }
    }
}
"""


def summary(xs: list[float]) -> float:
    return float(np.median(xs))
