#!/usr/bin/env python3
"""One-shot calibration of a single-GPU box (H200-class) within a short lease: <= 8 minutes wall, no network.

    python probes/run_single_gpu.py OUT_DIR [--wheels .whl] [--budget-s 480] [--quick] [--box NAME] [--gpu ENTRY]
    python probes/run_single_gpu.py OUT_DIR --dry-run [--rehearsal-s 60]       # what CI runs, on a CPU
    python probes/run_single_gpu.py --print-wheels                              # the pip download command
    python probes/run_single_gpu.py --write-tables OUT_DIR                      # here, once the files are back

1. Installs what the box lacks (pydantic and its dependencies, simpy, nvshmem4py) from a local wheel folder,
   one wheel at a time with `--no-index --no-deps`: nothing is fetched, an absent wheel costs only what needs it.
2. Reports the machine's capabilities, prints the plan (each probe's share of the budget) and runs every probe
   in its own subprocess, whose sweeps stop at its deadline and keep what they measured; a probe never gets
   more than what is left of the total budget.
3. Writes into OUT_DIR: profile.yaml (provenance per constant; the step-time constants in the GPU entry),
   samples.parquet, results.json (every probe's raw results), capability.json, calibrate.log: no more, since
   at most 8 files, two folders deep, come back from the box.
4. Afterwards, here, once the files are back: `--write-tables OUT_DIR` (no probes, no GPU) rebuilds the step
   probes' outcomes from OUT_DIR/results.json and writes their per-shape latencies as operator tables,
   OUT_DIR/ops/<gpu>/<framework>-<version>/, with the writer `simroute calibrate` uses
   (simroute.probes.calibrate.write_tables), and names them in OUT_DIR/profile.yaml's GPU entry
   (`operator_tables`). Then commit OUT_DIR as calib/measured/<box>/.

--dry-run rehearses the whole plan on a CPU: the GPU probes run their numpy reference implementations (cupy's
kernels and torch replaced, see simroute/probes/refcupy.py and step_backend.py) under the same shares of a
short rehearsal budget, and the profile says DRY RUN. See docs/PROBES.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# What the box lacks, to bring as wheels: (distribution==version, import name, needs a GPU). Installed in this
# order with --no-deps (the dependencies are listed too; the box's numpy, cuda-core and NVSHMEM library stay).
BRING_WHEELS: tuple[tuple[str, str, bool], ...] = (
    ("typing-extensions==4.15.0", "typing_extensions", False),
    ("annotated-types==0.7.0", "annotated_types", False),
    ("typing-inspection==0.4.2", "typing_inspection", False),
    ("pydantic-core==2.46.4", "pydantic_core", False),
    ("pydantic==2.13.4", "pydantic", False),
    ("simpy==4.1.2", "simpy", False),
    ("nvshmem4py-cu13==0.4.1", "nvshmem", True),
)
# What the box already has (the dry-run venv test provides exactly these, minus the GPU ones).
ON_THE_BOX = ("numpy", "pandas", "pyarrow", "pyyaml", "typer", "rich", "pip")
ON_THE_BOX_GPU = ("torch", "cupy-cuda13x", "cuda-core", "cuda-bindings", "numba-cuda")
WHEEL_PYTHON = "3.12"

# (probe, share of the budget), in run order; the shares leave RESERVE_SHARE for install, capability, writing.
PLAN: tuple[tuple[str, float], ...] = (
    ("splice", 0.10), ("holder", 0.12), ("staging", 0.06), ("hbm", 0.03), ("gemm", 0.15),
    ("decode-attention", 0.08), ("prefill-attention", 0.05), ("moe", 0.04), ("elementwise", 0.02),
    ("decoder-layer", 0.08), ("launch-overhead", 0.03),
    ("nvshmem-loopback", 0.05), ("host-shm", 0.03), ("host-tcp", 0.03))
RESERVE_SHARE = 1.0 - sum(share for _, share in PLAN)
MIN_PROBE_S = 5.0
REHEARSAL_MIN_PROBE_S = 10.0        # numpy stand-ins on a shared CI core: set-up alone can take seconds
OUTPUTS = ("profile.yaml", "samples.parquet", "results.json", "capability.json", "calibrate.log")
MAX_FILES, MAX_FILE_BYTES, MAX_DEPTH = 8, 16 * 2 ** 20, 2
SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def wheel_command(gpu: bool = True) -> str:
    """The `pip download` command that fetches BRING_WHEELS for the box's Python (run where there is network)."""
    reqs = " ".join(requirement for requirement, _, needs_gpu in BRING_WHEELS if gpu or not needs_gpu)
    return (f"pip download --no-deps --only-binary=:all: --python-version {WHEEL_PYTHON} --implementation cp "
            f"--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "
            f"-d .whl {reqs}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="After the run, once OUT_DIR's files are back on a machine with this "
                                            "checkout:\n"
                                            "  python probes/run_single_gpu.py --write-tables OUT_DIR\n"
                                            "writes the step probes' operator tables (OUT_DIR/ops/<gpu>/...) and names "
                                            "them in OUT_DIR/profile.yaml\n(not on the box: at most "
                                            f"{MAX_FILES} files, {MAX_DEPTH} folders down, come back). See "
                                            "docs/PROBES.md.")
    parser.add_argument("out_dir", type=Path, nargs="?", help="where the outputs go (at most two folders deep)")
    parser.add_argument("--wheels", type=Path, default=REPO / ".whl", help="local wheel folder (default .whl/)")
    parser.add_argument("--budget-s", type=float, default=480.0, help="wall budget of the whole run (default 480)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--dry-run", action="store_true", help="rehearse the plan on the CPU with reference probes")
    parser.add_argument("--rehearsal-s", type=float, default=60.0, help="dry run: the budget whose shares the "
                                                                     "rehearsal's probes get")
    parser.add_argument("--only", default="", help="comma-separated probes of the plan (default: all)")
    parser.add_argument("--box", default=None, help="box name for provenance (default: hostname)")
    parser.add_argument("--gpu", default=None, help="GPU entry for the step-time constants (default: matched; "
                                                "dry run: h200-sxm)")
    parser.add_argument("--print-wheels", action="store_true", help="print the pip download command and exit")
    parser.add_argument("--write-tables", type=Path, default=None, metavar="OUT_DIR",
                    help="here, after the files come back: write the step probes' operator tables from "
                         "OUT_DIR/results.json into OUT_DIR/ops/ and name them in OUT_DIR/profile.yaml (no probes)")
    args = parser.parse_args(argv)
    if args.print_wheels:
        return args
    if args.write_tables is not None:
        if args.out_dir is not None:
            parser.error("--write-tables OUT_DIR takes the folder itself; give no other OUT_DIR")
        return args
    if args.out_dir is None:
        parser.error("OUT_DIR is required")
    if args.budget_s < 60:
        parser.error("--budget-s must be at least 60")
    names = {name for name, _ in PLAN}
    bad = [name for name in args.only.split(",") if name and name not in names]
    if bad:
        parser.error(f"--only: unknown probe(s) {bad}; the plan has {sorted(names)}")
    return args


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def missing(pairs: list[tuple[str, str]]) -> list[str]:
    """The requirements among (requirement, import name) whose module cannot be found, or whose installed
    distribution is older than the pinned version (pydantic needs a recent typing-extensions; the box's,
    from torch, may be older)."""
    import importlib.metadata as md
    out = []
    for req, mod in pairs:
        try:
            found = importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):
            found = False
        name, _, pin = req.partition("==")
        if found and pin:
            try:
                found = _version_tuple(md.version(name)) >= _version_tuple(pin)
            except md.PackageNotFoundError:       # importable but not a distribution: keep it
                pass
        if not found:
            out.append(req)
    return out


