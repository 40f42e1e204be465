"""The probes `simroute calibrate` knows, what each needs, and how long it may take."""

from __future__ import annotations

from simroute.probes.framework import Probe

_H = "simroute.probes.host:probe_host"
_G = "simroute.probes.gpu_single"
_A = "simroute.probes.gpu_attn"
_N = "simroute.probes.nvshmem_probes"

PROBES: dict[str, Probe] = {p.name: p for p in [
    Probe("host-shm", _H, "cpu", "round trip + BW, two processes over shared memory (q 1152 B / p 1032 B rows)",
          timeout_s=120),
    Probe("host-tcp", _H, "cpu", "round trip + BW, two processes over loopback TCP 127.0.0.1", timeout_s=120),
    Probe("splice", f"{_G}:probe_splice", "gpu1", "delta-rotation of the 64 RoPE dims (YaRN) + scatter into "
          "the paged pool, 27 layers, ct 55..4096", deps=("cupy",), timeout_s=240),
    Probe("holder", f"{_A}:probe_holder", "gpu1", "holder partial attention (FlashMLA or fallback), N 1..256, "
          "h_q 16/128, ct 2048; sparse top-k; merge", deps=("cupy",), timeout_s=300),
    Probe("staging", f"{_G}:probe_staging", "gpu1", "K-stream D2D staging (K 1/4/8/16); single- vs multi-block "
          "copy rate", deps=("cupy",), timeout_s=180),
    Probe("nvshmem-loopback", f"{_N}:probe_loopback", "gpu1", "1-PE NVSHMEM put+signal loopback (software floor; "
          "never a fabric constant)", deps=("cupy", "nvshmem"), timeout_s=180),
    Probe("nvshmem-pes", f"{_N}:probe_pes", "gpus-host", "2+ PEs: sig_rt, full_rt over Mq, payload sweep "
          "900-8736 B/row, block-count sweep", deps=("cupy", "nvshmem"), timeout_s=420),
    # framework self-tests (hidden; run with --only)
    Probe("selftest-hang", "simroute.probes.selftest:hang", "cpu", "a probe that never answers", hidden=True,
          timeout_s=2),
    Probe("selftest-missing", "simroute.probes.selftest:needs_missing", "cpu", "a probe lacking a library",
          hidden=True, timeout_s=30),
    Probe("selftest-crash", "simroute.probes.selftest:crash", "cpu", "a probe that raises", hidden=True,
          timeout_s=30),
]}

HOST_TRANSPORT = {"host-shm": "shm", "host-tcp": "tcp"}
