"""From the step-time probes' raw rates to the GPU entry the step-time model reads (docs/STEP_TIME.md): each
measured fraction is the probe's rate over the entry's datasheet peak, with `measured` provenance naming the
probe, the kernel and the box. The datasheet peaks and what was not measured are kept from the shipped
entry (a profile's `gpus:` entry replaces the included one whole)."""

from __future__ import annotations

import re
from typing import Any, Callable

from simroute.calib.profile import Profile
from simroute.probes.framework import ProbeOutcome

STEP_PROBES = ("hbm", "gemm", "decode-attention", "prefill-attention", "decoder-layer", "launch-overhead")
Measured = Callable[[str], dict[str, Any]]


def match_gpu_entry(device_name: str, entries: list[str]) -> str | None:
    """The GPU entry a device name (nvidia-smi / torch) belongs to: the entry whose leading token ('h200' of
    'h200-sxm', 'rtxpro6000') appears in the squashed lower-case device name; the longest such token wins."""
    squashed = re.sub(r"[^a-z0-9]", "", device_name.lower())
    hits = [(len(token), entry) for entry in entries if (token := entry.split("-")[0].lower()) and token in squashed]
    return max(hits)[1] if hits else None


def _fraction(rate: float, peak: float) -> tuple[float, str]:
    """rate / peak in (0, 1]; a rate above the datasheet is clipped and says so."""
    fraction = rate / peak
    if fraction > 1.0:
        return 1.0, f" (measured {fraction:.3f} of the datasheet: clipped to 1)"
    return max(fraction, 1e-9), ""


def _const(value: float | None = None, *, points: list[list[float]] | None = None, unit: str | None = None,
           note: str, prov: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"points": points, "x": "tokens"} if points is not None else {"value": float(value)}
    if unit:
        out["unit"] = unit
    out["note"] = note
    out["provenance"] = prov
    return out


def _rate_fraction(result: dict[str, Any], key: str, peak: float, unit: str, what: str, probe: str,
                   measured: Measured) -> dict[str, Any]:
    """A measured rate r[key] as a fraction of the datasheet `peak`, its note saying both."""
    fraction, clip = _fraction(result[key], peak)
    return _const(fraction, note=f"{what} {result[key]:.4g} {unit} over the datasheet {peak:g} {unit}{clip}",
                  prov=measured(f"probe {probe} ({result.get('backend')})"))


def step_entry_constants(results: dict[str, dict[str, Any]], peak_TFLOPs: float, hbm_GBps: float,
                         measured: Measured) -> dict[str, dict[str, Any]]:
    """GPU-entry constants from the step probes' results (probe name -> results), by contract name."""
    out: dict[str, dict[str, Any]] = {}
    if (result := results.get("hbm")) is not None:
        out["hbm_efficiency"] = _rate_fraction(result, "best_GBps", hbm_GBps, "GB/s", "device-to-device copy (read + "
                                               "write)", "hbm", measured)
    if (result := results.get("gemm")) is not None:
        pts = [[float(tokens), _fraction(tflops, peak_TFLOPs)[0]]
               for tokens, tflops in result["TFLOPs_by_tokens"].items()]
        out["gemm_efficiency"] = _const(points=pts, note=f"bf16 GEMMs of {len(result['shapes'])} model linear shapes "
                                        f"(TP 1/2/4/8): their FLOPs over their seconds at each token count, over "
                                        f"{peak_TFLOPs:g} TFLOP/s",
                                        prov=measured(f"probe gemm ({result.get('backend')})"))
    if (result := results.get("prefill-attention")) is not None:
        out["attention_efficiency"] = _rate_fraction(result, "best_TFLOPs", peak_TFLOPs, "TFLOP/s", "causal prefill "
                                                     "attention at best", "prefill-attention", measured)
    if (result := results.get("launch-overhead")) is not None:
        prov = measured(f"probe launch-overhead ({result.get('backend')}): {result['launches']} launches per iteration")
        out["iteration_overhead_us"] = _const(result["iteration_us"], unit="us", prov=prov,
                                              note="eager launches of one iteration's kernels (no scheduling)")
        if result.get("iteration_graph_us") is not None:
            out["iteration_overhead_graph_us"] = _const(result["iteration_graph_us"], unit="us", prov=prov,
                                                        note=f"the same iteration replayed as {result.get('graphs')}")
    return out


