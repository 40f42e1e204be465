"""`simroute plan` side by side with NVIDIA's `aiconfigurator cli default` (issue 36): the same question asked of both.

The question: the fewest GPUs that serve a load (requests/s) within the SLOs, for DeepSeek-V3 FP8 on H200 (the
model simroute's default deployment serves, simroute/defaults.py; aiconfigurator's `deepseek-ai/DeepSeek-V3` on
`h200_sxm`, backend sglang 0.5.14), the SLOs simroute's one default (simroute/sim/slo.py: p99 TTFT <= 2 s, p99
TPOT <= 50 ms; aiconfigurator's --ttft 2000 --tpot 50, which it applies to its steady-state estimates), asked for
two workloads:
- `serving`: a plain serving benchmark, every request 4096 tokens in and 1024 out (simroute's `serving` generator
  with range_ratio=1, i.e. fixed lengths), an open-loop Poisson stream of `--serving-qps` requests/s;
- `agents`: the README's question (`simroute plan --workload agents -p documents=1 -p doc_tokens=32768 -p
  subagents=32 -p requests_per_agent=2 --qps 4`): 65 requests that all read one 32k-token document. aiconfigurator
  cannot see shared documents: it gets the equivalent fixed ISL / OSL of the trace (mean prompt tokens, own and
  attended, and mean output tokens, read from the trace simroute generates with the plan's seed) with no reuse,
  and, as a second row, the same with `--prefix` = the document's tokens (its own knob: every request finds that
  prefix already cached on its own worker; no first touch, no transfer, no network).

Each deployment ("column"):
- `tp8`: TP 8 attention and TP 8 MoE per 8-GPU instance, a bf16 KV cache (simroute's default, SGLang's `auto` on
  this checkpoint); aiconfigurator restricted to tp 8, dp 1, moe_tp 8, moe_ep 1 with --kvcache bfloat16;
- `dep8`: DP attention 8 + EP 8 per 8-GPU instance, an fp8 KV cache on both sides (aiconfigurator's SGLang
  wide-EP rows carry only fp8 KV / fp8_block FMHA); aiconfigurator restricted to tp 1, dp 8, moe_tp 1, moe_ep 8;
- `disagg`: prefill and decode pools of TP 8 instances, P:D 1:1, a bf16 KV cache; aiconfigurator's disagg sweep
  restricted to TP 8 workers on 16 GPUs (one prefill and one decode worker: its replica, scaled by the load-match).
simroute runs a column when `simroute plan --help` offers its flags (DP attention + EP: `--parallel dp8ep8`;
disagg: `--disagg 1:1`), else the table says "not available in this build". aiconfigurator's restricted searches are
`cli exp` experiments (the same sweep `cli default` runs, with the candidate lists cut to the column); its own
unrestricted answer is `cli default --target-request-rate R` (its "recommend" mode: fewest GPUs for a load).

Mapping one tool onto the other. aiconfigurator estimates a steady state at a batch size: each row of its sweep is
one deployment at one batch size, with its request rate (seq/s), TTFT, TPOT and output tokens/s per GPU.
`load_match` turns that into the plan's answer exactly as aiconfigurator's own load-match does
(`aiconfigurator.sdk.pareto_analysis.get_best_configs_for_target_load`, 0.12.0): rows within the SLOs, replicas =
ceil(R / seq/s), GPUs = replicas x GPUs per replica, fewest GPUs first (ties: more tokens/s per GPU). simroute's
plan runs the workload at R requests/s on 1..`hosts_max` hosts of the shipped leaf-spine (network, KV reuse,
per-request scheduling) and answers the fewest hosts whose run meets the SLOs (p99 over the run's requests).
Throughput per GPU is given three ways: aiconfigurator's (its replica at its batch size: a capacity), the load
carried at the answer (R x OSL / GPUs, both tools, like for like), and simroute's measured over its run (first
send to last completion: ramp-up and drain included, so below the carried load on short traces).

aiconfigurator runs in its own venv, called as a subprocess (bench/bench_aiconfigurator.py says how to make it);
the bench skips with a message when bench/.venv-aic is missing. Wall on the 2-core box: 14 to 22 minutes (840 s
at a load average of about 3, 1,316 s at about 17; the DP 8 + EP 8 plans and operating point dominate, then
aiconfigurator's sweeps; `--jobs 2` runs two tasks at once; `--columns` runs some columns only).

Run: PYTHONPATH=. python3 bench/bench_plan_aiconfigurator.py [--no-record] [--jobs 2] [--only serving,agents]
                                                             [--columns default,tp8,dep8,disagg]
                                                             [--serving-qps 4] [--keep DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "bench" / ".venv-aic"
AIC = VENV / "bin" / "aiconfigurator"
HF_MODEL, SYSTEM, BACKEND, BACKEND_VERSION = "deepseek-ai/DeepSeek-V3", "h200_sxm", "sglang", "0.5.14"
GPUS_PER_HOST = 8                       # an HGX H200 host (simroute's fattree hosts; aiconfigurator's h200_sxm node)
PLAN_SEED = 0                           # the seed of a one-seed plan's runs (study seeds count from 0)
NOT_AVAILABLE = "not available in this build"


# ---- the columns ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    name: str
    words: str
    kv: str                              # KV-cache dtype on both sides: simroute --kv-cache, aiconfigurator's quant


COLUMNS = (Column("tp8", "TP 8 (attention and MoE), agg", "bf16"),
           Column("dep8", "DP 8 attention + EP 8, agg", "fp8"),
           Column("disagg", "disaggregated P:D pools of TP 8 instances", "bf16"))
DISAGG_RATIOS = "1:1"                 # P:D of simroute's pools; aiconfigurator's disagg sweep gets 16 GPUs: 1P:1D
# A DP 8 + EP 8 run simulates every rank as an instance and each step's all-to-all as flows: ~200 s wall for the
# serving workload's 480 requests on one host (measured on this box at load 13, dp-sim branch 465c163), so its plan
# probes at most 3 hosts (aiconfigurator's answer at 4 requests/s is 2) and replays the first 240 requests (60 s of
# arrivals at 4 requests/s), and its operating-point run sends 240.
HOSTS_MAX = {"dep8": 3}
MAX_REQUESTS = {"dep8": 240}


def plan_flags(help_text: str, column: str) -> list[str] | None:
    """The `simroute plan` flags of a column, or None where this build's plan does not offer them (DP attention +
    EP: `--parallel tp<N>dp<N>ep<M>`; disaggregated pools: `--disagg P:D,...`, TP 8 instances in both pools)."""
    text = re.sub(r"[\u2500-\u257f]", " ", help_text)          # the help's box-drawing frame
    kv = ["--kv-cache", next(c.kv for c in COLUMNS if c.name == column)]
    if column == "tp8":
        return ["--tp", "8", *kv]
    if column == "dep8":
        return ["--parallel", "dp8ep8", *kv] if re.search(r"--parallel\b", text) else None
    if column == "disagg":
        return ["--tp", "8", "--disagg", DISAGG_RATIOS, *kv] if re.search(r"--disagg\b", text) else None
    raise ValueError(f"unknown column {column!r}")


SKIP_REASONS = {"dep8": "`simroute plan --help` offers no --parallel (DP attention + EP is not in this build)",
                "disagg": "`simroute plan --help` offers no --disagg (disaggregated prefill / decode pools are not "
                          "in this build)"}


def skip_reason(column: str) -> str:
    """Why simroute's side of a column is skipped, in one line (printed, and the table's note)."""
    return f"{column} column: simroute side skipped: {SKIP_REASONS.get(column, NOT_AVAILABLE)}"


# ---- the workloads --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    name: str
    generator: str
    params: dict[str, Any]
    qps: float
    hosts_max: int
    compare: str = ""                    # plan --compare (the agents question also asks always-route / always-fetch)
    doc_tokens: int = 0                  # the shared document aiconfigurator's --prefix row gets


def workloads(serving_qps: float) -> list[Workload]:
    return [Workload("serving", "serving", {"input_tokens": 4096, "output_tokens": 1024, "range_ratio": 1,
                                            "requests": max(240, int(120 * serving_qps))},
                     qps=serving_qps, hosts_max=6),
            Workload("agents", "agents", {"documents": 1, "doc_tokens": 32768, "subagents": 32,
                                          "requests_per_agent": 2},
                     qps=4.0, hosts_max=8, compare="always-route,always-fetch", doc_tokens=32768)]


def equivalent_lengths(workload: Workload, tmp: Path) -> tuple[int, int]:
    """The fixed ISL / OSL aiconfigurator gets for a workload: the mean prompt tokens (own and attended chunks) and
    mean output tokens of the trace simroute's plan runs (generated here with the plan's seed)."""
    from simroute.workload.generators import generate
    from simroute.workload.stats import trace_info
    path = tmp / f"{workload.name}.parquet"
    generate(workload.generator, path, seed=PLAN_SEED, params={**workload.params, "qps": workload.qps})
    info = trace_info(path)
    return round(info.prompt_tokens["mean"]), round(info.output_tokens["mean"])


# ---- aiconfigurator: the experiments and their answer ------------------------------------------------------------
def slo_targets() -> tuple[float, float]:
    """(TTFT ms, TPOT ms) of simroute's one default SLO, for aiconfigurator's --ttft / --tpot."""
    from simroute.sim import slo
    parsed = slo.parse(slo.DEFAULT_SLO)
    values = {cond.column: cond.value for cond in parsed.conditions}
    return float(values["ttft_ms_p99"]), float(values["tpot_ms_p99"])


_AIC_KV = {"bf16": "bfloat16", "fp8": "fp8"}


def _worker(parallel: str) -> dict[str, list[int]]:
    """Candidate lists of one 8-GPU worker: 'tp8' (TP attention, TP MoE) or 'dep8' (DP attention, EP MoE)."""
    return ({"tp": [8], "dp": [1], "moe_tp": [8], "moe_ep": [1]} if parallel == "tp8"
            else {"tp": [1], "dp": [8], "moe_tp": [1], "moe_ep": [8]})


def aic_experiment(column: str, isl: int, osl: int, ttft: float, tpot: float, prefix: int = 0) -> dict[str, Any]:
    """One `aiconfigurator cli exp` experiment: the column's deployment at the workload's ISL / OSL and the SLOs."""
    kv = _AIC_KV[next(c.kv for c in COLUMNS if c.name == column)]
    common = {"isl": isl, "osl": osl, "prefix": prefix, "ttft": ttft, "tpot": tpot, "database_mode": "SILICON"}
    target = {"model_path": HF_MODEL, "system_name": SYSTEM, "backend_name": BACKEND,
              "backend_version": BACKEND_VERSION}
    # the wide-EP (DP attention + EP) rows of SGLang 0.5.14 carry an fp8 KV cache and fp8_block FMHA only
    fmha = "fp8_block" if kv == "fp8" else "bfloat16"
    if column in ("tp8", "dep8"):
        worker = _worker(column)
        return {"serving_mode": "agg", **target, **common, "total_gpus": GPUS_PER_HOST, "kvcache_quant_mode": kv,
                "fmha_quant_mode": fmha, "agg_num_gpu_candidates": [GPUS_PER_HOST], "agg_pp_candidates": [1],
                "agg_cp_candidates": [1], **{f"agg_{key}_candidates": value for key, value in worker.items()}}
    out: dict[str, Any] = {"serving_mode": "disagg", **common, "total_gpus": 2 * GPUS_PER_HOST}   # 1P:1D of TP 8
    for side in ("prefill", "decode"):
        out.update({f"{side}_{key}": value for key, value in target.items()})
        out.update({f"{side}_kvcache_quant_mode": kv, f"{side}_fmha_quant_mode": fmha,
                    f"{side}_num_gpu_candidates": [GPUS_PER_HOST], f"{side}_pp_candidates": [1],
                    f"{side}_cp_candidates": [1]})
        out.update({f"{side}_{key}_candidates": value for key, value in _worker("tp8").items()})
    return out


def read_rows(csv_path: Path) -> list[dict[str, Any]]:
    """aiconfigurator's saved sweep rows (pareto.csv / best_config_topn.csv), numbers as floats."""
    rows = []
    with csv_path.open(newline="") as f:
        for raw in csv.DictReader(f):
            row: dict[str, Any] = {}
            for key, value in raw.items():
                try:
                    row[key] = float(value)
                except (TypeError, ValueError):
                    row[key] = value
            rows.append(row)
    return rows


