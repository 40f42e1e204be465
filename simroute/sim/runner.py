"""Build a simulation from (topology, trace, profile, config), run it, and write what happened.

The simulator composes the layers: the model's predicate and constants (via the profile), the network
engine (flows and messages on real paths), and the workload (streamed request batches). `Simulation`
builds one `SimContext` and hands it to the components; it owns no request behaviour itself.
"""

from __future__ import annotations

import gc
import hashlib
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import simpy

from simroute.arrow import group_sums, pandas_like_table, rows_as_columns, table, to_numpy
from simroute.errors import ConfigurationError
from simroute.ioutil import sha256_file
from simroute.model.geometry import ModelGeometry
from simroute.model.scalar import ScalarModel
from simroute.network import FlowEngine, load_topology
from simroute.network.schema import flows_metadata
from simroute.network.telemetry import LINK_SERIES_COLUMNS, SPINE_COLUMNS
from simroute.sim.arrivals import Arrivals, arrival_load, attendance_counts, over_window
from simroute.sim.calibration import resolve_calibration
from simroute.sim.cluster import ChunkStore, Cluster, Instance
from simroute.sim.compute import ComputeModel
from simroute.sim.config import RunConfig
from simroute.sim.context import SimContext
from simroute.sim.engine import BLOCK_TOKENS, EngineOptions
from simroute.sim.engine.build import EngineSet
from simroute.sim.engine.serving import ChunkCopies
from simroute.sim.launch import launch
from simroute.sim.pools import PrefillPool
from simroute.sim.metrics import (Recorder, holder_summary, holder_table, overload, serving_summary, summarise,
                                  write_outputs)
from simroute.sim.registry import registry, run_rng
from simroute.sim.request import path_share_Bps
from simroute.sim.schedulers.base import Scheduler
from simroute.sim.vocab import DropReason, Status
from simroute.workload import read_chunks, read_trace_meta
from simroute.workload.schema import MAX_CONCURRENCY_KEY
from simroute.workload.validate import check_chunks


@dataclass
class RunResult:
    summary: dict[str, Any]
    perf: dict[str, Any]
    tables: dict[str, Any]


def read_chunk_store(trace: str, kv_bytes_per_token: float) -> tuple[ChunkStore, np.ndarray]:
    """The trace's chunk table (validated) as a `ChunkStore`, and its sorted chunk ids (for request checks)."""
    table = read_chunks(trace)
    sorted_ids = check_chunks(trace, table)
    column = lambda name: to_numpy(table.column(name))
    store = ChunkStore(column("chunk_id").astype(np.int64), column("tokens").astype(np.int64),
                       column("cached_offset").astype(np.int64), column("canonical").astype(bool),
                       column("holder_hint").astype(np.int64), kv_bytes_per_token)
    return store, sorted_ids


def model_limits(trace: str, mode: str, geometry: ModelGeometry, chunks: ChunkStore,
                 n_requests: int) -> dict[str, Any]:
    """The trace against the model's context window, before the run starts: a request whose sequence (prompt +
    attended chunks + output tokens) exceeds it is refused here (`mode` refuse: one line naming the trace, the
    request and the window) or dropped at its arrival as the engine would refuse it (`drop`: counted in the
    summary). Returns the summary block, with the ids to drop under `_drop`."""
    from simroute.model.limits import context_problem, window_source
    ids, tokens, longest = over_window(trace, n_requests, chunks, geometry.context_window)
    if len(ids) and mode == "refuse":
        more = f"; {len(ids) - 1:,} more request(s) are too" if len(ids) > 1 else ""
        raise ConfigurationError(
            f"request {int(ids[0])} (prompt + chunks + output): {context_problem(geometry, int(tokens[0]))}{more}; "
            "--over-window drop runs the trace without them, as the engine would refuse them",
            file=trace, field="requests")
    return {"context_window": geometry.context_window, "context_window_source": window_source(geometry),
            "longest_request_tokens": longest, "over_window": int(len(ids)), "over_window_mode": mode,
            "_drop": frozenset(int(request) for request in ids)}