def install_plan(wheels: Path) -> tuple[list[str], str]:
    """What would be installed from `wheels`, and a line saying so."""
    need = missing([(req, mod) for req, mod, _ in BRING_WHEELS])
    if not need:
        return [], "all libraries present"
    if not wheels.is_dir():
        return [], f"missing {', '.join(need)} and no wheel folder at {wheels}: what needs them will fail"
    return need, f"install from {wheels}: {', '.join(need)}"


def _has_wheel(req: str, wheels: Path) -> bool:
    name, _, version = req.partition("==")
    return any(wheels.glob(f"{name.replace('-', '_')}-{version or '*'}-*.whl"))


def _pip_install(reqs: list[str], wheels: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--find-links",
                           str(wheels), *reqs], capture_output=True, text=True)


def install(reqs: list[str], wheels: Path, log) -> None:
    """The wheels present in one pip call (pip's start-up is seconds); if that fails, one at a time, so that
    one bad wheel costs only what needs it. An absent wheel is reported and skipped."""
    present = [requirement for requirement in reqs if _has_wheel(requirement, wheels)]
    for req in reqs:
        if req not in present:
            log(f"pip install {req}: FAILED no wheel for it in {wheels}")
    if present and _pip_install(present, wheels).returncode == 0:
        for req in present:
            log(f"pip install {req}: ok")
    else:
        for req in present:
            installed = _pip_install([req], wheels)
            log(f"pip install {req}: "
                f"{'ok' if installed.returncode == 0 else 'FAILED ' + installed.stderr.strip()[-300:]}")
    importlib.invalidate_caches()


