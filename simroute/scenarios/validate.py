"""`simroute validate`: the scorecard of every paper effect simroute claims, paper value next to simulated value.

Each row runs a mechanism (the simulator on a small trace built in code, or the network engine it uses) and
compares what comes out with a value the papers *measured*, inside a stated acceptance band. No row reads a
calibration curve back: the holder-compute points and the two-point gather fit are inputs, so their shape is
not a row; what is checked is what the mechanisms make of them (batching and queueing of N requesters, route
fan-out, byte accounting, congestion, staging, path reservation).

Papers: "Move the Query, Not the Cache" (Ma et al., 2026) and "ARK: Avoiding Routing Collisions for KV Cache
Transfer in Disaggregated LLM Inference" (Lin et al., 2026); a row's `source` names the paper and its section.
A row that fails (or passes only at its band's edge) carries a `note`: the reason, with the numbers a reader
needs to check it. A failing row is a finding; its band is never widened to make it pass.
Extending: write a function `(ctx: Ctx) -> list[Row]` and append it to SECTIONS.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from simroute.calib import default_profile_path, load_profile
from simroute.network import load_topology, shipped_topology
from simroute.scenarios.traces import fanin_trace, selection_trace, single_chunk_trace, write_trace
from simroute.sim.config import RunConfig
from simroute.sim.runner import RunResult, simulate
from simroute.defaults import PAPER_DEPLOYMENT


@dataclass(frozen=True)
class Row:
    """One claimed effect: the paper's value, the simulated one, the acceptance band [lo, hi] and the verdict."""

    id: str
    effect: str
    source: str                  # paper, table / figure / section
    paper: float
    simulated: float
    unit: str
    lo: float
    hi: float
    tolerance: str               # the band in words
    basis: str                   # the mechanism that produced `simulated`
    note: str = ""               # why a row sits where it does (a failing row's reason, checkable from its numbers)
    verdict: str = field(init=False)

    def __post_init__(self) -> None:
        passed = math.isfinite(self.simulated) and self.lo <= self.simulated <= self.hi
        object.__setattr__(self, "verdict", "pass" if passed else "fail")

    def as_dict(self) -> dict:
        """JSON-ready: an open band end (infinite) is null."""
        return {key: (None if isinstance(value, float) and not math.isfinite(value) else value)
                for key, value in asdict(self).items()}


MQ = "Move the Query, Not the Cache"
ARK = "ARK: Avoiding Routing Collisions"


def rel_band(paper: float, rel: float) -> tuple[float, float]:
    return paper * (1 - rel), paper * (1 + rel)


@dataclass
class Ctx:
    """Shared inputs of the rows: a scratch directory, the default profile and model."""

    tmp: Path
    model: str = "deepseek-v2-lite"

    @cached_property
    def profile(self):
        return load_profile(default_profile_path())

    @cached_property
    def all_fabrics(self):
        """The profile of all five Table 2 fabrics (for rows that compare fabrics)."""
        from simroute.calib import shipped_dir
        return load_profile(shipped_dir() / "paper-all.yaml")

    @cached_property
    def geometry(self):
        from simroute.model import get_model
        return get_model(self.model)

    def config(self, trace: Path, topology: str, **overrides) -> RunConfig:
        return RunConfig(topology=str(shipped_topology(topology)), trace=str(trace), calib=str(default_profile_path()),
                         decode_steps_per_event=1, telemetry=True, **{**PAPER_DEPLOYMENT, **overrides})

    def run(self, trace: Path, topology: str = "paper-testbed", **overrides) -> RunResult:
        return simulate(self.config(trace, topology, **overrides))

    @cached_property
    def bare_ttft_s(self) -> float:
        """TTFT of the decode-point request without its chunk: the baseline that attend costs are added to."""
        trace = write_trace(self.tmp / "bare.parquet", [{"arrival_s": 0.0, "requester_hint": 0, "prompt_tokens": 16,
                                                        "output_tokens": 1, "chunk_ids": []}], [], name="bare")
        return column(self.run(trace, policy="paper"), "ttft_s")[0]


def column(res: RunResult, name: str) -> np.ndarray:
    """A column of the completed requests of a run."""
    req = res.tables["requests"].to_pandas()
    return req.loc[req["status"] == "completed", name].to_numpy(dtype=float)


def attention_cost_s(ctx: Ctx, res: RunResult) -> float:
    """What attending the remote chunk(s) added to TTFT over the same request without them."""
    return float(column(res, "ttft_s")[0] - ctx.bare_ttft_s)