def check_trace_window(trace: str, model: str, *, mode: str = "refuse", max_requests: int | None = None) -> None:
    """`model_limits` on its own, before anything runs (`plan` calls it before its header): refuses a trace with a
    request past `model`'s context window under `mode` refuse."""
    from simroute.model.geometry import get_model
    chunks, _ids = read_chunk_store(trace, 0.0)
    n = int(read_trace_meta(trace)["requests"])
    model_limits(trace, mode, get_model(model), chunks, n if max_requests is None else min(n, max_requests))


class Simulation:
    """One run. `run()` returns a RunResult; `simulate()` below also writes it.

    `ctx` is the run's `SimContext`; `env`, `rec` and `instances` are shortcuts into it for scenario and
    validation code.
    """

    def __init__(self, cfg: RunConfig, progress: Callable[[int, int], None] | None = None) -> None:
        self.cfg = cfg
        self.progress = progress
        topology = load_topology(cfg.topology, hosts=cfg.hosts)
        calibration = resolve_calibration(cfg, topology.spec)      # the profile, asked once (sim/calibration.py)
        self.gpu = calibration.gpu
        params = calibration.params
        env = simpy.Environment()
        network = FlowEngine(env, topology, routing=cfg.routing, seed=cfg.seed, record_series=cfg.link_series,
                             keep_records=cfg.telemetry, message_model=calibration.messages)
        compute = ComputeModel(params)
        self.meta = read_trace_meta(cfg.trace)
        chunks, self._sorted_chunk_ids = read_chunk_store(cfg.trace, compute.kv_bytes_per_token)
        needs_popularity = registry("placement").get(cfg.placement).needs_popularity
        popularity = attendance_counts(cfg.trace, chunks.ids) if needs_popularity else None
        layout = calibration.layout          # --disagg's pools (sim/pools.py), else None
        gpus = (topology.gpus[::cfg.instance_gpus] if layout is None      # one instance per TP group or DP rank
                else [topology.gpus[first] for first, _width in layout.decode_instances])
        fabric_of = lambda a, b: cluster.fabric(cluster.instances[a], cluster.instances[b])
        self.engine = calibration.engine
        cfg = self.cfg = self.engine.applied(cfg)       # the settings that ran, as the summary records them
        schedulers = scheduler_factory(cfg)
        engines = EngineSet(env, None, model=cfg.model, tp=cfg.instance_gpus, gpus=gpus,
                            intra_host_fabric=topology.spec.intra.fabric, network=network, fabric_of=fabric_of,
                            options=engine_options(cfg, self.engine.schedule_ahead, self.engine.recv_interval,
                                                   self.engine.batch_wait, self.engine.adp_balance),
                            exchanges_per_step=params.exchanges, merge_s=params.merge_s, hbm_gb=cfg.hbm_gb,
                            record=cfg.telemetry, host_gpu=self.gpu, weight_dtype=cfg.weights,
                            kv_layout=cfg.kv_layout, schedulers=schedulers, cache_dtype=cfg.kv_cache,
                            step=calibration.step, ingress_s=self.engine.ingress_s, egress_s=self.engine.egress_s,
                            group=calibration.group, group_gpus=topology.gpus, seed=cfg.seed,
                            ep_flows=cfg.ep_flows, kv_pool=self.engine.kv_pool_bytes)
        if layout is not None and calibration.prefill_step is not None:     # the prefill pool's engines, after
            engines.add_pool(env, [topology.gpus[first] for first in layout.prefill], calibration.prefill_step,
                             engine_options(cfg, self.engine.schedule_ahead, batch_wait=self.engine.batch_wait),
                             schedulers)
        # Canonical chunks may pin `chunk_hbm_share` of what the weights leave (in the chunks' byte units).
        chunk_capacity = (engines[0].hbm.capacity_blocks * BLOCK_TOKENS * compute.kv_bytes_per_token
                          * cfg.chunk_hbm_share) if len(engines) else 0.0
        cluster = Cluster(env, topology, calibration, cfg, compute, chunks, popularity,
                          chunk_capacity_bytes=chunk_capacity, layout=layout)
        copies = ChunkCopies(engines, chunks.holders, chunks.pins_at, chunks.tokens)
        copies.pin_canonical(_chunks_per_instance(chunks.holders, len(cluster.instances)))
        n = int(self.meta["requests"])
        self.n_requests = n if cfg.max_requests is None else min(n, cfg.max_requests)
        self.limits = model_limits(cfg.trace, cfg.over_window, params.geometry, chunks, self.n_requests)
        self.load = arrival_load(cfg.trace, self.n_requests, qps=cfg.qps, time_scale=cfg.time_scale)
        # the clients' concurrency limit: the run's, else the trace's (checked when its metadata was read)
        self.concurrency = cfg.concurrency if cfg.concurrency is not None else self.meta.get(MAX_CONCURRENCY_KEY)
        self.arrivals: Arrivals | None = None
        self.ctx = SimContext(
            config=cfg, env=env, topology=topology, network=network, calibration=calibration, params=params,
            compute=compute, model=ScalarModel(params),
            floor_model=ScalarModel(replace(params, host_overhead=False)),   # the simulator charges no host overhead
            cluster=cluster,
            policy=registry("policy").create(cfg.policy, cfg, run_rng(cfg.seed, "policy")),
            router=registry("router").create(cfg.router, cfg, run_rng(cfg.seed, "router")),
            recorder=Recorder(self.n_requests, chunk_id_of=cluster.chunks.ids),
            engines=engines, copies=copies, prefill_pool=_prefill_pool(cfg, cluster))

    # ---- shortcuts for scenario code ---------------------------------------------------------------------
    @property
    def env(self) -> simpy.Environment:
        return self.ctx.env

    @property
    def rec(self) -> Recorder:
        return self.ctx.recorder

    @property
    def instances(self) -> list[Instance]:
        return self.ctx.cluster.instances

    def path_share(self, src: Instance, dst: Instance) -> float:
        return path_share_Bps(self.ctx, src, dst)

    # ---- run and outputs ---------------------------------------------------------------------------
    def run(self, leave_frozen: bool = False) -> RunResult:
        """Replay the trace to its end (or `--until`); `leave_frozen`: the process ends after this run (its own
        command line), so the set-up frozen for the events stays frozen (`_collector_for_a_run`)."""
        ctx = self.ctx
        t0 = time.perf_counter()
        arrivals = self.arrivals = Arrivals(ctx, self.n_requests, self._sorted_chunk_ids,
                                            start=lambda spec: launch(ctx, spec), progress=self.progress,
                                            time_scale=self.load.time_scale, concurrency=self.concurrency,
                                            over_window=self.limits.pop("_drop"))
        ctx.env.process(arrivals.feed())
        self.selections = arrivals.selections
        with _collector_for_a_run(leave_frozen):    # the events, then the outputs made of what they recorded
            ctx.env.run(until=self.cfg.until_s)
            wall = time.perf_counter() - t0
            rec = ctx.recorder
            for r in np.flatnonzero(rec.status == Status.PENDING):
                if self.cfg.until_s is not None:
                    rec.drop(int(r), DropReason.UNFINISHED)
                elif not np.isnan(rec.arrival[r]):     # no --until: the run ran out of events with it unfinished
                    rec.drop(int(r), DropReason.STALLED)
            return self._result(wall)

    def _result(self, wall: float) -> RunResult:
        cfg, ctx = self.cfg, self.ctx
        cluster, topology = ctx.cluster, ctx.topology
        calib_files = ctx.calibration.files      # the profile's, the GPU entry's and the engine preset's files
        calib = hashlib.sha256("".join(sha256_file(f) for f in calib_files).encode()).hexdigest()
        inputs = {"topology": sha256_file(cfg.topology), "trace": sha256_file(cfg.trace),
                  "calib": calib, "calib_files": [str(f) for f in calib_files]}
        instances = cluster.instances
        holders = holder_table(ctx.engines.engines, instances, float(ctx.env.now))
        requests = ctx.recorder.requests_table()
        completed = ctx.recorder.status == Status.COMPLETED
        extra = {
            "instances": len(instances), "gpus": len(topology.gpus), "hosts": topology.spec.hosts,
            "load": {**self.load.as_dict(), **self._concurrency(),
                     **overload(ctx.recorder.arrival[completed], ctx.recorder.ttft[completed])},
            "topology": {**topology.summary(), "spine_names": self._spine_names()},
            "placement": {"policy": cfg.placement, "overflow_chunks": cluster.placement.overflow_chunks,
                          "overflow_bytes": cluster.placement.overflow_bytes,
                          "replicated_chunks": cluster.placement.replicated_chunks},
            "holders": {**holder_summary(holders),
                        "max_staging_queue": int(max((inst.staging.max_queue for inst in instances), default=0)),
                        "evictions": int(sum(engine.hbm.evictions for engine in ctx.engines.engines)),
                        "copies_refused": int(sum(engine.hbm.refused for engine in ctx.engines.engines)),
                        "fetch_fell_back_to_route": int(ctx.copies.fell_back)},
            "engine": {**ctx.engines.summary(), "preset": self.engine.summary()},
            "pools": self._pools(),
            "serving": serving_summary(ctx.recorder, ctx.engines.log.itl_s, ctx.engines.log.itl_n,
                                       gpus=(len(instances) * cfg.instance_gpus if cluster.layout is None
                                             else cluster.layout.total_gpus),    # --disagg: idle GPUs too
                                       concurrency=self.concurrency,
                                       offered_qps=self.load.offered_qps, itl=ctx.engines.log.itl()),
            "model_limits": {key: value for key, value in self.limits.items() if not key.startswith("_")},
            "sparse_attention": {"index_topk": ctx.params.geometry.index_topk,
                                 "selections_at_model_topk": self.selections["model"],
                                 "selections_at_trace_topk": self.selections["trace"]},
            "why": _why(requests, int(ctx.copies.fell_back)),
            "network": self._network_summary(),
        }
        summary = summarise(ctx.recorder, config=cfg.as_dict(), inputs=inputs, sim_time_s=float(ctx.env.now),
                            extra=extra)
        engine = extra["engine"]
        perf = {"wall_s": wall, "sim_s_per_wall_s": ctx.env.now / wall if wall > 0 else None,
                "iterations_per_wall_s": engine["iterations"] / wall if wall > 0 else None,
                "routed_messages_per_wall_s": engine["routed_messages"] / wall if wall > 0 else None,
                "requests_per_wall_s": summary["completed"] / wall if wall > 0 else None,
                "routed_queries_per_wall_s": extra["holders"]["queries"] / wall if wall > 0 else None}
        tables = {"requests": requests, "decisions": ctx.recorder.decisions_table(),
                  "holders": holders if cfg.telemetry else None,
                  "staging": self._staging_table() if cfg.telemetry else None,
                  "iterations": ctx.engines.log.table() if cfg.telemetry else None}
        tables.update(self._network_tables())
        return RunResult(summary, perf, tables)

    def _pools(self) -> dict[str, Any]:
        """summary.json `pools`: aggregated, or --disagg's pools (sizes, TP, GPUs, idle GPUs, the prefill router
        and how evenly it spread the requests)."""
        layout, pool = self.ctx.calibration.layout, self.ctx.prefill_pool
        if layout is None or pool is None:
            return {"mode": "aggregated"}
        return {**layout.summary(self.cfg.prefill_router), **pool.summary()}

    def _concurrency(self) -> dict[str, Any]:
        """The concurrency limit the run kept (summary.json `load`): its value, where it came from (`--concurrency`
        or the trace's `max_concurrency`), and the most requests it had in flight at once."""
        limiter = self.arrivals.limiter if self.arrivals is not None else None
        source = None if self.concurrency is None else "run" if self.cfg.concurrency is not None else "trace"
        return {"concurrency": self.concurrency, "concurrency_from": source,
                "peak_in_flight": limiter.peak if limiter is not None else None}

    def _network_summary(self) -> dict[str, Any]:
        tel = self.ctx.network.telemetry
        s: dict[str, Any] = {"routing": self.cfg.routing, "flows": int(tel.n_done)}
        links = tel.links_columns()
        # Routed messages, and bulk transfers where one rank pair stands for all (`Cluster.bulk_transfer`), carry
        # one TP rank pair's share on the network (docs/MODEL.md, "Tensor parallelism"): the other ranks' NICs carry
        # the same on parallel links, so that traffic counts tp x; bulk flows simulated for every rank count once,
        # and so do a DP group's all-to-all flows (one per GPU pair, `GroupEngine`) whatever the tier's planes.
        planes = self.ctx.cluster.tier_planes()
        tp = self.cfg.instance_gpus
        bulk = group_sums(links["tier"], links["bulk_bytes"])
        messages = group_sums(links["tier"], links["message_bytes"])
        a2a = self.ctx.engines.a2a_tier_bytes()
        s["bytes_by_tier"] = {str(k): (float(bulk[k]) - a2a.get(str(k), 0.0)) * planes.get(str(k), tp)
                              + a2a.get(str(k), 0.0) + float(messages[k]) * tp for k in bulk}
        s["bytes_by_tier_per_gpu"] = {k: v / tp for k, v in s["bytes_by_tier"].items()}
        s["rank_flows"] = {"mode": self.cfg.rank_flows, "every_rank_within_domain": self.ctx.cluster.rank_flows[0],
                           "every_rank_across_domains": self.ctx.cluster.rank_flows[1]}
        s["max_link_utilisation"] = float(np.max(links["mean_utilisation"])) if len(links["link"]) else 0.0
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
        tel = self.ctx.network.telemetry
        # Every spine starts at 0 flows at t = 0, so idle ones appear in the series (and the ARK heatmap).
        series = [(0.0, name, 0) for name in self._spine_names()] + list(tel.spine_series)
        frames: dict[str, tuple[dict[str, Any], list[tuple] | None]] = {
            "net_links": (tel.links_columns(), None), "net_flows": (tel.flows_columns(), None),
            "net_spines": (rows_as_columns(series, SPINE_COLUMNS), series)}
        if tel.record_series:
            frames["net_link_series"] = (rows_as_columns(tel.series, LINK_SERIES_COLUMNS), tel.series)
        tables = {k: pandas_like_table(*v) for k, v in frames.items()}
        flows, topology = tables["net_flows"], self.ctx.topology    # stamped for `flows replay` to check
        stamp = flows_metadata(topology.name, topology.links, len(self.ctx.network.active_flows()))
        tables["net_flows"] = flows.replace_schema_metadata({**(flows.schema.metadata or {}), **stamp})
        return tables

    def _spine_names(self) -> list[str]:
        return sorted({link.dst for link in self.ctx.topology.links if link.dst.startswith(("spine", "core"))},
                      key=lambda n: (len(n), n))

    def _staging_table(self):
        """The holders' staging pools over time."""
        return _samples_table(self.ctx.cluster.instances, lambda inst: inst.staging.samples,
                              (("time_s", np.float64), ("waiting", np.int32), ("copying", np.int32)))