def load_match(rows: list[dict[str, Any]], rate: float, ttft: float, tpot: float) -> dict[str, Any] | None:
    """The fewest GPUs serving `rate` requests/s within the SLOs over aiconfigurator's rows, as its own load-match
    computes it (get_best_configs_for_target_load, 0.12.0): replicas = ceil(rate / seq/s), GPUs = replicas x
    the row's GPUs; ties go to more tokens/s per GPU. None when no row is within the SLOs."""
    best = None
    for row in rows:
        if not (row.get("ttft", math.inf) <= ttft and row.get("tpot", math.inf) <= tpot and row.get("seq/s", 0) > 0):
            continue
        replicas = max(1, math.ceil(rate / row["seq/s"] - 1e-9))
        gpus = replicas * int(row["num_total_gpus"])
        key = (gpus, -row["tokens/s/gpu"])
        if best is None or key < best[0]:
            best = (key, {**row, "replicas": replicas, "gpus": gpus})
    return best[1] if best else None


def describe_row(row: dict[str, Any]) -> str:
    """An aiconfigurator row's deployment in words: 'agg tp1pp1dp8etp1ep8 bs 24' or 'disagg 1P (...) : 1D (...)'."""
    if "(p)parallel" in row:
        return (f"disagg {int(row['(p)workers'])}P {row['(p)parallel']} bs {int(row['(p)bs'])} : "
                f"{int(row['(d)workers'])}D {row['(d)parallel']} bs {int(row['(d)bs'])}")
    return f"agg {row['parallel']} bs {int(row['bs'])}"


