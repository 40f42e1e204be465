"""Routed exchanges on the requester's critical path, computed analytically once per (macro-)iteration.

An iteration whose sequences route pays, per exchange (per layer under `per-layer`, once per step under
`once`), the slowest holder's round trip: the query message out (the rows of every sequence of the batch
bound for that holder, one message), the holder's wait and its partial-attention kernel (one call over one
query per (request, holder): `StepTimeModel.holder_partial_s`), the partial back, and the merge. Messages
go through the network engine's `message_delay` (FIFO queueing on links, shares left by bulk flows), once
per holder per iteration event: the per-layer messages of one iteration see the same network state.

The holder side (`HolderPartials`) is GPU work on the holder: its kernels run between or inside the
holder's own iterations (`inline`, the default: a kernel waits for the holder's current layer to end, and
the holder's next iteration is longer by the work) or on a concurrent stream (`stream`: no layer wait,
the holder's iterations are slowed by `interference` x the work). Requesters routing to one holder at the
same time share its kernel calls: a call batches one query from each of the n requesters currently
routing there (`holder_partial_s` over n x their queries, flat to N ~ 8 as measured), each requester waits
for the whole call and is charged 1/n of its work. Beyond that, kernels queue: a fluid M/D/1 wait from the
holder's current partial-attention utilisation.
"""

from __future__ import annotations

from array import array

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simroute.sim.engine.engine import InstanceEngine

HOLDER_MODES = ("inline", "stream")
MAX_UTILISATION = 0.95          # the fluid queue's wait is capped where rho -> 1 (no unbounded backlog)


class HolderPartials:
    """The partial-attention work a holder does for others, and what it costs its own iterations."""

    __slots__ = ("mode", "interference", "pending_s", "demand", "calls", "queries", "work_s", "charged_s",
                 "kernel_s")

    def __init__(self, mode: str = "inline", interference: float = 0.3) -> None:
        self.mode = mode
        self.interference = interference
        self.pending_s = 0.0            # work to charge to the holder's next iteration
        self.demand: list[tuple[float, float, int]] = []   # (until, GPU s per s, requester) now routing here
        self.calls = 0.0                # kernel calls (x exchanges)
        self.queries = 0.0
        self.work_s = 0.0
        self.charged_s = 0.0
        self.kernel_s = array("d")      # one kernel call's time per requester iteration event (telemetry)

    def _prune(self, now: float) -> list[tuple[float, float, int]]:
        d = self.demand
        if d and min(x[0] for x in d) <= now:
            d[:] = [x for x in d if x[0] > now]
        return d

    def utilisation(self, now: float, requester: int = -1) -> float:
        """GPU seconds per second of partial attention the other requesters now ask of this holder."""
        return sum(x[1] for x in self._prune(now) if x[2] != requester)

    def concurrent(self, now: float, requester: int) -> int:
        """Requesters routing here now, this one included (they share kernel calls)."""
        return 1 + len({x[2] for x in self._prune(now) if x[2] != requester})

    def wait_s(self, kernel_s: float, now: float, holder_busy: bool, holder_layer_s: float,
               requester: int = -1) -> float:
        """Expected wait of one kernel: behind other requesters' kernels (M/D/1 at their utilisation) and,
        inline, for the holder's current layer to end (half a layer on average)."""
        rho = min(self.utilisation(now, requester), MAX_UTILISATION)
        wait = kernel_s * rho / (2 * (1 - rho)) if rho > 0 else 0.0
        if self.mode == "inline" and holder_busy:
            wait += holder_layer_s / 2
        return wait

    def add(self, kernel_s: float, calls: float, queries: float, now: float, span_s: float,
            holder_busy: bool, requester: int = -1) -> None:
        """`kernel_s` x `calls` of this requester's share of the holder's partial-attention work."""
        work = kernel_s * calls
        self.calls += calls
        self.queries += queries * calls
        self.work_s += work
        if span_s > 0:
            self.demand.append((now + span_s, work / span_s, requester))
        if holder_busy:                 # on an idle holder the kernels use an idle GPU: nobody waits for them
            self.pending_s += work if self.mode == "inline" else work * self.interference

    def take(self) -> float:
        """The work to add to the holder's iteration now starting."""
        w, self.pending_s = self.pending_s, 0.0
        self.charged_s += w
        return w


