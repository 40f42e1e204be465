"""GPU probes: their CPU-side contract is tested here; the kernels run only where a GPU is (marked gpu)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from simroute.probes import reference as ref
from simroute.probes.assemble import build_profile
from simroute.probes.capability import Capability
from simroute.probes.framework import ProbeOutcome, run_probe
from simroute.probes.gpu_common import from_bf16_bits, to_bf16_bits
from simroute.probes.registry import PROBES


def _gpu_available() -> str | None:
    if importlib.util.find_spec("cupy") is None:
        return "cupy is not installed (pip install 'simroute[gpu]')"
    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() < 1:
            return "no GPU visible to cupy"
    except Exception as exc:  # no driver
        return f"cupy cannot reach a GPU: {exc}"
    return None


NO_GPU = _gpu_available()
gpu = pytest.mark.skipif(NO_GPU is not None, reason=f"needs a CUDA GPU: {NO_GPU}")


def test_bf16_bits_match_the_reference_rounding() -> None:
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    np.testing.assert_array_equal(from_bf16_bits(to_bf16_bits(x)), ref.to_bf16(x))


@pytest.mark.skipif(NO_GPU is None, reason="a GPU is present: the probes run for real in test_gpu_*")
def test_gpu_probe_without_cupy_or_gpu_reports_a_clear_status() -> None:
    o = run_probe(PROBES["splice"], {"quick": True}, timeout_s=60)
    assert o.status in ("missing-dep", "skipped")
    assert "cupy" in o.message or "GPU" in o.message


def _fake(name: str, results: dict) -> ProbeOutcome:
    return ProbeOutcome(PROBES[name], "ok", "done", 1.0, results, [{"series": "x", "value": 1.0}])


def test_gpu_results_become_measured_and_loopback_constants(tmp_path: Path) -> None:
    """The result keys the GPU probes return are what the profile assembly reads (contract test on CPU)."""
    from simroute.calib.writer import write_profile_checked
    cap = Capability(hostname="h200box", cpu_model="Xeon", cpus=16, python="3.11", gpus=1, gpu_names=["NVIDIA H200"])
    outcomes = [
        _fake("splice", {"splice_ms": {"55": 2.1, "1024": 2.2, "2048": 2.3, "4096": 2.6}, "gather_us": 40.0,
                         "rotation_share": 0.8, "layers": 27, "kernel": "cupy"}),
        _fake("holder", {"kernel": "torch", "dense_us": {"16": {"1": 12, "16": 30, "256": 300},
                                                          "128": {"1": 20, "256": 900}},
                         "sparse_premium": {"512": 1.2, "2048": 2.4}, "sparse_kernel": "gather", "merge_us": 9.0}),
        _fake("staging", {"elbow_streams": 8, "gain_at_elbow": 0.05, "single_block_GBps": 20.0,
                          "multi_block_GBps": 2500.0, "blocks": [1, 132]}),
        _fake("nvshmem-loopback", {"sig_rt_us": 3.0, "put_GBps": 900.0}),
        ProbeOutcome(PROBES["nvshmem-pes"], "skipped", "needs 2+ GPUs on one host, found 1", 0.0),
    ]
    out = tmp_path / "profile.yaml"
    data = build_profile(outcomes, cap, out)
    c = data["constants"]
    assert c["splice_ms"]["provenance"]["kind"] == "measured" and "H200" in c["splice_ms"]["provenance"]["box"]
    assert c["holder_compute_dense_us"]["points"][1] == [16.0, 30.0]
    assert c["nvshmem_loopback_sig_rt_us"]["provenance"]["kind"] == "loopback"
    assert "nvshmem" not in " ".join(data["fabrics"])          # a loopback is never a fabric constant
    assert c["host_fixed_ms"]["provenance"]["kind"] == "default"
    assert "no probe measures it" in c["host_fixed_ms"]["provenance"]["ref"]
    prof = write_profile_checked(data, out)
    params = prof.cost_params()
    assert params.splice_s[0] == pytest.approx(2.1e-3) and params.merge_s == pytest.approx(9e-6)


@pytest.mark.gpu
@gpu
def test_gpu_splice_probe_runs_and_matches_reference() -> None:
    o = run_probe(PROBES["splice"], {"quick": True})
    assert o.ok, o.message
    assert set(o.results["splice_ms"]) == {"55", "1024", "2048", "4096"}


@pytest.mark.gpu
@gpu
def test_gpu_holder_and_staging_probes_run() -> None:
    for name in ("holder", "staging"):
        o = run_probe(PROBES[name], {"quick": True})
        assert o.ok, f"{name}: {o.message}"


def test_fallback_attention_kernel_math_on_numpy() -> None:
    """The cupy fallback kernel is written against the numpy-compatible API: run it with numpy as `cp`
    and it must pass the same correctness check the GPU run does before timing."""
    from simroute.probes import gpu_attn
    kern = object.__new__(gpu_attn._Cupy)
    kern.cp = np
    assert gpu_attn.check_kernel(kern) < 1e-3
    rng = np.random.default_rng(0)
    store = rng.standard_normal((4096, 576)).astype(np.float32)
    sel = np.sort(np.stack([rng.choice(4096, 64, replace=False) for _ in range(3)]), axis=1)
    q = rng.standard_normal((3, 1, 16, 576)).astype(np.float32)
    out, lse = kern.prepare(store, 3, 16, sel=sel, query=q)()
    for r in range(3):                       # sparse: each requester attends only its own selection
        want, want_lse = ref.attention(q[r, 0], store[sel[r]])
        np.testing.assert_allclose(out[r], want, atol=1e-5)
        np.testing.assert_allclose(lse[r], want_lse, rtol=1e-5)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed (the GPU box has it; this checks the torch holder kernel on the CPU)")
def test_torch_holder_kernel_passes_its_check_on_the_cpu() -> None:
    from simroute.probes import gpu_attn
    kern = gpu_attn._Torch(device="cpu")
    assert gpu_attn.check_kernel(kern) < 2e-2
    rng = np.random.default_rng(0)
    store = rng.standard_normal((512, 576)).astype(np.float32)
    sel = np.sort(np.stack([rng.choice(512, 64, replace=False) for _ in range(3)]), axis=1)
    out, lse = kern.prepare(store, 3, 16, sel=sel)()
    assert tuple(out.shape) == (3, 16, 512) and tuple(lse.shape) == (3, 16)


def test_staging_constants_from_the_probes_raw_timings() -> None:
    """The staging probe's host-side analysis (no GPU): medians of per-call host times and one copy's device
    time, the copy rate its layer over that time; the prediction is the model's hand count with them."""
    from simroute.probes.gpu_single import staging_constants, staging_prediction
    layer = 2048 * 576 * 2                                        # 2.36 MB: one layer of the paper's chunk
    constants = staging_constants([10e-6, 12e-6, 11e-6], [5e-6, 4e-6, 6e-6], [2e-6, 2e-6, 3e-6], layer, 3, 8,
                                  parallel_s=[4e-6, 5e-6, 4e-6])
    assert constants["dispatch_us"] == pytest.approx(11.0) and constants["join_us"] == pytest.approx(5.0)
    assert constants["copy_GBps"] == pytest.approx(layer / 2e-6 / 1e9)       # 1180 GB/s
    assert (constants["copy_engines"], constants["hw_queues"]) == (3, 8)
    assert constants["parallel_GBps"] == pytest.approx(3 * layer / 4e-6 / 1e9)   # 3 copies at once, 4 us
    predicted = staging_prediction(constants, 27, layer)
    for streams in (1, 4, 8, 16):                                 # host-bound: 27 issues + one join per stream
        assert predicted[str(streams)] == pytest.approx(27 * 11.0 + streams * 5.0)
    slow = staging_prediction({**constants, "copy_GBps": layer / 100e-6 / 1e9}, 27, layer, streams=(1, 3))
    assert slow["1"] == pytest.approx(11.0 + 27 * 100.0)         # device-bound: 100 us copies one after another
    assert slow["3"] == pytest.approx(33.0 + 9 * 100.0)          # 3 engines: stream 2's nine copies from 33 us
    with pytest.raises(ValueError):
        staging_constants([], [1e-6], [1e-6], layer, 3, 8, parallel_s=[1e-6])
    with pytest.raises(ValueError):
        staging_constants([1e-6], [1e-6], [0.0], layer, 3, 8, parallel_s=[1e-6])
