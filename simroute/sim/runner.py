"""Build a simulation from (topology, trace, profile, config), run it, and write what happened.

The simulator composes the layers: the model's predicate and constants (via the profile), the network
engine (flows and messages on real paths), and the workload (streamed request batches).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import simpy

from simroute.calib import load_profile
from simroute.errors import ConfigurationError
from simroute.ioutil import sha256_file
from simroute.model.cost import FabricParams
from simroute.model.scalar import ScalarModel, _interp
from simroute.network import FlowEngine, load_topology
from simroute.sim.cluster import ChunkStore, Instance
from simroute.sim.config import RunConfig
from simroute.sim.dispatcher import Dispatchers
from simroute.sim.holder import FifoServer, HolderServer, StagingPool
from simroute.sim.metrics import Recorder, summarise, write_outputs
from simroute.sim.placement import place
from simroute.sim.request import RequestFlow
from simroute.sim.selection import SelectionFlow
from simroute.workload import iter_request_batches, read_chunks, read_trace_meta
from simroute.workload.validate import RequestChecker, check_chunks

REQ_COLS = ["request_id", "arrival_s", "after_id", "think_s", "requester_hint", "prefill_hint", "prompt_tokens",
            "output_tokens", "chunk_ids", "chunk_at_cached_offset", "topk", "holders_spanned"]


@dataclass
class RunResult:
    summary: dict[str, Any]
    perf: dict[str, Any]
    tables: dict[str, Any]


class Simulation(RequestFlow, SelectionFlow):
    """One run. `run()` returns a RunResult; `write(dir)` stores it."""

    def __init__(self, cfg: RunConfig, progress: Callable[[int, int], None] | None = None) -> None:
        self.cfg = cfg
        self.progress = progress
        self.topology = load_topology(cfg.topology)
        self.profile = load_profile(cfg.calib)
        self.params = self.profile.cost_params(cfg.model, route_exchanges=cfg.route_exchanges,
                                               prefill_us=cfg.prefill_us)
        p = self.params
        self.env = simpy.Environment()
        self.net = FlowEngine(self.env, self.topology, routing=cfg.routing, seed=cfg.seed,
                              record_series=cfg.link_series, keep_records=cfg.telemetry)
        g = p.geometry
        self.kv_bytes_per_token = g.b_kv * g.layers * g.token_fraction
        self.prefill_s_per_token = g.layers * p.prefill_s_per_token_layer
        self.holder_curve = lambda n: _interp(n, p.holder_n, p.holder_s)
        self.splice_s = lambda ct: _interp(ct, p.splice_ct, p.splice_s)
        self.scalar = ScalarModel(p)
        self.floor_model = ScalarModel(replace(p, host_overhead=False))   # the simulator charges no host overhead
        self._build_instances()
        self.dispatchers = Dispatchers(self, cfg.dispatch_window_us * 1e-6)
        self._fabric_cache: dict[tuple[int, int], int] = {}
        self.meta = read_trace_meta(cfg.trace)
        self._build_chunks()
        n = int(self.meta["requests"])
        if cfg.max_requests is not None:
            n = min(n, cfg.max_requests)
        self.n_requests = n
        self.rec = Recorder(n)
        self.active = np.zeros(len(self.instances), dtype=np.int64)
        self._done: dict[int, simpy.Event] = {}
        self.completed = 0
        self._rr = 0

    # ---- construction -------------------------------------------------------------------------------
    def _build_instances(self) -> None:
        cfg, topo = self.cfg, self.topology
        gpus = topo.gpus
        per_host = len(gpus) // max(1, len({topo.host_of(x) for x in gpus}))
        if per_host % cfg.tp:
            raise ConfigurationError(f"tp = {cfg.tp} does not divide the {per_host} GPUs of a host", field="tp")
        elbow = int(self.profile.constants["staging_elbow_streams"].value) \
            if "staging_elbow_streams" in self.profile.constants else 8
        self.instances: list[Instance] = []
        for i, gpu in enumerate(gpus[::cfg.tp]):
            env = self.env
            self.instances.append(Instance(
                id=i, gpu=gpu, host=topo.host_of(gpu), capacity_bytes=cfg.hbm_gb * 1e9,
                compute=FifoServer(env, 1),
                holder=HolderServer(env, i, self.holder_curve, cfg.batch_window_us * 1e-6, cfg.holder_streams,
                                    record=cfg.telemetry),
                staging=StagingPool(env, cfg.staging_streams, elbow, cfg.staging_copy_GBps * 1e9,
                                    record=cfg.telemetry)))

    def _build_chunks(self) -> None:
        t = read_chunks(self.cfg.trace)
        self._sorted_chunk_ids = check_chunks(self.cfg.trace, t)
        col = lambda name: t.column(name).to_numpy(zero_copy_only=False)
        self.chunks = ChunkStore(col("chunk_id").astype(np.int64), col("tokens").astype(np.int64),
                                 col("cached_offset").astype(np.int64), col("canonical").astype(bool),
                                 col("holder_hint").astype(np.int64), self.kv_bytes_per_token)
        pop = None
        if self.cfg.placement == "popularity":
            pop = self._popularity()
        res = place(self.cfg.placement, self.chunks.ids, self.chunks.bytes, self.chunks.canonical,
                    self.chunks.holder_hint, len(self.instances), self.cfg.hbm_gb * 1e9, seed=self.cfg.seed,
                    popularity=pop, replicas=self.cfg.replicas, hot_fraction=self.cfg.hot_fraction)
        self.placement = res
        for ci, hs in enumerate(res.holders):
            self.chunks.holders[ci] = list(hs)
        for inst, used in zip(self.instances, res.used_bytes):
            inst.pinned_bytes = float(used)

    def _popularity(self) -> np.ndarray:
        """How often each chunk is attended in the trace (a streamed pre-pass)."""
        counts = np.zeros(len(self.chunks.ids), dtype=np.int64)
        ids = self.chunks.ids
        order = np.argsort(ids)
        for b in iter_request_batches(self.cfg.trace, columns=["chunk_ids"]):
            flat = b.column(0).flatten().to_numpy()
            pos = np.searchsorted(ids, flat, sorter=order)
            ok = (pos < len(ids)) & (ids[order[np.minimum(pos, len(ids) - 1)]] == flat)
            np.add.at(counts, order[pos[ok]], 1)
        return counts

    # ---- lookups the request flow uses -----------------------------------------------------------------
    def fabric_id(self, a: Instance, b: Instance) -> int:
        key = (a.id, b.id)
        fid = self._fabric_cache.get(key)
        if fid is None:
            name = self.topology.fabric_between(a.gpu, b.gpu)
            if name not in self.params.fabric_index:
                raise ConfigurationError(
                    f"topology {self.cfg.topology} puts {a.gpu} -> {b.gpu} on fabric '{name}', which profile "
                    f"'{self.profile.name}' lacks (it has: {', '.join(self.params.fabric_index)}); fix the "
                    f"topology's fabric names or use a profile that calibrates '{name}'",
                    file=self.cfg.calib, field=f"fabrics.{name}")
            fid = self._fabric_cache[key] = self.params.fabric_index[name]
        return fid

    def path_share(self, src: Instance, dst: Instance) -> float:
        """Bytes/s a new transfer src -> dst would get now: the least, over its path's links, of what bulk flows
        leave (or a fair share among them). Live link state for the adaptive policy."""
        topo, net = self.topology, self.net
        links, _ = topo.path_ids(topo.index(src.gpu), topo.index(dst.gpu), 0)
        share = float("inf")
        for l in links:
            cap = net.cap[l]
            n = net.link_n[l]
            s = max(cap - net.load[l], cap / (n + 1)) if n else cap
            share = min(share, s)
        return share

    def fabric(self, a: Instance, b: Instance) -> FabricParams:
        return self.params.fabrics[self.fabric_id(a, b)]

    def _decision(self, r: int, ci: int, holder: int, prim: int) -> None:
        self.rec.decision(r, int(self.chunks.ids[ci]), holder, prim)

    def done_event(self, r: int) -> simpy.Event:
        ev = self._done.get(r)
        if ev is None:
            ev = self._done[r] = self.env.event()
        return ev

    def _requester(self, hint: int, chunk_idx: list[int]) -> Instance | None:
        n = len(self.instances)
        router = self.cfg.router
        if router == "hint" and hint >= 0:
            return self.instances[hint] if hint < n else None
        if router == "round-robin":
            self._rr = (self._rr + 1) % n
            return self.instances[self._rr]
        if router == "locality" and chunk_idx:
            score = np.zeros(n)
            for ci in chunk_idx:
                for h in self.chunks.holders[ci]:
                    score[h] += self.chunks.tokens[ci]
            if score.max() > 0:
                best = np.flatnonzero(score == score.max())
                return self.instances[int(best[np.argmin(self.active[best])])]
        # Least-loaded; ties rotate round-robin so an idle cluster still spreads its requests.
        least = np.flatnonzero(self.active == self.active.min())
        self._rr += 1
        return self.instances[int(least[self._rr % len(least)])]

    # ---- arrivals ------------------------------------------------------------------------------------
    def _feeder(self):
        """Stream request batches; open-loop requests start at arrival_s, closed-loop ones after their parent."""
        env, n = self.env, self.n_requests
        seen = 0
        until = self.cfg.until_s
        checker = RequestChecker(self.cfg.trace, self._sorted_chunk_ids)
        for batch in iter_request_batches(self.cfg.trace, columns=REQ_COLS + ["parent_id"]):
            if seen >= n:
                break
            checker.check(batch)
            cols = {name: batch.column(name) for name in REQ_COLS}
            ids = cols["request_id"].to_numpy()
            arrival = cols["arrival_s"].to_numpy()
            after = cols["after_id"].to_numpy()
            think = cols["think_s"].to_numpy()
            hint = cols["requester_hint"].to_numpy()
            pf_hint = cols["prefill_hint"].to_numpy()
            prompt = cols["prompt_tokens"].to_numpy()
            output = cols["output_tokens"].to_numpy()
            topk = cols["topk"].to_numpy()
            spanned = cols["holders_spanned"].to_numpy()
            offs = cols["chunk_ids"].offsets.to_numpy()
            flat_ids = cols["chunk_ids"].flatten().to_numpy()
            flat_cached = cols["chunk_at_cached_offset"].flatten().to_numpy(zero_copy_only=False)
            index = self.chunks.index
            for j in range(len(ids)):
                if seen >= n:
                    break
                r = int(ids[j])
                if r >= n:
                    seen += 1
                    continue
                seen += 1
                self.rec.output_tokens[r] = output[j]
                if until is not None and arrival[j] > until and after[j] < 0:
                    self.rec.drop(r, 1)
                    continue
                a, b = offs[j], offs[j + 1]
                try:
                    chunk_idx = [index[c] for c in flat_ids[a:b].tolist()]
                except KeyError:
                    self.rec.drop(r, 3)
                    continue
                args = (r, int(hint[j]), int(pf_hint[j]), int(prompt[j]), int(output[j]), chunk_idx,
                        flat_cached[a:b].tolist(), int(topk[j]), int(spanned[j]))
                if after[j] >= 0 and after[j] < n:
                    env.process(self._closed_loop(int(after[j]), float(think[j]), args))
                    continue
                wait = float(arrival[j]) - env.now
                if wait > 0:
                    yield env.timeout(wait)
                self._start(*args)
            if self.progress:
                self.progress(seen, n)

    def _closed_loop(self, parent: int, think_s: float, args: tuple):
        yield self.done_event(parent)
        if self.rec.status[parent] == 2:
            self.rec.drop(args[0], 4)
            self.done_event(args[0]).succeed()
            return
        if think_s > 0:
            yield self.env.timeout(think_s)
        if self.cfg.until_s is not None and self.env.now > self.cfg.until_s:
            self.rec.drop(args[0], 1)
            self.done_event(args[0]).succeed()
            return
        self._start(*args)

    def _start(self, r: int, hint: int, pf_hint: int, prompt: int, output: int, chunk_idx: list[int],
               cached: list[bool], topk: int, spanned: int) -> None:
        req = self._requester(hint, chunk_idx)
        if req is None:
            self.rec.drop(r, 2)
            self.done_event(r).succeed()
            return
        pf = None
        if pf_hint >= 0:
            if pf_hint >= len(self.instances):
                self.rec.drop(r, 2)
                self.done_event(r).succeed()
                return
            pf = self.instances[pf_hint]
        self.env.process(self.request(r, req, pf, prompt, output, chunk_idx, cached, topk, spanned))

    # ---- run and outputs ---------------------------------------------------------------------------
    def run(self) -> RunResult:
        t0 = time.perf_counter()
        self.env.process(self._feeder())
        self.env.run(until=self.cfg.until_s)
        wall = time.perf_counter() - t0
        rec = self.rec
        pending = np.flatnonzero(rec.status == 0)
        for r in pending:
            if not np.isnan(rec.arrival[r]) or self.cfg.until_s is not None:
                rec.drop(int(r), 1)
        return self._result(wall)

    def _result(self, wall: float) -> RunResult:
        cfg = self.cfg
        import hashlib
        calib = hashlib.sha256("".join(sha256_file(f) for f in self.profile.files).encode()).hexdigest()
        inputs = {"topology": sha256_file(cfg.topology), "trace": sha256_file(cfg.trace),
                  "calib": calib, "calib_files": [str(f) for f in self.profile.files]}
        holders = self.instances
        extra = {
            "instances": len(holders), "gpus": len(self.topology.gpus),
            "topology": {**self.topology.summary(), "spine_names": self._spine_names()},
            "placement": {"policy": cfg.placement, "overflow_chunks": self.placement.overflow_chunks,
                          "overflow_bytes": self.placement.overflow_bytes,
                          "replicated_chunks": self.placement.replicated_chunks},
            "dispatcher": {"routed_queries": self.dispatchers.queries, "messages": self.dispatchers.messages},
            "holders": {"batches": int(sum(h.holder.batches for h in holders)),
                        "routed_queries": int(sum(h.holder.queries for h in holders)),
                        "mean_batch": (sum(h.holder.queries for h in holders) /
                                       max(1, sum(h.holder.batches for h in holders))),
                        "max_queue": int(max((h.holder.max_queue for h in holders), default=0)),
                        "max_staging_queue": int(max((h.staging.max_queue for h in holders), default=0)),
                        "evictions": int(sum(h.evictions for h in holders)),
                        "copies_refused": int(sum(h.refused for h in holders))},
            "network": self._network_summary(),
        }
        summary = summarise(self.rec, config=cfg.as_dict(), inputs=inputs, sim_time_s=float(self.env.now),
                            extra=extra)
        perf = {"wall_s": wall, "sim_s_per_wall_s": self.env.now / wall if wall > 0 else None,
                "requests_per_wall_s": summary["completed"] / wall if wall > 0 else None,
                "routed_queries_per_wall_s": extra["holders"]["routed_queries"] / wall if wall > 0 else None}
        tables = {"requests": self.rec.requests_table(), "decisions": self.rec.decisions_table(),
                  "holders": self._holder_table() if cfg.telemetry else None,
                  "staging": self._staging_table() if cfg.telemetry else None}
        tables.update(self._network_tables())
        return RunResult(summary, perf, tables)

    def _network_summary(self) -> dict[str, Any]:
        tel = self.net.telemetry
        s: dict[str, Any] = {"routing": self.cfg.routing, "flows": int(tel.n_done)}
        links = tel.links_frame()
        total = links["bulk_bytes"] + links["message_bytes"]
        s["bytes_by_tier"] = {str(k): float(v) for k, v in total.groupby(links["tier"]).sum().items()}
        s["max_link_utilisation"] = float(links["mean_utilisation"].max()) if len(links) else 0.0
        s["bottlenecks"] = tel.bottlenecks()      # per tier / hottest links: peak, p99, mean, saturated (net)
        peaks: dict[str, int] = {name: 0 for name in self._spine_names()}   # idle spines show as 0
        for _t, spine, c in tel.spine_series:
            peaks[spine] = max(peaks.get(spine, 0), c)
        s["peak_spine_concurrency"] = dict(sorted(peaks.items(), key=lambda kv: (len(kv[0]), kv[0])))
        if tel.records:
            a = np.array([r.end - r.start for r in tel.records])
            s["fct_ms"] = {"mean": float(a.mean() * 1e3), "p95": float(np.percentile(a, 95) * 1e3)}
            for tag in ("fetch", "pd", "gather"):
                t = np.array([r.end - r.start for r in tel.records if r.tag == tag])
                if t.size:
                    s[f"fct_ms_{tag}"] = {"mean": float(t.mean() * 1e3), "p95": float(np.percentile(t, 95) * 1e3),
                                          "flows": int(t.size)}
        return s

    def _network_tables(self) -> dict[str, Any]:
        if not self.cfg.telemetry:
            return {}
        import pandas as pd
        import pyarrow as pa
        tel = self.net.telemetry
        # Every spine starts at 0 flows at t = 0, so idle ones appear in the series (and the ARK heatmap).
        series = [(0.0, name, 0) for name in self._spine_names()] + list(tel.spine_series)
        frames = {"net_links": tel.links_frame(), "net_flows": tel.flows_frame(),
                  "net_spines": pd.DataFrame(series, columns=["t_s", "spine", "active_flows"])}
        if tel.record_series:
            frames["net_link_series"] = pd.DataFrame(tel.series, columns=["link", "t0_s", "t1_s", "utilisation"])
        return {k: pa.Table.from_pandas(v, preserve_index=False) for k, v in frames.items()}

    def _spine_names(self) -> list[str]:
        return sorted({l.dst for l in self.topology.links if l.dst.startswith(("spine", "core"))},
                      key=lambda n: (len(n), n))

    def _holder_table(self):
        """Routed-query queue and batches of every holder over time."""
        return _samples_table(self.instances, lambda i: i.holder.samples,
                              (("time_s", np.float64), ("queue", np.int32), ("batch_size", np.int32),
                               ("batch_duration_s", np.float64)))

    def _staging_table(self):
        """The holders' staging pools over time (DESIGN §3: both holder queues observable)."""
        return _samples_table(self.instances, lambda i: i.staging.samples,
                              (("time_s", np.float64), ("waiting", np.int32), ("copying", np.int32)))