# ---- the cost model: Table 1, Table 2, Fig 1b, wire bytes ---------------------------------------------------
def route_rt_s(ctx: Ctx, *, rows: int, q_bytes: float, p_bytes: float, k_background: int = 0,
               same_host: bool = False, topology: str = "paper-testbed") -> float:
    """Mean routed round trip through the network engine's message path (k other loops on the same uplink)."""
    from simroute.scenarios.network import closed_loop_rtt
    topo = load_topology(shipped_topology(topology))
    gpus_per_host = topo.spec.gpus_per_host
    holders = topo.gpus[1:gpus_per_host] if same_host else topo.gpus[gpus_per_host:2 * gpus_per_host]
    fab = ctx.profile.fabric_params(topo.spec.intra.fabric if same_host else topo.spec.nic_fabric)
    return closed_loop_rtt(topo, k_background, rows=rows, q_bytes=q_bytes, p_bytes=p_bytes,
                           t_probe_s=fab.t_probe_s + fab.turnaround_s, single_block_Bps=fab.single_block_Bps,
                           compute_s=0.0, holders=holders)


def table1_rows(ctx: Ctx) -> list[Row]:
    """Table 1: full round trip at Mq = 1024 for four payloads; the engine's message path on an idle link."""
    out = []
    for row_bytes, paper_us in ((900, 62.8), (2184, 115.8), (4368, 207.7), (8736, 389.1)):
        query_bytes = row_bytes * ctx.geometry.q_bytes / ctx.geometry.qp_bytes
        trip_us = route_rt_s(ctx, rows=1024, q_bytes=query_bytes, p_bytes=row_bytes - query_bytes) * 1e6
        out.append(Row(f"table1-rt-{row_bytes}", f"route round trip, Mq 1024, {row_bytes} B/row, cross-node",
                       f"{MQ}, Table 1", paper_us, trip_us, "us", *rel_band(paper_us, 0.10), "±10% (fit MAPE ~7%)",
                       "network engine message path, profile T_probe and single-block BW"))
    return out


def affine_rt_us(ctx: Ctx, fabric: str, rows: int) -> float:
    """Table 2's affine fit T_probe (+ turnaround) + Mq (q+p) / BW for one fabric of the profile, in us."""
    fab = ctx.all_fabrics.fabric_params(fabric)
    return (fab.t_probe_s + fab.turnaround_s + rows * ctx.geometry.qp_bytes / fab.single_block_Bps) * 1e6


def nvlink_note(ctx: Ctx, rt_us: float) -> str:
    """Why the intra-node decode route reads below the band: Table 2's affine fit, not the engine."""
    h100_nvlink, a100 = affine_rt_us(ctx, "h100-nvlink4", 256), affine_rt_us(ctx, "a100-nvlink3", 256)
    fab = ctx.all_fabrics.fabric_params("h100-nvlink4")
    return (f"honest gap: the engine reproduces Table 2's affine fit for H100 NVLink 4.0 (T_probe "
            f"{fab.t_probe_s * 1e6:.1f} us + 256 x {ctx.geometry.qp_bytes:.0f} B / {fab.single_block_Bps / 1e9:.0f} "
            f"GB/s = {h100_nvlink:.1f} us; simulated {rt_us:.1f} us); that fit is good at "
            "Mq >= 512 (3% MAPE) but misses small batches (18% MAPE over the whole sweep, Table 2), and the paper "
            "publishes no small-Mq turnaround for this fabric (its ~9 us, Fig 2b, is IBGDA's, and a constant one "
            "would break the 3% at Mq >= 512). The same affine form gives A100 NVLink 3.0 "
            f"{a100:.1f} us where §8 states 39 us measured: the fits, not the engine, sit below 31 us.")


def table2_rows(ctx: Ctx) -> list[Row]:
    """Table 2 / Fig 6b: a decode-size route (Mq = 256) costs 31-48 us on every fabric."""
    out = []
    for same_host, name in ((False, "cross-node IBGDA"), (True, "intra-node NVLink 4.0")):
        trip_us = route_rt_s(ctx, rows=256, q_bytes=ctx.geometry.q_bytes, p_bytes=ctx.geometry.p_bytes,
                        same_host=same_host) * 1e6
        out.append(Row(f"table2-decode-rt-{'intra' if same_host else 'cross'}",
                       f"decode route round trip (Mq 256), {name}", f"{MQ}, Table 2, Fig 6b", 39.5, trip_us, "us",
                       31.0, 48.0, "inside the measured 31-48 us band (paper: its midpoint)",
                       "network engine message path on paper-testbed", nvlink_note(ctx, trip_us) if same_host else ""))
    return out


