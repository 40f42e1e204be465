"""NVSHMEM probes (nvshmem4py; the NVSHMEM perftest methodology).

- `nvshmem-loopback` (1 GPU): one PE puts+signals to itself. A software floor of the put+signal path,
  labelled `loopback`, never a fabric constant.
- `nvshmem-pes` (`--pes N`, N >= 2 GPUs): one process per GPU, UID bootstrap through a temp file. PE 0 and
  PE 1 ping-pong: sig_rt (no payload), full_rt over Mq (q rows out, p rows back) and the payload sweep
  900-8736 B/row at Mq = 1024. Fitted with fit_affine. The block-count sweep (`shmem_put_bw -c N`) needs
  device-initiated puts from N CTAs and is not implemented yet: link_peak is the single-stream rate.

Both time with CUDA events around the whole loop after a warm-up. Every wait is `spin_wait` (gpu_common):
a kernel polling the local signal word with a %globaltimer deadline, so a lost signal sets an error flag
instead of hanging. Puts are host-initiated on the stream (`nvshmem.core.put_signal`), so each round trip
includes two stream-op launches: an upper bound on the device-initiated perftest figure.
NOT RUN in this repository's CI: no GPU. Written to the documented API; see docs/PROBES.md.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from simroute.ioutil import atomic_path, write_text_atomic
from simroute.probes.framework import MissingDependency, ProbeSkipped
from simroute.probes.gpu_common import SPIN_WAIT_CUDA, Deadline, import_cupy

MQ_SWEEP = (1, 4, 16, 64, 256, 1024, 4096)
ROW_SWEEP = ((900, 450, 450), (2184, 1152, 1032), (4368, 2304, 2064), (8736, 4608, 4128))  # (q+p, q, p)
BLOCKS = (1, 2, 4, 8, 16, 32)
SPIN_TIMEOUT_NS = 2_000_000_000          # 2 s per wait: far above any round trip, far below the probe timeout


def _nvshmem() -> Any:
    try:
        import nvshmem.core as nvshmem
        from cuda.core.experimental import Device  # noqa: F401
    except ImportError as exc:
        raise MissingDependency("nvshmem", str(exc)) from None
    return nvshmem


def _init(rank: int, nranks: int, uid_file: Path, deadline: Deadline) -> tuple[Any, Any, Any]:
    """nvshmem.core.init over a UID shared through a file (rank 0 writes it atomically, others poll)."""
    nvshmem = _nvshmem()
    from cuda.core.experimental import Device, system
    dev = Device(rank % system.num_devices)
    dev.set_current()
    if rank == 0:
        uid = nvshmem.get_unique_id()
        with atomic_path(uid_file) as tmp:
            tmp.write_bytes(pickle.dumps(uid))
    else:
        while not uid_file.exists():
            deadline.check("waiting for PE 0's unique id")
            time.sleep(0.05)
        uid = pickle.loads(uid_file.read_bytes())
    nvshmem.init(device=dev, uid=uid, rank=rank, nranks=nranks, initializer_method="uid")
    return nvshmem, dev, dev.create_stream()


class _PingPong:
    """Symmetric buffers, a signal word and the deadline-bounded wait kernel for one pair of PEs."""

    def __init__(self, nvshmem: Any, cp: Any, stream: Any, max_bytes: int) -> None:
        self.nv, self.cp = nvshmem, cp
        self.stream = stream
        self.cps = cp.cuda.ExternalStream(int(stream.handle))
        self.src = nvshmem.array((max_bytes,), dtype="uint8")
        self.dst = nvshmem.array((max_bytes,), dtype="uint8")
        self.sig = nvshmem.array((1,), dtype="uint64")
        self.sig[...] = 0
        self.err = cp.zeros(1, dtype=cp.int32)
        self.wait = cp.RawKernel(SPIN_WAIT_CUDA, "spin_wait")
        self.count = 0

    def put(self, nbytes: int, peer: int, value: int) -> None:
        """Put `nbytes` to `peer` and set its signal word to `value` once the data has landed."""
        size = max(nbytes, 8)                         # a payload-free round trip still moves the signal word
        self.nv.put_signal(self.dst[:size], self.src[:size], self.sig, value,
                           self.nv.SignalOp.SIGNAL_SET, remote_pe=peer, stream=self.stream)

    def wait_for(self, value: int) -> None:
        with self.cps:
            self.wait((1,), (1,), (self.sig, np.uint64(value), np.uint64(SPIN_TIMEOUT_NS), self.err))

    def exchange(self, rank: int, peer: int, out_b: int, back_b: int, iters: int) -> float:
        """`iters` round trips (PE 0: put, wait; PE 1: wait, put back); seconds per round trip on PE 0."""
        cp = self.cp
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(self.cps)
        for _ in range(iters):
            self.count += 1                        # both PEs step the same sequence
            if rank == 0:
                self.put(out_b, peer, self.count)
                self.wait_for(self.count)
            else:
                self.wait_for(self.count)
                self.put(back_b, peer, self.count)
        end.record(self.cps)
        end.synchronize()
        if int(self.err.get()[0]):
            raise TimeoutError("a signal did not arrive within the spin-wait deadline (lost signal?)")
        return cp.cuda.get_elapsed_time(start, end) * 1e-3 / iters

    def close(self) -> None:
        for arr in (self.src, self.dst, self.sig):
            self.nv.free_array(arr)


def _pe_main(rank: int, nranks: int, uid_file: Path, out: Path, quick: bool, timeout_s: float) -> None:
    """One PE: PEs 0 and 1 run the sweeps against each other; the rest only join init and the barrier."""
    deadline = Deadline(timeout_s - 5)
    cp = import_cupy()
    nvshmem, dev, stream = _init(rank, nranks, uid_file, deadline)
    ping = _PingPong(nvshmem, cp, stream, max(MQ_SWEEP) * max(shape[1] for shape in ROW_SWEEP))
    samples: list[dict] = []
    try:
        nvshmem.barrier_all(stream=stream) if hasattr(nvshmem, "barrier_all") else None
        if rank < 2 and nranks >= 2:
            peer = 1 - rank
            iters = 50 if quick else 500
            ping.exchange(rank, peer, 0, 0, 10)                                  # warm-up
            sig = [ping.exchange(rank, peer, 0, 0, iters) for _ in range(3)]
            samples += [{"series": "sig_rt", "x": 0.0, "value": seconds, "unit": "s"} for seconds in sig]
            for row, q_bytes, p_bytes in ROW_SWEEP:
                for mq in (MQ_SWEEP if row == 2184 else (1024,)):
                    deadline.check(f"full_rt row={row} Mq={mq}")
                    seconds = ping.exchange(rank, peer, mq * q_bytes, mq * p_bytes, max(iters // (1 + mq // 256), 5))
                    samples.append({"series": "full_rt", "x": float(mq), "value": seconds, "unit": "s",
                                    "row_bytes": float(row)})
        write_text_atomic(out, json.dumps({"rank": rank, "samples": samples}))
    finally:
        ping.close()
        nvshmem.finalize()


def launch_pes(module: str, pes: int, args: dict[str, Any], timeout: float, prefix: str) -> dict:
    """Run `python -m module RANK PES UID_FILE OUT QUICK TIMEOUT` once per PE (bootstrapped over loopback unless
    NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME says otherwise), wait for all, and return PE 0's JSON result."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    uid_file = tmp / "uid.pkl"
    env = {**os.environ, "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": os.environ.get("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME",
                                                                          "lo")}
    procs = [subprocess.Popen([sys.executable, "-m", module, str(rank), str(pes), str(uid_file),
                               str(tmp / f"pe{rank}.json"), "1" if args.get("quick") else "0", str(timeout)], env=env)
             for rank in range(pes)]
    for proc in procs:
        proc.wait(timeout=timeout)
    if any(proc.returncode for proc in procs):
        raise RuntimeError(f"PE exit codes {[proc.returncode for proc in procs]}")
    return json.loads((tmp / "pe0.json").read_text())