def plan_timeouts(budget_s: float, only: list[str] | None = None, floor_s: float = MIN_PROBE_S) -> dict[str, float]:
    """Each planned probe's timeout: its share of the budget (at least `floor_s`)."""
    return {name: max(share * budget_s, floor_s) for name, share in PLAN if not only or name in only}


def plan_lines(budget_s: float, tos: dict[str, float], dry_run: bool) -> list[str]:
    lines = [f"plan        {name:<18} {timeout_s:5.0f} s" for name, timeout_s in tos.items()]
    total = sum(tos.values())
    fits = total <= budget_s * (1 - RESERVE_SHARE / 2)
    lines.append(f"plan total  {total:.0f} s of probes + {budget_s - total:.0f} s for install, capability and "
                 f"writing = {budget_s:.0f} s budget ({budget_s / 60:.1f} min): {'fits' if fits else 'DOES NOT FIT'}")
    if dry_run:
        lines.append("plan        dry run: GPU probes replaced by their numpy reference implementations")
    return lines


def check_outputs(out_dir: Path) -> list[str]:
    """What breaks the lease's limits: more than MAX_FILES files, one over MAX_FILE_BYTES, a path deeper than
    MAX_DEPTH folders below OUT_DIR's parent, a name outside letters, digits, '.', '_' and '-'."""
    files = [path for path in out_dir.rglob("*") if path.is_file()]
    bad = [f"{len(files)} files (at most {MAX_FILES})"] if len(files) > MAX_FILES else []
    for path in files:
        rel = path.relative_to(out_dir.parent)
        if path.stat().st_size > MAX_FILE_BYTES:
            bad.append(f"{rel}: {path.stat().st_size} bytes (at most {MAX_FILE_BYTES})")
        if len(rel.parts) - 1 > MAX_DEPTH:
            bad.append(f"{rel}: deeper than {MAX_DEPTH} folders")
        if not all(SAFE_NAME.match(part) for part in rel.parts):
            bad.append(f"{rel}: a name outside [A-Za-z0-9._-]")
    return bad


def run_plan(args: argparse.Namespace, cap, tos: dict[str, float], end: float, reserve_s: float, log) -> list:
    """Run the planned probes in order; each gets its share, or what is left before the reserve."""
    from simroute.probes.calibrate import run_probes, select
    from simroute.probes.framework import ProbeOutcome
    extra = {"backend": "reference"} if args.dry_run else {}
    outcomes = []
    for probe in select(list(tos)):
        left = end - time.monotonic() - reserve_s
        if left < MIN_PROBE_S:
            outcomes.append(ProbeOutcome(probe, "skipped", f"no budget left ({left:.0f} s)", 0.0))
        else:
            quick = args.quick or args.dry_run or probe.name.startswith("host")
            outcomes += run_probes([probe], cap, quick=quick, timeout_s=min(tos[probe.name], left), extra_args=extra)
        log(outcomes[-1].line())
    return outcomes


def write_outputs(args: argparse.Namespace, cap, outcomes: list, log) -> int:
    from simroute.calib.writer import write_profile_checked, write_samples
    from simroute.probes.assemble import build_profile
    from simroute.ioutil import atomic_path
    out = args.out_dir / "profile.yaml"
    with atomic_path(args.out_dir / "results.json") as tmp:
        tmp.write_text(results_json(outcomes))
    if not any(outcome.ok for outcome in outcomes):
        log("nothing was measured: no profile written")
        return 1
    samples = [dict(sample, probe=sample.get("probe", outcome.probe.name))
               for outcome in outcomes for sample in outcome.samples]
    gpu = args.gpu or ("h200-sxm" if args.dry_run else None)
    data = build_profile(outcomes, cap, out, gpu=gpu)
    if args.dry_run:
        data["description"] = ("DRY RUN (numpy reference implementations on a CPU, not a GPU measurement). "
                               + data["description"])
    prof = write_profile_checked(data, out, before_commit=lambda: write_samples(
        samples, args.out_dir / "samples.parquet", metadata={"simroute.box": cap.box}))
    log(f"wrote {out} ({len(prof.fabrics)} fabrics, {len(prof.constants)} constants, GPU entries measured: "
        f"{', '.join(data.get('gpus', {})) or 'none'}), samples.parquet, results.json")
    _log_layer_vs_model(outcomes, prof, data.get("gpu"), log)
    return 0


