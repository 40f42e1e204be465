"""A numpy stand-in for the part of cupy the GPU probes use, for the dry run: the probes' own code (sweeps,
deadlines, correctness checks, result keys) runs unchanged on the CPU, with each CUDA kernel replaced by its
numpy reference implementation and CUDA events by the host clock. Nothing here measures a GPU; a profile
written from it says so (probe results carry `backend: reference`).

To cover a new kernel: add its numpy implementation to `_KERNELS` under its `extern "C"` name, with the
launch signature `(grid, block, args)` that cupy's RawKernel has.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from simroute.probes import reference as ref

# numpy's array API is cupy's: the probes call these on "cp".
zeros, ones, empty_like, zeros_like, copyto = np.zeros, np.ones, np.empty_like, np.zeros_like, np.copyto
matmul, exp, log = np.matmul, np.exp, np.log
float32, uint16, int32, uint64 = np.float32, np.uint16, np.int32, np.uint64
BACKEND = "reference (numpy on the CPU; no GPU)"


def asarray(value: Any, dtype: Any = None) -> np.ndarray:
    """A copy, as cupy's host-to-device transfer is: the probe's host array and its "device" one never alias."""
    return np.array(value, dtype=dtype, copy=True)


def asnumpy(value: Any) -> np.ndarray:
    return np.array(value, copy=True)


def _bf16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _to_bits(values: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)


def _rope_delta(grid, block, args) -> None:
    """rope_delta: rotate pairs (2i, 2i+1) of the 64 RoPE dims of `ct` rows in place (bf16 bits)."""
    cache, ct, cos, sin = args
    rows = cache.reshape(-1, ref.D_QK)[: int(ct)]
    even, odd = _bf16(rows[:, 512::2]), _bf16(rows[:, 513::2])
    rows[:, 512::2] = _to_bits(even * cos - odd * sin)
    rows[:, 513::2] = _to_bits(even * sin + odd * cos)


def _scatter_pages(grid, block, args) -> None:
    """scatter_pages: row t goes to page table[t // 64], slot t % 64 of the pool [pages, 64, 576]."""
    src, pool, table, ct = args
    token = np.arange(int(ct))
    pool[np.asarray(table)[token // 64], token % 64] = src.reshape(-1, ref.D_QK)[: int(ct)]


def _copy_blocks(grid, block, args) -> None:
    """copy_blocks: n 16-byte words from src to dst."""
    src, dst, words = args
    nbytes = int(words) * 16
    dst.reshape(-1).view(np.uint8)[:nbytes] = src.reshape(-1).view(np.uint8)[:nbytes]


def _hold_ns(grid, block, args) -> None:
    """hold_ns: keeps a stream busy on the GPU; the CPU stand-in runs in order anyway."""


_KERNELS: dict[str, Callable[[Any, Any, Any], None]] = {
    "rope_delta": _rope_delta, "scatter_pages": _scatter_pages, "copy_blocks": _copy_blocks, "hold_ns": _hold_ns}


class RawModule:
    def __init__(self, code: str = "", **_: Any) -> None:
        self.code = code

    def get_function(self, name: str) -> Callable[[Any, Any, Any], None]:
        if name not in self.code:
            raise KeyError(f"kernel {name} is not in this module's source")
        return _KERNELS[name]


def RawKernel(code: str, name: str, **_: Any) -> Callable[[Any, Any, Any], None]:  # noqa: N802 (cupy's name)
    return RawModule(code).get_function(name)


class _Event:
    def __init__(self) -> None:
        self.t = 0.0

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass


class _Stream:
    def __init__(self, non_blocking: bool = False) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait_event(self, event: _Event) -> None:
        pass

    def __enter__(self) -> "_Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


class _Runtime:
    @staticmethod
    def getDeviceCount() -> int:  # noqa: N802 (cupy's name)
        return 1

    @staticmethod
    def getDeviceProperties(device: int) -> dict[str, Any]:  # noqa: N802
        return {"multiProcessorCount": 4, "name": b"reference", "major": 0, "minor": 0, "totalGlobalMem": 0,
                "asyncEngineCount": 1}


class cuda:  # noqa: N801 (mirrors cupy.cuda)
    Event, Stream, runtime = _Event, _Stream, _Runtime
    _current = _Stream()

    @staticmethod
    def get_current_stream() -> _Stream:
        return cuda._current

    @staticmethod
    def get_elapsed_time(start: _Event, end: _Event) -> float:
        return (end.t - start.t) * 1e3
