"""The routed-exchange service: requester dispatchers in front of the holders' batching servers.

Routed queries from one requester to one holder for the same chunk shape that are issued within a batching
window travel as one message (one probe, Mq summed), are computed in one holder query, and return as one
partial message: a requester batches every sequence attending a chunk into one Mq, and the dispatcher
batches across requests (Move the Query, Not the Cache, §5.3). The return leg is charged when the partial
is actually sent (after the holder's batch), so it sees the link state of that moment.

The request flow sees only `RoutedExchanges.exchange(...) -> event` and `wire_bytes(...)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import simpy

from simroute.model.cost import CostParams
from simroute.network import FlowEngine
from simroute.sim.compute import ComputeModel

if TYPE_CHECKING:
    from simroute.sim.cluster import Cluster, Instance


class WindowKey(NamedTuple):
    requester: int
    holder: int
    tokens: float
    topk: float
    weight: float


class Dispatcher:
    """One open coalescing window: the rows and waiters of the queries it will send as one message."""

    __slots__ = ("service", "requester", "holder", "tokens", "topk", "weight", "rows", "waiters")

    def __init__(self, service: RoutedExchanges, requester: Instance, holder: Instance, tokens: float,
                 topk: float, weight: float) -> None:
        self.service, self.requester, self.holder = service, requester, holder
        self.tokens, self.topk, self.weight = tokens, topk, weight
        self.rows = 0.0
        self.waiters: list[simpy.Event] = []

    def add(self, rows: float) -> simpy.Event:
        done = self.service.env.event()
        self.rows += rows
        self.waiters.append(done)
        return done

    def send(self) -> None:
        """Query out now; the holder's batch; partial back; then every member's event fires."""
        service, weight = self.service, self.weight
        fabric = service.cluster.fabric(self.requester, self.holder)
        geometry, tp = service.params.geometry, service.tp
        out_s = service.network.message_delay(
            self.requester.gpu, self.holder.gpu, self.rows * geometry.q_bytes * weight / tp,
            t_probe_s=fabric.t_probe_s * weight, single_block_Bps=fabric.single_block_Bps, include_latency=False)
        work, premium = service.compute.partial_work(self.rows, self.tokens, self.topk)
        computed = self.holder.holder_server.submit(work, premium, weight, delay_s=out_s)
        computed.callbacks.append(self._return_partial)

    def _return_partial(self, _event: simpy.Event) -> None:
        service, weight = self.service, self.weight
        fabric = service.cluster.fabric(self.requester, self.holder)
        back_s = service.network.message_delay(
            self.holder.gpu, self.requester.gpu, self.rows * service.params.geometry.p_bytes * weight / service.tp,
            t_probe_s=fabric.turnaround_s * weight, single_block_Bps=fabric.single_block_Bps,
            include_latency=False)
        service.env.timeout(back_s).callbacks.append(self._deliver)

    def _deliver(self, _event: simpy.Event) -> None:
        for done in self.waiters:
            done.succeed()


class RoutedExchanges:
    """Routed exchanges of a run: open dispatcher windows keyed by (requester, holder, tokens, top-k, weight).

    Contract: `exchange` returns an event that fires when the partial of `rows` query rows over a chunk of
    `tokens` tokens (or `topk` selected entries) is back at the requester; `weight` is how many back-to-back
    exchanges the simulated one stands for (layers x decode steps), which scales probe, bytes, holder
    compute and the windows alike.
    """

    def __init__(self, env: simpy.Environment, network: FlowEngine, cluster: Cluster, params: CostParams,
                 compute: ComputeModel, *, window_s: float, tp: int) -> None:
        self.env, self.network, self.cluster, self.params, self.compute = env, network, cluster, params, compute
        self.window_s, self.tp = window_s, tp
        self.open: dict[WindowKey, Dispatcher] = {}
        self.messages = 0
        self.queries = 0

    def wire_bytes(self, rows: float, weight: float) -> float:
        """Query plus partial bytes of `rows` rows, `weight` exchanges (one request's share of a message)."""
        return rows * self.params.geometry.qp_bytes * weight

    def exchange(self, requester: Instance, holder: Instance, rows: float, tokens: float, topk: float,
                 weight: float) -> simpy.Event:
        self.queries += 1
        key = WindowKey(requester.id, holder.id, tokens, topk, weight)
        window = self.open.get(key)
        if window is not None:
            return window.add(rows)
        window = Dispatcher(self, requester, holder, tokens, topk, weight)
        done = window.add(rows)
        self.messages += 1
        if self.window_s <= 0:
            window.send()
            return done
        self.open[key] = window
        # Dilated like the holder's window: a weighted query stands for `weight` exchanges.
        self.env.timeout(self.window_s * weight).callbacks.append(lambda _e: self._close(key))
        return done

    def _close(self, key: WindowKey) -> None:
        self.open.pop(key).send()