def local_note(ctx: Ctx, local_s: float, chunk_tokens: int = 2048) -> str:
    """Why local re-prefill reads below ct L c: the step model's charge for one prefill of the chunk, term by
    term, each with what it rests on (measured tables where the GPU's cover the model, else the roofline)."""
    from dataclasses import replace
    from simroute.model.steptime import BatchShape, expert_load
    layers = ctx.geometry.layers
    per_token_layer = local_s / (chunk_tokens * layers)           # the simulated cost per token-layer
    shape = BatchShape.uniform(prefill_tokens=chunk_tokens)
    step = ctx.profile.step_model(ctx.model)
    terms = step.iteration(shape)
    slow = ctx.profile.step_model(ctx.model, gpu_spec=replace(step.gpu, gemm_efficiency=0.4)).iteration(shape)
    geometry = ctx.geometry
    per_expert = expert_load(geometry.routed_experts, geometry.experts_per_token, chunk_tokens)[1] \
        if geometry.routed_experts else chunk_tokens
    band_lo, band_hi = chunk_tokens * layers * 0.5e-3, chunk_tokens * layers * 1.5e-3
    parts = ", ".join(f"{name} {seconds * 1e3:.1f} ms ({terms.lookups.get(name, 'roofline')})" for name, seconds in (
        ("linear", terms.linear_s_per_layer * layers), ("attention", terms.attention_s_per_layer * layers),
        ("elementwise", terms.elementwise_s_per_layer * layers), ("lm_head", terms.lm_head_s),
        ("overhead", terms.overhead_s)))
    if band_lo * 1e-3 <= local_s <= band_hi * 1e-3:
        verdict = "inside the band"
    else:
        verdict = "honest gap: " + ("still below the band" if local_s < band_lo * 1e-3 else "above the band")
    return (f"{verdict}. The engine charges the re-prefill as one "
            f"{chunk_tokens}-token prefill on the step model on {step.gpu.name}: {local_s * 1e3:.1f} ms "
            f"({terms.iteration_s * 1e3:.1f} ms for the iteration: {parts}), {per_token_layer * 1e6:.2f} us per "
            f"token-layer, against the paper's {band_lo:.1f}-{band_hi:.1f} ms (c = 0.5-1.5 us, its prototype's "
            f"re-prefill, stack not stated), {band_lo * 1e-3 / local_s:.1f}-{band_hi * 1e-3 / local_s:.1f}x this "
            f"value. The linear term is the roofline's wherever no table holds the model's expert shape (GEMMs at "
            f"the cited {step.gpu.gemm_fraction(chunk_tokens):.2f} of peak, each routed expert's at "
            f"{step.gpu.gemm_fraction(per_expert):.2f} for its ~{per_expert:.0f} tokens); at 0.4 of peak the "
            f"iteration would take {slow.iteration_s * 1e3:.1f} ms"
            + (f" ({'; '.join(step.notes)})" if step.notes else "") + ".")


def decode_point_rows(ctx: Ctx) -> list[Row]:
    """Fig 1b, §5.1, §6.1: at decode (Mq 256, ct 2048, cross-node) route << fetch < local."""
    trace = single_chunk_trace(ctx.tmp / "fig1b.parquet", requester=0, holder=4, prompt_tokens=16)
    cost = {policy: attention_cost_s(ctx, ctx.run(trace, policy=f"always-{policy}", route_exchanges="once"))
            for policy in ("route", "fetch", "local")}
    fetch_p50 = ctx.profile.constant("staging_fetch_p50_ms").value
    layers = ctx.geometry.layers
    return [
        Row("fig1b-fetch", "fetch of a 2048-token chunk: all-layer pull + splice",
            f"{MQ}, §6.1 (per-fetch p50, IBGDA)", fetch_p50, cost["fetch"] * 1e3, "ms", *rel_band(fetch_p50, 0.20), "±20%",
            "simulator: staging pool, bulk flow on the fabric, splice"),
        Row("fig1b-fetch-over-route", "fetch / route cost at the decode point",
            f"{MQ}, Fig 6b (route > 60x below splice)", 60.0, cost["fetch"] / cost["route"], "x", 10.0, math.inf, ">= 10x (an order of magnitude)",
            "simulator: routed query, holder batch, partial back, merge vs fetch"),
        Row("fig1b-local", "local re-prefill of the chunk (ct L c, c = 0.5-1.5 us)", f"{MQ}, §4 (T_local)",
            2048 * layers * 1e-3, cost["local"] * 1e3, "ms", 2048 * layers * 0.5e-3, 2048 * layers * 1.5e-3,
            "inside ct x L x [0.5, 1.5] us", "simulator: re-prefill on the requester", local_note(ctx, cost["local"])),
    ]