class RouteExchange:
    """Per-iteration exchange time of one requester's batch (see the module docstring).

    `fabric_of(requester, holder)` gives the pair's FabricParams (t_probe_s, single_block_Bps,
    turnaround_s); `net` is a FlowEngine (or anything with its `message_delay`). Byte sizes are per query row.
    """

    def __init__(self, net: Any, fabric_of: Callable[[Any, Any], Any], *, q_bytes: float, p_bytes: float,
                 tp: int, merge_s: float, exchanges_per_step: int) -> None:
        self.net = net
        self.fabric_of = fabric_of
        self.q_bytes, self.p_bytes = q_bytes, p_bytes
        self.tp = tp
        self.merge_s = merge_s
        self.exchanges = exchanges_per_step
        self.messages = 0.0             # routed messages (queries + partials, x exchanges)
        self._routes: dict[tuple[int, int], tuple[Any, Any, Any]] = {}   # (requester, holder) -> legs, fabric
        self._fast = hasattr(net, "message_route") and hasattr(net, "send_message")

    def _legs(self, engine: "InstanceEngine", holder: "InstanceEngine") -> tuple[Any, Any, Any]:
        key = (engine.eid, holder.eid)
        legs = self._routes.get(key)
        if legs is None:
            fab = self.fabric_of(engine, holder)
            if self._fast:
                legs = (self.net.message_route(engine.gpu, holder.gpu), self.net.message_route(holder.gpu, engine.gpu),
                        fab)
            else:
                legs = ((engine.gpu, holder.gpu), (holder.gpu, engine.gpu), fab)
            self._routes[key] = legs
        return legs

    def _send(self, leg: Any, nbytes: float, t_probe_s: float, single_block_Bps: float) -> float:
        if self._fast:
            return self.net.send_message(leg, nbytes, t_probe_s=t_probe_s, single_block_Bps=single_block_Bps,
                                         include_latency=False)
        return self.net.message_delay(leg[0], leg[1], nbytes, t_probe_s=t_probe_s,
                                      single_block_Bps=single_block_Bps, include_latency=False)

    def iteration(self, engine: "InstanceEngine", groups: dict, k: int, compute_s: float) -> tuple[float, float]:
        """(exchange seconds, of which holder wait) added to each iteration of a k-iteration event whose
        compute is `compute_s` per iteration. `groups` maps a holder engine to [queries, rows, key_tokens,
        premium] (premium: the sparse kernel's factor over dense, `RouteShare.premium`)."""
        now, tp, ex, me = engine.env.now, self.tp, self.exchanges, engine.eid
        legs = []
        bare = 0.0                      # the slowest round trip without holder waits
        for holder, (queries, rows, keys, premium) in groups.items():
            leg_out, leg_back, fab = self._legs(engine, holder)
            out = self._send(leg_out, rows * self.q_bytes / tp, fab.t_probe_s, fab.single_block_Bps)
            back = self._send(leg_back, rows * self.p_bytes / tp, fab.turnaround_s, fab.single_block_Bps)
            sharing = holder.partials.concurrent(now, me)
            kernel = holder.step.holder_partial_s(queries * sharing, rows / queries, keys / queries) * premium
            rt = out + kernel + back + self.merge_s
            bare = max(bare, rt)
            legs.append((holder, queries, kernel, sharing, rt))
        span = k * (compute_s + ex * bare)   # the event's duration: the rate its partial work is asked at
        worst, worst_wait = 0.0, 0.0
        for holder, queries, kernel, sharing, rt in legs:
            partials, busy = holder.partials, holder.busy
            wait = partials.wait_s(kernel / sharing, now, busy, holder.layer_s, me)
            partials.add(kernel / sharing, ex * k, queries, now, span, busy, me)
            partials.kernel_s.append(kernel)
            if rt + wait > worst:
                worst, worst_wait = rt + wait, wait
        self.messages += 2 * ex * k * len(groups)
        return ex * worst, ex * worst_wait
