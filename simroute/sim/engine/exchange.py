"""Routed exchanges on the requester's critical path, computed analytically once per (macro-)iteration.

An iteration whose sequences route pays, per exchange (per layer under `per-layer`, once per step under
`once`), the slowest holder's round trip: the query message out (the rows of every sequence of the batch
bound for that holder, one message), the holder's wait and its partial-attention kernel (one call over one
query per (request, holder), each with its own rows and keys: `StepTimeModel.holder_partial_s` over the
per-query lists), the partial back, and the merge. Messages go through the network engine's `message_delay`
(FIFO queueing on links, shares left by bulk flows), once per holder per iteration event: the per-layer
messages of one iteration see the same network state. Bytes
are one accounting: when the event ends (`settle`, with the iterations it actually ran), the network counts
every exchange's messages (the sampled one and the others alike) and each sequence its rows, so the
network's message bytes x tp equal the requests' route bytes (the network carries one TP rank pair's share,
1/tp, as it does for fetches).

The holder side (`HolderPartials`) is GPU work on the holder: its kernels run between or inside the holder's
own iterations (`inline`, the default: a kernel waits for the holder's current layer to end, and the holder's
iterations are longer by the work, charged as it is asked) or on a concurrent stream (`stream`: no layer wait,
the holder's iterations are slowed by `interference` x the work). Requesters routing to one holder at the same
time share its kernel calls: a call batches one query from each of the n requesters currently routing there
(`holder_partial_s` over n x their queries, flat to N ~ 8 as measured), each requester waits for the whole
call and is charged 1/n of its work. Beyond that, kernels queue: a fluid M/D/1 wait from the holder's current
partial-attention utilisation.
"""

from __future__ import annotations

from array import array

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from simroute.sim.engine.peer import EventLegs
from simroute.sim.vocab import HolderMode

if TYPE_CHECKING:     # the engine as the exchange sees it, from a leaf module (no engine <-> exchange circle)
    from simroute.sim.engine.peer import ExchangePeer as InstanceEngine

INF = float("inf")
MAX_UTILISATION = 0.95          # the fluid queue's wait is capped where rho -> 1 (no unbounded backlog)
KERNEL_SHAPES_KEPT = 131072      # holder-kernel shapes kept per cache before it starts over (as the step model's shape caches)


class DemandEntry:
    """One requester event's demand on a holder (`HolderPartials.add`): `rate` GPU s per s from `begin` to
    `until` for `requester`, charging the holder `charge` per s while both last. A class rather than a list: its
    floats stay unboxed where exchange.py runs compiled (`simroute.compiled`)."""

    __slots__ = ("begin", "until", "rate", "requester", "charge")

    def __init__(self, begin: float, until: float, rate: float, requester: int, charge: float) -> None:
        self.begin, self.until, self.rate, self.requester, self.charge = begin, until, rate, requester, charge


