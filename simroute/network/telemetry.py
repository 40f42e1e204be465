"""Network telemetry: per-link bytes and utilisation (bulk flows and latency-bound messages), time saturated,
per-spine concurrent flows, per-flow FCTs, and `bottlenecks()`: where the network was the bottleneck.

Recorded on change only: a link's bulk bytes are integrated when its load changes (never per event per link);
at each window boundary (`window_s`, 1 ms by default) every link is integrated up to it and the window's
bytes (bulk + messages) are kept per link, so utilisation has a stated time base. At most `max_windows`
windows are kept: beyond that adjacent pairs merge and the window doubles (memory stays bounded).
Messages count where they are sent: a message's bytes go to every link of its path in the window it is
sent in (window utilisation is clipped at 1 for the queue that drains into the next one). Time saturated
counts bulk load at the capacity bulk flows are given (the link's, less the message charge).

The message charge: at each close, every link's message bytes in the window over its duration is the message
rate charged against the link's capacity for bulk flows (`BulkState.charge_messages`, applied at the instant the
window is closed; the engine steps at the boundary while bulk flows run beside messages).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import sub
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from simroute.ioutil import atomic_path, check_replaceable

if TYPE_CHECKING:
    import pandas as pd

    import simpy

    from simroute.network.bulk import BulkState
    from simroute.network.flows import FlowRecord
    from simroute.network.topology import EngineTopology

FULL_LOAD = 1 - 1e-9      # a link at or above this fraction of capacity counts as saturated
BOTTLENECK_P99 = 0.5      # a tier is named the most saturated only when its p99 window utilisation reaches this


class WindowedRoute(Protocol):
    """What telemetry reads and resets of a message route (`messages.MessageRoute`) at a window's close."""

    links: tuple[int, ...]
    spine: str | None
    window: int
    window_bytes: float


# The columns of the spine series and the link series tables (net_spines.parquet, net_link_series.parquet):
# one place for the run that writes them and the report that reads them.
SPINE_COLUMNS = ("t_s", "spine", "active_flows")
LINK_SERIES_COLUMNS = ("link", "t0_s", "t1_s", "utilisation")