def wire_byte_rows(ctx: Ctx) -> list[Row]:
    """§2, §4: route moves >= 76% fewer wire bytes at Mq 256; break-even Mq* = 1080 at ct 2048.

    The paper compares one layer's exchange with one layer's cache, so route pays one exchange per layer here.
    """
    trace = single_chunk_trace(ctx.tmp / "bytes.parquet", requester=0, holder=4, prompt_tokens=16)
    bytes_by_policy = {policy: float(ctx.run(trace, policy=f"always-{policy}",
                                             route_exchanges="per-layer").summary["bytes"][policy])
                       for policy in ("route", "fetch")}
    query_rows = 16 * ctx.geometry.heads_q
    return [Row("bytes-route-saving", "route's wire-byte saving over fetch at Mq 256, ct 2048", f"{MQ}, §2.1, §4",
                76.0, 100 * (1 - bytes_by_policy["route"] / bytes_by_policy["fetch"]), "%", 73.0, 79.0, "±3 points",
                "simulator byte accounting of the messages and the bulk copy"),
            Row("bytes-break-even", "wire-byte break-even Mq* at ct 2048", f"{MQ}, §4", 1080.0,
                query_rows * bytes_by_policy["fetch"] / bytes_by_policy["route"], "rows", *rel_band(1080.0, 0.05),
                "±5%",
                "simulator byte accounting, route bytes linear in Mq")]


# ---- selection, holders, replicas: Fig 4a, Fig 4b, §6.3 ----------------------------------------------------
def fanout_rows(ctx: Ctx) -> list[Row]:
    """Fig 4a: route fan-out over the M holders a selection spans stays flat (parallel, probe-bound)."""
    cost = {}
    for replicas in (1, 7):
        trace = selection_trace(ctx.tmp / f"sel{replicas}.parquet", requester=0, holders=list(range(1, replicas + 1)))
        cost[replicas] = attention_cost_s(ctx, ctx.run(trace, policy="always-route"))
    ratio = cost[7] / cost[1]
    return [Row("fig4a-route-fanout", "route fan-out cost, M = 7 holders over M = 1", f"{MQ}, Fig 4a, §5.4", 1.0,
                ratio, "x", 0.8, 1.2, "flat: within ±20%",
                "simulator: parallel routed queries, slowest holder, M-way merge",
                fanout_note(ratio) if ratio > 1.2 else "")]


def fanout_note(ratio: float) -> str:
    """Why a fan-out over 4 cross-host holders reads above flat: the NIC context cache fitted to Fig 7."""
    from simroute.network.messages import MessageModelParams
    nic = MessageModelParams()
    return (f"honest gap: holders 4-7 of M = 7 are on the other host, 4 queue pairs on the requester's NIC "
            f"against the {nic.nic_context_slots} contexts its cache holds (fitted to Fig 7's onset at K = 3), "
            f"so every layer's query and partial to them miss it (+{nic.nic_miss_s * 1e6:.0f} us each and a "
            f"slower rate): {ratio:.2f}x. With the context cache off the fan-out is flat (pinned in "
            f"tests/sim/test_sparse_engine.py); the paper's flat Fig 4a and its Fig 7 onset disagree under "
            f"this cache model.")


def fanin(ctx: Ctx, requesters: int, replicas: int = 1, first_requester: int = 8) -> float:
    """Mean TPOT of N sub-agents (instances first_requester...) on one 2048-token document homed on instance 0."""
    trace = fanin_trace(ctx.tmp / f"fanin{requesters}-{first_requester}.parquet", requesters,
                        first_requester=first_requester, holder=0)
    res = ctx.run(trace, "fattree", policy="always-route", placement="popularity", replicas=replicas,
                  hot_fraction=1.0)
    return float(np.mean(column(res, "tpot_s")))