class HolderPartials:
    """The partial-attention work a holder does for others, and what it costs its own iterations.

    Each requester event routing here is one `DemandEntry` (from, until, GPU s per s, requester, charge per s):
    it asks `work / span` of the holder's GPU over its span (other requesters' kernels queue behind it), and,
    when the holder was busy as it started, charges the holder at `charge per s` (the work, or interference
    x the work on a stream) as the span elapses. A holder event stretches its iterations by the charge rate
    asked as it starts (`charge`), and pays at its next event what accrued beyond that: neither a requester
    event nor a holder event standing for k iterations lumps k iterations' partial work into one.
    """

    # `_waits_for_layer`, not `_inline`: mypyc names a C struct field after it, and `__inline` is a C keyword
    __slots__ = ("_mode", "_interference", "_waits_for_layer", "_busy_charge", "demand", "tail", "expiry", "calls",
                 "queries", "work_s", "charged_s", "kernel_s", "last_take", "prepaid", "busy_fraction", "queued_s",
                 "fan_in_calls", "max_fan_in", "asked", "slot")

    def __init__(self, mode: HolderMode = HolderMode.INLINE, interference: float = 0.3) -> None:
        self._mode, self._interference = mode, interference
        self._derive()
        self.demand: list[DemandEntry] = []     # the requester events routing here now
        self.tail: list[DemandEntry] = []       # entries past their span whose charge has not all been taken yet
        self.expiry = INF               # the earliest `until` in `demand`
        self.calls = 0.0                # kernel calls (x exchanges)
        self.queries = 0.0
        self.work_s = 0.0
        self.charged_s = 0.0
        self.kernel_s = array("d")      # one kernel call's time per requester iteration event (telemetry)
        self.last_take = 0.0            # the holder's charge is accrued up to here
        self.prepaid = 0.0              # of it, what the last event's stretch already paid
        self.busy_fraction = 1.0        # the share of the holder's last event its own GPU work took
        self.queued_s = 0.0             # summed expected wait of the calls that ran (x exchanges)
        self.fan_in_calls = 0.0         # summed requesters sharing each call that ran (x exchanges)
        self.max_fan_in = 0             # most requesters that shared one call
        # its flag on the run's load board (`LoadBoard.asked`), raised as demand is added: the replica choice reads
        # the demand of flagged holders only
        self.asked: list[bool] | None = None
        self.slot = 0

    @property
    def mode(self) -> HolderMode:
        return self._mode

    @mode.setter
    def mode(self, mode: HolderMode) -> None:
        self._mode = mode
        self._derive()

    @property
    def interference(self) -> float:
        return self._interference

    @interference.setter
    def interference(self, interference: float) -> None:
        self._interference = interference
        self._derive()

    def _derive(self) -> None:
        """What the mode decides on every leg, kept as plain values (an enum comparison per leg costs): whether
        a kernel waits for the holder's layer (`inline`), and the charge rate per unit of work on a busy holder
        (all of it inline, the interference share on a stream)."""
        self._waits_for_layer = self._mode == HolderMode.INLINE
        self._busy_charge = 1.0 if self._waits_for_layer else self._interference

    def _prune(self, now: float) -> list[DemandEntry]:
        """The entries still asking (until > now); ended ones with charge left move to `tail` (in list order).
        It rebuilds the list whenever the earliest span has ended (most requester events), in one pass."""
        d = self.demand
        if now >= self.expiry:
            last, tail = self.last_take, self.tail
            keep: list[DemandEntry] = []
            expiry = INF
            for x in d:
                until = x.until
                if until > now:
                    keep.append(x)
                    if until < expiry:
                        expiry = until
                elif x.charge > 0 and until > last:
                    tail.append(x)
            self.demand = d = keep
            self.expiry = expiry
        return d

    def others(self, now: float, requester: int) -> tuple[float, int]:
        """(GPU s per s the other requesters now ask of this holder, how many they are): one pass. It runs
        once per routed leg of every requester event, so it builds nothing unless entries of two or more other
        requesters are live (their entries are often one requester's: its current event's and its last ones),
        when it counts them apart in the same pass."""
        rho, first, several = 0.0, None, None
        for x in (self._prune(now) if now >= self.expiry else self.demand):
            other = x.requester
            if other != requester:
                rho += x.rate
                if first is None:
                    first = other
                elif other != first:        # entries of two or more other requesters: count them apart
                    if several is None:
                        several = {first, other}
                    else:
                        several.add(other)
        if several is not None:
            return rho, len(several)
        return rho, 0 if first is None else 1

    def utilisation(self, now: float, requester: int = -1) -> float:
        """GPU seconds per second of partial attention the other requesters now ask of this holder."""
        return self.others(now, requester)[0]

    def concurrent(self, now: float, requester: int) -> int:
        """Requesters routing here now, this one included (they share kernel calls)."""
        return 1 + self.others(now, requester)[1]

    def wait_s(self, kernel_s: float, now: float, holder_busy: bool, holder_layer_s: float,
               requester: int = -1) -> float:
        """Expected wait of one kernel: behind other requesters' kernels (M/D/1 at their utilisation) and,
        inline, for the holder's current layer to end (half a layer on average)."""
        utilisation = self.utilisation(now, requester) if self.demand else 0.0    # nobody routing here (most)
        return self.queue_wait_s(kernel_s, utilisation, holder_busy, holder_layer_s)

    def queue_wait_s(self, kernel_s: float, utilisation: float, holder_busy: bool, holder_layer_s: float) -> float:
        """`wait_s` at a known utilisation of the other requesters."""
        rho = MAX_UTILISATION if MAX_UTILISATION < utilisation else utilisation     # min(), spelt out (hot)
        wait = kernel_s * rho / (2 * (1 - rho)) if rho > 0 else 0.0
        if self._waits_for_layer and holder_busy:
            wait += holder_layer_s / 2
        return wait

    def add(self, kernel_s: float, calls: float, queries: float, now: float, span_s: float,
            holder_busy: bool, requester: int = -1) -> DemandEntry | None:
        """`kernel_s` x `calls` of this requester's share of the holder's partial-attention work over the next
        `span_s`; returns its demand entry (for `retract`)."""
        work = kernel_s * calls
        self.calls += calls
        self.queries += queries * calls
        self.work_s += work
        if span_s <= 0:
            return None
        # on an idle holder the kernels use an idle GPU: nobody waits for them (no charge)
        charge = self._busy_charge if holder_busy else 0.0
        entry = DemandEntry(now, now + span_s, work / span_s, requester, charge * work / span_s)
        self.demand.append(entry)
        asked = self.asked
        if asked is not None:
            asked[self.slot] = True
        if entry.until < self.expiry:
            self.expiry = entry.until
        return entry

    def ask(self, kernel_s: float, calls: float, queries: float, now: float, span_s: float, holder_busy: bool,
            holder_layer_s: float, utilisation: float, requester: int,
            call_s: float) -> tuple[float, DemandEntry | None]:
        """One requester event's leg here, in one call (once per routed leg of every event): the kernel's
        expected wait (`queue_wait_s`), its demand entry (`add`) and the call's time in the telemetry."""
        wait = self.queue_wait_s(kernel_s, utilisation, holder_busy, holder_layer_s)
        entry = self.add(kernel_s, calls, queries, now, span_s, holder_busy, requester)
        self.kernel_s.append(call_s)
        return wait, entry

    def served(self, calls: float, wait_s: float, sharing: int) -> None:
        """`calls` calls ran, each after an expected `wait_s` and shared by `sharing` requesters (per-holder
        load: holders.parquet)."""
        self.queued_s += wait_s * calls
        self.fan_in_calls += sharing * calls
        self.max_fan_in = max(self.max_fan_in, sharing)

    def retract(self, kernel_s: float, calls: float, queries: float, entry: DemandEntry | None,
                fraction: float) -> None:
        """Undo `add` for `calls` calls that did not run (the requester's event was cut short, after
        `fraction` of its span): the counters, and the entry's demand and charge end there."""
        self.calls -= calls
        self.queries -= queries * calls
        self.work_s -= kernel_s * calls
        if entry is not None:
            entry.until = entry.begin + (entry.until - entry.begin) * fraction
            if entry.until < self.expiry:
                self.expiry = entry.until

    def skip(self, now: float) -> None:
        """The holder was idle until now: what accrued meanwhile used an idle GPU (no charge)."""
        self.last_take = max(self.last_take, now)
        self.prepaid = 0.0
        self.busy_fraction = 1.0
        self.tail.clear()

    def charge(self, now: float, compute_s: float, k: int, own_s: float) -> tuple[float, float]:
        """What the holder's event now starting (k iterations of `own_s` each, `compute_s` of it its GPU's own
        work: its exchange waits leave the GPU idle) pays for partials: (once, at its start: what accrued since
        the last event while its GPU was busy, beyond what that one prepaid; per iteration: the work each
        request now routing here asks while the event lasts, at its charge rate x the busy share, prepaid for
        the next take). A kernel that finds the holder's GPU idle (during its own exchange waits) delays
        nobody."""
        busy_fraction = compute_s / own_s if own_s > 0 else 0.0
        if not self.demand and not self.tail:      # nobody routes here (most events): nothing accrued or asked
            pre = max(0.0, 0.0 * self.busy_fraction - self.prepaid)
            self.busy_fraction = busy_fraction
            self.last_take = now
            self.prepaid = 0.0
            self.charged_s += pre + 0.0
            return pre, 0.0
        last = self.last_take
        accrued = rho = 0.0
        active = []
        for x in self._prune(now):
            begin, until, charge = x.begin, x.until, x.charge
            if charge > 0:
                lo = begin if begin > last else last
                if now > lo:
                    accrued += charge * (now - lo)
                rho += charge
                active.append((until, charge))
        for x in self.tail:         # ended since the last take
            begin, until, charge = x.begin, x.until, x.charge
            lo = begin if begin > last else last
            if until > lo:
                accrued += charge * (until - lo)
        self.tail.clear()
        pre = max(0.0, accrued * self.busy_fraction - self.prepaid)
        self.busy_fraction = busy_fraction
        stretch = 0.0
        if active and k > 0:
            # the event lasts k own_s / (1 - rho f) while all of them ask; each asks only until it ends
            horizon = k * own_s / (1.0 - min(rho * busy_fraction, MAX_UTILISATION))
            asked = sum(charge * (until - now if until - now < horizon else horizon) for until, charge in active)
            stretch = asked * busy_fraction / k
        self.last_take = now
        self.prepaid = stretch * k
        self.charged_s += pre + self.prepaid
        return pre, stretch

    def prepay(self, seconds: float) -> None:
        """The holder's event under way was lengthened by `seconds` of partial work (`InstanceEngine.absorb`)."""
        self.prepaid += seconds
        self.charged_s += seconds

    def unprepay(self, seconds: float) -> None:
        """The event was cut short: the stretch of the iterations it did not run was not paid."""
        self.prepaid -= seconds
        self.charged_s -= seconds


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
        self.round_trips = 0            # legs costed, and their query + partial messages' network seconds (the
        self.network_s = 0.0            # sampled pair per leg): how much the links' other traffic slows a route
        self._fast = hasattr(net, "message_route") and hasattr(net, "send_message")
        # the message model's `send` called positionally (FlowEngine.send_message's own body, one call less per
        # message); a network without one goes through `message_delay`
        messages: Any = getattr(net, "messages", None) if self._fast else None
        self._send_direct = messages.send if hasattr(messages, "send") else None
        self._send_legs = getattr(messages, "send_legs", None)      # an event's legs' queries and partials in one call
        self._account_messages = getattr(messages, "account_messages", None)    # and their later exchanges' in one
        # requester eid -> holder engine -> `_legs` (the one cache of the pair's message routes and fabric)
        self._legs_of: dict[int, dict[Any, tuple[Any, Any, float, float, float]]] = {}
        self._kernels: dict[tuple, float] = {}   # (step, sharing, rows, keys, dense) -> one kernel call (a query's scalars or the queries' tuples)
        # requester eid -> (its last event's groups, them as (holder, [rows, keys, premium]) items, their
        # `_static_legs`): a requester's consecutive events mostly route the same groups (a steady decode batch)
        self._static: dict[int, tuple[dict, list, tuple[list[tuple], list[tuple], list[tuple]]]] = {}
        # (holder, rows, keys, premium) -> {sharing: kernel x premium}: a leg's kernels, kept across requesters and
        # their groups' changes (bounded as `_kernels`)
        self._kernels_of: dict[tuple, dict[int, float]] = {}

    def _legs(self, engine: "InstanceEngine", holder: "InstanceEngine") -> tuple[Any, Any, float, float, float]:
        """The pair's (query leg, partial leg, probe s, turnaround s, single-block rate) (its fabric's
        constants unpacked once); `iteration` keeps them per requester and holder."""
        fab = self.fabric_of(engine, holder)
        if self._fast:
            out, back = self.net.message_route(engine.gpu, holder.gpu), self.net.message_route(holder.gpu, engine.gpu)
        else:
            out, back = (engine.gpu, holder.gpu), (holder.gpu, engine.gpu)
        return out, back, fab.t_probe_s, fab.turnaround_s, fab.single_block_Bps

    def _send(self, leg: Any, nbytes: float, *, t_probe_s: float, single_block_Bps: float,
              include_latency: bool = False) -> float:
        """A network without a message model (`message_delay` only): the delay of one message of the leg."""
        return self.net.message_delay(leg[0], leg[1], nbytes, t_probe_s=t_probe_s,
                                      single_block_Bps=single_block_Bps, include_latency=include_latency)

    def _send_positional(self, leg: Any, nbytes: float, t_probe_s: float, single_block_Bps: float, _now: float,
                         include_latency: bool) -> float:
        """`MessageModel.send`'s signature over a network without one (`_send`)."""
        return self._send(leg, nbytes, t_probe_s=t_probe_s, single_block_Bps=single_block_Bps,
                          include_latency=include_latency)

    def _static_legs(self, engine: "InstanceEngine", items: list) -> tuple[list[tuple], list[tuple], list[tuple]]:
        """What an event's legs need that does not change while its groups do not: per holder (holder, its
        partials, queries, rows, keys, premium, {sharing: kernel x premium}); per leg its sends (query route, query
        bytes, probe s, partial route, partial bytes, turnaround s, single-block rate), as `MessageModel.send_legs`
        takes them; and their messages' (route, bytes), query then partial, leg after leg (as `account_messages`
        takes them)."""
        known = self._legs_of.get(engine.eid)
        if known is None:
            known = self._legs_of[engine.eid] = {}
        tp, q_bytes, p_bytes, kernels_of = self.tp, self.q_bytes, self.p_bytes, self._kernels_of
        static: list[tuple] = []
        sends: list[tuple] = []
        messages: list[tuple] = []
        for holder, (rows, keys, premium) in items:
            route = known.get(holder)
            if route is None:
                route = known[holder] = self._legs(engine, holder)
            leg_out, leg_back, t_probe_s, turnaround_s, single_block_Bps = route
            shape = (holder, tuple(rows), tuple(keys), premium)
            kernel_of = kernels_of.get(shape)
            if kernel_of is None:
                if len(kernels_of) >= KERNEL_SHAPES_KEPT:
                    kernels_of.clear()
                kernel_of = kernels_of[shape] = {}
            total_rows = sum(rows)
            out_bytes, back_bytes = total_rows * q_bytes / tp, total_rows * p_bytes / tp
            static.append((holder, holder.partials, len(rows), rows, keys, premium, kernel_of))
            sends.append((leg_out, out_bytes, t_probe_s, leg_back, back_bytes, turnaround_s, single_block_Bps))
            messages += ((leg_out, out_bytes), (leg_back, back_bytes))
        return static, sends, messages

    def _kernel(self, step: Any, sharing: int, rows: list, keys: list, premium: float) -> float:
        """One kernel call shared by `sharing` requesters, each with this one's queries (as it sees them); one
        query per requester (the common case) is the scalar form, every query alike (kept per exact shape: the
        step model is a pure function of it). A selection's kernel has a premium > 1: its tokens gather apart
        (no prefill block)."""
        kernels, queries = self._kernels, len(rows)
        if queries == 1:
            shape = (step, sharing, rows[0], keys[0], premium == 1.0)
            kernel = kernels.get(shape)
            if kernel is None:
                if len(kernels) >= KERNEL_SHAPES_KEPT:
                    kernels.clear()
                kernel = kernels[shape] = step.holder_partial_s(sharing, rows[0], keys[0]) if premium == 1.0 \
                    else step.holder_partial_s(sharing, rows[0], keys[0], dense=False)
            return kernel
        shape = (step, sharing, tuple(rows), tuple(keys), premium == 1.0)
        kernel = kernels.get(shape)
        if kernel is None:
            others = sharing > 1
            if premium == 1.0:
                kernel = step.holder_partial_s(queries * sharing, rows * sharing if others else rows,
                                               keys * sharing if others else keys)
            else:
                kernel = step.holder_partial_s(queries * sharing, rows * sharing if others else rows,
                                               keys * sharing if others else keys, dense=False)
            if len(kernels) >= KERNEL_SHAPES_KEPT:
                kernels.clear()
            kernels[shape] = kernel
        return kernel

    def iteration(self, engine: "InstanceEngine", groups: dict, k: int,
                  compute_s: float) -> tuple[float, float, EventLegs]:
        """(exchange seconds, of which holder wait, per-holder legs for `settle` / `retract`) added to each
        iteration of a k-iteration event whose compute is `compute_s` per iteration. `groups` maps a holder
        engine to [rows, key_tokens, premium]: one entry per query in the lists (each routing sequence's own),
        and the batch's largest premium (the sparse kernel's factor over dense, `RouteShare.premium`).

        Once per routed leg of every requester event (the hot path of a routed run): what does not change while
        the groups do not is kept per requester (`_static_legs`); the holder's side of the leg is
        `HolderPartials.ask` (its fluid queue's formulas live there only)."""
        now, ex, me = engine.env.now, self.exchanges, engine.eid
        cached = self._static.get(me)
        if cached is None or cached[0] is not groups:    # the engine hands the same groups again while they hold
            items = list(groups.items())    # in order: the legs' sends queue on the links in this order
            if cached is None or cached[1] != items:
                cached = (groups, items, self._static_legs(engine, items))
            else:
                cached = (groups, items, cached[2])
            self._static[me] = cached
        static, sends, messages = cached[2]
        if self._send_legs is not None:
            delays = self._send_legs(sends, messages, now)
        else:
            send = self._send_direct or self._send_positional          # the message model, called directly
            delays = [(send(leg_out, out_bytes, t_probe_s, single_block_Bps, now, False),
                       send(leg_back, back_bytes, turnaround_s, single_block_Bps, now, False))
                      for leg_out, out_bytes, t_probe_s, leg_back, back_bytes, turnaround_s, single_block_Bps in sends]
        merge_s = self.merge_s
        legs = []
        bare = 0.0                      # the slowest round trip without holder waits
        for (holder, partials, queries, rows, keys, premium, kernel_of), (out, back) in zip(static, delays):
            rho, others = partials.others(now, me)
            sharing = 1 + others
            # the n requesters routing here share one call (`_kernel`)
            kernel = kernel_of.get(sharing)
            if kernel is None:
                kernel = kernel_of[sharing] = self._kernel(holder.step, sharing, rows, keys, premium) * premium
            self.network_s += out + back
            rt = out + kernel + back + merge_s
            if rt > bare:
                bare = rt
            legs.append((holder, partials, queries, kernel, sharing, rho, rt))
        self.round_trips += len(legs)
        span = k * (compute_s + ex * bare)   # the event's duration: the rate its partial work is asked at
        worst, worst_wait = 0.0, 0.0
        settled = EventLegs()
        settled.messages = messages
        calls = ex * k
        for holder, partials, queries, kernel, sharing, rho, rt in legs:
            share = kernel / sharing
            wait, entry = partials.ask(share, calls, queries, now, span, holder.busy, holder.layer_s, rho, me, kernel)
            if entry is not None and entry.charge > 0:
                holder.absorb(entry, now)       # the holder's event under way runs its share now
            settled.append((holder, share, queries, entry, wait, sharing))
            if rt + wait > worst:
                worst, worst_wait = rt + wait, wait
        return ex * worst, ex * worst_wait, settled

    def settle(self, legs: "EventLegs", k: int) -> None:
        """The event's exchanges ran k iterations: count their messages and the network's bytes of all but the
        one sampled per leg (which `send_legs` counted)."""
        ex = self.exchanges
        calls = ex * k
        self.messages += 2 * calls * len(legs)
        for holder, _share, _queries, _entry, wait, sharing in legs:
            holder.partials.served(calls, wait, sharing)
        more = calls - 1 if self._fast else 0
        if more > 0:
            now = self.net.env.now
            if self._account_messages is not None:
                self._account_messages(legs.messages, more, now)
            else:
                account = self.net.messages.account
                for route, nbytes in legs.messages:
                    account(route, nbytes, more, now)

    def retract(self, engine: "InstanceEngine", legs: list[tuple], done: int, k: int) -> None:
        """The k-iteration event was cut after `done`: the holders' partial work for the rest did not run."""
        calls = self.exchanges * (k - done)
        for holder, kernel_share, queries, entry, *_ in legs:
            holder.partials.retract(kernel_share, calls, queries, entry, done / k)
