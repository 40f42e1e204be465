"""Holder partial attention on one GPU ("Move the Query, Not the Cache" §6.3): N requesters' queries (h_q heads each) over one held
2048-token chunk, returning (out [., 512], natural-log lse). FlashMLA's dense decode when importable, else a
torch bf16 absorbed-MLA kernel, else a cupy fp32 one; the kernel used is recorded. Also a sparse top-k variant
(per-requester gather of k entries then the same kernel) and the online-softmax merge of M partials."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from simroute.probes import reference as ref
from simroute.probes.gpu_common import Deadline, backend_name, import_cupy, summary, time_events

NS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CT, PAGE = 2048, 64
TOPK = (512, 1024, 2048)
STORE = 32768


class _Kernel:
    """Dense partial attention: run(q [N, h, 576], kv per requester) -> (out [N, h, 512], lse [N, h])."""

    name = "?"

    def prepare(self, chunk: np.ndarray, requesters: int, heads: int, sel: np.ndarray | None = None,
                query: np.ndarray | None = None) -> Callable[[], Any]:
        """A no-argument callable running one batch: kv [ct, 576] held (or a store `sel` indexes per
        requester [n, k]); q [n, 1, h, 576] given for the correctness check, random otherwise."""
        raise NotImplementedError


class _FlashMLA(_Kernel):
    name = "flash_mla_with_kvcache (FlashMLA, bf16, paged 64)"

    def __init__(self) -> None:
        import torch
        from flash_mla import flash_mla_with_kvcache, get_mla_metadata
        self.torch, self.fwd, self.meta = torch, flash_mla_with_kvcache, get_mla_metadata

    def prepare(self, chunk, requesters, heads, sel=None, query=None):
        torch = self.torch
        rows = chunk if sel is None else None
        if sel is None:                      # one held chunk, every requester's block table points at it
            blocks = (rows.shape[0] + PAGE - 1) // PAGE
            cache = torch.zeros(blocks * PAGE, 576, dtype=torch.bfloat16, device="cuda")
            cache[:rows.shape[0]] = torch.from_numpy(rows).to("cuda", torch.bfloat16)
            table = torch.arange(blocks, dtype=torch.int32, device="cuda").repeat(requesters, 1)
            lens = torch.full((requesters,), rows.shape[0], dtype=torch.int32, device="cuda")
        else:                                # each requester's k selected entries gathered into its own pages
            topk = sel.shape[1]
            blocks = (topk + PAGE - 1) // PAGE
            store = torch.from_numpy(chunk).to("cuda", torch.bfloat16)
            idx = torch.from_numpy(sel).to("cuda").long()
            cache = torch.zeros(requesters * blocks * PAGE, 576, dtype=torch.bfloat16, device="cuda")
            table = torch.arange(requesters * blocks, dtype=torch.int32, device="cuda").view(requesters, blocks)
            lens = torch.full((requesters,), topk, dtype=torch.int32, device="cuda")
        paged = cache.view(-1, PAGE, 1, 576)
        queries = (torch.from_numpy(query).to("cuda", torch.bfloat16) if query is not None
              else torch.randn(requesters, 1, heads, 576, dtype=torch.bfloat16, device="cuda"))
        meta, splits = self.meta(lens, heads, 1)

        def run():
            if sel is not None:
                cache.view(requesters, -1, 576)[:, :topk] = store[idx]
            return self.fwd(queries, paged, table, lens, 512, meta, splits, softmax_scale=ref.softmax_scale(),
                            causal=False)
        return run


class _Torch(_Kernel):
    name = "torch bf16 absorbed-MLA (matmul + softmax with lse)"

    def __init__(self, device: str = "cuda") -> None:      # "cpu": the tests' check where torch has no GPU
        import torch
        self.torch, self.device = torch, device

    def prepare(self, chunk, requesters, heads, sel=None, query=None):
        torch, dev = self.torch, self.device
        store = torch.from_numpy(chunk).to(dev, torch.bfloat16)
        queries = (torch.from_numpy(query).to(dev, torch.bfloat16) if query is not None
                   else torch.randn(requesters, 1, heads, 576, dtype=torch.bfloat16, device=dev))
        queries = queries.view(requesters, heads, 576)
        idx = None if sel is None else torch.from_numpy(sel).to(dev).long()
        scale = ref.softmax_scale()

        def run():
            keys = store.expand(requesters, -1, -1) if idx is None else store[idx]          # [n, ct|k, 576]
            scores = torch.bmm(queries, keys.transpose(1, 2)).float() * scale
            lse = torch.logsumexp(scores, dim=-1)
            out = torch.bmm(torch.exp(scores - lse[..., None]).to(torch.bfloat16), keys[..., :512])
            return out, lse
        return run


class _Cupy(_Kernel):
    name = "cupy fp32 absorbed-MLA (cuBLAS gemm + softmax with lse)"

    def __init__(self) -> None:
        self.cp = import_cupy()

    def prepare(self, chunk, requesters, heads, sel=None, query=None):
        cp = self.cp
        store = cp.asarray(chunk, dtype=cp.float32)
        queries = cp.asarray(query.reshape(requesters, heads, 576) if query is not None
                        else np.random.default_rng(0).standard_normal((requesters, heads, 576)), dtype=cp.float32)
        idx = None if sel is None else cp.asarray(sel)
        scale = np.float32(ref.softmax_scale())

        def run():
            if idx is None:
                scores = cp.matmul(queries.reshape(requesters * heads, 576), store.T)
                scores = scores.reshape(requesters, heads, -1) * scale
                vals = None
            else:
                picked = store[idx]
                scores = cp.matmul(queries, picked.transpose(0, 2, 1)) * scale
                vals = picked[..., :512]
            row_max = scores.max(axis=-1, keepdims=True)
            weights = cp.exp(scores - row_max)
            row_sum = weights.sum(axis=-1, keepdims=True)  # noqa: E741
            if vals is None:
                out = cp.matmul(weights.reshape(requesters * heads, -1), store[:, :512]).reshape(requesters, heads, 512)
            else:
                out = cp.matmul(weights, vals)
            out = out / row_sum
            return out, (row_max + cp.log(row_sum))[..., 0]
        return run


def pick_kernel(prefer: str | None = None) -> _Kernel:
    """FlashMLA, else torch, else cupy (or the one named by `prefer`)."""
    errors = []
    from simroute.probes.gpu_common import reference_backend
    for cls in ((_Cupy,) if reference_backend() else (_FlashMLA, _Torch, _Cupy)):
        if prefer and prefer not in cls.__name__.lower():
            continue
        try:
            return cls()
        except ImportError as exc:
            errors.append(f"{cls.__name__[1:]}: {exc}")
    from simroute.probes.framework import MissingDependency
    raise MissingDependency("cupy", "; ".join(errors))


def _to_np(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach"):
        return value.detach().float().cpu().numpy()
    import cupy as cp
    return cp.asnumpy(value)


def check_kernel(kern: _Kernel) -> float:
    """Correctness before timing: the kernel's (out, lse) against numpy on bf16-rounded inputs."""
    rng = np.random.default_rng(0)
    requesters, heads, ct = 2, 16, 300
    query, chunk = ref.to_bf16(rng.standard_normal((requesters * heads, 576)).astype(np.float32)), ref.to_bf16(
        rng.standard_normal((ct, 576)).astype(np.float32))
    out, lse = kern.prepare(chunk, requesters, heads, query=query.reshape(requesters, 1, heads, 576))()
    want_o, want_lse = ref.attention(query.astype(np.float64), chunk.astype(np.float64))
    got_o, got_lse = _to_np(out).reshape(requesters * heads, 512), _to_np(lse).reshape(requesters * heads)
    err = float(np.max(np.abs(got_o - want_o)) / np.max(np.abs(want_o)))
    if err > 2e-2 or np.max(np.abs(got_lse - want_lse)) > 2e-2 * np.max(np.abs(want_lse)):
        raise AssertionError(f"{kern.name}: disagrees with the numpy reference (rel err {err:.3g})")
    return err


