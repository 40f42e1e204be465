"""The paper's model figures as data: wire-byte winner map (Fig 3b), cost vs chunk size (Fig 1b), cost vs
effective bandwidth (Fig 6a). Each returns plain column arrays; writing and plotting live in the CLI."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from simroute.model.cost import CostParams, FabricParams, Shape, costs, route_byte_saving, wire_break_even_mq


def crossover_map(params: CostParams, mq: np.ndarray, ct: np.ndarray) -> dict[str, np.ndarray]:
    """Per (Mq, ct): one layer's route bytes Mq (q+p), fetch bytes ct b_KV, saving and winner (Fig 3b)."""
    geometry = params.geometry
    mq_grid, ct_grid = np.meshgrid(np.asarray(mq, float), np.asarray(ct, float), indexing="ij")
    route_bytes = mq_grid * geometry.qp_bytes
    fetch_bytes = ct_grid * geometry.token_fraction * geometry.b_kv
    saving = route_byte_saving(mq_grid, ct_grid, geometry)
    return {"mq": mq_grid.ravel(), "ct": ct_grid.ravel(), "route_bytes_per_layer": route_bytes.ravel(),
            "fetch_bytes_per_layer": fetch_bytes.ravel(), "route_saving": saving.ravel(),
            "winner": np.where(saving > 0, "route", "fetch").ravel(),
            "break_even_mq": wire_break_even_mq(ct_grid, geometry).ravel()}


def _with_bw(params: CostParams, fabric: int, bw_Bps: float | None) -> CostParams:
    """`params` with fabric `fabric`'s single-block and bulk rates both set to `bw_Bps` (unchanged if None)."""
    if bw_Bps is None:
        return params
    old = params.fabrics[fabric]
    fabrics = list(params.fabrics)
    fabrics[fabric] = FabricParams(old.name, old.t_probe_s, bw_Bps, bw_Bps, old.turnaround_s)
    return replace(params, fabrics=tuple(fabrics))


def cost_vs_chunk(params: CostParams, ct: np.ndarray, *, mq: float, fabric: int = 0, bw_Bps: float | None = None,
                  prefill_band_us: tuple[float, float] = (0.5, 1.5)) -> dict[str, np.ndarray]:
    """route / fetch / local totals against chunk tokens (Fig 1b), with local's band over c."""
    at_bw = _with_bw(params, fabric, bw_Bps)
    ct = np.asarray(ct, float)
    shape = Shape(mq=mq, ct=ct, fabric=fabric)
    central = costs(shape, at_bw)
    cheap = costs(shape, replace(at_bw, prefill_s_per_token_layer=prefill_band_us[0] * 1e-6))
    dear = costs(shape, replace(at_bw, prefill_s_per_token_layer=prefill_band_us[1] * 1e-6))
    return {"ct": ct, "route_s": central["route"]["total"], "fetch_s": central["fetch"]["total"],
            "local_s": central["local"]["total"], "local_lo_s": cheap["local"]["total"],
            "local_hi_s": dear["local"]["total"]}


def cost_vs_bandwidth(params: CostParams, bw_Bps: np.ndarray, *, mq: float, ct: float,
                      fabric: int = 0) -> dict[str, np.ndarray]:
    """route / fetch / local totals against effective bandwidth, applied to route and to the pull (Fig 6a)."""
    rows: dict[str, list[float]] = {"bw_GBps": [], "route_s": [], "fetch_s": [], "local_s": []}
    for bandwidth in np.asarray(bw_Bps, float):
        cost = costs(Shape(mq=mq, ct=ct, fabric=fabric), _with_bw(params, fabric, float(bandwidth)))
        rows["bw_GBps"].append(bandwidth / 1e9)
        for primitive in ("route", "fetch", "local"):
            rows[f"{primitive}_s"].append(float(np.asarray(cost[primitive]["total"]).ravel()[0]))
    return {column: np.asarray(values) for column, values in rows.items()}


def fetch_local_crossover_ct(params: CostParams, *, mq: float, fabric: int = 0, prefill_us: float | None = None,
                             low: float = 1.0, high: float = 1 << 16) -> float:
    """Chunk tokens above which fetch beats local (paper: ~75-220 over c = 1.5..0.5 us), by bisection."""
    priced = params if prefill_us is None else replace(params, prefill_s_per_token_layer=prefill_us * 1e-6)

    def fetch_minus_local(ct: float) -> float:
        cost = costs(Shape(mq=mq, ct=ct, fabric=fabric), priced)
        return float(np.asarray(cost["fetch"]["total"]).ravel()[0] - np.asarray(cost["local"]["total"]).ravel()[0])

    if fetch_minus_local(low) <= 0 or fetch_minus_local(high) >= 0:
        return float("nan")
    for _ in range(60):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if fetch_minus_local(mid) > 0 else (low, mid)
    return 0.5 * (low + high)