def _why(requests, fell_back: int) -> dict[str, Any]:
    """What the primitive counts rest on: routes the policy chose vs fetches that did not fit in HBM, and the
    median decoded tokens of the requests that routed / fetched (the predicate's horizon)."""
    cols = {k: to_numpy(requests.column(k)) for k in ("n_route", "n_fetch", "output_tokens")}
    median = lambda mask: float(np.median(cols["output_tokens"][mask])) if mask.any() else None
    routed = int(cols["n_route"].sum())
    return {"route_by_policy": routed - fell_back, "route_fetch_did_not_fit": fell_back,
            "median_output_tokens": {"routing_requests": median(cols["n_route"] > 0),
                                     "fetching_requests": median(cols["n_fetch"] > 0)}}


def _samples_table(instances: list[Instance], samples, columns: tuple[tuple[str, type], ...]):
    """One table from every instance's parallel sample arrays (array.array buffers), with a holder column."""
    parts: dict[str, list] = {"holder": [], **{name: [] for name, _ in columns}}
    for inst in instances:
        arrays = samples(inst)
        if len(arrays[0]):
            parts["holder"].append(np.full(len(arrays[0]), inst.id, dtype=np.int32))
            for (name, dt), a in zip(columns, arrays):
                parts[name].append(np.frombuffer(a, dtype=dt))
    types = {"holder": np.int32, **dict(columns)}
    return table({k: np.concatenate(v) if v else np.zeros(0, types[k]) for k, v in parts.items()})


