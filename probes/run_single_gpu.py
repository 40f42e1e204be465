#!/usr/bin/env python3
"""One-shot calibration of a single-GPU box (H200-class; <= 8 minutes wall; no network).

    python probes/run_single_gpu.py OUT_DIR [--wheels .whl] [--budget-s 480] [--quick] [--dry-run] [--box NAME]

1. Installs what is missing (cupy, nvshmem4py, cuda-core, simroute's own deps) from a local wheel folder
   (`pip install --no-index --find-links .whl`); nothing is fetched from the network.
2. Reports the machine's capabilities, then runs the host probes and the 1-GPU probes (splice, holder,
   staging, nvshmem-loopback), each in its own subprocess with a timeout sized to the wall budget.
3. Writes OUT_DIR/profile.yaml (provenance per constant), OUT_DIR/samples.parquet, OUT_DIR/capability.json
   and OUT_DIR/calibrate.log. Commit OUT_DIR as calib/measured/<box>/.

--dry-run installs nothing and runs no GPU probe: it prints the plan and runs the host probes (quick),
which is what CI exercises. See docs/PROBES.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# import name -> wheel/requirement name installed from the local folder when missing
# One CUDA major version throughout (cupy and nvshmem4py must share it): the `gpu` extra's CUDA 13 set,
# or the `gpu-cu12` set when only CUDA 12 wheels are in the wheel folder.
GPU_LIBS_CU13 = {"cupy": "cupy-cuda13x", "nvshmem": "nvshmem4py-cu13", "cuda.core": "cuda-core"}
GPU_LIBS_CU12 = {"cupy": "cupy-cuda12x", "nvshmem": "nvshmem4py-cu12", "cuda.core": "cuda-core"}


def gpu_libs(wheels: Path) -> dict[str, str]:
    """The CUDA 12 set if the wheel folder holds CUDA 12 cupy and no CUDA 13 cupy, else the CUDA 13 set."""
    if wheels.is_dir() and any(wheels.glob("cupy_cuda12x-*.whl")) and not any(wheels.glob("cupy_cuda13x-*.whl")):
        return GPU_LIBS_CU12
    return GPU_LIBS_CU13
BASE_LIBS = {"numpy": "numpy", "yaml": "pyyaml", "pydantic": "pydantic", "pyarrow": "pyarrow", "tqdm": "tqdm",
             "typer": "typer", "rich": "rich"}
# (probe, share of the budget): the 1-GPU set; shares sum to < 1 to leave room for start-up and writing
PLAN = (("host-shm", 0.05), ("host-tcp", 0.05), ("splice", 0.25), ("holder", 0.30), ("staging", 0.12),
        ("nvshmem-loopback", 0.10))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path, help="where profile.yaml, samples.parquet and the log go")
    ap.add_argument("--wheels", type=Path, default=REPO / ".whl", help="local wheel folder (default .whl/)")
    ap.add_argument("--budget-s", type=float, default=480.0, help="wall budget for all probes (default 480)")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, run only the host probes")
    ap.add_argument("--box", default=None, help="box name for provenance (default: hostname)")
    a = ap.parse_args(argv)
    if a.budget_s < 60:
        ap.error("--budget-s must be at least 60")
    return a


def missing(libs: dict[str, str]) -> list[str]:
    out = []
    for mod, req in libs.items():
        try:
            found = importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(req)
    return out


def install_plan(wheels: Path) -> tuple[list[str], str]:
    """What would be installed from `wheels`, and a line saying so."""
    need = missing(BASE_LIBS) + missing(gpu_libs(wheels))
    if not need:
        return [], "all libraries present"
    if not wheels.is_dir():
        return [], f"missing {', '.join(need)} and no wheel folder at {wheels}: those probes will report missing-dep"
    return need, f"install from {wheels}: {', '.join(need)}"


def install(reqs: list[str], wheels: Path, log) -> None:
    for req in reqs:                       # one at a time: a wheel that is absent must not block the others
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels),
                            req], capture_output=True, text=True)
        log(f"pip install {req}: {'ok' if r.returncode == 0 else 'FAILED ' + r.stderr.strip()[-300:]}")


def timeouts(budget_s: float) -> dict[str, float]:
    return {name: max(share * budget_s, 20.0) for name, share in PLAN}


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    log_path = a.out_dir / "calibrate.log"
    logf = log_path.open("a")

    def log(msg: str) -> None:
        line = f"[{time.monotonic() - t0:6.1f}s] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    os.environ.setdefault("NVSHMEM_REMOTE_TRANSPORT", "none")          # one box, no InfiniBand needed
    os.environ.setdefault("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo")
    reqs, line = install_plan(a.wheels)
    log(("dry run (nothing installed): " if a.dry_run else "") + line)
    if reqs and not a.dry_run:
        install(reqs, a.wheels, log)
    from simroute.probes.calibrate import calibrate
    from simroute.probes.capability import detect, report_rows
    cap = detect()
    if a.box:
        cap.hostname = a.box
    for what, val in report_rows(cap):
        log(f"capability  {what:<22} {val}")
    (a.out_dir / "capability.json").write_text(json.dumps(cap.as_dict(), indent=2))
    tos = timeouts(a.budget_s)
    for name, to in tos.items():
        log(f"plan        {name:<18} timeout {to:5.0f} s" + (" (dry run: not run)" if a.dry_run
                                                              and not name.startswith("host") else ""))
    only = [n for n in tos if not a.dry_run or n.startswith("host")]
    outcomes = []
    for name in only:                       # one call per probe so each gets its own share of the budget
        cal = calibrate(None, only=[name], quick=a.quick or a.dry_run, timeout_s=tos[name], cap=cap, write=False)
        outcomes += cal.outcomes
        log(cal.outcomes[0].line())
    from simroute.calib.writer import write_profile_checked, write_samples
    from simroute.probes.assemble import build_profile
    out = a.out_dir / "profile.yaml"
    if not any(o.ok for o in outcomes):
        log("nothing was measured: no profile written")
        return 1
    samples = [dict(s, probe=s.get("probe", o.probe.name)) for o in outcomes for s in o.samples]
    data = build_profile(outcomes, cap, out)
    if a.dry_run:
        data["description"] = "DRY RUN (host probes only). " + data["description"]
    prof = write_profile_checked(data, out, before_commit=lambda: write_samples(
        samples, a.out_dir / "samples.parquet", metadata={"simroute.box": cap.box}))
    log(f"wrote {out} ({len(prof.fabrics)} fabrics, {len(prof.constants)} constants) and samples.parquet")
    log("measured: " + ", ".join(o.probe.name for o in outcomes if o.ok))
    for o in outcomes:
        if not o.ok:
            log(f"NOT measured: {o.probe.name}: {o.status}: {o.message}")
    log(f"done in {time.monotonic() - t0:.0f} s (budget {a.budget_s:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
