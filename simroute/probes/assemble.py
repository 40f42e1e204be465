"""From probe outcomes to a profile dict: measured fabrics and constants with their box, loopback floors
labelled loopback, and every constant of the shipped `shared.yaml` that was not measured re-stated as a
`default` naming the paper value that stands in and why it was not measured. The paper's fabric files are
included so the result is complete enough to simulate."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from simroute.calib.profile import load_profile, shipped_dir
from simroute.probes.capability import Capability
from simroute.probes.framework import ProbeOutcome

# Which probe would have measured each shared constant (for the `default` provenance's "why").
MEASURED_BY: dict[str, str] = {
    "splice_ms": "splice", "splice_gather_us": "splice",
    "holder_compute_dense_us": "holder", "holder_sparse_premium": "holder", "merge_us": "holder",
    "fanin_elbow_requesters": "holder",
    "staging_dispatch_us": "staging", "staging_join_us": "staging", "staging_copy_engines": "staging",
    "staging_hw_queues": "staging", "staging_parallel_GBps": "staging",
}   # staging_gain_at_elbow / _elbow_streams are the paper's fetch-level claims (§6.2), never a probe's constants
NO_PROBE = "no probe measures it (needs a serving stack or a multi-host run)"


def _c(value: float | None = None, *, points=None, axis: str | None = None, unit: str | None = None,
       note: str | None = None, prov: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if points is not None:
        out["points"] = [[float(first), float(second)] for first, second in points]
        if axis:
            out["x"] = axis
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


def fabric_from_fit(res: dict[str, Any], probe: str, method: str, prov: _Prov, *, description: str,
                    link_peak_Bps: float, peak_ref: str) -> dict[str, Any]:
    """A fabric entry from an affine fit (seconds, bytes/s in `res["fit"]`)."""
    fit = res["fit"]
    ref = f"probe {probe}: {method}; affine fit over Mq {res.get('mq')} x {res.get('row_bytes')} B/row"
    return {
        "description": description,
        "t_probe_us": _c(fit["t_probe_s"] * 1e6, unit="us", note="median payload-free signal round trip (sig_rt)",
                         prov=prov.measured(f"probe {probe}: sig_rt")),
        "single_block_GBps": _c(fit["bw_Bps"] / 1e9, unit="GB/s", note="slope of full_rt over bytes (Mq >= 512)",
                                prov=prov.fitted(ref)),
        "link_peak_GBps": _c(max(link_peak_Bps, fit["bw_Bps"]) / 1e9, unit="GB/s", prov=prov.measured(peak_ref)),
        "turnaround_us": _c(fit["turnaround_s"] * 1e6, unit="us", note="fitted intercept beyond the probe",
                            prov=prov.fitted(ref)),
        "mape_amortised": _c(fit["mape_amortised"] if fit["mape_amortised"] == fit["mape_amortised"] else 0.0,
                             note="MAPE of the affine fit over Mq >= 512", prov=prov.fitted(ref)),
        "mape_full": _c(fit["mape_full"], note="MAPE of the affine fit over the whole Mq sweep", prov=prov.fitted(ref)),
    }


def _pts(entry_data: dict[str, float]) -> list[tuple[float, float]]:
    return sorted((float(key), float(value)) for key, value in entry_data.items())


def gpu_constants(outcome: ProbeOutcome, prov: _Prov) -> dict[str, dict[str, Any]]:
    """Constants a GPU probe measured, by name (the result keys are the probes' contract)."""
    results, name, out = outcome.results, outcome.probe.name, {}
    kernel = results.get("kernel", "")
    if name == "splice":
        out["splice_ms"] = _c(points=_pts(results["splice_ms"]), axis="chunk_tokens", unit="ms",
                              note=f"gather + delta-rotation + scatter, {results.get('layers', 27)} layers; rotation "
                                   f"{results.get('rotation_share', 0):.0%} of it",
                              prov=prov.measured(f"probe splice ({kernel})"))
        out["splice_gather_us"] = _c(results["gather_us"], unit="us", prov=prov.measured("probe splice: gather part"))
    elif name == "holder":
        out["holder_compute_dense_us"] = _c(points=_pts(results["dense_us"]["16"]), axis="requesters", unit="us",
                                            note=f"h_q = 16, ct = {results.get('ct', 2048)}, kernel {kernel}",
                                            prov=prov.measured(f"probe holder ({kernel})"))
        if "128" in results["dense_us"]:
            out["holder_compute_dense_h128_us"] = _c(points=_pts(results["dense_us"]["128"]), axis="requesters",
                                                     unit="us",
                                                     note=f"h_q = 128, ct = {results.get('ct', 2048)}, kernel {kernel}",
                                                     prov=prov.measured(f"probe holder ({kernel})"))
        if results.get("sparse_premium"):
            out["holder_sparse_premium"] = _c(points=_pts(results["sparse_premium"]), axis="topk",
                                              note="sparse kernel over dense at matched k "
                                                   f"({results.get('sparse_kernel')})",
                                              prov=prov.measured("probe holder: sparse top-k"))
        if results.get("merge_us") is not None:
            out["merge_us"] = _c(results["merge_us"], unit="us", note=results.get("merge_note"),
                                 prov=prov.measured("probe holder: merge of partials"))
    elif name == "staging":
        ref = f"probe staging ({results.get('backend', 'cupy')})"
        if "dispatch_us" in results:                    # the mechanisms' constants (simroute.model.staging)
            out["staging_dispatch_us"] = _c(results["dispatch_us"], unit="us", note="host time to issue one per-layer "
                                            "copy (median over the chunk's 27)", prov=prov.measured(ref + ": issue"))
            out["staging_join_us"] = _c(results["join_us"], unit="us", note="host time to join one stream (event "
                                        "record + wait)", prov=prov.measured(ref + ": join"))
            out["staging_copy_GBps"] = _c(results["copy_GBps"], unit="GB/s", note="one per-layer copy's device rate, "
                                          "queued behind a hold kernel", prov=prov.measured(ref + ": one copy"))
            if results.get("parallel_GBps"):
                out["staging_parallel_GBps"] = _c(results["parallel_GBps"], unit="GB/s", note="copies started "
                                                  "together, one per copy engine: the rate they share",
                                                  prov=prov.measured(ref + ": parallel copies"))
            if results.get("copy_engines"):
                out["staging_copy_engines"] = _c(results["copy_engines"], note="cudaDeviceProp.asyncEngineCount",
                                                 prov=prov.measured(ref + ": device properties"))
            out["staging_hw_queues"] = _c(results["hw_queues"], note="CUDA_DEVICE_MAX_CONNECTIONS of the probe's "
                                          "process", prov=prov.measured(ref + ": environment"))
        if "single_block_GBps" in results:                 # absent when the deadline came before the copy sweep
            out["d2d_single_block_GBps"] = _c(results["single_block_GBps"], unit="GB/s",
                                              prov=prov.measured("probe staging: one-CTA copy kernel"))
            out["d2d_multi_block_GBps"] = _c(results["multi_block_GBps"], unit="GB/s",
                                             note=f"best over block counts {results.get('blocks')}",
                                             prov=prov.measured("probe staging: multi-CTA copy kernel"))
    elif name == "nic-qp-sweep" and "capacity" in results:     # no step seen: the capacity is only bounded below
        prov_ref = f"probe nic-qp-sweep: {results.get('method', 'queue-pair rotation')}"
        out["nic_qp_contexts"] = _c(results["capacity"], note="queue pairs a NIC serves in rotation without a context "
                                                              "miss (the largest Q within 10% of Q = 1)",
                                    prov=prov.measured(prov_ref))
        out["nic_context_miss_us"] = _c(results["miss_us"], unit="us", note="a message's context miss: half the "
                                                                            "exchange's step past the capacity",
                                        prov=prov.measured(prov_ref))
    elif name == "nvshmem-loopback":
        note = "1-PE put+signal to itself: a software floor, never a fabric constant"
        out["nvshmem_loopback_sig_rt_us"] = _c(results["sig_rt_us"], unit="us", note=note,
                                               prov=prov.loopback("probe nvshmem-loopback"))
        out["nvshmem_loopback_put_GBps"] = _c(results["put_GBps"], unit="GB/s", note=note,
                                              prov=prov.loopback("probe nvshmem-loopback"))
    return out


def shipped_gpu_entries() -> dict[str, Path]:
    """GPU entry name -> the shipped file defining it."""
    out = {}
    for fit in sorted((shipped_dir() / "gpus").glob("*.yaml")):
        out.update({name: fit for name in load_profile(fit).gpus})
    return out


def instance_gpu(cap: Capability, gpu: str | None = None) -> str | None:
    """The GPU entry the measured constants belong to: `gpu` if given, else the one matching the first GPU."""
    from simroute.probes.step_constants import match_gpu_entry
    if gpu is not None:
        return gpu
    return match_gpu_entry(cap.gpu_names[0], list(shipped_gpu_entries())) if cap.gpu_names else None


def _step_section(outcomes: list[ProbeOutcome], entry: str | None, prov: _Prov) -> tuple[dict, dict, str]:
    """({entry: GPU entry with the step probes' constants}, extra constants, why not) for the profile."""
    from simroute.probes.step_constants import STEP_PROBES, gpu_entry
    from simroute.probes.step_tables import TABLE_PROBES
    if not any(outcome.ok and outcome.probe.name in (*STEP_PROBES, *TABLE_PROBES) for outcome in outcomes):
        return {}, {}, "no step-time probe measured anything"
    entries = shipped_gpu_entries()
    if entry not in entries:
        return {}, {}, f"no shipped GPU entry for this GPU ({entry or 'unknown'}; have {sorted(entries)})"
    data, extra = gpu_entry(load_profile(entries[entry]), entry, outcomes, prov.measured)
    return {entry: data}, extra, ""


def _unmeasured_defaults(shared, measured: dict[str, Any], by_name: dict[str, ProbeOutcome],
                         host: str) -> dict[str, Any]:
    """Every shared constant not measured, re-stated as `default` naming why and what stands in."""
    out = {}
    for key, constant in shared.constants.items():
        if key in measured:
            continue
        probe = MEASURED_BY.get(key)
        outcome = by_name.get(probe) if probe else None
        why = (NO_PROBE if probe is None else f"probe {probe} not run" if outcome is None
               else f"probe {probe}: {outcome.status}: {outcome.message}")
        entry_data = constant.as_dict(exclude_none=True)
        orig = constant.provenance
        entry_data["provenance"] = {"kind": "default", "ref": f"not measured on {host} ({why[:160]}); stands in: "
                           f"{orig.kind} {orig.ref or ''}".strip()}
        if "points" in entry_data:
            entry_data["points"] = [list(point) for point in entry_data["points"]]
        if "range" in entry_data:
            entry_data["range"] = list(entry_data["range"])
        out[key] = entry_data
    return out


def build_profile(outcomes: list[ProbeOutcome], cap: Capability, out_path: Path,
                  samples_name: str = "samples.parquet", gpu: str | None = None) -> dict[str, Any]:
    """The profile dict for `out_path` (it includes the shipped shared constants, fabrics and GPU entries by
    name); the step-time probes' constants go into the GPU entry of `gpu` (default: matched from `cap`)."""
    prov = _Prov(cap.box, samples_name)
    base = shipped_dir().resolve()
    fabric_files = sorted((base / "fabrics").glob("*.yaml")) + sorted((base / "gpus").glob("*.yaml"))
    # By shipped name, not by path: the profile stays valid when copied to another box or reinstalled.
    include = ["shipped:shared.yaml"] + [f"shipped:{fit.relative_to(base).as_posix()}" for fit in fabric_files]
    by_name = {outcome.probe.name: outcome for outcome in outcomes}
    fabrics: dict[str, Any] = {}
    for name, outcome in by_name.items():
        if not outcome.ok:
            continue
        results = outcome.results
        if name in ("host-shm", "host-tcp"):
            fabrics[name] = fabric_from_fit(
                results, name, results.get("method", ""), prov, link_peak_Bps=results["bulk_Bps"],
                peak_ref=f"probe {name}: one-way bulk of {results['bulk_bytes'] / 1e6:.1f} MB",
                description=f"two processes on {cap.hostname} over {results.get('method', name)} (CPU copies)")
        elif name == "nvshmem-pes":
            fabrics[results["fabric"]] = fabric_from_fit(
                results, name, results.get("method", ""), prov, link_peak_Bps=results["multi_block_Bps"],
                peak_ref=f"probe {name}: block-count sweep {results.get('blocks')}",
                description=results.get("description", "GPU-to-GPU NVSHMEM put+signal"))
    constants: dict[str, Any] = {}
    for outcome in outcomes:
        if outcome.ok:
            constants.update(gpu_constants(outcome, prov))
    constants.update(_unmeasured_defaults(load_profile(base / "shared.yaml"), constants, by_name, cap.hostname))
    entry = instance_gpu(cap, gpu)
    gpus, extra, why = _step_section(outcomes, entry, prov)
    constants.update(extra)
    ran = [outcome.probe.name for outcome in outcomes if outcome.ok]
    out = {
        "schema": "simroute.calib/1",
        "name": f"measured-{cap.hostname}",
        "description": f"Measured by `simroute calibrate` on {cap.box}, {prov.date}; measured: "
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
