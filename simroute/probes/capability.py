"""What this machine can measure: CPUs, GPUs (SM, memory, peer access, NVLink), NICs, and which probe
libraries are importable with their versions. Nothing here imports a GPU library into the caller: GPU
details come from `nvidia-smi` and, when cupy is installed, from a short subprocess."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from simroute.probes.framework import missing_modules

LIBS: dict[str, tuple[str, ...]] = {       # import name -> distributions that may provide it
    "cupy": ("cupy-cuda12x", "cupy-cuda13x", "cupy-cuda11x", "cupy"),
    "nvshmem": ("nvshmem4py-cu13", "nvshmem4py-cu12", "nvshmem4py"),
    "flash_mla": ("flash_mla", "flash-mla"),
    "torch": ("torch",),
    "triton": ("triton",),
    "numba": ("numba-cuda", "numba"),
    "cuda": ("cuda-python", "cuda-core"),
}

_GPU_QUERY = r"""
import json, cupy as cp
n = cp.cuda.runtime.getDeviceCount()
out = {"count": n, "devices": [], "peer": []}
for i in range(n):
    p = cp.cuda.runtime.getDeviceProperties(i)
    out["devices"].append({"name": p["name"].decode() if isinstance(p["name"], bytes) else p["name"],
                           "sm": f"{p['major']}.{p['minor']}", "sms": p["multiProcessorCount"],
                           "mem_GB": round(p["totalGlobalMem"] / 1e9, 1)})
for i in range(n):
    out["peer"].append([bool(cp.cuda.runtime.deviceCanAccessPeer(i, j)) if i != j else True for j in range(n)])
out["cuda_runtime"] = cp.cuda.runtime.runtimeGetVersion()
print(json.dumps(out))
"""


@dataclass
class Capability:
    hostname: str
    cpu_model: str
    cpus: int
    python: str
    gpus: int = 0
    gpu_names: list[str] = field(default_factory=list)
    sm: list[str] = field(default_factory=list)
    peer_access: list[list[bool]] = field(default_factory=list)
    nvlink: bool = False
    infiniband: list[str] = field(default_factory=list)
    libs: dict[str, str | None] = field(default_factory=dict)    # import name -> version or None
    notes: list[str] = field(default_factory=list)

    @property
    def box(self) -> str:
        """How provenance names this machine: hostname + CPU model (+ GPU)."""
        gpu = f", {self.gpus}x {self.gpu_names[0]}" if self.gpus else ""
        return f"{self.hostname} ({self.cpu_model}, {self.cpus} CPUs{gpu})"

    def as_dict(self) -> dict:
        return asdict(self)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(import_name: str) -> str | None:
    for dist in LIBS.get(import_name, (import_name,)):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return "installed" if not missing_modules((import_name,)) else None


def _run(cmd: list[str], timeout: float = 20) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return proc.stdout if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def detect(*, query_gpus: bool = True) -> Capability:
    """Look at the machine (a few hundred ms without GPUs; a cupy subprocess with them)."""
    cap = Capability(hostname=socket.gethostname(), cpu_model=cpu_model(), cpus=os.cpu_count() or 1,
                     python=sys.version.split()[0])
    cap.libs = {name: _version(name) for name in LIBS}
    ib_dir = Path("/sys/class/infiniband")
    cap.infiniband = sorted(port.name for port in ib_dir.iterdir()) if ib_dir.is_dir() else []
    smi = shutil.which("nvidia-smi")
    if smi:
        out = _run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"])
        if out:
            rows = [line.split(",") for line in out.strip().splitlines() if line.strip()]
            cap.gpus = len(rows)
            cap.gpu_names = [line[0].strip() for line in rows]
            cap.sm = [line[1].strip() if len(line) > 1 else "?" for line in rows]
        topo = _run([smi, "topo", "-m"])
        cap.nvlink = bool(topo and any(tok.startswith("NV") and tok[2:].isdigit() for tok in topo.split()))
    else:
        cap.notes.append("no nvidia-smi: no NVIDIA driver, GPU probes will be skipped")
    if query_gpus and cap.gpus and cap.libs.get("cupy"):
        out = _run([sys.executable, "-c", _GPU_QUERY], timeout=60)
        if out:
            info = json.loads(out.strip().splitlines()[-1])
            cap.gpus = info["count"]
            cap.gpu_names = [device["name"] for device in info["devices"]]
            cap.sm = [f"sm_{device['sm'].replace('.', '')} ({device['sms']} SMs, {device['mem_GB']} GB)"
                      for device in info["devices"]]
            cap.peer_access = info["peer"]
        else:
            cap.notes.append("cupy is installed but could not query the GPUs (driver / CUDA mismatch?)")
    return cap


def report_rows(cap: Capability) -> list[list[str]]:
    """The capability report the CLI prints first (what, value)."""
    rows = [["host", cap.hostname], ["CPU", f"{cap.cpu_model} x {cap.cpus}"], ["python", cap.python],
            ["GPUs", str(cap.gpus) + (": " + ", ".join(cap.gpu_names) if cap.gpus else "")]]
    if cap.gpus:
        rows.append(["SM", ", ".join(cap.sm)])
        peers = "n/a (1 GPU)" if cap.gpus < 2 else (
            "yes" if all(all(row) for row in cap.peer_access) and cap.peer_access else
            ("unknown" if not cap.peer_access else "partial/no"))
        rows += [["peer access", peers], ["NVLink", "yes" if cap.nvlink else "no"]]
    rows.append(["InfiniBand", ", ".join(cap.infiniband) or "none"])
    for lib, ver in cap.libs.items():
        rows.append([f"{lib} importable", ver or "no"])
    return rows
