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

    def upload(self, tensor: np.ndarray) -> Any:
        raise NotImplementedError

    def host(self, tensor: Any) -> np.ndarray:
        raise NotImplementedError

    def empty_like(self, tensor: Any) -> Any:
        raise NotImplementedError

    def nbytes(self, tensor: Any) -> int:
        raise NotImplementedError

    def copy(self, dst: Any, src: Any) -> None:
        raise NotImplementedError

    def silu(self, tensor: Any) -> Any:
        raise NotImplementedError

    def topk(self, tensor: Any, count: int) -> tuple[Any, Any]:
        raise NotImplementedError

    def rmsnorm(self, tensor: Any) -> Any:
        raise NotImplementedError

    def softmax(self, tensor: Any) -> Any:
        raise NotImplementedError

    def cat(self, tensors: list[Any], axis: int) -> Any:
        raise NotImplementedError

    def expand(self, tensor: Any, shape: tuple[int, ...]) -> Any:
        raise NotImplementedError

    def index_add(self, out: Any, rows: Any, vals: Any) -> None:
        """out[rows[i]] += vals[i] (rows may repeat)."""
        raise NotImplementedError

    def take_rows(self, tensor: Any, rows: Any) -> Any:
        raise NotImplementedError

    def index(self, rows: Any) -> Any:
        """A backend index array of row numbers."""
        raise NotImplementedError

    def attention(self, query: Any, key: Any, value: Any, causal: bool, scale: float) -> Any:
        """q [B, h, Sq, dqk], k [B, hk, S, dqk], v [B, hk, S, dv] (hk divides h) -> [B, h, Sq, dv]."""
        raise NotImplementedError

    def mla_decode(self, query: Any, cache: Any, scale: float) -> tuple[Any, Any]:
        """Absorbed MLA: q [B, h, 576] over each sequence's own latent cache kv [B, C, 576] -> (out [B, h, 512],
        natural-log lse [B, h])."""
        raise NotImplementedError

    def time(self, call: Callable[[], Any], warm: int, reps: int, deadline: Deadline | None) -> list[float]:
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

    def upload(self, tensor):
        return np.array(tensor, dtype=self.dtype, copy=True)

    def host(self, tensor):
        return np.asarray(tensor, dtype=np.float64)

    def empty_like(self, tensor):
        return np.empty_like(tensor)

    def nbytes(self, tensor):
        return int(tensor.nbytes)

    def copy(self, dst, src):
        np.copyto(dst, src)

    def silu(self, tensor):
        return tensor / (1.0 + np.exp(-tensor))

    def topk(self, tensor, count):
        idx = np.argsort(-tensor, axis=-1, kind="stable")[..., :count]
        return np.take_along_axis(tensor, idx, axis=-1), idx

    def rmsnorm(self, tensor):
        return tensor / np.sqrt((tensor * tensor).mean(axis=-1, keepdims=True) + 1e-6)

    def softmax(self, tensor):
        weights = np.exp(tensor - tensor.max(axis=-1, keepdims=True))
        return weights / weights.sum(axis=-1, keepdims=True)

    def cat(self, tensors, axis):
        return np.concatenate(tensors, axis=axis)

    def expand(self, tensor, shape):
        return np.broadcast_to(tensor, shape)

    def index_add(self, out, rows, vals):
        np.add.at(out, rows, vals)

    def take_rows(self, tensor, rows):
        return tensor[rows]

    def index(self, rows):
        return np.asarray(rows, dtype=np.int64)

    def attention(self, query, key, value, causal, scale):
        rep = query.shape[1] // key.shape[1]
        key, value = np.repeat(key, rep, axis=1), np.repeat(value, rep, axis=1)
        scores = (query @ np.swapaxes(key, -1, -2)) * scale
        if causal:
            rows, cols = scores.shape[-2], scores.shape[-1]
            scores = np.where(np.tril(np.ones((rows, cols), bool), k=cols - rows), scores, -np.inf)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return (scores / scores.sum(axis=-1, keepdims=True)) @ value

    def mla_decode(self, query, cache, scale):
        scores = (query @ np.swapaxes(cache, -1, -2)) * scale                      # [B, h, C]
        row_max = scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores - row_max)
        row_sum = weights.sum(axis=-1, keepdims=True)  # noqa: E741
        return (weights @ cache[..., :512]) / row_sum, (row_max + np.log(row_sum))[..., 0]

    def time(self, call, warm, reps, deadline):
        for _ in range(warm):
            call()
            if deadline is not None and deadline.expired():
                break
        out = []
        for _ in range(reps):
            started = time.perf_counter()
            call()
            out.append(time.perf_counter() - started)
            if deadline is not None and deadline.expired():
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
        gen = self.t.Generator(device=self.dev).manual_seed(seed)
        return self.t.randn(shape, generator=gen, device=self.dev, dtype=self.dtype) * scale

    def upload(self, tensor):
        return self.t.from_numpy(np.ascontiguousarray(tensor, dtype=np.float32)).to(self.dev, self.dtype)

    def host(self, tensor):
        return tensor.detach().double().cpu().numpy()

    def empty_like(self, tensor):
        return self.t.empty_like(tensor)

    def nbytes(self, tensor):
        return int(tensor.numel() * tensor.element_size())

    def copy(self, dst, src):
        dst.copy_(src)

    def silu(self, tensor):
        return self.t.nn.functional.silu(tensor)

    def topk(self, tensor, count):
        return self.t.topk(tensor, count, dim=-1)

    def rmsnorm(self, tensor):
        mean_square = (tensor.float() * tensor.float()).mean(dim=-1, keepdim=True)
        return tensor * self.t.rsqrt(mean_square + 1e-6).to(tensor.dtype)

    def softmax(self, tensor):
        return self.t.softmax(tensor.float(), dim=-1).to(tensor.dtype)

    def cat(self, tensors, axis):
        return self.t.cat(tensors, dim=axis)

    def expand(self, tensor, shape):
        return tensor.expand(*shape)

    def index_add(self, out, rows, vals):
        out.index_add_(0, rows, vals)

    def take_rows(self, tensor, rows):
        return tensor.index_select(0, rows)

    def index(self, rows):
        return self.t.as_tensor(np.asarray(rows, dtype=np.int64), device=self.dev)

    def attention(self, query, key, value, causal, scale):
        sdpa = self.t.nn.functional.scaled_dot_product_attention
        if key.shape[1] != query.shape[1]:
            rep = query.shape[1] // key.shape[1]
            key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
        return sdpa(query, key, value, is_causal=causal, scale=scale)

    def mla_decode(self, query, cache, scale):
        scores = self.t.matmul(query, cache.transpose(-1, -2)).float() * scale
        lse = self.t.logsumexp(scores, dim=-1)
        out = self.t.matmul(self.t.exp(scores - lse[..., None]).to(self.dtype), cache[..., :512])
        return out, lse

    def sync(self):
        if self.measures_gpu:
            self.t.cuda.synchronize()

    def time(self, call, warm, reps, deadline):
        if not self.measures_gpu:
            return NumpyBackend.time(self, call, warm, reps, deadline)
        cuda = self.t.cuda
        for _ in range(warm):
            call()
        cuda.synchronize()                     # GPU warm-ups are short and asynchronous: not cut
        out = []
        for _ in range(reps):
            start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) * 1e-3)
            if deadline is not None and deadline.expired():
                break
        return out

    def launch_chain(self, launches, graph):
        torch = self.t
        box = torch.zeros(1, device=self.dev, dtype=torch.float32)

        def eager() -> None:
            for _ in range(launches):
                box.add_(1.0)
        if not graph or not self.measures_gpu:
            return eager, lambda: float(box.item())
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):                                    # warm-up off the capture, as torch asks
            eager()
        torch.cuda.current_stream().wait_stream(stream)
        cuda_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cuda_graph):
            eager()
        torch.cuda.synchronize()
        return cuda_graph.replay, lambda: float(box.item())

    def info(self):
        if not self.measures_gpu:
            return {"backend": self.name, "device": "cpu"}
        props = self.t.cuda.get_device_properties(0)
        return {"backend": self.name, "device": props.name, "sms": props.multi_processor_count,
                "l2_bytes": getattr(props, "L2_cache_size", 0), "memory_bytes": props.total_memory}


def backend_for(args: dict[str, Any]) -> StepBackend:
    """The numpy reference in a dry run, torch on the GPU otherwise."""
    return NumpyBackend() if reference_backend() else TorchBackend()


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def ceil_div(num: int, den: int) -> int:
    return int(math.ceil(num / den))
