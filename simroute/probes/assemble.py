"""From probe outcomes to a profile dict: measured fabrics and constants with their box, loopback floors
labelled loopback, and every constant of the shipped `shared.yaml` that was not measured re-stated as a
`default` naming the paper value that stands in and why it was not measured. The paper's fabric files are
included so the result is complete enough to simulate."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from simroute.calib.profile import load_profile, shipped_dir
from simroute.model.staging import paper_chunk_bytes
from simroute.probes.capability import Capability
from simroute.probes.framework import ProbeOutcome

# Which probe would have measured each shared constant (for the `default` provenance's "why").
MEASURED_BY: dict[str, str] = {
    "splice_ms": "splice", "splice_gather_us": "splice",
    "holder_compute_dense_us": "holder", "holder_sparse_premium": "holder", "merge_us": "holder",
    "fanin_elbow_requesters": "holder",
    "staging_elbow_streams": "staging", "staging_copy_GBps": "staging",
}   # staging_gain_at_elbow is a fetch round-trip gain (§6.2): the probe times the copies alone, not a fetch
NO_PROBE = "no probe measures it (needs a serving stack or a multi-host run)"


def _c(value: float | None = None, *, points=None, x: str | None = None, unit: str | None = None,
       note: str | None = None, prov: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if points is not None:
        out["points"] = [[float(a), float(b)] for a, b in points]
        if x:
            out["x"] = x
    else:
        out["value"] = float(value)
    if unit:
        out["unit"] = unit
    if note:
        out["note"] = note
    out["provenance"] = prov
    return out


class _Prov:
    """Provenance records for one calibration run."""

    def __init__(self, box: str, samples: str) -> None:
        self.box, self.samples, self.date = box, samples, dt.date.today().isoformat()

    def measured(self, ref: str) -> dict[str, Any]:
        return {"kind": "measured", "ref": ref, "box": self.box, "date": self.date, "samples": self.samples}

    def fitted(self, ref: str) -> dict[str, Any]:
        return {"kind": "fitted", "ref": ref, "box": self.box, "date": self.date, "samples": self.samples}

    def loopback(self, ref: str) -> dict[str, Any]:
        return {"kind": "loopback", "ref": ref, "box": self.box, "date": self.date, "samples": self.samples}


def fabric_from_fit(res: dict[str, Any], probe: str, method: str, pv: _Prov, *, description: str,
                    link_peak_Bps: float, peak_ref: str) -> dict[str, Any]:
    """A fabric entry from an affine fit (seconds, bytes/s in `res["fit"]`)."""
    f = res["fit"]
    ref = f"probe {probe}: {method}; affine fit over Mq {res.get('mq')} x {res.get('row_bytes')} B/row"
    return {
        "description": description,
        "t_probe_us": _c(f["t_probe_s"] * 1e6, unit="us", note="median payload-free signal round trip (sig_rt)",
                         prov=pv.measured(f"probe {probe}: sig_rt")),
        "single_block_GBps": _c(f["bw_Bps"] / 1e9, unit="GB/s", note="slope of full_rt over bytes (Mq >= 512)",
                                prov=pv.fitted(ref)),
        "link_peak_GBps": _c(max(link_peak_Bps, f["bw_Bps"]) / 1e9, unit="GB/s", prov=pv.measured(peak_ref)),
        "turnaround_us": _c(f["turnaround_s"] * 1e6, unit="us", note="fitted intercept beyond the probe",
                            prov=pv.fitted(ref)),
        "mape_amortised": _c(f["mape_amortised"] if f["mape_amortised"] == f["mape_amortised"] else 0.0,
                             note="MAPE of the affine fit over Mq >= 512", prov=pv.fitted(ref)),
        "mape_full": _c(f["mape_full"], note="MAPE of the affine fit over the whole Mq sweep", prov=pv.fitted(ref)),
    }


def _pts(d: dict[str, float]) -> list[tuple[float, float]]:
    return sorted((float(k), float(v)) for k, v in d.items())


def gpu_constants(o: ProbeOutcome, pv: _Prov) -> dict[str, dict[str, Any]]:
    """Constants a GPU probe measured, by name (the result keys are the probes' contract)."""
    r, name, out = o.results, o.probe.name, {}
    kernel = r.get("kernel", "")
    if name == "splice":
        out["splice_ms"] = _c(points=_pts(r["splice_ms"]), x="chunk_tokens", unit="ms",
                              note=f"gather + delta-rotation + scatter, {r.get('layers', 27)} layers; rotation "
                                   f"{r.get('rotation_share', 0):.0%} of it", prov=pv.measured(f"probe splice ({kernel})"))
        out["splice_gather_us"] = _c(r["gather_us"], unit="us", prov=pv.measured("probe splice: gather part"))
    elif name == "holder":
        out["holder_compute_dense_us"] = _c(points=_pts(r["dense_us"]["16"]), x="requesters", unit="us",
                                            note=f"h_q = 16, ct = {r.get('ct', 2048)}, kernel {kernel}",
                                            prov=pv.measured(f"probe holder ({kernel})"))
        if "128" in r["dense_us"]:
            out["holder_compute_dense_h128_us"] = _c(points=_pts(r["dense_us"]["128"]), x="requesters", unit="us",
                                                     note=f"h_q = 128, ct = {r.get('ct', 2048)}, kernel {kernel}",
                                                     prov=pv.measured(f"probe holder ({kernel})"))
        if r.get("sparse_premium"):
            out["holder_sparse_premium"] = _c(points=_pts(r["sparse_premium"]), x="topk",
                                              note=f"sparse kernel over dense at matched k ({r.get('sparse_kernel')})",
                                              prov=pv.measured("probe holder: sparse top-k"))
        if r.get("merge_us") is not None:
            out["merge_us"] = _c(r["merge_us"], unit="us", note=r.get("merge_note"),
                                 prov=pv.measured("probe holder: merge of partials"))
    elif name == "staging":
        out["staging_elbow_streams"] = _c(r["elbow_streams"], prov=pv.measured(f"probe staging: K-stream D2D "
                                                                                f"({r.get('backend', 'cupy')})"))
        # the copies' own time saved at the elbow (simroute.model.staging), not the paper's fetch-time gain
        out["staging_copy_gain_at_elbow"] = _c(max(r["gain_at_elbow"], 0.0),
                                               note="staging time saved at the elbow vs K = 1 (copies alone)",
                                               prov=pv.measured("probe staging: K-stream D2D"))
        if r.get("staging_us", {}).get("1"):        # one stream's rate: the chunk's 27 copies at K = 1
            out["staging_copy_GBps"] = _c(paper_chunk_bytes() / (r["staging_us"]["1"] * 1e-6) / 1e9, unit="GB/s",
                                          note="a 2048-token chunk's 27 per-layer copies on one stream",
                                          prov=pv.measured("probe staging: K = 1"))
        if "single_block_GBps" in r:                 # absent when the deadline came before the copy sweep
            out["d2d_single_block_GBps"] = _c(r["single_block_GBps"], unit="GB/s",
                                              prov=pv.measured("probe staging: one-CTA copy kernel"))
            out["d2d_multi_block_GBps"] = _c(r["multi_block_GBps"], unit="GB/s",
                                             note=f"best over block counts {r.get('blocks')}",
                                             prov=pv.measured("probe staging: multi-CTA copy kernel"))
    elif name == "nvshmem-loopback":
        note = "1-PE put+signal to itself: a software floor, never a fabric constant"
        out["nvshmem_loopback_sig_rt_us"] = _c(r["sig_rt_us"], unit="us", note=note,
                                               prov=pv.loopback("probe nvshmem-loopback"))
        out["nvshmem_loopback_put_GBps"] = _c(r["put_GBps"], unit="GB/s", note=note,
                                              prov=pv.loopback("probe nvshmem-loopback"))
    return out


def shipped_gpu_entries() -> dict[str, Path]:
    """GPU entry name -> the shipped file defining it."""
    out = {}
    for f in sorted((shipped_dir() / "gpus").glob("*.yaml")):
        out.update({name: f for name in load_profile(f).gpus})
    return out


def instance_gpu(cap: Capability, gpu: str | None = None) -> str | None:
    """The GPU entry the measured constants belong to: `gpu` if given, else the one matching the first GPU."""
    from simroute.probes.step_constants import match_gpu_entry
    if gpu is not None:
        return gpu
    return match_gpu_entry(cap.gpu_names[0], list(shipped_gpu_entries())) if cap.gpu_names else None


def _step_section(outcomes: list[ProbeOutcome], entry: str | None, pv: _Prov) -> tuple[dict, dict, str]:
    """({entry: GPU entry with the step probes' constants}, extra constants, why not) for the profile."""
    from simroute.probes.step_constants import STEP_PROBES, gpu_entry
    from simroute.probes.step_tables import TABLE_PROBES
    if not any(o.ok and o.probe.name in (*STEP_PROBES, *TABLE_PROBES) for o in outcomes):
        return {}, {}, "no step-time probe measured anything"
    entries = shipped_gpu_entries()
    if entry not in entries:
        return {}, {}, f"no shipped GPU entry for this GPU ({entry or 'unknown'}; have {sorted(entries)})"
    data, extra = gpu_entry(load_profile(entries[entry]), entry, outcomes, pv.measured)
    return {entry: data}, extra, ""


def _unmeasured_defaults(shared, measured: dict[str, Any], by_name: dict[str, ProbeOutcome],
                         host: str) -> dict[str, Any]:
    """Every shared constant not measured, re-stated as `default` naming why and what stands in."""
    out = {}
    for key, c in shared.constants.items():
        if key in measured:
            continue
        probe = MEASURED_BY.get(key)
        o = by_name.get(probe) if probe else None
        why = (NO_PROBE if probe is None else f"probe {probe} not run" if o is None
               else f"probe {probe}: {o.status}: {o.message}")
        d = c.model_dump(exclude_none=True)
        orig = c.provenance
        d["provenance"] = {"kind": "default", "ref": f"not measured on {host} ({why[:160]}); stands in: "
                           f"{orig.kind} {orig.ref or ''}".strip()}
        if "points" in d:
            d["points"] = [list(pt) for pt in d["points"]]
        if "range" in d:
            d["range"] = list(d["range"])
        out[key] = d
    return out


def build_profile(outcomes: list[ProbeOutcome], cap: Capability, out_path: Path,
                  samples_name: str = "samples.parquet", gpu: str | None = None) -> dict[str, Any]:
    """The profile dict for `out_path` (it includes the shipped shared constants, fabrics and GPU entries by
    name); the step-time probes' constants go into the GPU entry of `gpu` (default: matched from `cap`)."""
    pv = _Prov(cap.box, samples_name)
    base = shipped_dir().resolve()
    fabric_files = sorted((base / "fabrics").glob("*.yaml")) + sorted((base / "gpus").glob("*.yaml"))
    # By shipped name, not by path: the profile stays valid when copied to another box or reinstalled.
    include = ["shipped:shared.yaml"] + [f"shipped:{f.relative_to(base).as_posix()}" for f in fabric_files]
    by_name = {o.probe.name: o for o in outcomes}
    fabrics: dict[str, Any] = {}
    for name, o in by_name.items():
        if not o.ok:
            continue
        r = o.results
        if name in ("host-shm", "host-tcp"):
            fabrics[name] = fabric_from_fit(
                r, name, r.get("method", ""), pv, link_peak_Bps=r["bulk_Bps"],
                peak_ref=f"probe {name}: one-way bulk of {r['bulk_bytes'] / 1e6:.1f} MB",
                description=f"two processes on {cap.hostname} over {r.get('method', name)} (CPU copies)")
        elif name == "nvshmem-pes":
            fabrics[r["fabric"]] = fabric_from_fit(
                r, name, r.get("method", ""), pv, link_peak_Bps=r["multi_block_Bps"],
                peak_ref=f"probe {name}: block-count sweep {r.get('blocks')}",
                description=r.get("description", "GPU-to-GPU NVSHMEM put+signal"))
    constants: dict[str, Any] = {}
    for o in outcomes:
        if o.ok:
            constants.update(gpu_constants(o, pv))
    constants.update(_unmeasured_defaults(load_profile(base / "shared.yaml"), constants, by_name, cap.hostname))
    entry = instance_gpu(cap, gpu)
    gpus, extra, why = _step_section(outcomes, entry, pv)
    constants.update(extra)
    ran = [o.probe.name for o in outcomes if o.ok]
    out = {
        "schema": "simroute.calib/1",
        "name": f"measured-{cap.hostname}",
        "description": f"Measured by `simroute calibrate` on {cap.box}, {pv.date}; measured: "
                       f"{', '.join(ran) or 'nothing'}; paper values stand in for the rest (provenance default)"
                       + (f"; GPU entry not measured: {why}" if why else ""),
        "box": {"name": cap.hostname, "description": cap.box},
        "include": include,
        "fabrics": fabrics,
        "constants": constants,
    }
    if gpus:
        out["gpus"] = gpus
        out["gpu"] = entry
    return out
