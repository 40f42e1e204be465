"""The paper's model figures as data: wire-byte winner map (Fig 3b), cost vs chunk size (Fig 1b), cost vs
effective bandwidth (Fig 6a). Each returns plain column arrays; writing and plotting live in the CLI."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from simroute.model.cost import CostParams, FabricParams, Shape, costs, route_byte_saving, wire_break_even_mq


def crossover_map(p: CostParams, mq: np.ndarray, ct: np.ndarray) -> dict[str, np.ndarray]:
    """Per (Mq, ct): one layer's route bytes Mq (q+p), fetch bytes ct b_KV, saving and winner (Fig 3b)."""
    g = p.geometry
    MQ, CT = np.meshgrid(np.asarray(mq, float), np.asarray(ct, float), indexing="ij")
    route_b = MQ * g.qp_bytes
    fetch_b = CT * g.token_fraction * g.b_kv
    saving = route_byte_saving(MQ, CT, g)
    return {"mq": MQ.ravel(), "ct": CT.ravel(), "route_bytes_per_layer": route_b.ravel(),
            "fetch_bytes_per_layer": fetch_b.ravel(), "route_saving": saving.ravel(),
            "winner": np.where(saving > 0, "route", "fetch").ravel(),
            "break_even_mq": wire_break_even_mq(CT, g).ravel()}


def _with_bw(p: CostParams, fabric: int, bw_Bps: float | None) -> CostParams:
    if bw_Bps is None:
        return p
    f = p.fabrics[fabric]
    fabs = list(p.fabrics)
    fabs[fabric] = FabricParams(f.name, f.t_probe_s, bw_Bps, bw_Bps, f.turnaround_s)
    return replace(p, fabrics=tuple(fabs))


def cost_vs_chunk(p: CostParams, ct: np.ndarray, *, mq: float, fabric: int = 0, bw_Bps: float | None = None,
                  prefill_band_us: tuple[float, float] = (0.5, 1.5)) -> dict[str, np.ndarray]:
    """route / fetch / local totals against chunk tokens (Fig 1b), with local's band over c."""
    q = _with_bw(p, fabric, bw_Bps)
    ct = np.asarray(ct, float)
    c = costs(Shape(mq=mq, ct=ct, fabric=fabric), q)
    lo = costs(Shape(mq=mq, ct=ct, fabric=fabric), replace(q, prefill_s_per_token_layer=prefill_band_us[0] * 1e-6))
    hi = costs(Shape(mq=mq, ct=ct, fabric=fabric), replace(q, prefill_s_per_token_layer=prefill_band_us[1] * 1e-6))
    return {"ct": ct, "route_s": c["route"]["total"], "fetch_s": c["fetch"]["total"],
            "local_s": c["local"]["total"], "local_lo_s": lo["local"]["total"], "local_hi_s": hi["local"]["total"]}


def cost_vs_bandwidth(p: CostParams, bw_Bps: np.ndarray, *, mq: float, ct: float,
                      fabric: int = 0) -> dict[str, np.ndarray]:
    """route / fetch / local totals against effective bandwidth, applied to route and to the pull (Fig 6a)."""
    rows = {"bw_GBps": [], "route_s": [], "fetch_s": [], "local_s": []}
    for bw in np.asarray(bw_Bps, float):
        c = costs(Shape(mq=mq, ct=ct, fabric=fabric), _with_bw(p, fabric, float(bw)))
        rows["bw_GBps"].append(bw / 1e9)
        for prim in ("route", "fetch", "local"):
            rows[f"{prim}_s"].append(float(np.asarray(c[prim]["total"]).ravel()[0]))
    return {k: np.asarray(v) for k, v in rows.items()}


def fetch_local_crossover_ct(p: CostParams, *, mq: float, fabric: int = 0, prefill_us: float | None = None,
                             lo: float = 1.0, hi: float = 1 << 16) -> float:
    """Chunk tokens above which fetch beats local (paper: ~75-220 over c = 1.5..0.5 us), by bisection."""
    q = p if prefill_us is None else replace(p, prefill_s_per_token_layer=prefill_us * 1e-6)

    def diff(ct: float) -> float:
        c = costs(Shape(mq=mq, ct=ct, fabric=fabric), q)
        return float(np.asarray(c["fetch"]["total"]).ravel()[0] - np.asarray(c["local"]["total"]).ravel()[0])

    if diff(lo) <= 0 or diff(hi) >= 0:
        return float("nan")
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if diff(mid) > 0 else (lo, mid)
    return 0.5 * (lo + hi)