def _chunks_per_instance(holders: list[list[int]], n: int) -> list[list[int]]:
    per_instance: list[list[int]] = [[] for _ in range(n)]
    for chunk, where in enumerate(holders):
        for inst in where:
            per_instance[inst].append(chunk)
    return per_instance


def _prefill_pool(cfg: RunConfig, cluster: Cluster) -> PrefillPool | None:
    """--disagg's prefill pool: the cluster's prefill instances and the run's prefill router."""
    if cluster.layout is None:
        return None
    router = registry("prefill-router").create(cfg.prefill_router, cfg, run_rng(cfg.seed, "prefill-router"))
    return PrefillPool([inst for inst in cluster.instances if inst.prefill], router)


def scheduler_factory(cfg: RunConfig) -> Callable[[], Scheduler]:
    """One instance engine's scheduler per call, built by the scheduler registry from the run's config and the
    run's scheduler stream (one stream, drawn in instance order: a pure function of the seed)."""
    schedulers, rng = registry("scheduler"), run_rng(cfg.seed, "scheduler")
    return lambda: schedulers.create(cfg.scheduler, cfg, rng)


def engine_options(cfg: RunConfig, schedule_ahead: bool = False, recv_interval: int = 1,
                   batch_wait: tuple[int, float] = (0, 0.0),
                   adp_balance: tuple[bool, int, int] = (False, 0, 0)) -> EngineOptions:
    """The instance engines' options from the run configuration (its engine settings resolved: sim/calibration.py)."""
    return EngineOptions(scheduler=cfg.scheduler, max_running=cfg.max_running_seqs, token_budget=cfg.token_budget,
                         prefill_chunk=cfg.prefill_chunk, steps_per_event=cfg.decode_steps_per_event,
                         holder_mode=cfg.holder_mode, interference=cfg.holder_interference,
                         overlap=cfg.micro_batch_overlap, check_hbm=cfg.check_hbm, schedule_ahead=schedule_ahead,
                         recv_interval=recv_interval, batch_wait_iters=batch_wait[0],
                         batch_wait_ratio=batch_wait[1], adp_balance=adp_balance[0],
                         adp_timeout_iters=adp_balance[1], adp_batching_wait_iters=adp_balance[2])