def results_json(outcomes: list) -> str:
    """results.json: every probe's status, message, seconds and raw results (what --write-tables reads)."""
    return json.dumps({outcome.probe.name: {"status": outcome.status, "message": outcome.message,
                                            "seconds": outcome.seconds, "results": outcome.results}
                       for outcome in outcomes}, indent=1, default=float)


def outcomes_from_results(results: dict) -> list:
    """The ProbeOutcomes results.json holds (no samples: those are in samples.parquet); probes this checkout
    does not know are left out."""
    from simroute.probes.framework import ProbeOutcome
    from simroute.probes.registry import PROBES
    if not isinstance(results, dict):
        raise ValueError("not a mapping of probe name to its outcome")
    out = []
    for name, record in results.items():
        if name not in PROBES:
            continue
        if not isinstance(record, dict) or not isinstance(record.get("results", {}), dict):
            raise ValueError(f"probe {name}: not an outcome (status, message, seconds, results)")
        out.append(ProbeOutcome(PROBES[name], str(record.get("status", "failed")),
                                str(record.get("message", "")),
                                float(record.get("seconds", 0.0)), dict(record.get("results") or {})))
    return out


def write_tables_after(out_dir: Path, say=print) -> int:
    """--write-tables OUT_DIR: the operator tables `simroute calibrate` writes, from the one-shot's outputs.

    Rebuilds the outcomes from OUT_DIR/results.json (box names from capability.json), writes
    OUT_DIR/ops/<gpu>/<framework>-<version>/ with simroute.probes.calibrate.write_tables and rewrites
    OUT_DIR/profile.yaml (checked, atomically) with its GPU entry's operator_tables naming them. Bad input: one
    line, exit 2, nothing changed. Run again, it replaces the directory it wrote, never one it did not."""
    import yaml
    from dataclasses import fields
    from simroute.calib.writer import write_profile_checked
    from simroute.probes.calibrate import SAMPLES_NAME, write_tables
    from simroute.probes.capability import Capability
    from simroute.probes.step_tables import TABLE_PROBES, remove_written, step_tables

    def bad(why: str) -> int:
        print(f"--write-tables {out_dir}: {why}; nothing changed", file=sys.stderr)
        return 2

    profile = out_dir / "profile.yaml"
    for name in ("results.json", "capability.json", "profile.yaml"):
        if not (out_dir / name).is_file():
            return bad(f"no {name} there (the one-shot run's outputs: {', '.join(OUTPUTS)})")
    try:
        outcomes = outcomes_from_results(json.loads((out_dir / "results.json").read_text()))
        capd = json.loads((out_dir / "capability.json").read_text())
        data = yaml.safe_load(profile.read_text())
        known = {field_spec.name for field_spec in fields(Capability)}
        cap = Capability(**{key: value for key, value in capd.items() if key in known})
        tables = step_tables(outcomes)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, yaml.YAMLError) as exc:
        return bad(f"unreadable input: {type(exc).__name__}: {exc}")
    if tables is None:
        return bad(f"results.json holds no step probe results ({', '.join(TABLE_PROBES)} measured nothing)")
    if not isinstance(data, dict) or not data.get("gpu") or data["gpu"] not in (data.get("gpus") or {}):
        return bad("profile.yaml has no GPU entry (`gpu:` naming one of its `gpus:`) to name the tables")
    written, notes = write_tables(data, outcomes, box=cap.hostname, box_description=cap.box, profile_path=profile,
                                  samples_name=SAMPLES_NAME)
    if written is None:
        return bad(notes[-1] if notes else "operator tables not written")
    try:
        write_profile_checked(data, profile)
    except Exception as exc:                 # the profile stays as it was; a directory made just now goes
        remove_written(written)
        print(f"--write-tables {out_dir}: profile.yaml naming the tables did not check, left as it was: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    for note in notes:
        say(note)
    rows = ", ".join(f"{kind} {count} rows" for kind, count in written.tables.rows.items())
    say(f"wrote {written.path} ({rows}{'' if written.created else '; replaced the one written before'}) and named "
        f"it in {profile} (gpus.{data['gpu']}.operator_tables: {written.ref['path']})")
    return 0


def _has_table_results(outcomes: list) -> bool:
    from simroute.probes.step_tables import TABLE_PROBES
    return any(outcome.ok and outcome.probe.name in TABLE_PROBES for outcome in outcomes)


def _log_layer_vs_model(outcomes: list, prof, gpu: str | None, log) -> None:
    from simroute.probes.step_constants import layer_vs_model
    layer = next((outcome for outcome in outcomes if outcome.probe.name == "decoder-layer" and outcome.ok), None)
    if layer is None or gpu is None:
        return
    if layer.results.get("narrowed"):
        log("layer       vs step-time model: not compared (dry run: narrowed layers on numpy)")
        return
    for row in layer_vs_model(layer.results["layers"], prof, gpu):
        log(f"layer       {row['model']:<17} T={row['tokens']:<5} measured {row['measured_layer_ms']:.3f} ms "
            f"(linear {row['measured_linear_ms']:.3f}, attention {row['measured_attention_ms']:.3f}) vs step-time "
            f"model {row['model_layer_ms']:.3f} ms (linear {row['model_linear_ms']:.3f}, attention "
            f"{row['model_attention_ms']:.3f})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.print_wheels:
        print(wheel_command())
        return 0
    if args.write_tables is not None:
        return write_tables_after(args.write_tables)
    start = time.monotonic()
    end = start + args.budget_s
    args.out_dir.mkdir(parents=True, exist_ok=True)
    logf = (args.out_dir / "calibrate.log").open("a")

    def log(msg: str) -> None:
        line = f"[{time.monotonic() - start:6.1f}s] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    os.environ.setdefault("NVSHMEM_REMOTE_TRANSPORT", "none")          # one box, no InfiniBand needed
    os.environ.setdefault("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo")
    reqs, line = install_plan(args.wheels)
    log(line)
    if reqs:
        install(reqs, args.wheels, log)
    from simroute.probes.capability import detect, report_rows
    cap = detect()
    if args.box:
        cap.hostname = args.box
    for what, val in report_rows(cap):
        log(f"capability  {what:<22} {val}")
    (args.out_dir / "capability.json").write_text(json.dumps(cap.as_dict(), indent=2))
    only = [name for name in args.only.split(",") if name]
    for text in plan_lines(args.budget_s, plan_timeouts(args.budget_s, only), args.dry_run):
        log(text)
    run_budget = args.rehearsal_s if args.dry_run else args.budget_s
    tos = plan_timeouts(args.budget_s, only)
    if args.dry_run:                           # each probe under its share of the rehearsal; no total cap
        end = float("inf")
        tos = plan_timeouts(run_budget, only, REHEARSAL_MIN_PROBE_S)
        log(f"rehearsal   the same shares of {run_budget:.0f} s (at least {REHEARSAL_MIN_PROBE_S:.0f} s each)")
    outcomes = run_plan(args, cap, tos, end, RESERVE_SHARE / 2 * run_budget, log)
    exit_code = write_outputs(args, cap, outcomes, log)
    log("measured: " + (", ".join(outcome.probe.name for outcome in outcomes if outcome.ok) or "nothing"))
    for outcome in outcomes:
        if not outcome.ok:
            log(f"NOT measured: {outcome.probe.name}: {outcome.status}: {outcome.message}")
    problems = check_outputs(args.out_dir)
    for path in problems:
        log(f"OUTPUT LIMIT: {path}")
    log(f"done in {time.monotonic() - start:.0f} s (" + (f"rehearsal of the {args.budget_s:.0f} s plan)" if args.dry_run
                                                       else f"budget {args.budget_s:.0f} s)"))
    if exit_code == 0 and _has_table_results(outcomes):
        log(f"next        once these files are back (not on the box: at most {MAX_FILES} files come back), run here "
            f"`python probes/run_single_gpu.py --write-tables OUT_DIR` on the folder they landed in (this run's "
            f"{args.out_dir}): it writes the step probes' operator tables to OUT_DIR/ops/ and names them in "
            "profile.yaml")
    logf.close()
    return exit_code or (3 if problems else 0)


if __name__ == "__main__":
    sys.exit(main())
