"""The calibrate pipeline as a library call: capability -> probes (each in a subprocess) -> fits ->
profile + raw samples, written atomically, and the step-time probes' per-shape latencies as operator tables
beside the profile (simroute.probes.step_tables), which its GPU entry names. The CLI (`simroute calibrate`)
only prints what this returns."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simroute.errors import UnknownNameError
from simroute.probes.capability import Capability, detect
from simroute.probes.framework import Probe, ProbeOutcome, requirement_gap, run_probe
from simroute.probes.registry import HOST_TRANSPORT, PROBES

if TYPE_CHECKING:
    from simroute.probes.step_tables import WrittenTables

SAMPLES_NAME = "samples.parquet"


def default_out(hostname: str | None = None) -> Path:
    return Path("calib") / "measured" / (hostname or socket.gethostname()) / "profile.yaml"


def select(only: Iterable[str] | None) -> list[Probe]:
    """The probes to run: all visible ones, or those named (hidden self-tests only by name)."""
    if not only:
        return [probe for probe in PROBES.values() if not probe.hidden]
    out = []
    for name in only:
        if name not in PROBES:
            raise UnknownNameError("probe", name,
                                   [probe_name for probe_name, probe in PROBES.items() if not probe.hidden])
        out.append(PROBES[name])
    return out


@dataclass
class Calibration:
    capability: Capability
    outcomes: list[ProbeOutcome]
    profile_path: Path | None = None
    samples_path: Path | None = None
    profile: Any = None
    notes: list[str] = field(default_factory=list)
    tables_path: Path | None = None         # the operator tables the step-time probes wrote, if any
    tables_rows: dict[str, int] = field(default_factory=dict)

    def measured(self) -> list[str]:
        return [outcome.probe.name for outcome in self.outcomes if outcome.ok]

    def not_measured(self) -> list[tuple[str, str]]:
        return [(outcome.probe.name, f"{outcome.status}: {outcome.message}") for outcome in self.outcomes
                if not outcome.ok]


def run_probes(probes: list[Probe], cap: Capability, *, quick: bool = False, pes: int = 1,
               timeout_s: float | None = None, on_done: Callable[[ProbeOutcome], None] | None = None,
               extra_args: dict[str, Any] | None = None) -> list[ProbeOutcome]:
    """Run each probe that this machine can run; skip the rest with the reason. Never stops early."""
    outcomes = []
    for probe in probes:
        rehearsal = (extra_args or {}).get("backend") == "reference" and probe.needs == "gpu1"
        gap = None if rehearsal else requirement_gap(probe.needs, cap.gpus, pes,
                                                     hosts_with_nic=bool(cap.infiniband) and pes >= 2)
        if gap:
            outcome = ProbeOutcome(probe, "skipped", gap, 0.0)
        else:
            args = {"quick": quick, "pes": pes, "box": cap.box, **(extra_args or {})}
            if probe.name in HOST_TRANSPORT:
                args["transport"] = HOST_TRANSPORT[probe.name]
            outcome = run_probe(probe, args, timeout_s=timeout_s)
            for sample in outcome.samples:
                sample.setdefault("probe", probe.name)
        outcomes.append(outcome)
        if on_done:
            on_done(outcome)
    return outcomes


def calibrate(out: Path | None = None, *, only: Iterable[str] | None = None, quick: bool = False, pes: int = 1,
              timeout_s: float | None = None, on_done: Callable[[ProbeOutcome], None] | None = None,
              cap: Capability | None = None, write: bool = True, gpu: str | None = None,
              extra_args: dict[str, Any] | None = None) -> Calibration:
    """Run the probes and (if anything was measured) write the profile and its samples beside it, and the step
    probes' operator tables under <profile dir>/ops/<gpu>/<framework>-<version>/ (named by the GPU entry).
    `gpu` is the GPU entry (default: matched from the capability); `extra_args` go to every probe
    (`{"backend": "reference"}`: the dry run, numpy on the CPU)."""
    from simroute.calib.writer import write_profile_checked, write_samples
    from simroute.probes.assemble import build_profile
    cap = cap or detect()
    probes = select(only)
    outcomes = run_probes(probes, cap, quick=quick, pes=pes, timeout_s=timeout_s, on_done=on_done,
                          extra_args=extra_args)
    cal = Calibration(cap, outcomes)
    if not write:
        return cal
    if not cal.measured():
        cal.notes.append("nothing was measured: no profile written")
        return cal
    out = Path(out) if out else default_out(cap.hostname)
    samples = [sample for outcome in outcomes for sample in outcome.samples]
    data = build_profile(outcomes, cap, out, SAMPLES_NAME, gpu=gpu)
    written, notes = write_tables(data, outcomes, box=cap.hostname, box_description=cap.box, profile_path=out)
    cal.notes.extend(notes)
    if written is not None:
        cal.tables_path, cal.tables_rows = written.path, written.tables.rows
    samples_path = out.parent / SAMPLES_NAME
    # The profile is checked (loads back, gives cost_params) before the samples and it are renamed into place.
    try:
        cal.profile = write_profile_checked(data, out, before_commit=lambda: write_samples(
            samples, samples_path, metadata={"simroute.box": cap.box, "simroute.profile": out.name}))
    except BaseException:
        from simroute.probes.step_tables import remove_written
        remove_written(written)
        raise
    cal.samples_path = samples_path
    cal.profile_path = out
    return cal


def write_tables(data: dict[str, Any], outcomes: list[ProbeOutcome], *, box: str, box_description: str,
                 profile_path: Path, samples_name: str = SAMPLES_NAME) -> tuple[WrittenTables | None, list[str]]:
    """Write the step probes' operator tables beside the profile at `profile_path` and name them in its GPU
    entry (`data`, the profile dict: its `gpus.<gpu>.operator_tables` set; a dry run's description says so).

    Returns (the WrittenTables or None, notes). None with no note: no table probe measured anything; None with a
    note `operator tables not written: ...`: the profile has no GPU entry, or writing failed (the profile is still
    worth writing). `box` is the host name provenance gives, `box_description` the longer one. Used by
    `calibrate()` and by `probes/run_single_gpu.py --write-tables` (the one-shot's results.json, afterwards).
    Writing again replaces the directory a previous run wrote (never one simroute did not write: a fresh name is
    taken) and does not repeat the description's dry-run remark."""
    from simroute.probes.step_tables import step_tables, write_step_tables
    tables = step_tables(outcomes)
    if tables is None:
        return None, []
    notes = list(tables.notes)
    entry = data.get("gpu")
    if not entry or entry not in (data.get("gpus") or {}):
        notes.append("operator tables not written: the profile has no GPU entry to name them (the per-shape "
                     "timings are in samples.parquet)")
        return None, notes
    from simroute.errors import SimrouteError
    try:
        written = write_step_tables(tables, box=box, box_description=box_description, gpu=entry,
                                    profile_path=Path(profile_path), samples_name=samples_name)
    except (SimrouteError, OSError) as exc:       # the profile is still worth writing: say why, keep going
        notes.append(f"operator tables not written: {exc}")
        return None, notes
    data["gpus"][entry]["operator_tables"] = written.ref
    if tables.dry_run:
        said = f"; its operator tables are a dry run ({tables.device}): not GPU timings"
        if said not in data.get("description", ""):
            data["description"] = data.get("description", "") + said
        notes.append(f"warning: the operator tables are a dry run ({tables.framework} on the CPU): never "
                     f"simulate {entry} with this profile")
    return written, notes