def simulate(cfg: RunConfig, out_dir: str | Path | None = None,
             progress: Callable[[int, int], None] | None = None, *, leave_frozen: bool = False) -> RunResult:
    """Run one configuration; write its outputs atomically if `out_dir` is given. `leave_frozen`: the process
    ends after it (`Simulation.run`)."""
    if out_dir is not None:   # fail before simulating, not after
        from simroute.ioutil import check_replaceable
        check_replaceable(out_dir, ("summary.json",), "simroute run")
    sim = Simulation(cfg, progress=progress)
    res = sim.run(leave_frozen)
    if out_dir is not None:
        write_outputs(Path(out_dir), res.summary, res.tables, res.perf)
    return res


YOUNG_COLLECTION_EVERY = 50_000   # allocations between youngest-generation collections while a run's events run
#   (CPython's default is 700). measured on this 2-core box: 10,000 was the best of 700 / 10,000 / 50,000 on the
#   agent-real bench without freezing (2026-12-05); with the set-up frozen (below), the Zipf 100k bench's collector
#   took 2.5 CPU s at 50,000 against 4.7 at 10,000 unfrozen (`gc.callbacks`, load ~8-11, 2026-12-07), and an
#   agent-real always-route run's 0.03 s at either (issue 39)


@contextmanager
def _collector_for_a_run(leave_frozen: bool = False):
    """The cyclic collector collects less often while events run and their outputs are built (no effect on any
    output): each engine event allocates short-lived tuples and lists, and a collection every 700 allocations
    spent about 10% of the agent-real bench's CPU time; the outputs build a list per flow and per column (a Zipf
    30k run's outputs spent 0.35 of their 1.23 CPU s collecting at 700). The set-up's objects (topology, chunk
    store, engines: a few 10^5, alive for the whole run) are frozen out of the collector's generations meanwhile
    (`gc.freeze`), so that its full collections walk only what the events made, and handed back when the run
    ends (`gc.unfreeze`), only where nothing was frozen before: `unfreeze` hands back every frozen object, and
    the command line's modules, frozen as they load (`cli.common.loading_modules`), stay frozen. Where the
    process ends after the run (`leave_frozen`: its own command line, which freezes the whole heap at exit anyway)
    the set-up is frozen whatever was before and left so: no count of the frozen objects (`gc.get_freeze_count`
    walks them all, ~3 ms of the default run's start-up), no unfreezing."""
    before = gc.get_threshold()
    freeze = leave_frozen or gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    gc.set_threshold(max(before[0], YOUNG_COLLECTION_EVERY), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        if freeze and not leave_frozen:
            gc.unfreeze()
