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

    def prepare(self, kv: np.ndarray, n: int, h: int, sel: np.ndarray | None = None,
                q: np.ndarray | None = None) -> Callable[[], Any]:
        """A no-argument callable running one batch: kv [ct, 576] held (or a store `sel` indexes per
        requester [n, k]); q [n, 1, h, 576] given for the correctness check, random otherwise."""
        raise NotImplementedError


class _FlashMLA(_Kernel):
    name = "flash_mla_with_kvcache (FlashMLA, bf16, paged 64)"

    def __init__(self) -> None:
        import torch
        from flash_mla import flash_mla_with_kvcache, get_mla_metadata
        self.torch, self.fwd, self.meta = torch, flash_mla_with_kvcache, get_mla_metadata

    def prepare(self, kv, n, h, sel=None, q=None):
        t = self.torch
        rows = kv if sel is None else None
        if sel is None:                      # one held chunk, every requester's block table points at it
            blocks = (rows.shape[0] + PAGE - 1) // PAGE
            cache = t.zeros(blocks * PAGE, 576, dtype=t.bfloat16, device="cuda")
            cache[:rows.shape[0]] = t.from_numpy(rows).to("cuda", t.bfloat16)
            table = t.arange(blocks, dtype=t.int32, device="cuda").repeat(n, 1)
            lens = t.full((n,), rows.shape[0], dtype=t.int32, device="cuda")
        else:                                # each requester's k selected entries gathered into its own pages
            k = sel.shape[1]
            blocks = (k + PAGE - 1) // PAGE
            store = t.from_numpy(kv).to("cuda", t.bfloat16)
            idx = t.from_numpy(sel).to("cuda").long()
            cache = t.zeros(n * blocks * PAGE, 576, dtype=t.bfloat16, device="cuda")
            table = t.arange(n * blocks, dtype=t.int32, device="cuda").view(n, blocks)
            lens = t.full((n,), k, dtype=t.int32, device="cuda")
        kc = cache.view(-1, PAGE, 1, 576)
        qq = (t.from_numpy(q).to("cuda", t.bfloat16) if q is not None
              else t.randn(n, 1, h, 576, dtype=t.bfloat16, device="cuda"))
        meta, splits = self.meta(lens, h, 1)

        def run():
            if sel is not None:
                cache.view(n, -1, 576)[:, :k] = store[idx]
            return self.fwd(qq, kc, table, lens, 512, meta, splits, softmax_scale=ref.softmax_scale(),
                            causal=False)
        return run


class _Torch(_Kernel):
    name = "torch bf16 absorbed-MLA (matmul + softmax with lse)"

    def __init__(self, device: str = "cuda") -> None:      # "cpu": the tests' check where torch has no GPU
        import torch
        self.torch, self.device = torch, device

    def prepare(self, kv, n, h, sel=None, q=None):
        t, dev = self.torch, self.device
        store = t.from_numpy(kv).to(dev, t.bfloat16)
        qq = (t.from_numpy(q).to(dev, t.bfloat16) if q is not None
              else t.randn(n, 1, h, 576, dtype=t.bfloat16, device=dev)).view(n, h, 576)
        idx = None if sel is None else t.from_numpy(sel).to(dev).long()
        scale = ref.softmax_scale()

        def run():
            k = store.expand(n, -1, -1) if idx is None else store[idx]          # [n, ct|k, 576]
            s = t.bmm(qq, k.transpose(1, 2)).float() * scale
            lse = t.logsumexp(s, dim=-1)
            out = t.bmm(t.exp(s - lse[..., None]).to(t.bfloat16), k[..., :512])
            return out, lse
        return run


class _Cupy(_Kernel):
    name = "cupy fp32 absorbed-MLA (cuBLAS gemm + softmax with lse)"

    def __init__(self) -> None:
        self.cp = import_cupy()

    def prepare(self, kv, n, h, sel=None, q=None):
        cp = self.cp
        store = cp.asarray(kv, dtype=cp.float32)
        qq = cp.asarray(q.reshape(n, h, 576) if q is not None
                        else np.random.default_rng(0).standard_normal((n, h, 576)), dtype=cp.float32)
        idx = None if sel is None else cp.asarray(sel)
        scale = np.float32(ref.softmax_scale())

        def run():
            if idx is None:
                s = cp.matmul(qq.reshape(n * h, 576), store.T).reshape(n, h, -1) * scale
                vals = None
            else:
                k = store[idx]
                s = cp.matmul(qq, k.transpose(0, 2, 1)) * scale
                vals = k[..., :512]
            m = s.max(axis=-1, keepdims=True)
            e = cp.exp(s - m)
            l = e.sum(axis=-1, keepdims=True)  # noqa: E741
            out = (cp.matmul(e.reshape(n * h, -1), store[:, :512]).reshape(n, h, 512) if vals is None
                   else cp.matmul(e, vals)) / l
            return out, (m + cp.log(l))[..., 0]
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


def _to_np(x: Any) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach"):
        return x.detach().float().cpu().numpy()
    import cupy as cp
    return cp.asnumpy(x)


