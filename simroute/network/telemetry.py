"""Network telemetry: per-link bytes and utilisation, per-spine concurrent flows, per-flow FCTs.

Recorded on change only: a link's bytes are integrated when its load changes (never per event per
link), the utilisation series (piecewise-constant segments) only when `record_series` is on.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from simroute.ioutil import atomic_path, check_replaceable

if TYPE_CHECKING:
    import pandas as pd

    from simroute.network.engine import FlowEngine, FlowRecord


class Telemetry:
    def __init__(self, engine: "FlowEngine", *, record_series: bool = False, keep_records: bool = True) -> None:
        self._e = engine
        n = len(engine.cap)
        self.record_series = record_series
        self.keep_records = keep_records
        self.link_bytes = [0.0] * n
        self._lt = [0.0] * n
        self.series: list[tuple[int, float, float, float]] = []     # (link, t0, t1, utilisation)
        self.spine_active: dict[str, int] = {}
        self.spine_series: list[tuple[float, str, int]] = []        # (t, spine, active flows from t on)
        self.records: list["FlowRecord"] = []
        self.n_done = 0

    def touch(self, l: int, now: float) -> None:
        """Integrate link l's bytes up to now (called just before its load changes)."""
        t0 = self._lt[l]
        if now > t0:
            ld = self._e.load[l]
            if ld > 0:
                self.link_bytes[l] += ld * (now - t0)
                if self.record_series:
                    self.series.append((l, t0, now, ld / self._e.cap[l]))
            self._lt[l] = now

    def flush(self, now: float | None = None) -> None:
        now = self._e.env.now if now is None else now
        for l in range(len(self._lt)):
            self.touch(l, now)

    def spine_change(self, spine: str, delta: int, now: float) -> None:
        c = self.spine_active.get(spine, 0) + delta
        self.spine_active[spine] = c
        self.spine_series.append((now, spine, c))

    def flow_done(self, rec: "FlowRecord") -> None:
        self.n_done += 1
        if self.keep_records:
            self.records.append(rec)

    # ---- views --------------------------------------------------------------------------------
    def spine_profile(self, t0: float, t1: float) -> dict[str, dict[str, float]]:
        """Per spine over [t0, t1]: time-averaged and peak concurrent flows."""
        out: dict[str, dict[str, float]] = {}
        last: dict[str, tuple[float, int]] = {}
        for t, s, c in self.spine_series:
            if t > t1:
                break
            pt, pc = last.get(s, (t0, 0))
            o = out.setdefault(s, {"mean": 0.0, "peak": 0})
            a = max(pt, t0)
            if t > a:
                o["mean"] += pc * (t - a)
            if t >= t0:
                o["peak"] = max(o["peak"], c)
            last[s] = (t, c)
        for s, (pt, pc) in last.items():
            a = max(pt, t0)
            out[s]["mean"] = (out[s]["mean"] + (pc * (t1 - a) if t1 > a else 0.0)) / max(t1 - t0, 1e-300)
        return out

    def flows_frame(self) -> "pd.DataFrame":
        import pandas as pd
        r = self.records
        return pd.DataFrame({
            "fid": [x.fid for x in r], "src": [x.src for x in r], "dst": [x.dst for x in r],
            "nbytes": [x.nbytes for x in r], "start_s": [x.start for x in r], "end_s": [x.end for x in r],
            "fct_s": [x.end - x.start for x in r], "spine": [x.spine for x in r], "sport": [x.sport for x in r],
            "n_links": [len(x.links) for x in r], "tag": [None if x.tag is None else str(x.tag) for x in r]})

    def links_frame(self) -> "pd.DataFrame":
        import pandas as pd
        self.flush()
        msg = [0.0] * len(self.link_bytes)
        for c in self._e._mcache.values():
            for l in c[0]:
                msg[l] += c[6]
        L = self._e.topology.links
        span = max(self._e.env.now, 1e-300)
        return pd.DataFrame({
            "link": [l.id for l in L], "src": [l.src for l in L], "dst": [l.dst for l in L],
            "tier": [l.tier for l in L], "capacity_Bps": [l.capacity_Bps for l in L],
            "bulk_bytes": self.link_bytes, "message_bytes": msg,
            "mean_utilisation": [b / (l.capacity_Bps * span) for b, l in zip(self.link_bytes, L)]})

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
        with atomic_path(directory, directory=True) as tmp:
            for name, df in frames.items():
                pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp / f"{name}.parquet")
        return directory
