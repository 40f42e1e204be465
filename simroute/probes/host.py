"""Host fabric probes: a requester process routes real q rows (1152 B) to a holder process that returns real
p rows (1032 B), over shared memory or loopback TCP; plus the payload-free signal round trip (sig_rt) and a
one-way bulk transfer of a chunk (the fetch pull). Fitted with the model's affine fit -> `host-shm`,
`host-tcp`, so calibrate -> profile -> simulate runs on any machine (no GPU).
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import struct
import time
from enum import StrEnum
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from simroute.model.geometry import get_model

GEOM = get_model("deepseek-v2-lite")
Q_ROW, P_ROW = GEOM.q_bytes, GEOM.p_bytes          # 1152, 1032
MQ_SWEEP = (1, 4, 16, 64, 256, 1024, 4096)
HDR = 64                                           # shm header: req seq, resp seq, rows, stop (u64 each)
STOP = np.uint64(2 ** 63)
SPIN = 300                                         # polls of the word before blocking on the doorbell


def _reps(mq: int, quick: bool) -> tuple[int, int]:
    """(warm-up, timed) repetitions: many for the small, latency-bound sizes, few for the large ones."""
    reps = 1000 if mq <= 64 else (300 if mq <= 1024 else 60)
    return (max(reps // 50, 3), max(reps // 25, 5)) if quick else (reps // 10, reps)


def _bulk_bytes(quick: bool) -> int:
    """One-way bulk payload: 16 MiB quick, else a 2048-token chunk's c_KV over all 27 layers (~64 MB)."""
    return 16 * 2 ** 20 if quick else int(GEOM.chunk_bytes(2048))


# ---------------------------------------------------------------- shared memory
def _wait_word(word: np.ndarray, idx: int, want_not: int, bell: Any, deadline: float) -> None:
    """Spin briefly on a sequence word, then block on the pipe doorbell (a loaded box would starve a pure
    spin); the doorbell byte is always consumed so both sides stay in step."""
    for _ in range(SPIN):
        if word[idx] != want_not:
            break
    while not bell.poll(0.05):
        if time.monotonic() > deadline:
            raise TimeoutError("no signal before the deadline")
    bell.recv_bytes()


def _shm_holder(name: str, capacity: int, deadline: float, bell_in: Any, bell_out: Any) -> None:
    """Holder side: wait for the request word, read the q rows, write p rows, bump the response word."""
    shm = shared_memory.SharedMemory(name=name)
    try:
        hdr = np.ndarray((4,), np.uint64, shm.buf[:32])
        req = np.ndarray((capacity * Q_ROW,), np.uint8, shm.buf[HDR:HDR + capacity * Q_ROW])
        resp = np.ndarray((capacity * P_ROW,), np.uint8, shm.buf[HDR + capacity * Q_ROW:])
        inbox = np.empty(capacity * Q_ROW, np.uint8)
        outbox = np.full(capacity * P_ROW, 7, np.uint8)
        seen = 0
        while True:
            _wait_word(hdr, 0, seen, bell_in, deadline)
            seq = int(hdr[0])
            if seq & int(STOP):
                return
            rows, back_bytes = int(hdr[2]), int(hdr[3])
            inbox[:rows * Q_ROW] = req[:rows * Q_ROW]           # receive the queries
            back_len = back_bytes if back_bytes else rows * P_ROW
            if back_len:
                resp[:back_len] = outbox[:back_len] if back_len <= outbox.size else 0   # send the partials back
            seen = seq
            hdr[1] = np.uint64(seq)
            bell_out.send_bytes(b"!")
    except TimeoutError:
        return
    finally:
        del hdr, req, resp
        shm.close()