class Telemetry:
    """Accumulates what the engine did; views (`links_frame`, `bottlenecks`, ...) flush up to `env.now`.

    It reads the engine's bulk state (`bulk.load`, integrated on change) and clock, and the topology's links."""

    def __init__(self, bulk: "BulkState", env: "simpy.Environment", topology: "EngineTopology", *,
                 record_series: bool = False, keep_records: bool = True, window_s: float = 1e-3,
                 max_windows: int = 1024) -> None:
        self._bulk, self._env, self._topology = bulk, env, topology
        n_links = len(bulk.cap)
        self._cap = np.array(bulk.cap)
        self._cap_list = list(bulk.cap)
        self._sat_cap = np.array(bulk.residual)          # what bulk flows are given: saturated at that load
        self._full_list = [cap * FULL_LOAD for cap in bulk.residual]     # saturated at or above (B/s)
        self.record_series = record_series
        self.keep_records = keep_records
        # Per-link clocks: Python lists while the engine is in object mode (scalar updates are cheaper),
        # arrays in array mode (batched updates); `set_array_mode` converts.
        self._bytes: list[float] | np.ndarray = [0.0] * n_links      # bulk bytes per link
        self._saturated: list[float] | np.ndarray = [0.0] * n_links  # bulk load at capacity, s per link
        self._link_t: list[float] | np.ndarray = [0.0] * n_links
        self.message_link_bytes = np.zeros(n_links)      # message bytes per link (closed windows)
        self.series: list[tuple[int, float, float, float]] = []     # (link, t0, t1, utilisation)
        self.spine_active: dict[str, int] = {}
        self.spine_series: list[tuple[float, str, int]] = []        # (t, spine, active flows from t on)
        self.spine_message_bytes: dict[str, float] = {}
        self.records: list["FlowRecord"] = []
        self.n_done = 0
        self.window_s = float(window_s)
        self.max_windows = max(2, int(max_windows) // 2 * 2)
        self.window_index = 0
        self.window_end = self.window_s
        self.windows: list[np.ndarray | None] = []       # bytes per link in each closed window (None: idle)
        self._window_mark: list[float] | np.ndarray = [0.0] * n_links   # link_bytes at the window's start
        # Object mode: a window closes over the links that can hold bytes in it, not over every link: those
        # loaded at the last close and those a flow joined since (`joined`, which the engine fills: a link
        # unloaded at the last close carries bulk bytes only after a flow joins it).
        self._live: set[int] = set()
        self.joined: set[int] = set()
        self.message_routes: list[WindowedRoute] = []   # routes with message bytes in the current window
        self._message_bytes: dict[int, float] = {}      # message bytes per link in the last closed window
        self._message_window_s = self.window_s             # and that window's duration
        self._deferred: tuple[dict[int, float], float] | None = None    # a charge waiting for a bulk flow
        # the engine's: a step at this time (the open window's end, once messages ride beside bulk flows)
        self.on_boundary: Callable[[float], None] | None = None
        self.charging = True          # False: message rates are measured, never charged (`FlowEngine.message_charge`)

    # ---- recording (called by the engine and the message model) ------------------------------------
    @property
    def link_bytes(self) -> np.ndarray:
        """Bulk bytes per link integrated so far (call `flush` first for up to now)."""
        return np.array(self._bytes, dtype=float)

    @property
    def saturated_s(self) -> np.ndarray:
        """Seconds each link's bulk load was at capacity."""
        return np.array(self._saturated, dtype=float)

    def set_array_mode(self, on: bool) -> None:
        if not on:       # the next object-mode close visits every loaded link and every one with open-window bytes
            pending = (np.asarray(self._bytes) != np.asarray(self._window_mark)) | \
                (np.asarray(self._bulk.load, dtype=float)[:len(self._link_t)] != 0)
            self._live = set(np.flatnonzero(pending).tolist())
        convert = (lambda values: np.array(values, dtype=float)) if on else (lambda values: list(map(float, values)))
        self._bytes, self._saturated, self._link_t, self._window_mark = (
            convert(self._bytes), convert(self._saturated), convert(self._link_t), convert(self._window_mark))
        self.joined.clear()

    def bind_arrays(self, link_bytes: np.ndarray, saturated: np.ndarray, link_t: np.ndarray) -> None:
        """Keep the per-link clocks in the given arrays (views of the engine's online core, which integrates
        them in its kernel): what was recorded so far is copied in, and array mode is on for good."""
        for target, values in ((link_bytes, self._bytes), (saturated, self._saturated), (link_t, self._link_t)):
            target[:] = values
        self._bytes, self._saturated, self._link_t = link_bytes, saturated, link_t
        self._window_mark = np.array(self._window_mark, dtype=float)
        self.joined.clear()

    def touch(self, link: int, now: float) -> None:
        """Integrate one link's bulk bytes up to now (called just before its load changes)."""
        self.touch_path((link,), now)

    def touch_path(self, links: tuple[int, ...], now: float) -> None:
        """`touch` for each link of a path (one call per group change on the engine's hot path)."""
        link_t, engine_load, full = self._link_t, self._bulk.load, self._full_list
        for link in links:
            start = link_t[link]
            if now > start:
                load = engine_load[link]
                if load > 0:
                    self._bytes[link] += load * (now - start)
                    if load >= full[link]:
                        self._saturated[link] += now - start
                    if self.record_series:
                        self.series.append((link, float(start), now, float(load / self._cap_list[link])))
                link_t[link] = now

    def touch_links(self, links: np.ndarray, now: float, load: np.ndarray | None = None) -> None:
        """`touch` for many links at once (array mode, window boundaries); `load` is the engine's per-link
        load as an array when the caller has it."""
        if isinstance(self._bytes, list):
            self.touch_path(links.tolist(), now)
            return
        start = self._link_t[links]
        elapsed = np.maximum(now - start, 0.0)
        load = (np.asarray(self._bulk.load) if load is None else load)[links]
        self._bytes[links] += load * elapsed
        self._saturated[links] += np.where(load >= self._sat_cap[links] * FULL_LOAD, elapsed, 0.0)
        if self.record_series:
            cap = self._cap[links]
            keep = (elapsed > 0) & (load > 0)
            self.series.extend(zip(links[keep].tolist(), start[keep].tolist(), [now] * int(keep.sum()),
                                   (load[keep] / cap[keep]).tolist()))
        self._link_t[links] = np.maximum(start, now)

    def record_intervals(self, links: np.ndarray, starts: np.ndarray, loads: np.ndarray, now: float) -> None:
        """Append the series rows of links integrated by a kernel (their clock and load before the change)."""
        keep = (now > starts) & (loads > 0)
        self.series.extend(zip(links[keep].tolist(), starts[keep].tolist(), [now] * int(keep.sum()),
                               (loads[keep] / self._cap[links[keep]]).tolist()))

    def _integrate_all(self, now: float) -> None:
        """Integrate every loaded link up to now (an idle link has nothing to add, whatever its clock)."""
        load = np.asarray(self._bulk.load, dtype=float)[:len(self._link_t)]
        loaded = np.flatnonzero(load)
        if loaded.size:
            self.touch_links(loaded, now, load)

    def advance_to(self, now: float) -> None:
        """Close every window that ended at or before now; charge the last one's message rates (`charge`)."""
        if now < self.window_end:
            return
        while now >= self.window_end:
            self._close_window(self.window_end)
        if self.charging and (self._message_bytes or self._bulk.charged or self._deferred is not None):
            self.charge(self._message_bytes, self._message_window_s, now)

    def charge(self, window_bytes: dict[int, float], duration_s: float, now: float, *, force: bool = False) -> None:
        """Charge a window's message bytes per link over its duration against the links' capacity for bulk flows
        from `now` on (`BulkState.charge_messages`); the links whose charge moves are integrated up to now at
        their old saturation threshold, which then follows. With no bulk flow in flight the charge waits (O(1)
        per window) for the next start (`charge_deferred`), unless `force`."""
        bulk = self._bulk
        if not bulk.n_active and not force:
            self._deferred = (window_bytes, duration_s)
            return
        self._deferred = None
        moved = bulk.charge_messages(window_bytes, duration_s)
        if moved:
            ids = np.array(moved, dtype=np.int64)
            self.touch_links(ids, now)
            residual, full = bulk.residual, self._full_list
            for link in moved:
                self._sat_cap[link] = residual[link]
                full[link] = residual[link] * FULL_LOAD
        if bulk.charged and bulk.n_active and self.on_boundary is not None:
            self.on_boundary(self.window_end)

    def charge_deferred(self, now: float) -> None:
        """Apply the charge kept while no bulk flow ran (the engine's, before the first start)."""
        if self._deferred is not None and self.charging:
            self.charge(*self._deferred, now, force=True)

    def first_message(self) -> None:
        """The open window's first message (the message model's call): while bulk flows run, the engine steps at
        the window's end to charge it."""
        if self._bulk.n_active and self.on_boundary is not None:
            self.on_boundary(self.window_end)

    def _close_window(self, end: float) -> None:
        if isinstance(self._bytes, list):
            if not self._live and not self.joined and not self.message_routes:
                # object mode, nothing loaded, joined or sent since the last close (most windows of a
                # latency-bound run): the window is idle, as the full close would find it
                self._message_bytes = {}
                self._append_window(None, end)
                return
            bulk = self._close_links(end)
        else:
            self._integrate_all(end)
            link_bytes = self.link_bytes
            bulk = link_bytes - self._window_mark
            self._window_mark = link_bytes
        messages = self._flush_messages()
        total = bulk if messages is None else bulk + messages
        self._append_window(total.astype(np.float32) if total.any() else None, end)

    def _append_window(self, window: np.ndarray | None, end: float) -> None:
        """Keep a closed window's bytes per link (None: idle) and open the next one."""
        self.windows.append(window)
        self.window_index += 1
        self.window_end = end + self.window_s
        if len(self.windows) >= self.max_windows:
            self._merge_windows()

    def _close_links(self, end: float) -> np.ndarray:
        """Object mode: integrate up to `end` the links that can hold bulk bytes in the closing window (loaded
        at the last close, or joined by a flow since) and return every link's bulk bytes in it (the same
        arithmetic as integrating them all)."""
        load, link_bytes, mark = self._bulk.load, self._bytes, self._window_mark
        candidates = self._live | self.joined
        loaded = sorted(link for link in candidates if load[link])
        self.touch_path(loaded, end)
        self._live = set(loaded)
        self.joined = set()
        bulk = np.zeros(len(link_bytes))
        for link in candidates:
            moved = link_bytes[link] - mark[link]
            if moved:
                bulk[link] = moved
                mark[link] = link_bytes[link]
        return bulk

    def _flush_messages(self) -> np.ndarray | None:
        """The closing window's message bytes per link (None: none); its rates kept for `charge`."""
        if not self.message_routes:
            self._message_bytes = {}
            return None
        per_link = self._message_link_sums()
        self._message_bytes, self._message_window_s = per_link, self.window_s
        out = self._link_array(per_link)
        for route in self.message_routes:
            if route.spine is not None:
                self.spine_message_bytes[route.spine] = self.spine_message_bytes.get(route.spine, 0.0) + \
                    route.window_bytes
            route.window_bytes = 0.0
            route.window = -1
        self.message_routes = []
        self.message_link_bytes += out
        return out

    def _merge_windows(self) -> None:
        """Halve the number of windows kept by merging neighbours; the window doubles. Called when the count
        reaches `max_windows` (even), so the merged windows end where the open one starts."""
        pairs = zip(self.windows[0::2], self.windows[1::2])
        self.windows = [a if b is None else b if a is None else a + b for a, b in pairs]
        start = self.window_end - self.window_s
        self.window_s *= 2
        self.window_end = start + self.window_s

    def flush(self, now: float | None = None) -> None:
        """Integrate every link up to now (the current window stays open)."""
        self._integrate_all(self._env.now if now is None else now)

    def spine_change(self, spine: str, delta: int, now: float) -> None:
        count = self.spine_active.get(spine, 0) + delta
        self.spine_active[spine] = count
        self.spine_series.append((now, spine, count))

    def flow_done(self, record: "FlowRecord") -> None:
        self.n_done += 1
        if self.keep_records:
            self.records.append(record)

    # ---- views --------------------------------------------------------------------------------
    def _open_window_messages(self) -> np.ndarray:
        """Message bytes per link in the open window (`_message_link_sums`, as an array)."""
        return self._link_array(self._message_link_sums())

    def _message_link_sums(self) -> dict[int, float]:
        """Message bytes per link in the open window: summed per link in plain floats, in the routes' order
        (the same sums as a numpy scalar `+=` per link, which cost 5x)."""
        per_link: dict[int, float] = {}
        for route in self.message_routes:
            window_bytes = route.window_bytes
            for link in route.links:
                per_link[link] = per_link.get(link, 0.0) + window_bytes
        return per_link

    def _link_array(self, per_link: dict[int, float]) -> np.ndarray:
        out = np.zeros(len(self._link_t))
        if per_link:
            out[list(per_link)] = list(per_link.values())
        return out

    def message_bytes_per_link(self) -> np.ndarray:
        """Message bytes per link so far (closed windows and the open one)."""
        return self.message_link_bytes + self._open_window_messages()

    def flows_columns(self) -> dict[str, list[Any]]:
        """One row per finished flow (`flows_frame`'s columns, as lists)."""
        records = self.records
        if not records:
            fid = src = dst = nbytes = start = end = links = spine = sport = tag = cap = delay = ()
        else:       # the records' fields as columns in one transposition (a long run keeps ~10^5 records)
            fid, src, dst, nbytes, start, end, links, spine, sport, tag, cap, delay = zip(*records)
        return {
            "fid": list(fid), "src": list(src), "dst": list(dst), "nbytes": list(nbytes),
            "start_s": list(start), "end_s": list(end), "fct_s": list(map(sub, end, start)),
            "spine": list(spine), "sport": list(sport), "n_links": list(map(len, links)),
            "tag": [None if t is None else str(t) for t in tag],
            # what `simroute flows replay` needs (network/schema.py FLOW_COLUMNS): the pinned path, cap, delay
            "links": list(map(list, links)), "rate_cap_Bps": list(cap), "delay_s": list(delay)}

    def flows_frame(self) -> "pd.DataFrame":
        import pandas as pd
        return pd.DataFrame(self.flows_columns())

    def links_columns(self) -> dict[str, Any]:
        """One row per directed link: bulk and message bytes, mean utilisation (both), time saturated."""
        self.flush()
        links = self._topology.links
        span = max(self._env.now, 1e-300)
        messages = self.message_bytes_per_link()
        return {
            "link": [link.id for link in links], "src": [link.src for link in links],
            "dst": [link.dst for link in links], "tier": [link.tier for link in links],
            "capacity_Bps": self._cap, "bulk_bytes": self.link_bytes, "message_bytes": messages,
            "mean_utilisation": (self.link_bytes + messages) / (self._cap * span),
            "saturated_s": self.saturated_s}

    def links_frame(self) -> "pd.DataFrame":
        """`links_columns` as a DataFrame."""
        import pandas as pd
        return pd.DataFrame(self.links_columns())

    def window_matrix(self, window_s: float | None = None) -> tuple[np.ndarray, np.ndarray, float]:
        """(bytes per window x link, window durations, window) up to now, windows of `window_s` (rounded to
        a whole number of recorded windows; the last one may be partial)."""
        now = self._env.now
        self.advance_to(now)
        self.flush(now)
        open_bytes = (self.link_bytes - np.asarray(self._window_mark, dtype=float)) + self._open_window_messages()
        base = self.window_s
        rows = [np.zeros(len(self._link_t), dtype=np.float32) if w is None else w for w in self.windows]
        durations = [base] * len(rows)
        open_span = now - (self.window_end - base)
        if open_span > 0 or not rows:
            rows.append(open_bytes.astype(np.float32))
            durations.append(max(open_span, 1e-300))
        matrix, dur = np.vstack(rows), np.array(durations)
        factor = 1 if window_s is None else max(1, int(round(window_s / base)))
        if factor > 1:
            groups = -(-len(dur) // factor)
            pad = groups * factor - len(dur)
            matrix = np.vstack([matrix, np.zeros((pad, matrix.shape[1]), dtype=np.float32)])
            matrix = matrix.reshape(groups, factor, -1).sum(1)
            dur = np.concatenate([dur, np.zeros(pad)]).reshape(groups, factor).sum(1)
        return matrix, dur, base * factor

    def bottlenecks(self, window_s: float | None = None, top: int = 10) -> dict[str, Any]:
        """Where the network was the bottleneck, JSON-ready: per tier and for the `top` hottest links, the peak,
        p99 and mean utilisation (bulk + messages) over windows of `window_s` (default: the recorded window),
        time saturated and bytes. Hottest = highest peak, then highest mean."""
        matrix, durations, window = self.window_matrix(window_s)
        cap = self._cap
        # A window's utilisation is clipped at 1: messages count in the window they are sent in, so a queue of
        # them that drains into the next window would otherwise read as more than the link can carry.
        util = np.minimum(matrix / (durations[:, None] * cap[None, :]), 1.0)
        span = float(durations.sum())
        messages = self.message_bytes_per_link()
        link_bytes, saturated = self.link_bytes, self.saturated_s
        total_bytes = link_bytes + messages
        mean = total_bytes / (cap * max(span, 1e-300))
        peak = util.max(0)
        links = self._topology.links
        tiers: dict[str, dict[str, float]] = {}
        tier_names = np.array([link.tier for link in links])
        for tier in dict.fromkeys(tier_names.tolist()):
            mask = tier_names == tier
            tier_util = util[:, mask]
            tiers[tier] = {
                "links": int(mask.sum()), "peak_utilisation": float(tier_util.max()),
                "p99_utilisation": float(np.percentile(tier_util, 99)),
                "mean_utilisation": float(total_bytes[mask].sum() / (cap[mask].sum() * max(span, 1e-300))),
                "saturated_link_s": float(saturated[mask].sum()),
                "bulk_bytes": float(link_bytes[mask].sum()), "message_bytes": float(messages[mask].sum())}
        order = np.lexsort((-mean, -peak))[:top]
        # the p99 of the listed links only (a column's percentile is its own: the same as over every link)
        p99 = dict(zip(order.tolist(), np.percentile(util[:, order], 99, axis=0).tolist() if len(util)
                       else [0.0] * len(order)))
        hottest = [{"link": int(i), "tier": links[i].tier, "src": links[i].src, "dst": links[i].dst,
                    "peak_utilisation": float(peak[i]), "p99_utilisation": float(p99[i]),
                    "mean_utilisation": float(mean[i]), "saturated_s": float(saturated[i]),
                    "bulk_bytes": float(link_bytes[i]), "message_bytes": float(messages[i])}
                   for i in order if total_bytes[i] > 0]
        # One flow alone fills its NIC link for a moment, so time at capacity names no bottleneck by itself: a
        # tier is the most saturated only when its p99 window utilisation reaches BOTTLENECK_P99.
        busy = {name: t for name, t in tiers.items() if t["p99_utilisation"] >= BOTTLENECK_P99}
        saturated = max(busy.items(), key=lambda kv: (kv[1]["saturated_link_s"], kv[1]["p99_utilisation"]),
                        default=(None, None))
        return {"window_s": window, "span_s": span, "tiers": tiers, "hottest_links": hottest,
                "most_saturated_tier": saturated[0], "most_saturated_floor_p99": BOTTLENECK_P99,
                "spine_message_bytes": dict(sorted(self.spine_message_bytes.items()))}

    def to_parquet(self, directory: str | Path) -> Path:
        """Write flows / links / spines (and link_series when recorded) as Parquet, atomically."""
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq
        frames: dict[str, Any] = {
            "flows": self.flows_frame(), "links": self.links_frame(),
            "spines": pd.DataFrame(self.spine_series, columns=["t_s", "spine", "active_flows"]),
        }
        if self.record_series:
            frames["link_series"] = pd.DataFrame(self.series, columns=["link", "t0_s", "t1_s", "utilisation"])
        directory = Path(directory)
        check_replaceable(directory, ("flows.parquet", "links.parquet"), "telemetry export")
        with atomic_path(directory, directory=True, what="telemetry export") as tmp:
            for name, df in frames.items():
                pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp / f"{name}.parquet")
        return directory
