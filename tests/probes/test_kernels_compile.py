"""Every CUDA source of the probes compiles (NVRTC + ptxas, no GPU needed) for sm_80/86/90/120 with no error
and no warning; a source that is not registered for this check fails the suite."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import simroute.probes
from simroute.probes import kernels

try:
    NVRTC = kernels.nvrtc_version()
    NO_NVRTC = None
except kernels.NvrtcUnavailable as exc:
    NVRTC, NO_NVRTC = None, str(exc)
nvrtc = pytest.mark.skipif(NO_NVRTC is not None, reason=f"no NVRTC: {NO_NVRTC}")

CASES = [(name, arch) for name in kernels.KERNEL_SOURCES for arch in kernels.ARCHS]


def test_the_four_architectures_are_covered() -> None:
    assert set(kernels.ARCHS) == {"sm_80", "sm_86", "sm_90", "sm_120"}
    assert len(CASES) == len(kernels.KERNEL_SOURCES) * 4


@nvrtc
@pytest.mark.parametrize("name,arch", CASES, ids=[f"{n}-{a}" for n, a in CASES])
def test_kernel_source_compiles_cleanly(name: str, arch: str) -> None:
    src = kernels.KERNEL_SOURCES[name]
    cubin = kernels.compile_cubin(src, arch)
    assert cubin[:4] == b"\x7fELF"                      # a SASS image, not PTX text
    for kernel in src.kernels:
        assert kernel.encode() in cubin


def _defined_kernels(source: str) -> set[str]:
    return set(re.findall(r'extern\s+"C"\s+__global__\s+void\s+(\w+)', source))


def test_every_cuda_source_in_the_probes_is_registered() -> None:
    """Scan every module of simroute.probes for module-level strings defining a kernel: each must be a
    registered source, and each registered source must list exactly the kernels it defines."""
    registered = {src.source: src for src in kernels.KERNEL_SOURCES.values()}
    found = 0
    for info in pkgutil.iter_modules(simroute.probes.__path__):
        mod = importlib.import_module(f"simroute.probes.{info.name}")
        for attr, val in vars(mod).items():
            if isinstance(val, str) and "__global__" in val and not attr.startswith("__"):
                found += 1
                assert val in registered, f"{info.name}.{attr} defines a CUDA kernel but is not in KERNEL_SOURCES"
                assert _defined_kernels(val) == set(registered[val].kernels), f"{info.name}.{attr}"
    assert found >= len(kernels.KERNEL_SOURCES)


@nvrtc
def test_a_warning_fails_the_compile() -> None:
    src = kernels.KernelSource("unused", 'extern "C" __global__ void f(int* x) { int y; x[0] = 1; }', ("f",), "test")
    with pytest.raises(kernels.CompileError, match="never referenced"):
        kernels.compile_cubin(src, "sm_90")


@nvrtc
def test_local_memory_use_fails_the_compile() -> None:
    src = kernels.KernelSource("stack", 'extern "C" __global__ void g(int* x, int i) { int a[256];'
                               ' for (int j = 0; j < 256; j++) a[j] = x[j * i]; x[0] = a[x[1]]; }', ("g",), "test")
    with pytest.raises(kernels.CompileError, match="Local memory"):
        kernels.compile_cubin(src, "sm_80")


@nvrtc
def test_bad_inline_ptx_is_caught_by_ptxas() -> None:
    src = kernels.KernelSource("ptx", 'extern "C" __global__ void h(unsigned long long* t) {'
                               ' asm volatile("mov.u64 %0, %%notaregister;" : "=l"(*t)); }', ("h",), "test")
    with pytest.raises(kernels.CompileError, match="error"):
        kernels.compile_cubin(src, "sm_90")


@nvrtc
def test_a_promised_kernel_missing_from_the_image_fails() -> None:
    src = kernels.KernelSource("ghost", 'extern "C" __global__ void real(int* x) { x[0] = 1; }', ("real", "ghost"),
                               "test")
    with pytest.raises(kernels.CompileError, match="ghost"):
        kernels.compile_cubin(src, "sm_86")
