"""The array backends the step-time probes run on: torch on a CUDA GPU in bf16 (what is measured), and numpy
on the CPU (the reference: the correctness checks' ground truth in float64, and the dry run's stand-in in
float32). A probe is written once against `StepBackend`; only these classes know which library is below.

To add a backend: subclass StepBackend, implement every method, and add it to `backend_for`.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from simroute.probes.framework import MissingDependency, ProbeSkipped
from simroute.probes.gpu_common import Deadline, reference_backend


class StepBackend:
    """Arrays, the few operators a decoder layer needs, and a timer. Arrays are the backend's own type."""

    name = "?"
    measures_gpu = False
    # what ran, for the operator tables the probes write (simroute.probes.step_tables): the framework and its
    # version, and the element type of the operands ("bf16" on the GPU)
    framework = "?"
    framework_version = ""
    dtype_label = "?"

    def randn(self, shape: tuple[int, ...], seed: int, scale: float = 1.0) -> Any:
        raise NotImplementedError

    def upload(self, x: np.ndarray) -> Any:
        raise NotImplementedError

    def host(self, x: Any) -> np.ndarray:
        raise NotImplementedError

    def empty_like(self, x: Any) -> Any:
        raise NotImplementedError

    def nbytes(self, x: Any) -> int:
        raise NotImplementedError

    def copy(self, dst: Any, src: Any) -> None:
        raise NotImplementedError

    def silu(self, x: Any) -> Any:
        raise NotImplementedError

    def topk(self, x: Any, k: int) -> tuple[Any, Any]:
        raise NotImplementedError

    def rmsnorm(self, x: Any) -> Any:
        raise NotImplementedError

    def softmax(self, x: Any) -> Any:
        raise NotImplementedError

    def cat(self, xs: list[Any], axis: int) -> Any:
        raise NotImplementedError

    def expand(self, x: Any, shape: tuple[int, ...]) -> Any:
        raise NotImplementedError

    def index_add(self, out: Any, rows: Any, vals: Any) -> None:
        """out[rows[i]] += vals[i] (rows may repeat)."""
        raise NotImplementedError

    def take_rows(self, x: Any, rows: Any) -> Any:
        raise NotImplementedError

    def index(self, rows: Any) -> Any:
        """A backend index array of row numbers."""
        raise NotImplementedError

    def attention(self, q: Any, k: Any, v: Any, causal: bool, scale: float) -> Any:
        """q [B, h, Sq, dqk], k [B, hk, S, dqk], v [B, hk, S, dv] (hk divides h) -> [B, h, Sq, dv]."""
        raise NotImplementedError

    def mla_decode(self, q: Any, kv: Any, scale: float) -> tuple[Any, Any]:
        """Absorbed MLA: q [B, h, 576] over each sequence's own latent cache kv [B, C, 576] -> (out [B, h, 512],
        natural-log lse [B, h])."""
        raise NotImplementedError

    def time(self, fn: Callable[[], Any], warm: int, reps: int, dl: Deadline | None) -> list[float]:
        raise NotImplementedError

    def launch_chain(self, launches: int, graph: bool) -> tuple[Callable[[], None], Callable[[], float]]:
        """(one iteration of `launches` tiny kernels, launched eagerly or replayed as a CUDA graph; a reader of
        the counter they bump): the per-iteration launch overhead and its correctness check."""
        raise NotImplementedError

    def sync(self) -> None:
        pass

    def info(self) -> dict[str, Any]:
        return {"backend": self.name}


class NumpyBackend(StepBackend):
    """numpy on the CPU: float64 for the correctness references, float32 for the dry run. Timed with the host
    clock; it measures nothing about a GPU."""

    name = "reference (numpy on the CPU; no GPU)"

    framework = "numpy-dry-run"
    framework_version = np.__version__

    def __init__(self, dtype: Any = np.float32) -> None:
        self.dtype = dtype
        name = np.dtype(dtype).name
        self.dtype_label = {"float32": "fp32", "float64": "fp64"}.get(name, name)

    def randn(self, shape, seed, scale=1.0):
        return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(self.dtype)

    def upload(self, x):
        return np.array(x, dtype=self.dtype, copy=True)

    def host(self, x):
        return np.asarray(x, dtype=np.float64)

    def empty_like(self, x):
        return np.empty_like(x)

    def nbytes(self, x):
        return int(x.nbytes)

    def copy(self, dst, src):
        np.copyto(dst, src)

    def silu(self, x):
        return x / (1.0 + np.exp(-x))

    def topk(self, x, k):
        idx = np.argsort(-x, axis=-1, kind="stable")[..., :k]
        return np.take_along_axis(x, idx, axis=-1), idx

    def rmsnorm(self, x):
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)

    def softmax(self, x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def cat(self, xs, axis):
        return np.concatenate(xs, axis=axis)

    def expand(self, x, shape):
        return np.broadcast_to(x, shape)

    def index_add(self, out, rows, vals):
        np.add.at(out, rows, vals)

    def take_rows(self, x, rows):
        return x[rows]

    def index(self, rows):
        return np.asarray(rows, dtype=np.int64)

    def attention(self, q, k, v, causal, scale):
        rep = q.shape[1] // k.shape[1]
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = (q @ np.swapaxes(k, -1, -2)) * scale
        if causal:
            sq, sk = s.shape[-2], s.shape[-1]
            s = np.where(np.tril(np.ones((sq, sk), bool), k=sk - sq), s, -np.inf)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        return (s / s.sum(axis=-1, keepdims=True)) @ v

    def mla_decode(self, q, kv, scale):
        s = (q @ np.swapaxes(kv, -1, -2)) * scale                      # [B, h, C]
        m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - m)
        l = e.sum(axis=-1, keepdims=True)  # noqa: E741
        return (e @ kv[..., :512]) / l, (m + np.log(l))[..., 0]

    def time(self, fn, warm, reps, dl):
        for _ in range(warm):
            fn()
            if dl is not None and dl.expired():
                break
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
            if dl is not None and dl.expired():
                break
        return out

    def launch_chain(self, launches, graph):
        box = np.zeros(1, dtype=np.float64)

        def iteration() -> None:                                       # no CUDA graphs: the same loop either way
            for _ in range(launches):
                np.add(box, 1.0, out=box)
        return iteration, lambda: float(box[0])