def _merge_us(cp: Any, deadline: Deadline, warm: int, reps: int, count: int = 4, rows: int = 256) -> tuple[float, list]:
    """Online-softmax merge of m partials of `rows` rows (bf16 o on the wire, fp32 lse) on the requester."""
    rng = np.random.default_rng(2)
    parts = [ref.partial_attention(*ref.random_case(rows, 256, rng)) for _ in range(count)]
    outs = cp.asarray(np.stack([part.o for part in parts]))
    lse = cp.asarray(np.stack([part.lse for part in parts]))

    def merge():
        lse_max = lse.max(axis=0)
        weights = cp.exp(lse - lse_max)
        return (weights[..., None] * outs).sum(axis=0) / weights.sum(axis=0)[:, None]
    got = cp.asnumpy(merge())
    want = ref.merge(parts).o
    if np.max(np.abs(got - want)) > 1e-5 * np.max(np.abs(want)):
        raise AssertionError("GPU merge disagrees with the numpy merge")
    times = time_events(cp, merge, warm=warm, reps=reps, deadline=deadline)
    return summary(times) * 1e6, times


def probe_holder(args: dict[str, Any]) -> dict:
    cp = import_cupy()
    deadline = Deadline.for_probe(args, 300)
    quick = bool(args.get("quick"))
    warm, reps = (2, 5) if quick else (5, 30)
    kern = pick_kernel(args.get("kernel"))
    err = check_kernel(kern)
    rng = np.random.default_rng(1)
    from simroute.probes.gpu_common import reference_backend
    # The dry run's numpy stand-in runs the same sweep over a shorter chunk and store: seconds, not minutes.
    ct, store_rows = (256, 4096) if reference_backend() else (CT, STORE)
    chunk = rng.standard_normal((ct, 576)).astype(np.float32)
    samples, dense = [], {}
    for heads in deadline.points("holder heads", (16, 128)):
        dense[str(heads)] = {}
        for requesters in deadline.points(f"holder h_q={heads} requesters", NS):
            times = time_events(cp, kern.prepare(chunk, requesters, heads), warm=warm, reps=reps, deadline=deadline)
            dense[str(heads)][str(requesters)] = summary(times) * 1e6
            samples += [{"series": "dense", "x": float(requesters), "value": seconds, "unit": "s", "heads": heads,
                         "ct": ct} for seconds in times]
    store = rng.standard_normal((store_rows, 576)).astype(np.float32)
    n_sparse, sparse, premium = 16, {}, {}
    for topk in deadline.points("sparse top-k", TOPK):
        sel = np.sort(np.stack([rng.choice(store_rows, topk, replace=False) for _ in range(n_sparse)]), axis=1)
        times = time_events(cp, kern.prepare(store, n_sparse, 16, sel=sel.astype(np.int32)), warm=warm, reps=reps,
                         deadline=deadline)
        base = time_events(cp, kern.prepare(store[:topk], n_sparse, 16), warm=warm, reps=reps, deadline=deadline)
        sparse[str(topk)] = summary(times) * 1e6
        premium[str(topk)] = summary(times) / summary(base)
        samples += [{"series": "sparse", "x": float(topk), "value": seconds, "unit": "s", "requesters": n_sparse}
                    for seconds in times]
        samples += [{"series": "dense_matched_k", "x": float(topk), "value": seconds, "unit": "s"} for seconds in base]
    merge_us = None
    if not deadline.expired():
        merge_us, mxs = _merge_us(cp, deadline, warm, reps)
        samples += [{"series": "merge", "x": 4.0, "value": seconds, "unit": "s", "rows": 256} for seconds in mxs]
    d16 = dense.get("16", {})
    if not d16:
        raise TimeoutError("probe deadline reached before the first holder batch was timed")
    dense = {heads: times_us for heads, times_us in dense.items() if times_us}
    shown = ", ".join(f"N={count} {d16[count]:.1f} us" for count in ("1", "16", "256") if count in d16)
    return {"results": {"kernel": kern.name, "check_rel_err": err, "dense_us": dense, "sparse_us": sparse,
                        "sparse_premium": premium, "sparse_kernel": f"per-requester gather of k from {store_rows} + "
                        f"{kern.name}", "merge_us": merge_us, "merge_note": "4 partials x 256 rows, cupy elementwise",
                        "sweep": deadline.note(), "backend": backend_name(cp), "ct": ct},
            "samples": samples,
            "message": f"{kern.name}: h_q 16 {shown} (paper H100: 15-37 us at N<=16, <=400 at 256)"
                       + (f"; merge {merge_us:.1f} us" if merge_us is not None else "; merge not reached")}