class _ShmChannel:
    def __init__(self, capacity: int, deadline: float) -> None:
        size = HDR + capacity * (Q_ROW + P_ROW)
        self.cap = capacity
        self.shm = shared_memory.SharedMemory(create=True, size=size)
        self.hdr = np.ndarray((4,), np.uint64, self.shm.buf[:32])
        self.hdr[:] = 0
        self.req = np.ndarray((capacity * Q_ROW,), np.uint8, self.shm.buf[HDR:HDR + capacity * Q_ROW])
        self.resp = np.ndarray((capacity * P_ROW,), np.uint8, self.shm.buf[HDR + capacity * Q_ROW:])
        self.q = np.random.default_rng(0).integers(0, 255, capacity * Q_ROW, dtype=np.uint8)
        self.p = np.empty(capacity * P_ROW, np.uint8)
        self.seq = 0
        self.deadline = deadline
        ctx = mp.get_context("spawn")
        self.bell_to_holder, bell_in = ctx.Pipe(duplex=False)[::-1]
        bell_back, self.bell_from_holder = ctx.Pipe(duplex=False)[::-1]
        self.proc = ctx.Process(target=_shm_holder, args=(self.shm.name, capacity, deadline, bell_in, bell_back),
                                daemon=True)
        self.proc.start()

    def round_trip(self, rows: int, out_bytes: int = 0, back_bytes: int = 0) -> float:
        """One exchange; returns seconds. `out_bytes`/`back_bytes` override the row payloads (bulk)."""
        back_override = back_bytes
        out_len = out_bytes or rows * Q_ROW
        started = time.perf_counter()
        if out_len:
            self.req[:out_len] = self.q[:out_len] if out_len <= self.q.size else 0
        self.seq += 1
        self.hdr[2], self.hdr[3] = rows, back_override
        self.hdr[0] = np.uint64(self.seq)
        self.bell_to_holder.send_bytes(b"!")
        if not self.proc.is_alive():
            raise RuntimeError(f"holder process died (exit code {self.proc.exitcode})")
        _wait_word(self.hdr, 1, self.seq - 1, self.bell_from_holder, self.deadline)
        back_len = back_override if back_override else rows * P_ROW
        if back_len:
            self.p[:back_len] = self.resp[:back_len]
        return time.perf_counter() - started

    def close(self) -> None:
        self.hdr[0] = STOP | np.uint64(self.seq + 1)
        try:
            self.bell_to_holder.send_bytes(b"!")
        except OSError:
            pass
        self.proc.join(timeout=2)
        if self.proc.is_alive():
            self.proc.kill()
        del self.hdr, self.req, self.resp
        self.shm.close()
        self.shm.unlink()


# ---------------------------------------------------------------- loopback TCP
def _recv_exact(sock: socket.socket, buf: memoryview, size: int) -> None:
    got = 0
    while got < size:
        got_now = sock.recv_into(buf[got:size])
        if got_now == 0:
            raise ConnectionError("peer closed")
        got += got_now


def _tcp_holder(port_q: Any, capacity: int, deadline: float) -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(max(deadline - time.monotonic(), 0.1))
    port_q.put(srv.getsockname()[1])
    conn, _ = srv.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.settimeout(max(deadline - time.monotonic(), 0.1))
    inbox = memoryview(bytearray(max(capacity * Q_ROW, 8)))
    outbox = bytes(max(capacity * P_ROW, 8))
    hdr = memoryview(bytearray(12))
    try:
        while True:
            _recv_exact(conn, hdr, 12)
            rows, out_len, back_len = struct.unpack("<III", hdr)
            if rows == 0xFFFFFFFF:
                return
            _recv_exact(conn, inbox, out_len)
            conn.sendall(struct.pack("<I", back_len) + outbox[:back_len])
    except (ConnectionError, socket.timeout, OSError):
        return
    finally:
        conn.close()
        srv.close()


class _TcpChannel:
    def __init__(self, capacity: int, deadline: float) -> None:
        ctx = mp.get_context("spawn")
        ports = ctx.Queue()
        self.proc = ctx.Process(target=_tcp_holder, args=(ports, capacity, deadline), daemon=True)
        self.proc.start()
        port = ports.get(timeout=max(deadline - time.monotonic(), 1))
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(max(deadline - time.monotonic(), 0.1))
        self.q = np.random.default_rng(0).integers(0, 255, capacity * Q_ROW, dtype=np.uint8).tobytes()
        self.back = memoryview(bytearray(max(capacity * P_ROW, 8)))
        self.hdr = memoryview(bytearray(4))

    def round_trip(self, rows: int, out_bytes: int = 0, back_bytes: int = 0) -> float:
        out_len = out_bytes or rows * Q_ROW
        back_len = back_bytes or rows * P_ROW
        payload = self.q[:out_len] if out_len <= len(self.q) else bytes(out_len)
        started = time.perf_counter()
        self.sock.sendall(struct.pack("<III", rows, out_len, back_len) + payload)
        _recv_exact(self.sock, self.hdr, 4)
        _recv_exact(self.sock, self.back, back_len)
        return time.perf_counter() - started

    def close(self) -> None:
        try:
            self.sock.sendall(struct.pack("<III", 0xFFFFFFFF, 0, 0))
        except OSError:
            pass
        self.sock.close()
        self.proc.join(timeout=2)
        if self.proc.is_alive():
            self.proc.kill()