def _sweep_dir(save_dir: Path, experiment: str) -> Path | None:
    hits = sorted(save_dir.glob(f"*/*/{experiment}"))
    return hits[0] if hits else None


def run_aic(args: list[str], log: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(AIC), *args, "--no-color"], capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    log.write_text(proc.stdout + proc.stderr)
    return proc


def _failure(proc: subprocess.CompletedProcess) -> str:
    """aiconfigurator's reason in one line: its 'Experiment X failed: ...' line (the sweep's own words), else the
    last error line."""
    every = (proc.stdout + proc.stderr).splitlines()
    lines = [line for line in every if "[E]" in line]
    failed = ([line for line in lines if " failed: " in line]
              or [line for line in every if "returned no results" in line])
    text = (failed or lines or (proc.stderr.strip().splitlines() or ["(no output)"]))[-1]
    text = re.sub(r"^.*\[[EW]\] \[[^]]*\]\s*(->\s*)?", "", text)
    return re.sub(r"(\s*Selected exception: |\. Possible causes).*", "", text)[:160]


def prefill_ms(isl: int) -> dict[str, float | str]:
    """One prefill of `isl` tokens at TP 8, bf16 KV, on both sides (ms): why a long prompt without reuse cannot meet
    the TTFT SLO. bench_aiconfigurator's points: `cli estimate --estimate-mode static_ctx` and simroute's step."""
    from bench_aiconfigurator import Point, aic_estimate, simroute_step
    point = Point(f"prefill-{isl}", model="deepseek-v3", hf=HF_MODEL, gpu="h200-sxm", system=SYSTEM, tp=8,
                  phase="prefill", batch=1, isl=isl, moe=True)
    aic = aic_estimate(point)
    return {"simroute_ms": simroute_step(point)["iteration_ms"],
            "aic_ms": aic.get("iteration_ms", float("nan")), "aic_error": aic.get("error", "")}


