"""The K-stream staging pool of fetched chunks on a holder (`StagingPool`) and the light FIFO server it
queues on: a leaf of the simulator (the cluster builds one pool per instance)."""

from __future__ import annotations

from array import array
from collections import deque

import simpy

from simroute.model.staging import StagingParams, stage_s


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
    (Move the Query, Not the Cache, §6.2 and Fig 5b), as mechanisms (simroute.model.staging).

    A chunk is staged as one copy per layer: the holder's host thread issues them round-robin over the K
    streams and joins the streams it used; the copies run on the copy engines behind the hardware work queues.
    The pool stages one chunk at a time (one issuing thread), chunks queue FIFO behind each other, and a chunk
    holds the pool for `simroute.model.staging.stage_s` of its bytes (kept per chunk size: a run's chunks come
    in few sizes).
    """

    def __init__(self, env: simpy.Environment, streams: int, params: StagingParams, *, layers: int,
                 record: bool = True) -> None:
        self.env, self.streams, self.params, self.layers = env, streams, params, max(1, layers)
        self.server = FifoServer(env, 1, on_change=self._sample if record else None)
        self._seconds: dict[float, float] = {}
        self.samples = (array("d"), array("i"), array("i"))   # time, chunks waiting, chunks being staged

    @property
    def max_queue(self) -> int:
        return self.server.max_waiting

    def stage_s(self, nbytes: float) -> float:
        """Seconds to stage `nbytes` (one copy of nbytes / layers per layer) on this pool."""
        seconds = self._seconds.get(nbytes)
        if seconds is None:
            seconds = self._seconds[nbytes] = stage_s(self.layers, nbytes / self.layers, self.streams, self.params)
        return seconds

    def stage(self, nbytes: float):
        """A SimPy sub-process (`yield from` it): wait for the pool, stage the chunk's per-layer copies, release.
        The server's own generator, returned as is (a generator of its own around it cost one more frame on
        every step of every fetch)."""
        return self.server.hold(self.stage_s(nbytes))

    def _sample(self) -> None:
        t, q, b = self.samples
        t.append(self.env.now)
        q.append(len(self.server.waiting))
        b.append(self.server.busy)
