"""`simroute validate --serving`: simulated runs against public measured serving benchmarks.

Each baseline row of calib/serving/measured.csv (simroute.calib.serving) that simroute can replay is run as its
benchmark ran: `trace gen serving` with the row's input / output length, range ratio and clients (a closed loop of
N clients), on one host of the shipped fat-tree at the row's TP, GPU entry and KV-cache dtype, under the row's
framework preset (`--engine sglang|trtllm|vllm`, docs/ENGINES.md) with the launch flags the row states on top
(expert parallelism, chunked prefill, token budget, running-request cap, CUDA-graph batch limit, SGLang's
scheduler poll interval and its version's prefill CUDA graphs).
Three metrics are scored, the ones every serving benchmark prints and the table carries: median TTFT, mean TPOT,
output tokens/s per GPU. A point
passes when simulated / measured lies in BAND (0.67-1.5x); a band is never widened to make a point pass.

Fitted and predicted are kept apart: every `fitted` constant of the presets and of the rows' GPU entries is
listed (`fitted_constants`) with what it was fitted to; a row named among a fitted constant's points is labelled
`fitted_to` and left out of the judged summary. No shipped constant is fitted to a row of the table today.

A row is skipped (with the reason) where simroute cannot replay it: a GPU without an entry (B200 waits for
issue 35 item 6), ShareGPT prompts (not shipped), open loops (not in the default set: `--only` takes them by id),
MTP / DP attention (labelled rows, not the baseline; an MTP row also lacks the acceptance its run had: no source
records it). `dp_attention=True` (`validate --serving --dp-attention`)
also replays the DP-attention rows without MTP through the DP-attention group (~160 CPU s for the four: outside
the default set, scored apart from it). Docs: docs/VALIDATION.md, section "Serving".
"""

from __future__ import annotations

import functools
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from simroute.calib.serving import ServingRow, load_serving_table
from simroute.errors import ConfigurationError

BAND = (0.67, 1.5)          # issue 35 "Must show": none outside 0.67-1.5x
# (short name, table column, words, unit): what every serving benchmark prints and the table carries
SCORED = (("ttft", "ttft_median_ms", "median TTFT", "ms"),
          ("tpot", "tpot_mean_ms", "mean TPOT", "ms"),
          ("tok/s/GPU", "output_throughput_per_gpu_tok_s", "output tok/s per GPU", "tok/s"))

Progress = Callable[[str, int, int, float], None]


@dataclass(frozen=True)
class FittedConstant:
    """A `fitted` constant a serving replay reads, where it lives and what it was fitted to."""

    file: str
    name: str
    ref: str
    points: tuple[str, ...]
    rows: tuple[str, ...]           # ids of measured.csv rows among its points (judged nowhere)


@dataclass(frozen=True)
class Point:
    """One metric of one measured row: measured, simulated, their ratio, the band and the verdict."""

    id: str                         # the measured row's id
    metric: str                     # a SCORED short name
    framework: str
    version: str                    # the measured framework's version (the preset is the shipped one)
    gpu: str
    workload: str                   # e.g. "1k/8k c16"
    holdout: bool                   # the table's suggested split
    fitted_to: str                  # fitted constants fitted to this row ('' : none; then it is judged)
    measured: float
    simulated: float
    unit: str
    ratio: float
    lo: float
    hi: float
    verdict: str                    # pass / fail

    @property
    def judged(self) -> bool:
        return not self.fitted_to

    def as_dict(self) -> dict:
        out = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}
        out["judged"] = self.judged
        return out


def verdict(ratio: float, band: tuple[float, float] = BAND) -> str:
    """pass when the ratio is finite and inside the band (both ends included), else fail."""
    return "pass" if math.isfinite(ratio) and band[0] <= ratio <= band[1] else "fail"


@functools.lru_cache(maxsize=None)
def gpu_has_entry(gpu: str) -> bool:
    """Whether the default profile or calib/gpus has an entry `gpu` (once per process)."""
    from simroute.calib import default_profile_path, load_profile
    return load_profile(default_profile_path()).gpu_entry_file(gpu) is not None


