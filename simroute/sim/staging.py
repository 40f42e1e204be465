"""The K-stream staging pool of fetched chunks on a holder (`StagingPool`) and the light FIFO server it
queues on: a leaf of the simulator (the cluster builds one pool per instance)."""

from __future__ import annotations

from array import array
from collections import deque

import simpy

from simroute.model.staging import STAGING_OVERSUBSCRIPTION_LOSS


class FifoServer:
    """c identical servers with one FIFO queue: `yield from server.hold(seconds)` waits for one, then holds it.

    Lighter than simpy.Resource (no request objects): an idle server is taken without any event, which
    matters when every fetch and prefill passes through one.
    """

    __slots__ = ("env", "capacity", "busy", "waiting", "max_waiting", "on_change")

    def __init__(self, env: simpy.Environment, capacity: int, on_change=None) -> None:
        self.env, self.capacity = env, max(1, capacity)
        self.busy = 0
        self.waiting: deque[simpy.Event] = deque()
        self.max_waiting = 0
        self.on_change = on_change          # called after every join, start and release (telemetry)

    def hold(self, seconds: float):
        if self.busy < self.capacity:
            self.busy += 1
        else:
            turn = self.env.event()
            self.waiting.append(turn)
            self.max_waiting = max(self.max_waiting, len(self.waiting))
            if self.on_change:
                self.on_change()
            yield turn                      # the releasing holder hands its server over (busy unchanged)
        if self.on_change:
            self.on_change()
        try:
            yield self.env.timeout(seconds)
        finally:
            if self.waiting:
                self.waiting.popleft().succeed()
            else:
                self.busy -= 1
            if self.on_change:
                self.on_change()


class StagingPool:
    """The holder's pool of K CUDA streams for the D2D copies that stage fetched chunks
    (Move the Query, Not the Cache, §6.2 and Fig 5b).

    A chunk is staged as one copy per layer; the pool spreads those L copies over its K streams, so a chunk
    is staged at the copy engines' aggregate rate with c = min(K, L) copies in flight, and chunks queue FIFO
    behind each other (the pool pipelines one chunk's copies, then the next's). The aggregate rate is one
    stream's rate r scaled by

        1 / (1 - gain x (c - 1) / (E - 1))                for c <= E (the elbow, 8 on H100),
        1 / (1 - gain) x (1 - loss x (c - E) / E)         beyond it,

    so K = 1 (a single async stream) is no faster than serial copies, K = E spends `gain` less copy time, and
    K = 2E regresses by `loss` (scheduler oversubscription). `gain` is a copy-time share, not the paper's 7%
    fetch-time gain: simroute.model.staging derives it from that gain (`StagingParams.pool_kwargs`).
    """

    def __init__(self, env: simpy.Environment, streams: int, copy_Bps: float, *, layers: int, elbow: int = 8,
                 gain_at_elbow: float = 0.07, oversubscription_loss: float = STAGING_OVERSUBSCRIPTION_LOSS,
                 record: bool = True) -> None:
        self.env, self.streams, self.copy_Bps, self.layers = env, streams, copy_Bps, layers
        self.elbow, self.gain, self.loss = max(1, elbow), gain_at_elbow, oversubscription_loss
        self.server = FifoServer(env, 1, on_change=self._sample if record else None)
        self.rate_Bps = self.aggregate_Bps(min(streams, max(1, layers)))
        self.samples = (array("d"), array("i"), array("i"))   # time, chunks waiting, chunks being staged

    @property
    def max_queue(self) -> int:
        return self.server.max_waiting

    def aggregate_Bps(self, in_flight: int) -> float:
        """The pool's total copy rate with `in_flight` per-layer copies on streams."""
        c, e, r = in_flight, self.elbow, self.copy_Bps
        if c <= 1:
            return r
        if c <= e:                        # here e > 1
            return r / (1 - self.gain * (c - 1) / (e - 1))
        return r / (1 - self.gain) * max(1 - self.loss * (c - e) / e, 0.05)

    def stage(self, nbytes: float):
        """A SimPy sub-process: wait for the pool, stage the chunk's L copies, release."""
        yield from self.server.hold(nbytes / self.rate_Bps)

    def _sample(self) -> None:
        t, q, b = self.samples
        t.append(self.env.now)
        q.append(len(self.server.waiting))
        b.append(self.server.busy)
