"""The requester's dispatcher: routed queries from one requester to one holder for the same chunk that are
issued within a batching window travel as one message (one probe, Mq summed), are computed in one holder
query, and return as one partial message (DESIGN §2: a requester batches all its sequences attending a chunk
into one Mq; paper §5.3: cross-request dispatcher batching).

The return leg is charged when the partial is actually sent (after the holder's batch), so it sees the link
state of that moment.
"""

from __future__ import annotations

from typing import Any

import simpy


class Dispatcher:
    """One (requester, holder, chunk shape, weight) coalescing queue; created on demand by `Dispatchers`."""

    __slots__ = ("sim", "req", "holder", "ct", "topk", "weight", "rows", "events")

    def __init__(self, sim: Any, req: Any, holder: Any, ct: float, topk: int, weight: float) -> None:
        self.sim, self.req, self.holder = sim, req, holder
        self.ct, self.topk, self.weight = ct, topk, weight
        self.rows = 0.0
        self.events: list[simpy.Event] = []

    def add(self, rows: float) -> simpy.Event:
        ev = self.sim.env.event()
        self.rows += rows
        self.events.append(ev)
        return ev

    def send(self) -> None:
        """Query out now; the holder's batch; partial back; then every member's event fires."""
        sim, req, holder, w = self.sim, self.req, self.holder, self.weight
        fab = sim.fabric(req, holder)
        g = sim.params.geometry
        tp = sim.cfg.tp
        out = sim.net.message_delay(req.gpu, holder.gpu, self.rows * g.q_bytes * w / tp, t_probe_s=fab.t_probe_s * w,
                                    single_block_Bps=fab.single_block_Bps, include_latency=False)
        work, prem = sim._work(self.rows, self.ct, self.topk)
        done = holder.holder.submit(work, prem, w, delay_s=out)
        rows, events = self.rows, self.events

        def back(_e: object) -> None:
            d = sim.net.message_delay(holder.gpu, req.gpu, rows * g.p_bytes * w / tp, t_probe_s=fab.turnaround_s * w,
                                      single_block_Bps=fab.single_block_Bps, include_latency=False)
            sim.env.timeout(d).callbacks.append(lambda _e: [ev.succeed() for ev in events])

        done.callbacks.append(back)


class Dispatchers:
    """Open coalescing windows, keyed by (requester, holder, chunk tokens, top-k, weight)."""

    def __init__(self, sim: Any, window_s: float) -> None:
        self.sim = sim
        self.window_s = window_s
        self.open: dict[tuple, Dispatcher] = {}
        self.messages = 0
        self.queries = 0

    def submit(self, req: Any, holder: Any, rows: float, ct: float, topk: int, weight: float) -> simpy.Event:
        self.queries += 1
        key = (req.id, holder.id, ct, topk, weight)
        d = self.open.get(key)
        if d is not None:
            return d.add(rows)
        d = Dispatcher(self.sim, req, holder, ct, topk, weight)
        ev = d.add(rows)
        self.messages += 1
        if self.window_s <= 0:
            d.send()
            return ev
        self.open[key] = d

        def fire(_e: object) -> None:
            del self.open[key]
            d.send()

        # Dilated like the holder's window: a weighted query stands for `weight` exchanges.
        self.sim.env.timeout(self.window_s * weight).callbacks.append(fire)
        return ev