def skip_reason(row: ServingRow, *, open_loops: bool = False, dp_attention: bool = False) -> str | None:
    """Why `row` is not replayed (None: it is). `dp_attention`: a DP-attention row without MTP is replayed too
    (through the DP-attention group, `engine_values`). An MTP row replays only with the acceptance its run had
    (`--nextn` and `--accept-length`): no source of the table records one (docs/VALIDATION.md, "The MTP rows"),
    and none is fitted or assumed, so every MTP row stays skipped, saying so."""
    from simroute.calib.engine_files import preset_versions
    if row.speculative == "mtp" and row.mtp_accept_length is None:
        return f"{row.deployment}: the source records no MTP acceptance length, and none is assumed"
    if row.deployment != "baseline" and not (dp_attention and row.deployment == "dp-attention"):
        return f"{row.deployment}: not the baseline engine"
    if row.dataset != "random":
        return "ShareGPT prompts: the dataset is not shipped"
    if row.nodes != 1:
        return f"{row.nodes} hosts"
    if not any(row.metric(column) is not None for _, column, _, _ in SCORED):
        return "no scored metric printed"
    if not gpu_has_entry(row.gpu):
        return f"no GPU entry {row.gpu} (issue 35 item 6)"
    if not preset_versions(row.framework):
        return f"no {row.framework} preset"
    if row.gpus != 8 or row.tp != 8:
        return f"TP {row.tp} on {row.gpus} GPUs: the replay runs one 8-GPU host at TP 8"
    if not row.closed_loop and not open_loops:
        return "open loop: not in the default set (name it with --only)"
    return None


def cases(table: Sequence[ServingRow] | None = None, only: Sequence[str] | None = None, *,
          dp_attention: bool = False) -> tuple[list[ServingRow], list[tuple[ServingRow, str]]]:
    """(rows replayed, [(row, why skipped)]). `only`: substrings of row ids; a row matching one runs even if it
    is an open loop. `dp_attention`: the DP-attention rows without MTP run too (`row.dp_attention` tells them
    apart). A substring matching no replayable row is refused naming --only."""
    table = load_serving_table() if table is None else table
    run: list[ServingRow] = []
    skipped: list[tuple[ServingRow, str]] = []
    for row in table:
        picked = only is None or any(s in row.id for s in only)
        reason = skip_reason(row, open_loops=only is not None, dp_attention=dp_attention)
        if picked and reason is None:
            run.append(row)
        elif picked:
            skipped.append((row, reason))
    if only is not None:
        for s in only:
            if not any(s in row.id for row in run):
                why = next((f" ({len([1 for r, _ in skipped if s in r.id])} match, not replayed: {reason})"
                            for row, reason in skipped if s in row.id), "")
                raise ConfigurationError(f"{s!r} matches no replayable row of calib/serving/measured.csv{why}; give "
                                         "a substring of a row id, e.g. h200-trtllm-1k1k or 2026-05", field="--only")
    return run, skipped


def engine_values(row: ServingRow) -> dict:
    """The RunConfig fields of a row: its framework's preset, then the launch flags the row states."""
    values: dict = {"engine": row.framework, "gpu": row.gpu, "tp": row.tp, "model": row.model}
    if row.ep > 1:      # the experts spread over `ep` of the TP GPUs (TP attention: a group of one rank)
        values["ep"] = row.ep
    if row.dp_attention:    # attention DP over the TP GPUs (TensorRT-LLM's enable_attention_dp: DP size = TP size)
        values["dp_attention"] = row.tp
        if row.framework == "trtllm":
            # one server: its requests go to the attention-DP rank with the fewest active requests. TensorRT-LLM's
            # ADP router (tensorrt_llm/_torch/pyexecutor `_schedule_attention_dp_requests` and
            # `balance_requests_across_ranks`) fills the ranks below max(ceil(active + new) / DP, the fullest
            # rank), fewest tokens first; the run's default router (affinity) spreads by two hashed choices and
            # lets a rank pass the even share, and past the launch's CUDA-graph batch (CONC / 8 at 256 clients)
            # its steps run eagerly. Ties: by tokens there, rotating here.
            values["router"] = "least-loaded"
    if row.kv_cache_dtype in ("fp8", "bf16"):
        values["kv_cache"] = row.kv_cache_dtype
    if row.framework == "sglang" and row.chunked_prefill_tokens is not None:
        values["prefill_chunk"] = row.chunked_prefill_tokens
        values["token_budget"] = row.chunked_prefill_tokens     # --max-prefill-tokens, equal in every script
    if row.framework == "trtllm" and row.max_num_tokens is not None:
        values["token_budget"] = row.max_num_tokens
    if row.max_running_requests is not None:
        values["max_running_seqs"] = row.max_running_requests
    if row.cuda_graph_max_bs is not None:
        values["cuda_graph_max_batch"] = row.cuda_graph_max_bs
    # the settings only some frameworks have (the poll interval, prefill graphs, the memory fraction, batch
    # waiting): each a column of the table under the setting's name, passed where the row's framework has it
    from simroute.sim.frameworks import FRAMEWORKS
    from simroute.sim.frameworks.base import OPTIONAL_SETTINGS
    has = FRAMEWORKS.get(row.framework).optional
    from simroute.sim.vocab import FP8_GEMM_BACKENDS, MOE_BACKENDS
    for name in OPTIONAL_SETTINGS:
        value = getattr(row, name)
        if name == "moe_backend" and value not in MOE_BACKENDS:
            continue    # the preset's own MoE rows time this backend on the row's GPU (DeepGEMM on B200, CUTLASS
            # on H200: aiconfigurator's kernel_source; tests/calib/test_serving_table.py holds the rows to it)
        if name == "fp8_gemm_backend" and value not in FP8_GEMM_BACKENDS:
            continue    # no column value but flashinfer_trtllm changes the GEMM rows (tests/calib/test_serving_table.py)
        if value is not None and name in has:
            values[name] = value
    return values