def aic_column(column: str, isl: int, osl: int, rate: float, prefix: int, work: Path) -> dict[str, Any]:
    """aiconfigurator's answer for one column: its restricted sweep (`cli exp`), then the load-match."""
    import yaml
    ttft, tpot = slo_targets()
    name = column + (f"_prefix{prefix}" if prefix else "")
    save = work / f"aic-{name}-{isl}-{osl}"
    spec = work / f"{name}-{isl}-{osl}.yaml"
    spec.write_text(yaml.safe_dump({name: aic_experiment(column, isl, osl, ttft, tpot, prefix)}, sort_keys=False))
    t0 = time.perf_counter()
    proc = run_aic(["cli", "exp", "--yaml-path", str(spec), "--save-dir", str(save), "--top-n", "3"],
                   work / f"{name}-{isl}-{osl}.log")
    wall = time.perf_counter() - t0
    sweep = _sweep_dir(save, name)
    if sweep is None or not (sweep / "pareto.csv").exists():
        return {"error": _failure(proc), "wall_s": wall}
    best = load_match(read_rows(sweep / "pareto.csv"), rate, ttft, tpot)
    if best is None:
        return {"error": f"no {column} row within TTFT {ttft:g} ms and TPOT {tpot:g} ms", "wall_s": wall}
    return {**best, "wall_s": wall}


