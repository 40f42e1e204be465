"""What every GPU probe shares: the lazy cupy import, CUDA-event timing under a wall deadline, bf16 as
uint16 (cupy has no bf16 dtype; the kernels convert by bit operations), and a spin-wait with a deadline."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable, Iterator, TypeVar

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


BACKEND_ENV = "SIMROUTE_PROBE_BACKEND"      # "reference": numpy stand-ins for the GPU (the dry run)
T = TypeVar("T")


def reference_backend() -> bool:
    """True in a dry run: the GPU probes run their numpy reference implementations on the CPU."""
    return os.environ.get(BACKEND_ENV) == "reference"


def import_cupy() -> Any:
    """cupy, with a GPU present; raises MissingDependency / ProbeSkipped with the reason otherwise. In a dry
    run (`reference_backend()`), the numpy stand-in of `simroute.probes.refcupy` instead."""
    if reference_backend():
        from simroute.probes import refcupy
        return refcupy
    try:
        import cupy as cp
    except ImportError as exc:
        raise MissingDependency("cupy", str(exc)) from None
    try:
        devices = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # driver missing or too old
        raise ProbeSkipped(f"cupy cannot reach a GPU: {exc}") from None
    if devices < 1:
        raise ProbeSkipped("no GPU visible to cupy")
    return cp


def backend_name(cp: Any) -> str:
    """What the cupy probes ran on, for their results and provenance: cupy's version, or the dry run's stand-in."""
    return getattr(cp, "BACKEND", None) or f"cupy {getattr(cp, '__version__', '?')}"


class Deadline:
    """Wall-clock budget of a probe: sweeps stop at it and keep what they measured (never killed mid-write).

    The runner passes an absolute `deadline_unix` (its kill time less a margin for writing the result), so
    the interpreter's and the libraries' start-up count against the probe's share, not on top of it."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.stopped: list[str] = []

    @classmethod
    def for_probe(cls, args: dict[str, Any], default_s: float) -> "Deadline":
        if "deadline_unix" in args:
            return cls(float(args["deadline_unix"]) - time.time())
        return cls(float(args.get("timeout_s", default_s)) - 5)

    def left(self) -> float:
        return self.end - time.monotonic()

    def expired(self) -> bool:
        return self.left() <= 0

    def check(self, what: str) -> None:
        """For steps without which nothing can be written (set-up, the correctness check)."""
        if self.expired():
            raise TimeoutError(f"probe deadline reached during {what}")

    def points(self, what: str, pts: Iterable[T]) -> Iterator[T]:
        """The points of a sweep while time is left, in order; it stops before a point that would not fit
        and records where in `stopped`. The next point is expected to take the last one's time times the
        growth seen between the last two (sweeps grow: 2x per point, 4x, ...), 2x until two are known."""
        pts = list(pts)
        last = prev = 0.0
        for index, point in enumerate(pts):
            growth = min(max(last / prev, 1.0), 8.0) if prev > 0 else 2.0
            if self.left() <= growth * last:
                self.stopped.append(f"{what}: deadline after {index} of {len(pts)} points")
                return
            started = time.monotonic()
            yield point
            prev, last = last, time.monotonic() - started

    def note(self) -> str:
        return "; ".join(self.stopped) if self.stopped else "complete"


def time_events(cp: Any, call: Callable[[], None], *, warm: int, reps: int, deadline: Deadline | None = None,
                stream: Any = None) -> list[float]:
    """Seconds per call of `fn`, each between two CUDA events on `stream` (warm-up calls first). Stops early
    (with at least one sample) when the deadline passes."""
    stream = stream or cp.cuda.get_current_stream()
    for _ in range(warm):
        call()
        if deadline is not None and deadline.expired():
            break
    stream.synchronize()
    out = []
    for _ in range(reps):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        call()
        end.record(stream)
        end.synchronize()
        out.append(cp.cuda.get_elapsed_time(start, end) * 1e-3)
        if deadline is not None and deadline.expired():
            break
    return out


def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (uint16), nearest-even, the layout the kernels read."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


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


def summary(samples: list[float]) -> float:
    return float(np.median(samples))
