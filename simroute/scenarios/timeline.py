"""Export one run as Chrome trace-event JSON, the format ui.perfetto.dev and chrome://tracing load.

Tracks (processes, named by metadata events):
- requesters: each request an async slice from arrival to completion on its requester instance, with two
  nested phases, "to first token" (arrival -> TTFT: prefill, attends, queueing) and "decode";
- network flows: each bulk flow an async slice on its source GPU (bytes, spine, tag in args);
- holders: each engine event's holder partial work (placed at the event's start: the log keeps its length,
  not its offset), from the iterations table;
- staging: each holder's staging pool (copies waiting / copying) as counter tracks;
- instance engines: each engine event (a batch of iterations) a slice on its instance, when the run logged them.
Async events (`b` / `e` with an id) are used because requests, flows and batches overlap on one instance.
No value is NaN or infinite: non-finite fields are left out of `args`, events without a finite time are dropped.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from simroute.ioutil import dumps_json, write_text_atomic

REQUESTERS, FLOWS, HOLDERS, STAGING, ENGINES = 1, 2, 3, 4, 5
PROCESS_NAMES = {REQUESTERS: "requesters", FLOWS: "network flows", HOLDERS: "holders", STAGING: "staging pools",
                 ENGINES: "instance engines"}
PHASES = frozenset("XBEbeinCMsft")      # trace-event phases this exporter may write (validate_events)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(v)


def _args(**kw: Any) -> dict[str, Any]:
    """Plain JSON values only: numpy scalars unwrapped, non-finite numbers dropped."""
    out = {}
    for k, v in kw.items():
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, float) and not math.isfinite(v):
            continue
        if v is not None:
            out[k] = v
    return out


def _async(ev: list, name: str, cat: str, pid: int, tid: int, uid: str, t0_s: float, t1_s: float,
           args: dict[str, Any] | None = None) -> None:
    """An async slice [t0, t1] (microseconds in the file), skipped if either end is not finite."""
    if not (_finite(t0_s) and _finite(t1_s)):
        return
    begin = {"name": name, "cat": cat, "ph": "b", "ts": t0_s * 1e6, "pid": pid, "tid": tid, "id": uid}
    if args:
        begin["args"] = args
    ev.append(begin)
    ev.append({"name": name, "cat": cat, "ph": "e", "ts": max(t1_s, t0_s) * 1e6, "pid": pid, "tid": tid, "id": uid})


def request_events(ev: list, requests, limit: int) -> None:
    req = requests.to_pandas()
    req = req[req.status == "completed"].head(limit)
    for r in req.itertuples(index=False):
        uid, tid, t0 = f"r{r.request_id}", int(r.requester), float(r.arrival_s)
        args = _args(ttft_ms=float(r.ttft_s) * 1e3, tpot_ms=float(r.tpot_s) * 1e3, route=int(r.n_route),
                     fetch=int(r.n_fetch), local=int(r.n_local), output_tokens=int(r.output_tokens))
        _async(ev, f"request {r.request_id}", "request", REQUESTERS, tid, uid, t0, t0 + float(r.e2e_s), args)
        _async(ev, "to first token", "request", REQUESTERS, tid, uid, t0, t0 + float(r.ttft_s))
        _async(ev, "decode", "request", REQUESTERS, tid, uid, t0 + float(r.ttft_s), t0 + float(r.e2e_s))


def flow_events(ev: list, flows, limit: int) -> dict[str, int]:
    """Flows on their source GPU's track; returns the track ids given to GPU names."""
    df = flows.to_pandas().head(limit)
    tids: dict[str, int] = {}
    for f in df.itertuples(index=False):
        tid = tids.setdefault(str(f.src), len(tids))
        _async(ev, f"{f.tag or 'flow'} {f.src} -> {f.dst}", "flow", FLOWS, tid, f"f{f.fid}", float(f.start_s),
               float(f.end_s), _args(bytes=float(f.nbytes), spine=f.spine, sport=int(f.sport)))
    return tids


def holder_work_events(ev: list, iterations, limit: int) -> None:
    it = iterations.to_pandas()
    if "holder_work_s" not in it:
        return
    it = it[it["holder_work_s"] > 0].head(limit)
    for i, row in enumerate(it.itertuples(index=False)):
        _async(ev, "holder partials", "holder", HOLDERS, int(row.instance), f"w{i}", float(row.t_start_s),
               float(row.t_start_s) + float(row.holder_work_s))


def staging_events(ev: list, staging, limit: int) -> None:
    for row in staging.to_pandas().head(limit).itertuples(index=False):
        if _finite(row.time_s):
            ev.append({"name": f"staging of holder {int(row.holder)}", "ph": "C", "ts": float(row.time_s) * 1e6,
                       "pid": STAGING, "tid": int(row.holder),
                       "args": {"waiting": int(row.waiting), "copying": int(row.copying)}})


def build_events(tables: dict[str, Any], max_events: int = 500_000) -> list[dict[str, Any]]:
    """Every track's events (each kind capped at `max_events` rows), then the track-naming metadata."""
    ev: list[dict[str, Any]] = []
    request_events(ev, tables["requests"], max_events)
    gpu_tids = flow_events(ev, tables["net_flows"], max_events) if tables.get("net_flows") is not None else {}
    if tables.get("staging") is not None:
        staging_events(ev, tables["staging"], max_events)
    if tables.get("iterations") is not None:
        holder_work_events(ev, tables["iterations"], max_events)
        from simroute.sim.engine.log import iteration_events
        ev.extend(e for e in iteration_events(tables["iterations"], pid=ENGINES, max_events=max_events)
                  if _finite(e["ts"]) and _finite(e["dur"]))
    for pid, name in PROCESS_NAMES.items():
        ev.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
    for gpu, tid in gpu_tids.items():
        ev.append({"name": "thread_name", "ph": "M", "pid": FLOWS, "tid": tid, "args": {"name": gpu}})
    return ev


def validate_events(doc: dict[str, Any]) -> list[str]:
    """Problems of a trace-event document against the Chrome trace-event format (empty: none)."""
    problems = []
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        return ["traceEvents is not a list"]
    open_async: dict[tuple, int] = {}
    for i, e in enumerate(events):
        where = f"event {i} ({e.get('name')!r})"
        if e.get("ph") not in PHASES:
            problems.append(f"{where}: phase {e.get('ph')!r}")
        if not isinstance(e.get("name"), str) or not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            problems.append(f"{where}: name, pid and tid must be a string and integers")
        if e.get("ph") != "M" and not _finite(e.get("ts")):
            problems.append(f"{where}: ts {e.get('ts')!r} is not a finite number")
        if e.get("ph") == "X" and not (_finite(e.get("dur")) and e["dur"] >= 0):
            problems.append(f"{where}: dur {e.get('dur')!r}")
        if e.get("ph") in ("b", "e"):
            key = (e.get("cat"), e.get("id"), e.get("name"))
            open_async[key] = open_async.get(key, 0) + (1 if e["ph"] == "b" else -1)
        if e.get("ph") == "C" and not all(_finite(v) for v in (e.get("args") or {}).values()):
            problems.append(f"{where}: counter values must be finite numbers")
    problems += [f"async slice {k} has unmatched begin/end" for k, n in open_async.items() if n]
    return problems


def write_timeline(path: str | Path, tables: dict[str, Any]) -> Path:
    """Write the run's trace-event JSON (strict JSON: NaN would make it unloadable)."""
    doc = {"traceEvents": build_events(tables), "displayTimeUnit": "ms"}
    write_text_atomic(path, dumps_json(doc))
    return Path(path)