def aic_default(isl: int, osl: int, rate: float, prefix: int, work: Path) -> dict[str, Any]:
    """aiconfigurator's own answer: `cli default --target-request-rate R` (fewest GPUs over every deployment it
    searches, agg and disagg, its KV / FMHA dtypes inferred from the checkpoint)."""
    ttft, tpot = slo_targets()
    save = work / f"aic-default-{isl}-{osl}-{prefix}"
    t0 = time.perf_counter()
    proc = run_aic(["cli", "default", "--model-path", HF_MODEL, "--system", SYSTEM, "--backend", BACKEND,
                    "--backend-version", BACKEND_VERSION, "--target-request-rate", f"{rate:g}", "--isl", str(isl),
                    "--osl", str(osl), "--prefix", str(prefix), "--ttft", f"{ttft:g}", "--tpot", f"{tpot:g}",
                    "--save-dir", str(save)], work / f"default-{isl}-{osl}-{prefix}.log")
    wall = time.perf_counter() - t0
    picks = []
    for mode in ("agg", "disagg"):
        sweep = _sweep_dir(save, mode)
        if sweep is not None and (sweep / "best_config_topn.csv").exists():
            rows = read_rows(sweep / "best_config_topn.csv")
            if rows:
                row = rows[0]
                picks.append({**row, "gpus": int(row["total_gpus_needed"]), "replicas": int(row["replicas_needed"])})
    if not picks:
        return {"error": _failure(proc), "wall_s": wall}
    best = min(picks, key=lambda row: (row["gpus"], -row["tokens/s/gpu"]))
    return {**best, "wall_s": wall}


def run_flags(help_text: str, column: str) -> list[str] | None:
    """`simroute run` flags of a column's one replica, or None where this build's run lacks them."""
    text = re.sub(r"[\u2500-\u257f]", " ", help_text)
    kv = ["--kv-cache", next(c.kv for c in COLUMNS if c.name == column)]
    if column == "tp8":
        return ["--tp", "8", *kv]
    if column == "dep8":
        return ["--tp", "8", "--dp-attention", "8", "--ep", "8", *kv] if re.search(r"--dp-attention\b", text) else None
    if column == "disagg":
        return ["--tp", "8", "--disagg", DISAGG_RATIOS, *kv] if re.search(r"--disagg\b", text) else None
    raise ValueError(f"unknown column {column!r}")


# ---- simroute plan ------------------------------------------------------------------------------------------------
def plan_args(workload: Workload, flags: list[str], out: Path, hosts_max: int) -> list[str]:
    params = [arg for key, value in workload.params.items() for arg in ("-p", f"{key}={value}")]
    return ["plan", "--workload", workload.generator, *params, "--qps", f"{workload.qps:g}", *flags,
            "--hosts-max", str(hosts_max), "--seeds", "1", "--compare", workload.compare,
            "--no-progress", "-j", "1", "-o", str(out)]


def plan_result(answer: dict[str, Any]) -> dict[str, Any]:
    """The plan's answer in the table's terms: GPUs, hosts, the answer's probe (p99 TTFT / TPOT, measured output
    tokens/s per GPU, busiest resource, route / fetch counts) and each compared policy's fewest GPUs."""
    own = answer["deployments"][answer["deployment"]]
    probe = own.get("at_answer") or {}
    return {"gpus": answer.get("answer_gpus"), "hosts": answer.get("answer_hosts"), "status": answer.get("status"),
            "ttft": probe.get("ttft_ms_p99"), "tpot": probe.get("tpot_ms_p99"),
            "measured_tok_s_gpu": probe.get("output_tokens_per_s_per_gpu"), "busiest": probe.get("busiest"),
            "n_fetch": probe.get("n_fetch"), "n_route": probe.get("n_route"),
            "network": (probe.get("resources") or {}).get("network"),
            "binding": own.get("binding"),
            "compared": {name: entry.get("gpus") for name, entry in answer["deployments"].items()
                         if not entry.get("candidate")}}