def holder_rows(ctx: Ctx) -> list[Row]:
    """Fig 4b, §6.3: ~8 requesters per holder come nearly free; past that a replica pays.

    Where replicas land changes each requester's path (a replica on its own host is nearer than the home), so
    the replica row divides out that placement effect: the same requesters, each alone, with 4 replicas vs 1.
    """
    tpot = {requesters: fanin(ctx, requesters) for requesters in (1, 8, 32)}
    crowd = fanin(ctx, 32, 4) / tpot[32]
    alone = np.mean([fanin(ctx, 1, 4, 8 + offset) for offset in range(32)]) / np.mean([fanin(ctx, 1, 1, 8 + offset)
                                                                            for offset in range(32)])
    return [
        Row("fig4b-fanin-flat", "TPOT with 8 sub-agents on one holder over 1", f"{MQ}, Fig 4b, §6.3", 1.0,
            tpot[8] / tpot[1], "x", 0.95, 1.15, "flat to N ~ 8: at most +15%",
            "simulator: holder batching window, calibrated batch compute, queueing"),
        Row("fig4b-fanin-rise", "TPOT with 32 sub-agents on one holder over 8", f"{MQ}, Fig 4b, §6.3", 2.0,
            tpot[32] / tpot[8], "x", 1.2, math.inf, "rises past N ~ 8 (> +20%)",
            "simulator: holder batches past the compute elbow"),
        Row("replica-relief", "32 sub-agents: TPOT gain of 4 replicas over 1, net of placement "
            f"(crowd x{crowd:.2f} / alone x{alone:.2f})", f"{MQ}, §6.3 (a replica warranted past ~8)", 0.5,
            crowd / alone, "x", 0.0, 0.9, "at least -10% beyond what placement alone gives",
            "simulator: popularity placement, least-queued replica; control: each requester alone"),
    ]


# ---- congestion: Fig 7 -------------------------------------------------------------------------------------
def congestion_curve(ctx: Ctx, stream_counts: tuple[int, ...] = (0, 1, 2, 3, 4),
                     query_rows: int = 1024) -> dict[int, float]:
    """Route round trip at Mq with K other closed-loop requesters on the same NIC (Fig 7a): the network
    layer's `fig7_round_trips`, i.e. its message model with the NIC queue-pair context cache."""
    from simroute.network.fig7 import fig7_round_trips
    topo = load_topology(shipped_topology("paper-testbed"))
    fab = ctx.profile.fabric_params(topo.spec.nic_fabric)
    trips = fig7_round_trips(topo, stream_counts, rows=query_rows, q_bytes=ctx.geometry.q_bytes,
                             p_bytes=ctx.geometry.p_bytes,
                             t_probe_s=fab.t_probe_s + fab.turnaround_s, single_block_Bps=fab.single_block_Bps)
    return dict(zip(stream_counts, trips))


def congestion_rows(ctx: Ctx) -> list[Row]:
    """Fig 7a: flat through K = 2, +119% (Mq 1024) / +108% (Mq 256) once the link is fully subscribed at
    K = 3; never above fetch's splice. The NIC context cache's two parameters are fitted to this figure, so
    these rows check the fit reproduces onset and magnitude through the engine, not an independent prediction."""
    round_trips, small = congestion_curve(ctx), congestion_curve(ctx, (0, 3), query_rows=256)
    splice_ms = 2.91
    basis = "network engine: NIC queue-pair context cache (parameters fitted to Fig 7) and link queueing"
    return [
        Row("fig7-onset", "route RT at K = 2 over K = 0 (Mq 1024)", f"{MQ}, Fig 7a, §8", 0.0,
            100 * (round_trips[2] / round_trips[0] - 1), "%", -5.0, 10.0, "flat: at most +10%", basis),
        Row("fig7-saturated", "route RT at K = 3 over K = 0 (Mq 1024)", f"{MQ}, Fig 7a, §8", 119.0,
            100 * (round_trips[3] / round_trips[0] - 1), "%", 80.0, 160.0, "+80% .. +160%", basis),
        Row("fig7-saturated-256", "route RT at K = 3 over K = 0 (Mq 256)", f"{MQ}, Fig 7a, §8 (45.6 -> 95 us)",
            108.0, 100 * (small[3] / small[0] - 1), "%", 70.0, 150.0, "+70% .. +150%", basis),
        Row("fig7-no-inversion", "splice / route RT at K = 4 (Mq 1024)", f"{MQ}, Fig 7a (~12x below the splice)",
            12.0, splice_ms * 1e-3 / round_trips[4], "x", 1.0, math.inf, "route stays below fetch's splice (> 1x)",
            "network engine; splice 2.91 ms at ct 2048 (Move the Query, Not the Cache, §6.1)"),
    ]