def step_shared_constants(results: dict[str, dict[str, Any]], hbm_GBps: float,
                          measured: Measured) -> dict[str, dict[str, Any]]:
    """Figures the GPU entry has no field for, as profile constants: the decode attention's cache-read rate
    over the datasheet bandwidth (what the model's memory-bound attention term assumes is hbm_efficiency)."""
    result = results.get("decode-attention")
    if result is None:
        return {}
    kernels = ", ".join(sorted(set(result.get("kernels", {}).values())))
    return {"decode_attention_hbm_fraction": _rate_fraction(result, "best_GBps", hbm_GBps, "GB/s", f"best decode-"
                                                            f"attention cache read ({kernels})", "decode-attention",
                                                            measured)}


def gpu_entry(base: Profile, entry: str, outcomes: list[ProbeOutcome], measured: Measured) -> tuple[dict, dict]:
    """(the full GPU entry for `entry` with the measured constants in place, extra shared constants)."""
    results = {outcome.probe.name: outcome.results for outcome in outcomes
               if outcome.ok and outcome.probe.name in STEP_PROBES}
    shipped = base.gpu_entry(entry)
    data = shipped.as_dict(exclude_none=True)
    for constant in data.values():
        if isinstance(constant, dict) and "points" in constant:
            constant["points"] = [list(point) for point in constant["points"]]
    peak, hbm = shipped.peak_bf16_TFLOPs.value, shipped.hbm_GBps.value
    data.update(step_entry_constants(results, peak, hbm, measured))
    return data, step_shared_constants(results, hbm, measured)


def layer_vs_model(layer_results: dict[str, Any], profile: Profile, gpu: str) -> list[dict[str, Any]]:
    """The decoder-layer probe's per-layer times next to the step-time model's prediction for the same batch
    (one prefill chunk of T tokens), per model and T: linear (the layer kinds weighted by their counts, as
    the model averages them), attention and the whole layer."""
    from simroute.model.geometry import get_model
    from simroute.model.steptime import BatchShape, StepTimeModel
    spec = profile.gpu_spec(gpu)
    by_model: dict[str, dict[str, dict[str, Any]]] = {}
    for case in layer_results.values():
        for tokens, result in case["tokens"].items():
            by_model.setdefault(case["model"], {}).setdefault(tokens, {})[case["kind"]] = result
    rows = []
    for model, per_t in by_model.items():
        geom = get_model(model)
        counts = geom.layer_kinds()
        step = StepTimeModel(geom, spec)
        for tokens, kinds in sorted(per_t.items(), key=lambda item: int(item[0])):
            if set(kinds) != {kind for kind, count in counts.items() if count}:
                continue                                 # a kind missing (deadline): no like-for-like number
            terms = step.iteration(BatchShape.uniform(prefill_tokens=int(tokens)))
            weight = {kind: counts[kind] / geom.layers for kind in kinds}
            lin = sum(weight[kind] * kinds[kind]["linear_s"] for kind in kinds)
            attn = sum(weight[kind] * kinds[kind]["attention_s"] for kind in kinds)
            layer = sum(weight[kind] * kinds[kind]["layer_s"] for kind in kinds)
            rows.append({"model": model, "tokens": int(tokens), "measured_linear_ms": lin * 1e3,
                         "model_linear_ms": terms.linear_s_per_layer * 1e3, "measured_attention_ms": attn * 1e3,
                         "model_attention_ms": terms.attention_s_per_layer * 1e3, "measured_layer_ms": layer * 1e3,
                         "model_layer_ms": (terms.linear_s_per_layer + terms.attention_s_per_layer) * 1e3})
    return rows