def check_kernel(kern: _Kernel) -> float:
    """Correctness before timing: the kernel's (out, lse) against numpy on bf16-rounded inputs."""
    rng = np.random.default_rng(0)
    n, h, ct = 2, 16, 300
    q, kv = ref.to_bf16(rng.standard_normal((n * h, 576)).astype(np.float32)), ref.to_bf16(
        rng.standard_normal((ct, 576)).astype(np.float32))
    out, lse = kern.prepare(kv, n, h, q=q.reshape(n, 1, h, 576))()
    want_o, want_lse = ref.attention(q.astype(np.float64), kv.astype(np.float64))
    got_o, got_lse = _to_np(out).reshape(n * h, 512), _to_np(lse).reshape(n * h)
    err = float(np.max(np.abs(got_o - want_o)) / np.max(np.abs(want_o)))
    if err > 2e-2 or np.max(np.abs(got_lse - want_lse)) > 2e-2 * np.max(np.abs(want_lse)):
        raise AssertionError(f"{kern.name}: disagrees with the numpy reference (rel err {err:.3g})")
    return err


def _merge_us(cp: Any, dl: Deadline, warm: int, reps: int, m: int = 4, rows: int = 256) -> tuple[float, list]:
    """Online-softmax merge of m partials of `rows` rows (bf16 o on the wire, fp32 lse) on the requester."""
    rng = np.random.default_rng(2)
    parts = [ref.partial_attention(*ref.random_case(rows, 256, rng)) for _ in range(m)]
    o = cp.asarray(np.stack([p.o for p in parts]))
    lse = cp.asarray(np.stack([p.lse for p in parts]))

    def merge():
        mx = lse.max(axis=0)
        w = cp.exp(lse - mx)
        return (w[..., None] * o).sum(axis=0) / w.sum(axis=0)[:, None]
    got = cp.asnumpy(merge())
    want = ref.merge(parts).o
    if np.max(np.abs(got - want)) > 1e-5 * np.max(np.abs(want)):
        raise AssertionError("GPU merge disagrees with the numpy merge")
    xs = time_events(cp, merge, warm=warm, reps=reps, deadline=dl)
    return summary(xs) * 1e6, xs


def probe_holder(args: dict[str, Any]) -> dict:
    cp = import_cupy()
    dl = Deadline.for_probe(args, 300)
    quick = bool(args.get("quick"))
    warm, reps = (2, 5) if quick else (5, 30)
    kern = pick_kernel(args.get("kernel"))
    err = check_kernel(kern)
    rng = np.random.default_rng(1)
    from simroute.probes.gpu_common import reference_backend
    # The dry run's numpy stand-in runs the same sweep over a shorter chunk and store: seconds, not minutes.
    ct, store_rows = (256, 4096) if reference_backend() else (CT, STORE)
    kv = rng.standard_normal((ct, 576)).astype(np.float32)
    samples, dense = [], {}
    for h in dl.points("holder heads", (16, 128)):
        dense[str(h)] = {}
        for n in dl.points(f"holder h_q={h} requesters", NS):
            xs = time_events(cp, kern.prepare(kv, n, h), warm=warm, reps=reps, deadline=dl)
            dense[str(h)][str(n)] = summary(xs) * 1e6
            samples += [{"series": "dense", "x": float(n), "value": v, "unit": "s", "heads": h, "ct": ct} for v in xs]
    store = rng.standard_normal((store_rows, 576)).astype(np.float32)
    n_sparse, sparse, premium = 16, {}, {}
    for k in dl.points("sparse top-k", TOPK):
        sel = np.sort(np.stack([rng.choice(store_rows, k, replace=False) for _ in range(n_sparse)]), axis=1)
        xs = time_events(cp, kern.prepare(store, n_sparse, 16, sel=sel.astype(np.int32)), warm=warm, reps=reps,
                         deadline=dl)
        base = time_events(cp, kern.prepare(store[:k], n_sparse, 16), warm=warm, reps=reps, deadline=dl)
        sparse[str(k)] = summary(xs) * 1e6
        premium[str(k)] = summary(xs) / summary(base)
        samples += [{"series": "sparse", "x": float(k), "value": v, "unit": "s", "requesters": n_sparse} for v in xs]
        samples += [{"series": "dense_matched_k", "x": float(k), "value": v, "unit": "s"} for v in base]
    merge_us = None
    if not dl.expired():
        merge_us, mxs = _merge_us(cp, dl, warm, reps)
        samples += [{"series": "merge", "x": 4.0, "value": v, "unit": "s", "rows": 256} for v in mxs]
    d16 = dense.get("16", {})
    if not d16:
        raise TimeoutError("probe deadline reached before the first holder batch was timed")
    dense = {h: d for h, d in dense.items() if d}
    shown = ", ".join(f"N={n} {d16[n]:.1f} us" for n in ("1", "16", "256") if n in d16)
    return {"results": {"kernel": kern.name, "check_rel_err": err, "dense_us": dense, "sparse_us": sparse,
                        "sparse_premium": premium, "sparse_kernel": f"per-requester gather of k from {store_rows} + "
                        f"{kern.name}", "merge_us": merge_us, "merge_note": "4 partials x 256 rows, cupy elementwise",
                        "sweep": dl.note(), "backend": backend_name(cp), "ct": ct},
            "samples": samples,
            "message": f"{kern.name}: h_q 16 {shown} (paper H100: 15-37 us at N<=16, <=400 at 256)"
                       + (f"; merge {merge_us:.1f} us" if merge_us is not None else "; merge not reached")}