def simroute_column(workload: Workload, flags: list[str], work: Path, column: str) -> dict[str, Any]:
    out = work / f"plan-{workload.name}-{column}"
    t0 = time.perf_counter()
    hosts_max = min(workload.hosts_max, HOSTS_MAX.get(column, workload.hosts_max))
    cap = ["--max-requests", str(MAX_REQUESTS[column])] if column in MAX_REQUESTS else []
    proc = subprocess.run([sys.executable, "-m", "simroute", *plan_args(workload, [*flags, *cap], out, hosts_max)],
                          cwd=ROOT, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not (out / "plan.json").exists():
        return {"error": (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:200], "wall_s": wall}
    return {**plan_result(json.loads((out / "plan.json").read_text())), "wall_s": wall}


def operating_point(row: dict[str, Any], isl: int, osl: int, flags: list[str], work: Path, name: str,
                    requests: int | None = None) -> dict[str, Any]:
    """simroute's run of one aiconfigurator replica at the request rate aiconfigurator says it sustains (its row's
    seq/s) as an open Poisson stream of fixed ISL / OSL, on the replica's hosts. By Little's law the requests in
    flight then settle at rate x latency, aiconfigurator's concurrency if both agree on the latency (a closed loop
    of that concurrency instead would start with every request at once and keep fixed-length requests in
    synchronised waves, which no steady state has). Mean and p99 TTFT / TPOT and the mean in flight."""
    rate = float(row["seq/s"])
    hosts = max(1, int(row["num_total_gpus"]) // GPUS_PER_HOST)
    trace = work / f"point-{name}.parquet"
    out = work / f"point-{name}"
    base = [sys.executable, "-m", "simroute"]
    gen = subprocess.run([*base, "trace", "gen", "serving", "-p", f"input_tokens={isl}", "-p", f"output_tokens={osl}",
                          "-p", "range_ratio=1", "-p", f"requests={requests or max(240, int(150 * rate))}",
                          "-p", f"qps={rate:g}",
                          "-o", str(trace), "--seed", str(PLAN_SEED)], cwd=ROOT, capture_output=True, text=True)
    run = subprocess.run([*base, "run", "--trace", str(trace), "--hosts", str(hosts), *flags, "--seed", str(PLAN_SEED),
                          "-o", str(out)], cwd=ROOT, capture_output=True, text=True) if gen.returncode == 0 else gen
    if not (out / "summary.json").exists():
        return {"error": (run.stderr.strip().splitlines() or ["(no output)"])[-1][:160]}
    serving = json.loads((out / "summary.json").read_text()).get("serving") or {}
    ttft, tpot = serving.get("ttft_ms") or {}, serving.get("tpot_ms") or {}
    return {"rate": rate, "hosts": hosts, "in_flight": serving.get("mean_in_flight"), "ttft": ttft.get("mean"),
            "ttft_p99": ttft.get("p99"), "tpot": tpot.get("mean"), "tpot_p99": tpot.get("p99")}


# ---- the table ---------------------------------------------------------------------------------------------------
def carried(rate: float, osl: int, gpus: int | None) -> float | None:
    """Output tokens/s per GPU the answer carries at the load: rate x OSL / GPUs (the like-for-like figure)."""
    return rate * osl / gpus if gpus else None


def _f(value: Any, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def table_rows(workload: Workload, isl: int, osl: int, aic: dict[str, dict], sim: dict[str, dict]) -> list[str]:
    rows = [f"| {workload.name} | {key} | {tool} | {deployment} | {gpus} | {own} | {load} | {ttft} | {tpot} | {note} |"
            for key, tool, deployment, gpus, own, load, ttft, tpot, note in _cells(workload, isl, osl, aic, sim)]
    return rows


def _cells(workload: Workload, isl: int, osl: int, aic: dict[str, dict], sim: dict[str, dict]):
    rate = workload.qps
    for key, result in aic.items():
        if "error" in result:
            yield key, "aiconfigurator", "-", "none", "-", "-", "-", "-", result["error"]
            continue
        yield (key, "aiconfigurator", describe_row(result), str(result["gpus"]), _f(result["tokens/s/gpu"]),
               _f(carried(rate, osl, result["gpus"])), _f(result["ttft"]), _f(result["tpot"], ".1f"),
               f"{result['replicas']} x {int(result['num_total_gpus'])} GPUs; {result['seq/s']:.2f} req/s per replica "
               f"at concurrency {int(result['concurrency'])}")
    for key, result in sim.items():
        if result.get("skipped"):
            yield key, "simroute plan", NOT_AVAILABLE, "-", "-", "-", "-", "-", result.get("reason", "")
            continue
        if "error" in result:
            yield key, "simroute plan", "-", "-", "-", "-", "-", "-", result["error"]
            continue
        compared = ", ".join(f"{name} {gpus if gpus is not None else 'none'}"
                             for name, gpus in result["compared"].items())
        note = f"busiest {result['busiest']}; fetch {_f(result['n_fetch'])}, route {_f(result['n_route'])}"
        if compared:
            note += f"; GPUs for {compared}"
        gpus = str(result["gpus"] or f"none in 1-{min(workload.hosts_max, HOSTS_MAX.get(key, 99))} hosts")
        yield (key, "simroute plan", f"{key} at {rate:g} req/s", gpus,
               _f(result["measured_tok_s_gpu"]), _f(carried(rate, osl, result["gpus"])), _f(result["ttft"]),
               _f(result["tpot"], ".1f"), note)


HEADER = ("| workload | column | tool | deployment | GPUs | own tok/s/GPU | carried tok/s/GPU | TTFT ms | TPOT ms "
          "| notes |\n|---|---|---|---|---|---|---|---|---|---|")


@dataclass
class Outcome:
    workload: Workload
    isl: int = 0
    osl: int = 0
    aic: dict[str, dict] = field(default_factory=dict)
    sim: dict[str, dict] = field(default_factory=dict)
    prefill: dict[str, Any] = field(default_factory=dict)
    points: dict[str, dict] = field(default_factory=dict)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma-separated workloads (serving, agents; default both)")
    ap.add_argument("--jobs", type=int, default=2, help="tasks at once (aiconfigurator sweeps, simroute plans)")
    ap.add_argument("--serving-qps", type=float, default=4.0, help="the serving workload's load, requests/s")
    ap.add_argument("--columns", default="", help="comma-separated columns (default, tp8, dep8, disagg; default "
                    "all): 'default' is aiconfigurator's own unrestricted answer, e.g. --columns disagg")
    ap.add_argument("--keep", default="", help="keep every plan and aiconfigurator output under this directory")
    args, _ = ap.parse_known_args()
    wanted = set(args.columns.split(",")) if args.columns else {"default", *(c.name for c in COLUMNS)}
    unknown = wanted - {"default", *(c.name for c in COLUMNS)}
    if unknown:
        print(f"--columns: unknown column(s) {', '.join(sorted(unknown))} (default, tp8, dep8, disagg)")
        sys.exit(2)
    columns = [column for column in COLUMNS if column.name in wanted]
    if not AIC.exists():
        print(f"[plan_aiconfigurator] skipped: no aiconfigurator venv at {VENV.relative_to(ROOT)} (make it with "
              "`python3 -m venv bench/.venv-aic && bench/.venv-aic/bin/pip install aiconfigurator==0.12.0`)")
        return
    sys.path.insert(0, str(ROOT / "bench"))
    from _common import record
    help_text = subprocess.run([sys.executable, "-m", "simroute", "plan", "--help"], cwd=ROOT, capture_output=True,
                               text=True, env={**os.environ, "COLUMNS": "200"}).stdout
    flags = {column.name: plan_flags(help_text, column.name) for column in COLUMNS}
    run_help = subprocess.run([sys.executable, "-m", "simroute", "run", "--help"], cwd=ROOT, capture_output=True,
                              text=True, env={**os.environ, "COLUMNS": "200"}).stdout
    replica_flags = {column.name: run_flags(run_help, column.name) for column in COLUMNS}
    for column in columns:
        if flags[column.name] is None:
            print(f"[plan_aiconfigurator] {skip_reason(column.name)}; aiconfigurator's side still runs")
    chosen = [w for w in workloads(args.serving_qps) if not args.only or w.name in args.only.split(",")]
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="simroute-bench-plan-aic-") as tmp:
        work = Path(args.keep).resolve() if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        outcomes = []
        for workload in chosen:
            isl, osl = equivalent_lengths(workload, work)
            outcomes.append(Outcome(workload, isl, osl))
        tasks = []
        for outcome in outcomes:
            w = outcome.workload
            if "default" in wanted:
                tasks.append((outcome.aic, "cli default",
                              lambda w=w, o=outcome: aic_default(o.isl, o.osl, w.qps, 0, work)))
            if w.doc_tokens and "tp8" in wanted:
                tasks.append((outcome.prefill, "at isl", lambda o=outcome: prefill_ms(o.isl)))
            if w.doc_tokens and "default" in wanted:
                tasks.append((outcome.aic, f"cli default --prefix {w.doc_tokens}",
                              lambda w=w, o=outcome: aic_default(o.isl, o.osl, w.qps, w.doc_tokens, work)))
            for column in columns:
                tasks.append((outcome.aic, column.name,
                              lambda c=column.name, w=w, o=outcome: aic_column(c, o.isl, o.osl, w.qps, 0, work)))
                if column.name != "disagg" and w.doc_tokens:
                    tasks.append((outcome.aic, f"{column.name} --prefix {w.doc_tokens}",
                                  lambda c=column.name, w=w, o=outcome: aic_column(c, o.isl, o.osl, w.qps,
                                                                                   w.doc_tokens, work)))
                if flags[column.name] is None:
                    outcome.sim[column.name] = {"skipped": True, "reason": SKIP_REASONS.get(column.name, "")}
                else:
                    tasks.append((outcome.sim, column.name,
                                  lambda c=column.name, w=w: simroute_column(w, flags[c], work, c)))
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            futures = [(target, key, pool.submit(fn)) for target, key, fn in tasks]
            for target, key, future in futures:
                target[key] = future.result()
            points = [(outcome.points, key, pool.submit(operating_point, outcome.aic[key], outcome.isl, outcome.osl,
                                                        replica_flags[key], work, f"{outcome.workload.name}-{key}",
                                                        MAX_REQUESTS.get(key)))
                      for outcome in outcomes if not outcome.workload.doc_tokens
                      for key in (c.name for c in columns)
                      if replica_flags[key] and "error" not in outcome.aic.get(key, {"error": 1})]
            for target, key, future in points:
                target[key] = future.result()
        wall = time.perf_counter() - t_start
    ttft, tpot = slo_targets()
    print(f"DeepSeek-V3 FP8 on H200 (simroute {HF_MODEL} {SYSTEM}); SLO TTFT <= {ttft:g} ms, TPOT <= {tpot:g} ms "
          "(simroute: p99 over the run; aiconfigurator: its steady-state estimate)")
    for outcome in outcomes:
        w = outcome.workload
        print(f"\n{w.name}: {w.qps:g} requests/s; aiconfigurator ISL {outcome.isl}, OSL {outcome.osl}"
              + (f" (prefix rows: --prefix {w.doc_tokens})" if w.doc_tokens else ""))
    print("\n" + HEADER)
    for outcome in outcomes:
        for row in table_rows(outcome.workload, outcome.isl, outcome.osl, outcome.aic, outcome.sim):
            print(row)
    for outcome in outcomes:
        if outcome.points:
            print(f"\n{outcome.workload.name}: one aiconfigurator replica at the rate it says it sustains, run by "
                  "simroute (open loop; means as aiconfigurator's, then simroute's p99)\n"
                  "| column | replica | req/s | aic concurrency | simroute mean in flight | aic TTFT ms | "
                  "simroute TTFT mean / p99 ms | aic TPOT ms | simroute TPOT mean / p99 ms |\n"
                  "|---|---|---|---|---|---|---|---|---|")
        for key, point in outcome.points.items():
            row = outcome.aic[key]
            if "error" in point:
                print(f"| {key} | {describe_row(row)} | {row['seq/s']:.2f} | - | {point['error']} | | | | |")
                continue
            print(f"| {key} | {describe_row(row)} on {point['hosts']} host(s) | {point['rate']:.2f} | "
                  f"{int(row['concurrency'])} | {_f(point['in_flight'])} | {row['ttft']:.0f} | {_f(point['ttft'])} / "
                  f"{_f(point['ttft_p99'])} | {row['tpot']:.1f} | {_f(point['tpot'], '.1f')} / "
                  f"{_f(point['tpot_p99'], '.1f')} |")
    for outcome in outcomes:
        got = outcome.prefill.get("at isl")
        if got:
            print(f"\n{outcome.workload.name}: one prefill of {outcome.isl} tokens at TP 8 (bf16 KV): simroute "
                  f"{got['simroute_ms']:.0f} ms, aiconfigurator {got['aic_ms']:.0f} ms {got['aic_error']}(TTFT SLO "
                  f"{ttft:g} ms: without reuse every request pays it; with simroute's reuse only a document's first "
                  "touch on an instance does)")
    figures: dict[str, Any] = {"wall_s": round(wall, 1)}
    if args.columns:
        figures["columns"] = "+".join(sorted(wanted))
    for outcome in outcomes:
        for tool, results in (("aic", outcome.aic), ("sim", outcome.sim)):
            for key, result in results.items():
                short = key.replace(" --prefix ", "+prefix").replace("cli default", "default")
                gpus = None if ("error" in result or result.get("skipped")) else result.get("gpus")
                figures[f"{outcome.workload.name}.{tool}.{short}"] = (
                    "n/a" if result.get("skipped") else str(gpus) if gpus else "none")
        for key, point in outcome.points.items():
            if "error" not in point and point.get("tpot") and point.get("ttft"):
                row = outcome.aic[key]
                figures[f"{outcome.workload.name}.point.{key}.tpot_sim/aic"] = round(point["tpot"] / row["tpot"], 3)
                figures[f"{outcome.workload.name}.point.{key}.ttft_sim/aic"] = round(point["ttft"] / row["ttft"], 3)
        got = outcome.prefill.get("at isl")
        if got:
            figures[f"{outcome.workload.name}.prefill_ms_sim/aic"] = f"{got['simroute_ms']:.0f}/{got['aic_ms']:.0f}"
    record("plan_vs_aiconfigurator", figures, target="same question both sides; GPUs at the load, per column")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
