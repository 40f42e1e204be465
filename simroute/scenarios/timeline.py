"""Export one run as Chrome / Perfetto trace JSON (chrome://tracing, ui.perfetto.dev).

Processes: requester instances (each request a slice from arrival to completion, its TTFT an instant),
network sources (each bulk flow a slice), holders (each batch a slice, its size and the queue left behind it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from simroute.ioutil import dumps_json, write_text_atomic


def build_events(tables: dict[str, Any], max_events: int = 500_000) -> list[dict[str, Any]]:
    ev: list[dict[str, Any]] = []
    req = tables["requests"].to_pandas()
    req = req[req.status == "completed"]
    for r in req.itertuples(index=False):
        ts = r.arrival_s * 1e6
        ev.append({"name": f"request {r.request_id}", "cat": "request", "ph": "X", "ts": ts, "dur": r.e2e_s * 1e6,
                   "pid": 1, "tid": int(r.requester),
                   "args": {"ttft_ms": r.ttft_s * 1e3, "tpot_ms": r.tpot_s * 1e3, "route": int(r.n_route),
                            "fetch": int(r.n_fetch), "local": int(r.n_local)}})
        ev.append({"name": "first token", "cat": "request", "ph": "i", "s": "t", "ts": ts + r.ttft_s * 1e6,
                   "pid": 1, "tid": int(r.requester)})
        if len(ev) >= max_events:
            break
    flows = tables.get("net_flows")
    if flows is not None:
        df = flows.to_pandas()
        for f in df.itertuples(index=False):
            ev.append({"name": f"{f.tag or 'flow'} {f.src}->{f.dst}", "cat": "flow", "ph": "X", "ts": f.start_s * 1e6,
                       "dur": max(f.fct_s, 0.0) * 1e6, "pid": 2, "tid": f.src,
                       "args": {"bytes": float(f.nbytes), "spine": f.spine}})
            if len(ev) >= 2 * max_events:
                break
    holders = tables.get("holders")
    if holders is not None:
        h = holders.to_pandas()
        h = h[h.batch_size > 0]
        for row in h.itertuples(index=False):
            ev.append({"name": f"batch of {int(row.batch_size)}", "cat": "holder", "ph": "X",
                       "ts": row.time_s * 1e6, "dur": float(row.batch_duration_s) * 1e6, "pid": 3,
                       "tid": int(row.holder), "args": {"queue_after": int(row.queue)}})
            if len(ev) >= 3 * max_events:
                break
    for pid, name in ((1, "requesters"), (2, "network flows"), (3, "holders")):
        ev.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}})
    return ev


def write_timeline(path: str | Path, tables: dict[str, Any]) -> Path:
    events = build_events(tables)
    write_text_atomic(path, dumps_json({"traceEvents": events, "displayTimeUnit": "ms"},   # NaN -> null
                                       default=lambda o: o.item() if isinstance(o, np.generic) else str(o)))
    return Path(path)
