"""Probe specs and the runner: each probe runs in its own subprocess under a timeout, so a hung GPU wait, a
missing library or a crash costs that probe only and the rest still run.

A probe is a function `fn(args: dict) -> dict` named by "module:function"; it returns
`{"results": {...}, "samples": [{series, x, value, unit, ...}], "notes": [...]}`. The worker
(`python -m simroute.probes.worker`) writes that as JSON; the runner turns it, a timeout or a failure into a
`ProbeOutcome` with a one-line status.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Needs = Literal["cpu", "gpu1", "gpus-host", "hosts-nic"]
Status = Literal["ok", "skipped", "missing-dep", "timeout", "failed"]

NEEDS_TEXT: dict[str, str] = {"cpu": "CPU only", "gpu1": "1 GPU", "gpus-host": "2+ GPUs on one host",
                              "hosts-nic": "2+ hosts with a NIC"}
# Where a missing module comes from (what to install).
INSTALL_HINT: dict[str, str] = {"cupy": "pip install 'simroute[gpu]' (CUDA 13) or 'simroute[gpu-cu12]'", "nvshmem": "pip install 'simroute[gpu]'",
                                "flash_mla": "build FlashMLA (github.com/deepseek-ai/FlashMLA)",
                                "numba": "pip install numba numba-cuda", "torch": "pip install torch"}


class MissingDependency(RuntimeError):
    """Raised inside a probe when an optional library it needs is not importable."""

    def __init__(self, module: str, why: str = "") -> None:
        self.module = module
        hint = INSTALL_HINT.get(module.split(".")[0], f"pip install {module}")
        super().__init__(f"needs '{module}' ({hint})" + (f": {why}" if why else ""))


class ProbeSkipped(RuntimeError):
    """Raised inside a probe when the machine cannot run it (e.g. no GPU, too few PEs)."""


@dataclass(frozen=True)
class Probe:
    name: str
    target: str                          # "module:function", run in the subprocess
    needs: Needs
    what: str
    deps: tuple[str, ...] = ()           # top-level modules that must be importable
    timeout_s: float = 120.0
    hidden: bool = False                 # not run by default (framework self-tests)


@dataclass
class ProbeOutcome:
    probe: Probe
    status: Status
    message: str
    seconds: float
    results: dict[str, Any] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def line(self) -> str:
        """The status line the CLI prints: name, status, why."""
        return f"{self.probe.name:<22} {self.status:<11} {self.seconds:6.1f}s  {self.message}"


def missing_modules(deps: tuple[str, ...]) -> list[str]:
    """Which of `deps` cannot be found (without importing them: importing cupy initialises CUDA)."""
    out = []
    for dep in deps:
        try:
            if importlib.util.find_spec(dep) is None:
                out.append(dep)
        except (ImportError, ValueError):
            out.append(dep)
    return out


def requirement_gap(needs: Needs, gpus: int, pes: int, hosts_with_nic: bool = False) -> str | None:
    """Why this machine cannot run a probe that needs `needs` (None when it can)."""
    if needs == "gpu1" and gpus < 1:
        return "needs 1 GPU, found none"
    if needs == "gpus-host" and (gpus < 2 or pes < 2):
        return (f"needs 2+ GPUs on one host, found {gpus}" if gpus < 2
                else "needs --pes N >= 2 (one process per GPU)")
    if needs == "hosts-nic" and not hosts_with_nic:
        return "needs 2+ hosts with a NIC (run one PE per host with a shared UID file)"
    return None


def _tail(path: Path, chars: int = 600) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-chars:].strip().replace("\n", " | ")


def run_probe(probe: Probe, args: dict[str, Any], *, timeout_s: float | None = None,
              workdir: Path | None = None) -> ProbeOutcome:
    """Run one probe in a fresh interpreter; never raises for the probe's own problems."""
    started = time.monotonic()
    # A dry run's reference implementations need numpy only: the GPU libraries are not asked for.
    miss = missing_modules(probe.deps) if args.get("backend") != "reference" else []
    if miss:
        return ProbeOutcome(probe, "missing-dep", str(MissingDependency(miss[0])), 0.0)
    timeout = float(timeout_s if timeout_s is not None else probe.timeout_s)
    tmp = Path(tempfile.mkdtemp(prefix=f"probe-{probe.name}-", dir=workdir))
    args_path, result_path, log_path = tmp / "args.json", tmp / "result.json", tmp / "log.txt"
    # The probe's own sweeps stop at deadline_unix: its kill time less a margin to write what it measured.
    deadline = time.time() + timeout - min(5.0, max(0.1 * timeout, 2.0), 0.5 * timeout)
    args_path.write_text(json.dumps({**args, "timeout_s": timeout, "deadline_unix": deadline, "probe": probe.name}))
    cmd = [sys.executable, "-m", "simroute.probes.worker", probe.target, str(args_path), str(result_path)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return ProbeOutcome(probe, "timeout", f"no result within {timeout:g} s; killed (raise --timeout?)"
                                + (f"; log: {_tail(log_path, 200)}" if _tail(log_path) else ""),
                                time.monotonic() - started)
    elapsed = time.monotonic() - started
    if not result_path.exists():
        return ProbeOutcome(probe, "failed", f"exit code {code}, no result; log: {_tail(log_path)}", elapsed)
    res = json.loads(result_path.read_text())
    status = res.get("status", "failed")
    msg = res.get("message") or ("done" if status == "ok" else f"exit code {code}; log: {_tail(log_path)}")
    return ProbeOutcome(probe, status, msg, elapsed, res.get("results", {}), res.get("samples", []),
                        res.get("notes", []))


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the probe's own process group (it and the helpers it spawned), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()