def _samples_table(instances: list[Instance], samples, columns: tuple[tuple[str, type], ...]):
    """One table from every instance's parallel sample arrays (array.array buffers), with a holder column."""
    import pyarrow as pa
    parts: dict[str, list] = {"holder": [], **{name: [] for name, _ in columns}}
    for inst in instances:
        arrays = samples(inst)
        if len(arrays[0]):
            parts["holder"].append(np.full(len(arrays[0]), inst.id, dtype=np.int32))
            for (name, dt), a in zip(columns, arrays):
                parts[name].append(np.frombuffer(a, dtype=dt))
    types = {"holder": np.int32, **dict(columns)}
    return pa.table({k: np.concatenate(v) if v else np.zeros(0, types[k]) for k, v in parts.items()})


def simulate(cfg: RunConfig, out_dir: str | Path | None = None,
             progress: Callable[[int, int], None] | None = None, timeline: str | Path | None = None) -> RunResult:
    """Run one configuration; write its outputs atomically if `out_dir` is given (and a timeline if asked)."""
    if out_dir is not None:   # fail before simulating, not after
        from simroute.ioutil import check_replaceable
        check_replaceable(out_dir, ("summary.json",), "simroute run")
    sim = Simulation(cfg, progress=progress)
    res = sim.run()
    if out_dir is not None:
        write_outputs(Path(out_dir), res.summary, res.tables, res.perf)
    if timeline is not None:
        from simroute.sim.timeline import write_timeline
        write_timeline(timeline, res.tables)
    return res
