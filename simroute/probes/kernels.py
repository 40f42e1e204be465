"""Every CUDA C source the probes hand to cupy's RawModule / RawKernel, and an NVRTC compile of them that
needs no GPU and no driver: CI compiles each source for every architecture the project runs on, so a
compile error or a warning shows up on a CPU runner instead of in the first minute of a GPU run.

To add a kernel: put its source in the probe module as a module-level string, then register it in
`KERNEL_SOURCES` with the `extern "C"` names it defines (tests/probes/test_kernels_compile.py fails for a
`__global__` source that is not registered, and for a registered name the compiled image lacks).
"""

from __future__ import annotations

from dataclasses import dataclass

from simroute.probes.gpu_common import SPIN_WAIT_CUDA
from simroute.probes.gpu_single import COPY_CUDA, HOLD_CUDA, SPLICE_CUDA

# A100, A40, H100/H200, RTX Pro 6000 (Blackwell workstation)
ARCHS: tuple[str, ...] = ("sm_80", "sm_86", "sm_90", "sm_120")
# Front-end warnings are errors; ptxas warns on register spills and local-memory use (a silent slowdown on the
# GPU). Any log text at all fails the compile (see compile_cubin).
NVRTC_OPTIONS: tuple[str, ...] = ("--std=c++17", "-Werror=all-warnings", "--ptxas-options=--warn-on-spills",
                                  "--ptxas-options=--warn-on-local-memory-usage")


@dataclass(frozen=True)
class KernelSource:
    """One CUDA translation unit: where it lives and which `extern "C"` kernels it must define."""

    name: str
    source: str
    kernels: tuple[str, ...]
    module: str


KERNEL_SOURCES: dict[str, KernelSource] = {source.name: source for source in [
    KernelSource("splice", SPLICE_CUDA, ("rope_delta", "scatter_pages"), "simroute.probes.gpu_single"),
    KernelSource("copy", COPY_CUDA, ("copy_blocks",), "simroute.probes.gpu_single"),
    KernelSource("hold", HOLD_CUDA, ("hold_ns",), "simroute.probes.gpu_single"),
    KernelSource("spin-wait", SPIN_WAIT_CUDA, ("spin_wait",), "simroute.probes.gpu_common"),
]}


class NvrtcUnavailable(RuntimeError):
    """The NVRTC Python binding or its shared library is not installed."""


class CompileError(RuntimeError):
    """NVRTC refused a source, or accepted it with a warning (the log is the message)."""


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
        nvrtc.nvrtcVersion()
    except Exception as exc:  # ImportError, or the binding cannot find libnvrtc
        raise NvrtcUnavailable(f"NVRTC is not usable ({type(exc).__name__}: {exc}); "
                               "pip install nvidia-cuda-nvrtc cuda-bindings (in the `test` extra)") from None
    return nvrtc


def nvrtc_version() -> tuple[int, int]:
    nvrtc = _nvrtc()
    _, major, minor = nvrtc.nvrtcVersion()
    return int(major), int(minor)


def _check(nvrtc, result, what: str) -> None:
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"{what}: {result}")


def compile_cubin(src: KernelSource, arch: str, options: tuple[str, ...] = NVRTC_OPTIONS) -> bytes:
    """The SASS image of `src` for `arch` (`sm_90`, ...): compiled through ptxas, so inline PTX and register
    use are checked too. Raises CompileError on an error, on any log output (warnings), or when one of the
    kernels the source promises is absent from the image."""
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(src.source.encode(), f"{src.name}.cu".encode(), 0, [], [])
    _check(nvrtc, err, f"{src.name}: create program")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), *(option.encode() for option in options)]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        _check(nvrtc, err, f"{src.name}: log size")
        log = b" " * size
        _check(nvrtc, nvrtc.nvrtcGetProgramLog(prog, log)[0], f"{src.name}: log")
        text = log.decode(errors="replace").rstrip("\x00").strip()
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS or text:
            kind = "error" if status != nvrtc.nvrtcResult.NVRTC_SUCCESS else "warning"
            raise CompileError(f"{src.name} ({src.module}) for {arch}: {kind}: {text or status}")
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(nvrtc, err, f"{src.name}: cubin size")
        cubin = b" " * size
        _check(nvrtc, nvrtc.nvrtcGetCUBIN(prog, cubin)[0], f"{src.name}: cubin")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    absent = [kernel for kernel in src.kernels if kernel.encode() + b"\x00" not in cubin]
    if absent:
        raise CompileError(f"{src.name} for {arch}: the image lacks kernel(s) {absent}")
    return cubin