# ---- staging elbow: §6.2 -----------------------------------------------------------------------------------
STAGING_REQUESTERS = (4, 8)      # paper-testbed: the other node's four GPUs ("inter-node RDMA staging", §6.2)
VISIBLE_REGRESSION = 1.01        # "K = 16 regresses": at least +1%, ~60 us on Fig 5b's 5-6 ms axis


def staging_share(ctx: Ctx, copy_GBps: float | None, fetch_s: float,
                  chunk_tokens: int = 2048) -> tuple[float, float, float]:
    """(staging seconds of one chunk at K = 1, its share of the fetch, the share of those seconds the pool saves
    at the elbow) under the run's staging parameters (simroute.model.staging)."""
    staging = ctx.profile.staging_params(copy_GBps)
    stage_s = ctx.geometry.chunk_bytes(chunk_tokens) / staging.copy_Bps
    return stage_s, stage_s / fetch_s, staging.copy_saving


def lone_fetch_gain(ctx: Ctx) -> float:
    """TTFT of one cross-node fetch (no other fetch on the holder's NIC) at K = 8 over K = 1, minus 1: the
    fit's own regime, a reference for the elbow row's note."""
    trace = fanin_trace(ctx.tmp / "staging-lone.parquet", 1, first_requester=STAGING_REQUESTERS[0], holder=0,
                        output_tokens=1)
    ttft = {streams: column(ctx.run(trace, policy="always-fetch", staging_streams=streams), "ttft_s")[0]
            for streams in (1, 8)}
    return ttft[8] / ttft[1] - 1


def staging_notes(ctx: Ctx, copy_GBps: float | None, p50: dict[int, float]) -> tuple[str, str]:
    """What the two staging rows check: the elbow row a fit through the engine (the copy rate is fitted to the
    same §6.2 gain), the K = 16 row a default with no figure behind it."""
    from simroute.model.staging import elbow_fetch_saving_s
    staging = ctx.profile.staging_params(copy_GBps)
    stage_s, share, saving = staging_share(ctx, copy_GBps, p50[1])
    gain = ctx.profile.constant("staging_gain_at_elbow").value
    saved_s = elbow_fetch_saving_s(gain, ctx.profile.constant("staging_fetch_p50_ms").value * 1e-3)
    common = (f"one stream stages a 2048-token chunk in {stage_s * 1e3:.2f} ms at {staging.copy_Bps / 1e9:.1f} GB/s "
              f"({dict(staging.sources)['copy_Bps'].split(':')[0]}), {share:.1%} of this {p50[1] * 1e3:.1f} ms "
              "fetch-bound "
              f"TTFT at K = 1. ")
    elbow = (f"honest gap: the copy rate is fitted to this gain, so the row checks the fit through the engine. "
             f"{common[0].upper() + common[1:]}The pool saves "
             f"{saving:.0%} of that at K = 8, the paper's {gain:.0%} fetch-time gain ({saved_s * 1e3:.2f} ms of its "
             f"{saved_s / gain * 1e3:.2f} ms serialised fetch) spent on the copies (simroute.model.staging); here "
             f"{len(range(*STAGING_REQUESTERS))} "
             "requesters queue on one holder's pool and then share its NIC: the earlier staging starts the first "
             "pull sooner, but all four pulls finish at the NIC's pace, so the p50 moves little. A lone fetch "
             f"(no NIC sharing) gains {100 * lone_fetch_gain(ctx):+.1f}%: the fit's regime. The paper's "
             "per-fetch p50 is set by its host prefetch pipeline (§6.1), not a 4-way shared wire.")
    past = (f"honest gap: {common}K = 16's only mechanism is the default staging_oversubscription_loss "
            f"({staging.oversubscription_loss:.0%} of the elbow's copy rate, no figure in the paper) on the "
            f"{(1 - saving) * stage_s * 1e3:.3f} ms the copies take at K = 8, about "
            f"{staging.oversubscription_loss * (1 - saving) * share:.2%} of TTFT: not a regression Fig 5b's "
            "5-6 ms axis would show.")
    return elbow, past


