"""`nic-qp-sweep`: the NIC constants of the message model that no figure of the papers gives.

The message model (simroute/network/messages.py) charges a message the wire (physics: bytes over the link's
capacity, shared round-robin among the NIC's queue pairs; Table 2's single-block rate equals NDR-200's link
peak, so one block fills the wire) and, beyond a NIC's queue-pair context capacity, a context miss. Those two
NIC constants (`nic_qp_contexts`, `nic_context_miss_us`) are what the paper's Fig. 7 rise at K = 3 would need and
what it does not isolate; this probe measures them, so that Fig. 7 stays a prediction.

Method: one process per GPU (NVSHMEM, UID bootstrap through a temp file, as `nvshmem-pes`), run with
`NVSHMEM_DISABLE_P2P=1` so every put crosses the NICs (or across hosts). PE 0 runs payload-free put + signal
round trips with Q peers in rotation (a cyclic access over Q queue pairs, LRU's worst case), Q = 1 .. P - 1, and
times the mean exchange with CUDA events; each peer echoes. While Q fits the NIC's context cache the exchange
stays at its Q = 1 time; past it every message misses. `qp_sweep_constants` reads the capacity (the largest Q
within `tolerance` of Q = 1) and the miss cost (half the step past it: an exchange is two messages, both
missing). With no step among the Q tested, the capacity is only bounded below (>= Q max) and nothing is written:
the model keeps its default. A box with 8 GPUs tests up to 7 queue pairs; a NIC's real capacity may be larger.

The GPU side imports cupy and nvshmem4py inside the probe's process only; the analysis is plain Python (tested
on CPU, tests/probes/test_nic_probes.py). NOT RUN in this repository's CI: no GPU. See docs/PROBES.md.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from simroute.ioutil import write_text_atomic
from simroute.probes.framework import ProbeSkipped

STEP_TOLERANCE = 0.10        # an exchange more than 10% above its Q = 1 time has left the context cache
ITERATIONS, QUICK_ITERATIONS = 400, 40


def qp_sweep_constants(exchange_s: dict[int, float], tolerance: float = STEP_TOLERANCE) -> dict[str, Any]:
    """The NIC's context capacity and miss cost from a queue-pair sweep: exchange seconds (a payload-free
    round trip) by the number Q of queue pairs in rotation.

    capacity: the largest Q before the first Q whose exchange exceeds (1 + tolerance) x the Q = 1 exchange;
    miss_us: half the mean excess of the Q past it over the Q within it (two messages per exchange, both
    missing). No step: capacity_at_least = the largest Q tested, nothing else."""
    if not exchange_s or 1 not in exchange_s:
        raise ValueError("a queue-pair sweep needs the Q = 1 exchange")
    if any(seconds <= 0 or seconds != seconds for seconds in exchange_s.values()):
        raise ValueError("exchange times must be positive")
    counts = sorted(exchange_s)
    base = exchange_s[1]
    beyond = [pairs for pairs in counts if exchange_s[pairs] > (1 + tolerance) * base]
    if not beyond:
        return {"capacity_at_least": counts[-1], "exchange_us": {pairs: exchange_s[pairs] * 1e6 for pairs in counts}}
    first = beyond[0]
    inside = [exchange_s[pairs] for pairs in counts if pairs < first]
    outside = [exchange_s[pairs] for pairs in counts if pairs >= first]
    step = sum(outside) / len(outside) - sum(inside) / len(inside)
    return {"capacity": max(pairs for pairs in counts if pairs < first), "miss_us": step / 2 * 1e6,
            "exchange_us": {pairs: exchange_s[pairs] * 1e6 for pairs in counts}}


def _pe_main(rank: int, nranks: int, uid_file: Path, out: Path, quick: bool, timeout_s: float) -> None:
    """One PE. PE 0 rotates payload-free put + signal exchanges over peers 1..Q for each Q; a peer echoes every
    exchange addressed to it. Both sides step the same per-peer sequence of signal values."""
    import numpy as np
    from simroute.probes.gpu_common import SPIN_WAIT_CUDA, Deadline, import_cupy
    from simroute.probes.nvshmem_probes import SPIN_TIMEOUT_NS, _init
    deadline = Deadline(timeout_s - 5)
    cp = import_cupy()
    nvshmem, _dev, stream = _init(rank, nranks, uid_file, deadline)
    cps = cp.cuda.ExternalStream(int(stream.handle))
    src = nvshmem.array((8,), dtype="uint8")
    dst = nvshmem.array((8,), dtype="uint8")
    sig = nvshmem.array((nranks,), dtype="uint64")        # PE 0: one word per peer; a peer: word 0
    sig[...] = 0
    err = cp.zeros(1, dtype=cp.int32)
    wait = cp.RawKernel(SPIN_WAIT_CUDA, "spin_wait")
    sent = [0] * nranks
    iterations = QUICK_ITERATIONS if quick else ITERATIONS
    results: dict[int, float] = {}

    def put(peer: int, slot: int, value: int) -> None:
        nvshmem.put_signal(dst[:8], src[:8], sig[slot:slot + 1], value, nvshmem.SignalOp.SIGNAL_SET,
                           remote_pe=peer, stream=stream)

    def wait_for(slot: int, value: int) -> None:
        with cps:
            wait((1,), (1,), (sig[slot:slot + 1], np.uint64(value), np.uint64(SPIN_TIMEOUT_NS), err))

    try:
        nvshmem.barrier_all(stream=stream) if hasattr(nvshmem, "barrier_all") else None
        for queue_pairs in range(1, nranks):
            deadline.check(f"queue-pair sweep Q={queue_pairs}")
            if rank == 0:
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record(cps)
            for _ in range(iterations):
                for peer in range(1, queue_pairs + 1):
                    sent[peer] += 1
                    if rank == 0:
                        put(peer, 0, sent[peer])
                        wait_for(peer, sent[peer])
                    elif rank == peer:
                        wait_for(0, sent[peer])
                        put(0, peer, sent[peer])
            if rank == 0:
                end.record(cps)
                end.synchronize()
                results[queue_pairs] = cp.cuda.get_elapsed_time(start, end) * 1e-3 / (iterations * queue_pairs)
            else:
                cps.synchronize()
        if int(err.get()[0]):
            raise TimeoutError("a signal did not arrive within the spin-wait deadline (lost signal?)")
        write_text_atomic(out, json.dumps({"rank": rank, "exchange_s": results}))
    finally:
        for arr in (src, dst, sig):
            nvshmem.free_array(arr)
        nvshmem.finalize()


def probe_nic_qp_sweep(args: dict[str, Any]) -> dict:
    """Launch one process per PE (P >= 3: at least two queue pairs), collect PE 0's exchange times, read the
    NIC's context capacity and miss cost from them."""
    pes = int(args.get("pes", 1))
    if pes < 3:
        raise ProbeSkipped("needs --pes N >= 3 (PE 0 and at least two peers)")
    if os.environ.get("NVSHMEM_DISABLE_P2P") != "1":
        raise ProbeSkipped("needs NVSHMEM_DISABLE_P2P=1 (every put through the NICs), or PEs on different hosts")
    timeout = float(args.get("timeout_s", 300))
    from simroute.probes.nvshmem_probes import launch_pes
    result = launch_pes("simroute.probes.nic_probes", pes, args, timeout, "nic-qp-sweep-")
    exchange = {int(pairs): float(seconds) for pairs, seconds in result["exchange_s"].items()}
    constants = qp_sweep_constants(exchange)
    samples = [{"series": "qp_sweep_exchange", "x": float(pairs), "value": seconds, "unit": "s"}
               for pairs, seconds in sorted(exchange.items())]
    message = (f"NIC contexts {constants['capacity']}, miss {constants['miss_us']:.1f} us" if "capacity" in constants
               else f"no context step through {constants['capacity_at_least']} queue pairs (capacity >= that)")
    return {"results": {**constants, "pes": pes,
                        "method": f"nvshmem4py payload-free put_signal rotation over Q peers, {pes} PEs, P2P off"},
            "samples": samples, "message": message}


if __name__ == "__main__":
    rank_, pes_, uid_, out_, quick_, timeout_ = sys.argv[1:7]
    _pe_main(int(rank_), int(pes_), Path(uid_), Path(out_), quick_ == "1", float(timeout_))