def probe_pes(args: dict[str, Any]) -> dict:
    """Launch one process per PE, collect PE 0's samples, fit (T_probe, BW) with the model's fit."""
    pes = int(args.get("pes", 1))
    if pes < 2:
        raise ProbeSkipped("needs --pes N >= 2")
    timeout = float(args.get("timeout_s", 420))
    samples = launch_pes("simroute.probes.nvshmem_probes", pes, args, timeout, "nvshmem-pes-")["samples"]
    from simroute.model.fit import fit_affine
    sig = [sample["value"] for sample in samples if sample["series"] == "sig_rt"]
    real = [sample for sample in samples if sample["series"] == "full_rt" and sample["row_bytes"] == 2184]
    fit = fit_affine([sample["x"] for sample in real], [sample["value"] for sample in real], 2184, probe_s=sig)
    transport = "nic" if os.environ.get("NVSHMEM_DISABLE_P2P") == "1" else "p2p"
    return {"results": {"fit": fit.as_dict(), "mq": list(MQ_SWEEP), "row_bytes": 2184,
                        "fabric": f"local-gpu-{transport}", "multi_block_Bps": fit.bw_Bps, "blocks": [1],
                        "method": f"nvshmem4py put_signal + deadline spin-wait, {pes} PEs, PE 0 <-> PE 1",
                        "description": f"GPU-to-GPU NVSHMEM ({transport}), measured by nvshmem-pes"},
            "samples": samples,
            "message": f"T_probe {fit.t_probe_s * 1e6:.1f} us, BW {fit.bw_Bps / 1e9:.1f} GB/s, "
                       f"MAPE {fit.mape_amortised:.1%}"}


def probe_loopback(args: dict[str, Any]) -> dict:
    """1 PE put+signal to itself: the software floor (never a fabric constant)."""
    cp = import_cupy()
    deadline = Deadline.for_probe(args, 180)
    tmp = Path(tempfile.mkdtemp(prefix="nvshmem-1pe-"))
    nvshmem, dev, stream = _init(0, 1, tmp / "uid.pkl", deadline)
    nbytes = 64 * 2 ** 20
    ping = _PingPong(nvshmem, cp, stream, nbytes)
    try:
        iters = 50 if args.get("quick") else 500
        ping.exchange(0, 0, 0, 0, 10)
        sig = [ping.exchange(0, 0, 0, 0, iters) for _ in range(5)]
        put = [ping.exchange(0, 0, nbytes, 0, 3) for _ in range(3)]
    finally:
        ping.close()
        nvshmem.finalize()
    samples = ([{"series": "loopback_sig_rt", "x": 0.0, "value": seconds, "unit": "s"} for seconds in sig]
               + [{"series": "loopback_put", "x": float(nbytes), "value": seconds, "unit": "s"} for seconds in put])
    return {"results": {"sig_rt_us": float(np.median(sig)) * 1e6, "put_GBps": nbytes / float(np.median(put)) / 1e9},
            "samples": samples,
            "message": f"loopback put+signal {np.median(sig) * 1e6:.1f} us (software floor, not a fabric)"}


if __name__ == "__main__":
    rank, pes, uid, out, quick, timeout = sys.argv[1:7]
    _pe_main(int(rank), int(pes), Path(uid), Path(out), quick == "1", float(timeout))