def staging_rows(ctx: Ctx) -> list[Row]:
    """§6.2: the holder's K-stream staging pool: K = 8 the elbow (p50 -7%), K = 16 regresses. As the paper
    runs it: the 2-node x 4-H100 testbed, the other node's GPUs fetching a chunk each from one holder."""
    first, requesters = STAGING_REQUESTERS
    trace = fanin_trace(ctx.tmp / "staging.parquet", requesters - first, first_requester=first, holder=0, n_chunks=1,
                        output_tokens=1)
    p50 = {streams: float(np.median(column(ctx.run(trace, policy="always-fetch", staging_streams=streams), "ttft_s")))
           for streams in (1, 8, 16)}
    gain = ctx.profile.constant("staging_gain_at_elbow").value
    elbow_note, past_note = staging_notes(ctx, ctx.config(trace, "paper-testbed").staging_copy_GBps, p50)
    basis = ("simulator: holder staging pool (one-stream rate fitted to this gain, simroute.model.staging) "
             "feeding the bulk flows on paper-testbed")
    return [
        Row("staging-elbow", f"fetch TTFT p50 at K = 8 staging streams over K = 1 ({requesters - first} cross-node "
            "requesters, one chunk each)", f"{MQ}, §6.2", -100 * gain, 100 * (p50[8] / p50[1] - 1), "%",
            -100 * gain - 5, -100 * gain + 5, "±5 points", basis, elbow_note),
        Row("staging-past-elbow", "fetch TTFT p50 at K = 16 over K = 8",
            f"{MQ}, §6.2 (K = 16 regresses; no figure, the paper column is the band's floor)",
            VISIBLE_REGRESSION, p50[16] / p50[8], "x", VISIBLE_REGRESSION, math.inf,
            "a visible regression (>= +1%)", basis, past_note),
    ]


# ---- ARK: Figs 2-3 and the abstract --------------------------------------------------------------------------
ARK_SEEDS = (0, 1, 2)     # independent Poisson realisations: one 60 s run's P95 and peak move by several points
TTFT_BAND = (-22.9, -2.9)  # the paper's -12.9% ± 10 points


def ark_points(ctx: Ctx, qps: float, duration_s: float, seeds: tuple[int, ...]) -> list[tuple]:
    """(ECMP, ARK) ArkPoints on the same trace, one pair per seed."""
    from simroute.scenarios.ark import ark_point, disagg_trace
    out = []
    for seed in seeds:
        trace = disagg_trace(ctx.tmp / f"ark{seed}.parquet", qps=qps, duration_s=duration_s, seed=seed)
        out.append((ark_point(trace, qps, "ecmp", seed), ark_point(trace, qps, "ark", seed)))
    return out


def ark_notes(pairs: list[tuple], qps: float, ttft_red: float, fct_red: float) -> tuple[str, str]:
    """Why TTFT gains less than the paper and the ECMP spine peak is lower: the scenario's transfers are short
    against its prefill, and few are in flight (Little's law)."""
    fct_s = float(np.mean([ecmp.fct_mean_ms for ecmp, _ in pairs])) / 1e3
    ttft_s = float(np.mean([ecmp.ttft_mean_ms for ecmp, _ in pairs])) / 1e3
    setup = ("The ARK paper (packet-level RDMA simulation) states no model, prompt sizes or link rates, so the "
             "scenario's transfers (llama-3.1-8b KV, lognormal prompts of median 16k tokens, 25 GB/s NICs) are a "
             "choice, not its setup.")
    ttft = (f"TTFT gains only what the transfer is of it: mean ECMP FCT is {fct_s / ttft_s:.0%} of mean TTFT "
            f"here ({fct_s * 1e3:.0f} of {ttft_s * 1e3:.0f} ms; prefill and its queue are the rest), so "
            f"{fct_red:+.1f}% FCT gives about {fct_red * fct_s / ttft_s:+.1f}% TTFT; the paper's two reductions "
            f"imply FCT is about 12.9 / 27.3 = 47% of its TTFT. " + setup)
    spine = (f"honest gap: peak per-spine concurrency follows the flows in flight, QPS x mean FCT = {qps:g} x "
             f"{fct_s:.3f} s = {qps * fct_s:.1f} over 4 spines here; the paper's 18 on one spine, with ARK's peaks "
             "of ~8 on each of four (up to ~32 in flight), needs tens of flows in flight, i.e. transfers of the order "
             "of a second at QPS 25, the upper end of the ARK abstract's 'hundreds of milliseconds to seconds'. "
             + setup + " Sizing the transfers to reach 18 would tune the scenario to this row.")
    return ttft, spine