class TorchBackend(StepBackend):
    """torch bf16 tensors on the current CUDA device, CUDA-event timing. Imported only inside a probe.
    `device="cpu"` runs the same operators on the CPU (the tests' check of the torch code where torch is
    installed without a GPU): it measures nothing and has no CUDA graphs."""

    def __init__(self, device: str = "cuda") -> None:
        try:
            import torch
        except ImportError as exc:
            raise MissingDependency("torch", str(exc)) from None
        if device == "cuda" and not torch.cuda.is_available():
            raise ProbeSkipped("torch sees no CUDA GPU")
        self.t, self.dev, self.dtype = torch, torch.device(device), torch.bfloat16
        self.measures_gpu = device == "cuda"
        where = torch.cuda.get_device_name(0) if self.measures_gpu else "the CPU (no GPU: measures nothing)"
        self.name = f"torch {torch.__version__} bf16 on {where}"
        self.framework, self.framework_version, self.dtype_label = "torch", str(torch.__version__), "bf16"

    def randn(self, shape, seed, scale=1.0):
        g = self.t.Generator(device=self.dev).manual_seed(seed)
        return self.t.randn(shape, generator=g, device=self.dev, dtype=self.dtype) * scale

    def upload(self, x):
        return self.t.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(self.dev, self.dtype)

    def host(self, x):
        return x.detach().double().cpu().numpy()

    def empty_like(self, x):
        return self.t.empty_like(x)

    def nbytes(self, x):
        return int(x.numel() * x.element_size())

    def copy(self, dst, src):
        dst.copy_(src)

    def silu(self, x):
        return self.t.nn.functional.silu(x)

    def topk(self, x, k):
        return self.t.topk(x, k, dim=-1)

    def rmsnorm(self, x):
        return x * self.t.rsqrt((x.float() * x.float()).mean(dim=-1, keepdim=True) + 1e-6).to(x.dtype)

    def softmax(self, x):
        return self.t.softmax(x.float(), dim=-1).to(x.dtype)

    def cat(self, xs, axis):
        return self.t.cat(xs, dim=axis)

    def expand(self, x, shape):
        return x.expand(*shape)

    def index_add(self, out, rows, vals):
        out.index_add_(0, rows, vals)

    def take_rows(self, x, rows):
        return x.index_select(0, rows)

    def index(self, rows):
        return self.t.as_tensor(np.asarray(rows, dtype=np.int64), device=self.dev)

    def attention(self, q, k, v, causal, scale):
        f = self.t.nn.functional.scaled_dot_product_attention
        if k.shape[1] != q.shape[1]:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return f(q, k, v, is_causal=causal, scale=scale)

    def mla_decode(self, q, kv, scale):
        s = self.t.matmul(q, kv.transpose(-1, -2)).float() * scale
        lse = self.t.logsumexp(s, dim=-1)
        out = self.t.matmul(self.t.exp(s - lse[..., None]).to(self.dtype), kv[..., :512])
        return out, lse

    def sync(self):
        if self.measures_gpu:
            self.t.cuda.synchronize()

    def time(self, fn, warm, reps, dl):
        if not self.measures_gpu:
            return NumpyBackend.time(self, fn, warm, reps, dl)
        c = self.t.cuda
        for _ in range(warm):
            fn()
        c.synchronize()                     # GPU warm-ups are short and asynchronous: not cut
        out = []
        for _ in range(reps):
            a, b = c.Event(enable_timing=True), c.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) * 1e-3)
            if dl is not None and dl.expired():
                break
        return out

    def launch_chain(self, launches, graph):
        t = self.t
        box = t.zeros(1, device=self.dev, dtype=t.float32)

        def eager() -> None:
            for _ in range(launches):
                box.add_(1.0)
        if not graph or not self.measures_gpu:
            return eager, lambda: float(box.item())
        stream = t.cuda.Stream()
        stream.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(stream):                                    # warm-up off the capture, as torch asks
            eager()
        t.cuda.current_stream().wait_stream(stream)
        g = t.cuda.CUDAGraph()
        with t.cuda.graph(g):
            eager()
        t.cuda.synchronize()
        return g.replay, lambda: float(box.item())

    def info(self):
        if not self.measures_gpu:
            return {"backend": self.name, "device": "cpu"}
        p = self.t.cuda.get_device_properties(0)
        return {"backend": self.name, "device": p.name, "sms": p.multi_processor_count,
                "l2_bytes": getattr(p, "L2_cache_size", 0), "memory_bytes": p.total_memory}


def backend_for(args: dict[str, Any]) -> StepBackend:
    """The numpy reference in a dry run, torch on the GPU otherwise."""
    return NumpyBackend() if reference_backend() else TorchBackend()


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def ceil_div(a: int, b: int) -> int:
    return int(math.ceil(a / b))
