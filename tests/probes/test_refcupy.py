"""The dry run's numpy stand-in for cupy: each CUDA kernel the probes launch has a numpy implementation that
does what the kernel's reference says, and the probes' own correctness checks catch a wrong one."""

from __future__ import annotations

import numpy as np
import pytest

from simroute.probes import gpu_single, kernels, refcupy
from simroute.probes import reference as ref
from simroute.probes.gpu_common import BACKEND_ENV, from_bf16_bits, import_cupy, to_bf16_bits


def test_every_registered_kernel_has_a_stand_in_but_the_nvshmem_wait() -> None:
    launched = {k for src in kernels.KERNEL_SOURCES.values() for k in src.kernels}
    assert set(refcupy._KERNELS) == launched - {"spin_wait"}     # spin_wait serves NVSHMEM, which has no stand-in


def test_import_cupy_gives_the_stand_in_only_in_a_dry_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BACKEND_ENV, "reference")
    assert import_cupy() is refcupy
    a = np.ones(4)
    assert refcupy.asarray(a) is not a                          # host <-> "device" never alias, as on a GPU


def test_rope_delta_stand_in_is_the_delta_rotation() -> None:
    rng = np.random.default_rng(0)
    bits = to_bf16_bits(ref.encode(rng.standard_normal((10, ref.D_QK)).astype(np.float32), np.arange(10)))
    theta, delta = ref.yarn_theta(), 300
    buf = refcupy.asarray(bits)
    refcupy.RawModule(code=gpu_single.SPLICE_CUDA).get_function("rope_delta")(
        (2,), (32, 8), (buf, np.int32(10), np.cos(delta * theta).astype(np.float32),
                        np.sin(delta * theta).astype(np.float32)))
    want = ref.delta_rotate(from_bf16_bits(bits), delta)
    np.testing.assert_allclose(from_bf16_bits(buf), want, atol=2 ** -7 * np.abs(want).max())


def test_the_splice_check_catches_a_wrong_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BACKEND_ENV, "reference")
    monkeypatch.setitem(refcupy._KERNELS, "rope_delta", lambda grid, block, args: None)   # rotates nothing
    with pytest.raises(AssertionError, match="rotation kernel disagrees"):
        gpu_single.probe_splice({"quick": True, "timeout_s": 30})