def ark_rows(ctx: Ctx, qps: float = 25.0, duration_s: float = 60.0, seeds: tuple[int, ...] = ARK_SEEDS) -> list[Row]:
    """ARK Figs 2-3: at QPS 25 ARK cuts mean / P95 FCT by 27.3% / 34.0%, TTFT by up to 12.9%; spine peaks.
    Reductions are the mean over `seeds` (independent Poisson traces), peaks the highest over them."""
    pairs = ark_points(ctx, qps, duration_s, seeds)
    red = lambda baseline, measured: 100 * (measured / baseline - 1) if baseline else math.nan
    mean_red = lambda attr: float(np.mean([red(getattr(ecmp, attr), getattr(ark, attr)) for ecmp, ark in pairs]))
    fct, p95, ttft = mean_red("fct_mean_ms"), mean_red("fct_p95_ms"), mean_red("ttft_mean_ms")
    peak_e = float(max(ecmp.peak_spine_flows for ecmp, _ in pairs))
    peak_a = float(max(ark.peak_spine_flows for _, ark in pairs))
    ttft_note, spine_note = ark_notes(pairs, qps, ttft, fct)
    if ttft > TTFT_BAND[1]:
        ttft_note = "honest gap: " + ttft_note
    elif ttft > TTFT_BAND[1] - 2.0:      # inside the band, within 2 points of its weak end
        ttft_note = "passes only at its band's weak end, not in the paper's regime: " + ttft_note
    per_seed = "per seed: " + ", ".join(f"{red(ecmp.fct_p95_ms, ark.fct_p95_ms):+.1f}%" for ecmp, ark in pairs)
    basis = f"simulator: PD KV transfers on ark-paper, ECMP hashing vs ARK reservation, mean of seeds {seeds}"
    return [
        Row("ark-fct-mean", "mean KV-transfer FCT, ARK vs ECMP, QPS 25", f"{ARK}, Fig 2", -27.3, fct, "%",
            -37.3, -17.3, "±10 points", basis),
        Row("ark-fct-p95", "P95 KV-transfer FCT, ARK vs ECMP, QPS 25", f"{ARK}, Fig 2", -34.0, p95, "%",
            -44.0, -24.0, "±10 points", basis, per_seed),
        Row("ark-ttft-mean", "mean TTFT, ARK vs ECMP, QPS 25", f"{ARK}, abstract (up to -12.9%)", -12.9, ttft, "%",
            *TTFT_BAND, "±10 points", basis, ttft_note),
        Row("ark-spine-ecmp", "peak concurrent flows on one spine, ECMP", f"{ARK}, Fig 3 (up to 18)", 18.0,
            peak_e, "flows", 12.0, 24.0, "±6 flows", basis, spine_note),
        Row("ark-spine-ark", "peak concurrent flows on one spine, ARK", f"{ARK}, Fig 3 (below ~8)", 8.0,
            peak_a, "flows", 0.0, 8.0, "at most 8", basis),
    ]


SECTIONS: tuple[Callable[[Ctx], list[Row]], ...] = (
    table1_rows, table2_rows, decode_point_rows, wire_byte_rows, fanout_rows, holder_rows, congestion_rows,
    staging_rows, ark_rows)


def scorecard(sections: tuple[Callable[[Ctx], list[Row]], ...] = SECTIONS) -> list[Row]:
    """Run every section in a scratch directory; each row carries its own verdict."""
    with tempfile.TemporaryDirectory(prefix="simroute-validate-") as scratch:
        ctx = Ctx(Path(scratch))
        return [row for section in sections for row in section(ctx)]


def section_names() -> list[str]:
    return [section.__name__.removesuffix("_rows") for section in SECTIONS]


def select_sections(names: list[str]) -> tuple[Callable[[Ctx], list[Row]], ...]:
    """The sections named (`table1`, `ark`, ...); unknown names are an error listing the known ones."""
    from simroute.errors import UnknownNameError
    known = {section.__name__.removesuffix("_rows"): section for section in SECTIONS}
    for name in names:
        if name not in known:
            raise UnknownNameError("validate section", name, list(known))
    return tuple(known[name] for name in names)