# ---------------------------------------------------------------- the probe
def _sweep(chan: Any, quick: bool, series_prefix: str) -> tuple[list[dict], dict[str, Any]]:
    samples: list[dict] = []
    sig: list[float] = []
    warm, reps = _reps(1, quick)
    for index in range(warm + reps):                       # sig_rt: a doorbell each way, no payload
        seconds = chan.round_trip(0, 0, 1) if isinstance(chan, _ShmChannel) else chan.round_trip(0, 1, 1)
        if index >= warm:
            sig.append(seconds)
            samples.append({"series": "sig_rt", "x": 0.0, "value": seconds, "unit": "s"})
    med_mq, med_rt = [], []
    for mq in MQ_SWEEP:
        warm, reps = _reps(mq, quick)
        rts = []
        for index in range(warm + reps):
            seconds = chan.round_trip(mq)
            if index >= warm:
                rts.append(seconds)
                samples.append({"series": "full_rt", "x": float(mq), "value": seconds, "unit": "s",
                                "row_bytes": float(Q_ROW + P_ROW)})
        med_mq.append(mq)
        med_rt.append(float(np.median(rts)))
    nbytes = _bulk_bytes(quick)
    bulk = []
    for index in range(2 if quick else 4):               # one-way chunk transfer with a 1-row ack (fetch pull)
        seconds = chan.round_trip(0, nbytes, 8)
        if index:
            bulk.append(seconds)
            samples.append({"series": "bulk_one_way", "x": float(nbytes), "value": seconds, "unit": "s"})
    from simroute.model.fit import fit_affine
    fit = fit_affine(med_mq, med_rt, Q_ROW + P_ROW, probe_s=sig)
    res = {"fit": fit.as_dict(), "sig_rt_s": float(np.median(sig)), "median_rt_s": dict(zip(map(str, med_mq),
           med_rt)), "bulk_Bps": nbytes / float(np.median(bulk)), "bulk_bytes": nbytes,
           "row_bytes": Q_ROW + P_ROW, "mq": list(MQ_SWEEP), "method": series_prefix}
    return samples, res


class HostTransport(StrEnum):
    """The requester-holder channel of a host probe (`args["transport"]`, set by the probe registry)."""

    SHM = "shm"
    TCP = "tcp"


# transport -> (channel, how the profile describes it)
CHANNELS = {HostTransport.SHM: (_ShmChannel, "shared memory (sequence words polled, then a pipe doorbell)"),
            HostTransport.TCP: (_TcpChannel, "loopback TCP 127.0.0.1, TCP_NODELAY")}


def probe_host(args: dict[str, Any]) -> dict:
    """Run the sweep over one transport (`args["transport"]`: a `HostTransport` value)."""
    quick = bool(args.get("quick"))
    deadline = time.monotonic() + float(args.get("timeout_s", 60)) - 1.0
    cap = max(max(MQ_SWEEP), _bulk_bytes(quick) // Q_ROW + 1)
    channel, method = CHANNELS[HostTransport(args.get("transport", HostTransport.SHM))]
    chan = channel(cap, deadline)
    try:
        samples, res = _sweep(chan, quick, method)
    finally:
        chan.close()
    fit = res["fit"]
    return {"results": res, "samples": samples,
            "message": f"T_probe {fit['t_probe_s'] * 1e6:.1f} us, BW {fit['bw_Bps'] / 1e9:.2f} GB/s, "
                       f"MAPE {fit['mape_amortised']:.1%} (Mq>=512) / {fit['mape_full']:.1%} (all)"}