def requests(row: ServingRow) -> int:
    """Prompts replayed: the row's own (10 per client in InferenceX). Fewer would be cheaper but not the same
    metric: the first N requests of a closed loop start together, and at 4 per client that cold burst moves the
    SGLang median TTFT error from 29% to 20% (docs/VALIDATION.md "Serving"); all 77 rows take ~28 CPU s."""
    return row.num_prompts


def workload(row: ServingRow) -> str:
    k = lambda n: f"{n // 1024}k" if n and n % 1024 == 0 else str(n)
    load = f"c{row.concurrency}" if row.closed_loop else f"rate {row.request_rate_req_s:g}"
    return f"{k(row.isl)}/{k(row.osl)} {load}"


def trace_params(row: ServingRow) -> dict:
    params = {"input_tokens": row.isl, "output_tokens": row.osl, "requests": requests(row)}
    if row.range_ratio is not None:
        params["range_ratio"] = row.range_ratio if row.length_rule != "fixed" else 1.0
    if row.client_seed is not None:     # the client's own draws: a 10-request run replays its ten lengths
        params["client_seed"] = row.client_seed
    if row.closed_loop:
        params["concurrency"] = row.concurrency
    elif math.isfinite(row.request_rate_req_s):
        params["qps"] = row.request_rate_req_s
    return params


def replay(trace: Path, values: dict, seed: int = 0) -> dict[str, float]:
    """Run a serving trace on one host of the shipped fat-tree with the RunConfig fields `values`; returns the
    SCORED columns as summary.json `serving` gives them (bench/bench_serving_engines.py runs this too)."""
    from simroute.calib import default_profile_path
    from simroute.network import default_topology_path
    from simroute.sim import RunConfig, simulate
    cfg = RunConfig(topology=str(default_topology_path()), trace=str(trace), calib=str(default_profile_path()),
                    hosts=1, seed=seed, **values)
    serving = simulate(cfg).summary["serving"]
    return {"ttft_median_ms": serving["ttft_ms"]["median"], "tpot_mean_ms": serving["tpot_ms"]["mean"],
            "output_throughput_per_gpu_tok_s": serving["throughput_per_gpu"]["output_tokens_per_s"]}


def simulate_row(row: ServingRow, directory: Path, seed: int = 0) -> dict[str, float]:
    """Replay one row as its benchmark ran (its workload, its framework's preset and launch flags)."""
    from simroute.workload import generate
    trace = generate("serving", directory / f"{row.id}.parquet", seed=seed, params=trace_params(row))
    return replay(trace, engine_values(row), seed)


def fitted_constants(table: Sequence[ServingRow] | None = None, gpus: Sequence[str] | None = None
                     ) -> list[FittedConstant]:
    """Every `fitted` constant of the shipped engine presets and of the GPU entries `gpus` (default: the table's),
    with the rows of `table` named among its points (a row id in a point's or the ref's text)."""
    from simroute.calib import default_profile_path, load_profile
    from simroute.calib.engines import FRAMEWORKS, load_engine_preset, preset_versions
    from simroute.ioutil import load_yaml
    table = load_serving_table() if table is None else table
    ids = [row.id for row in table]
    found: list[FittedConstant] = []

    def add(file: Path, name: str, ref: str, points: Sequence[str]) -> None:
        text = " ".join([ref, *points])
        found.append(FittedConstant(f"calib/{file.parent.name}/{file.name}", name, ref, tuple(points),
                                    tuple(i for i in ids if i in text)))

    for framework in FRAMEWORKS:
        for version in preset_versions(framework):
            preset = load_engine_preset(framework, version)
            for name, constant in preset.constants.items():
                if constant.kind == "fitted":
                    add(preset.file, name, constant.ref, constant.points)
    profile = load_profile(default_profile_path())
    for gpu in sorted(set(gpus) if gpus is not None else {row.gpu for row in table}):
        path = profile.gpu_entry_file(gpu)
        if path is None:
            continue
        raw = load_yaml(path)

        def walk(node, name: str) -> None:
            if isinstance(node, dict):
                prov = node.get("provenance")
                if isinstance(prov, dict) and prov.get("kind") == "fitted":
                    add(path, name, str(prov.get("ref", "")), [str(p) for p in prov.get("points") or ()])
                for key, value in node.items():
                    if key != "provenance":
                        walk(value, str(key))
            elif isinstance(node, list):
                for item in node:
                    walk(item, name)
        walk(raw, gpu)
    return found


def _run(row: ServingRow) -> tuple[str, dict[str, float], float]:
    started = time.process_time()
    with tempfile.TemporaryDirectory(prefix="simroute-serving-") as scratch:
        sim = simulate_row(row, Path(scratch))
    return row.id, sim, time.process_time() - started


def scorecard(rows: Sequence[ServingRow], *, jobs: int = 1, progress: Progress | None = None,
              fitted: Sequence[FittedConstant] = ()) -> list[Point]:
    """Replay `rows` (in `jobs` processes when > 1; the points are the same) and score each printed metric."""
    sims: dict[str, dict[str, float]] = {}
    # longest first (a DP-attention group steps once per rank's event: about DP times a row's work)
    order = sorted(rows, key=lambda r: -(requests(r) * ((r.osl or 1) + (r.isl or 1) / 8)
                                         * (r.tp if r.dp_attention else 1)))
    total = len(order)

    def tell(row_id: str, cpu_s: float) -> None:
        if progress is not None:
            progress(row_id, len(sims), total, cpu_s)

    if jobs > 1 and total > 1:
        from concurrent.futures import ProcessPoolExecutor, as_completed
        with ProcessPoolExecutor(max_workers=min(jobs, total)) as pool:
            for future in as_completed([pool.submit(_run, row) for row in order]):
                row_id, sim, cpu_s = future.result()
                sims[row_id] = sim
                tell(row_id, cpu_s)
    else:
        for row in order:
            row_id, sim, cpu_s = _run(row)
            sims[row_id] = sim
            tell(row_id, cpu_s)
    fitted_by_row: dict[str, list[str]] = {}
    for constant in fitted:
        for row_id in constant.rows:
            fitted_by_row.setdefault(row_id, []).append(f"{constant.file}:{constant.name}")
    points = []
    for row in rows:
        for metric, column, _, unit in SCORED:
            measured = row.metric(column)
            if measured is None:
                continue
            simulated = sims[row.id][column]
            ratio = simulated / measured if measured > 0 else math.nan
            points.append(Point(row.id, metric, row.framework, row.framework_version, row.gpu, workload(row),
                                row.holdout, ", ".join(fitted_by_row.get(row.id, [])), measured, simulated, unit,
                                ratio, BAND[0], BAND[1], verdict(ratio)))
    return points


def summary(points: Sequence[Point]) -> dict:
    """Judged points only: per metric the count, median |ratio - 1|, the ratios' range and how many fall outside
    the band; then the same split by the table's holdout column; and the pass / fail counts."""
    judged = [p for p in points if p.judged]
    out: dict = {"points": len(points), "judged": len(judged), "fitted": len(points) - len(judged),
                 "passed": sum(p.verdict == "pass" for p in judged), "failed": sum(p.verdict != "pass" for p in judged),
                 "rows": len({p.id for p in judged}), "frameworks": sorted({p.framework for p in judged}),
                 "gpus": sorted({p.gpu for p in judged}), "metrics": {}}
    for metric, _, words, _ in SCORED:
        for label, subset in (("all", judged), ("holdout", [p for p in judged if p.holdout]),
                              ("not holdout", [p for p in judged if not p.holdout])):
            ratios = [p.ratio for p in subset if p.metric == metric and math.isfinite(p.ratio)]
            if not ratios:
                continue
            out["metrics"].setdefault(metric, {"words": words})[label] = {
                "n": len(ratios), "median_abs_err": statistics.median(abs(r - 1) for r in ratios),
                "min_ratio": min(ratios), "max_ratio": max(ratios),
                "outside_band": sum(not (BAND[0] <= r <= BAND[1]) for r in ratios)}
    for framework in sorted({p.framework for p in judged}):
        for gpu in sorted({p.gpu for p in judged if p.framework == framework}):
            group = {}
            for metric, _, _, _ in SCORED:
                ratios = [p.ratio for p in judged if (p.framework, p.gpu, p.metric) == (framework, gpu, metric)]
                if ratios:
                    group[metric] = {"n": len(ratios), "median_abs_err": statistics.median(abs(r - 1) for r in ratios),
                                     "outside_band": sum(not (BAND[0] <= r <= BAND[1]) for r in ratios)}
            out.setdefault("groups", {})[f"{framework} {gpu}"] = group
    return out
