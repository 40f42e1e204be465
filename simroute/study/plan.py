"""`simroute plan`: the deployment with the fewest GPUs that meets the SLOs at a load, and what binds.

A plan is a study the planner need not write: one search over `hosts` (the topology's family resized, a
generated corpus sized with it) per deployment, a deployment being one combination of the searched choices
(TP or DP attention + EP: `--parallel tp8,dp8ep8`, KV-cache dtype, engine preset, policy; more choices are more
axes of the same study), repeated over seeds (a probe holds only when every seed meets every SLO). Each
search is a coarse grid over the whole host range, then refinement at every feasible / infeasible boundary
(`search.Refinement`): it never assumes that more hosts help, and a host count that meets the SLO below one that
does not is reported. The study lands in the plan's directory (`plan.yaml`, resumable with `simroute sweep
plan.yaml`), and `plan_answer` reads it back into the memo: the answer (fewest GPUs among the candidate
deployments), per deployment its fewest hosts, non-monotone edges and the binding constraint below it, and the
frontier of output throughput per GPU against TPOT over every probe, each point naming its busiest resource
(network link, HBM, compute). Anchors: AIConfigurator's `default` / `recommend` (fewest GPUs meeting a target)
and Vidur's capacity search; neither models the network or shared documents.

Aggregated vs disaggregated serving is one more axis (`--disagg none,1:1,1:3`: P:D ratios of prefill to decode
instances, `--prefill-tp` the prefill pool's TP; sim/pools.py): a host count too small to hold one P:D group is
a probe that fails (not served), so the coarse grid and refinement treat it as any host count that misses the SLO.
With `--parallel`, a P:D point's decode pool takes the parallel choice (TP, or DP attention + EP groups).
Not searched: the prefill TP (one value per plan), DP attention + EP in the prefill pool (TP instances only),
the prefill router.
"""

from __future__ import annotations

import json
import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from simroute.defaults import DEFAULT_CALIB, DEFAULT_MODEL, DEFAULT_TOPOLOGY, DEFAULT_TP, DEFAULT_TRACE, MIN_COMPLETION
from simroute.errors import ConfigurationError
from simroute.ioutil import load_json
from simroute.study.backends import Keep
from simroute.sim.slo import DEFAULT_SLO, flatten
from simroute.study.search import Goal, finished

DEFAULT_COARSE = 5          # coarse probes over the host range before refinement (1-8 hosts: 1, 2, 3, 5, 8)
DEFAULT_COMPARE = ("always-route", "always-fetch")
PLAN_FILE = "plan.yaml"


@dataclass(frozen=True)
class PlanRequest:
    """What a planner asks: a workload at a load, a model, SLOs, the host range and the deployment choices to
    search (`tp`, `kv_cache` and `policy` take one value or several; every combination is a deployment; the
    answer is chosen among them, `compare` policies are searched for reference only)."""

    trace: str | dict[str, Any] = DEFAULT_TRACE          # a trace path / shipped name, or {generate, params}
    model: str = DEFAULT_MODEL
    tp: int | tuple[int, ...] = DEFAULT_TP
    kv_cache: tuple[str, ...] = ()                       # KV-cache dtypes (none: the framework's default)
    engine: tuple[str, ...] = ()                         # serving framework presets (none: the run's default)
    disagg: tuple[str, ...] = ()                         # aggregated ('none') and / or P:D ratios (none: aggregated)
    prefill_tp: int | None = None                        # the prefill pool's TP under a P:D ratio (None: tp)
    topology: str = DEFAULT_TOPOLOGY
    gpu: str | None = None                              # the instances' GPU entry (default: the topology's hosts.gpu)
    calib: str = DEFAULT_CALIB
    slo: tuple[str, ...] = DEFAULT_SLO
    qps: float | None = None
    time_scale: float | None = None
    concurrency: int | None = None                      # at most this many requests in flight (a closed loop)
    hosts_min: int = 1
    hosts_max: int = 64
    policy: str | tuple[str, ...] = "paper"
    compare: tuple[str, ...] = DEFAULT_COMPARE
    seeds: int = 3
    max_requests: int | None = None
    coarse: int = DEFAULT_COARSE
    base: dict[str, Any] = field(default_factory=dict)   # further RunConfig fields
    parallel: tuple[str, ...] = ()                      # parallelism choices (`parse_parallel`: tp8, dp8ep8, ...)

    @property
    def tps(self) -> tuple[int, ...]:
        return (self.tp,) if isinstance(self.tp, int) else tuple(self.tp)

    @property
    def policies(self) -> tuple[str, ...]:
        """The candidate policies (the answer's), then the compared ones not among them."""
        return (self.policy,) if isinstance(self.policy, str) else tuple(self.policy)

    def study_document(self, name: str = "plan") -> dict[str, Any]:
        """The study this plan runs (written as plan.yaml beside its results): one choice given once is a base
        field, a choice given several ways an axis; policy is always an axis."""
        tps, kvs, engines = self.tps, tuple(self.kv_cache), tuple(self.engine)
        shapes = {label: parse_parallel(label) for label in self.parallel}
        base: dict[str, Any] = {"topology": self.topology, "calib": self.calib, "model": self.model,
                                **({"tp": tps[0]} if len(tps) == 1 and not shapes else {}),
                                **(next(iter(shapes.values())) if len(shapes) == 1 else {}),
                                **({"kv_cache": kvs[0]} if len(kvs) == 1 else {}),
                                **({"engine": engines[0]} if len(engines) == 1 else {}),
                                "trace": self._trace(), **self.base}
        disaggs = tuple(self.disagg)
        if len(disaggs) == 1:
            base["disagg"] = disaggs[0]
        if self.prefill_tp is not None:
            base["prefill_tp"] = self.prefill_tp
        if self.max_requests is not None:
            base["max_requests"] = self.max_requests
        if self.gpu is not None:
            base["gpu"] = self.gpu
        if self.time_scale is not None:
            base["time_scale"] = self.time_scale
        if self.qps is not None and not self._generator_takes("qps"):
            base["qps"] = self.qps
        if self.concurrency is not None and not self._generator_takes("concurrency"):
            base["concurrency"] = self.concurrency
        policies = [*self.policies, *[policy for policy in self.compare if policy not in self.policies]]
        axes: dict[str, list[Any]] = {}
        if len(tps) > 1:
            axes["tp"] = list(tps)
        if len(shapes) > 1:
            axes["parallel"] = shapes          # a case axis: each choice sets tp, dp_attention and ep together
        if len(kvs) > 1:
            axes["kv_cache"] = list(kvs)
        if len(engines) > 1:
            axes["engine"] = list(engines)
        if len(disaggs) > 1:
            axes["disagg"] = list(disaggs)
        axes["policy"] = policies
        return {"name": name, "description": f"simroute plan: fewest GPUs meeting {' and '.join(self.slo)}",
                "base": base, "axes": axes, "seeds": self.seeds, "keep": Keep.SUMMARY.value,
                "search": {"field": "hosts", "goal": Goal.MIN.value, "lo": self.hosts_min, "hi": self.hosts_max,
                           "integer": True, "coarse": self.coarse, "slo": list(self.slo)},
                "plan": {"candidates": {"policy": list(self.policies)}}}

    def _generator_takes(self, name: str) -> bool:
        if not isinstance(self.trace, dict):
            return False
        from simroute.workload.generators import get_generator
        return name in typing.get_type_hints(get_generator(str(self.trace["generate"])).params)

    def _trace(self) -> str | dict[str, Any]:
        """The trace spec: a generator sized to each point's cluster (`instances: auto`) and driven at `qps`."""
        if not isinstance(self.trace, dict):
            return self.trace
        params = dict(self.trace.get("params") or {})
        if self._generator_takes("instances"):
            params.setdefault("instances", "auto")
        if self.qps is not None and self._generator_takes("qps"):
            params["qps"] = self.qps
        if self.concurrency is not None and self._generator_takes("concurrency"):
            params["concurrency"] = self.concurrency
        return {**self.trace, "params": params}


PARALLEL_PART = re.compile(r"(tp|dp|ep)(\d+)")


def parse_parallel(label: str) -> dict[str, int]:
    """A parallelism choice as the RunConfig fields it sets: `tp8` (TP 8 instances), `dp8ep8` (DP attention 8 over
    8 GPUs with EP 8: tp defaults to dp), `tp16dp16ep16`; parts in any order, each once. Raises ValueError."""
    text = label.strip().lower()
    parts: dict[str, int] = {}
    read = 0                        # characters read so far: the parts must tile the word
    for match in PARALLEL_PART.finditer(text):
        if match.start() != read or match.group(1) in parts or int(match.group(2)) < 1:
            break
        parts[match.group(1)] = int(match.group(2))
        read = match.end()
    if not parts or read != len(text):
        raise ValueError(f"'{label}' is not a parallelism choice (tp<N>, dp<N>ep<M>, tp<N>dp<N>ep<M>: e.g. tp8, "
                         "dp8ep8)")
    tp = parts.get("tp", parts.get("dp", 1))
    return {"tp": tp, "dp_attention": parts.get("dp", 1), "ep": parts.get("ep", 1)}


def study_name(out: Path) -> str:
    """The plan's study name: its directory's name, made a valid study name."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", out.resolve().name)[:100]
    return name if re.match(r"[A-Za-z0-9_]", name) else "plan"


# A study field's head (in a study error) -> the plan flag that set it.
PLAN_FLAGS = {"policy": "--policy / --compare", "model": "--model", "tp": "--tp / --parallel",
              "dp_attention": "--parallel", "ep": "--parallel", "parallel": "--parallel", "kv_cache": "--kv-cache",
              "engine": "--engine", "disagg": "--disagg", "prefill_tp": "--prefill-tp",
              "topology": "--topology",
              "calib": "--calib", "gpu": "--gpu", "qps": "--qps", "time_scale": "--time-scale",
              "concurrency": "--concurrency",
              "max_requests": "--max-requests", "hosts": "--hosts-min / --hosts-max", "search.slo": "--slo"}


def _plan_flag(field: str | None, request: PlanRequest) -> str:
    """The flag a study error's field came from ('axes.policy=paper: model' -> '--model')."""
    if field == "search.slo":
        return "--slo"
    name = (field or "").split(": ")[-1].split(".")[0] if field and not field.startswith("search.") else field or ""
    if name == "trace":
        return "--workload / -p" if isinstance(request.trace, dict) else "--trace"
    return PLAN_FLAGS.get(name, name or "plan")


def check_request(request: PlanRequest) -> None:
    """The plan's own flags, before its study is built: names that are names, no value given twice, a GPU
    entry that exists (the one check of --gpu, `Profile.check_gpu_entry`)."""
    from simroute.checks import check_name
    from simroute.shipped import check_not_empty
    check_not_empty("topology", request.topology)
    check_not_empty("calib", request.calib)
    if not request.policies:
        raise ConfigurationError("names no policy", field="--policy")
    for flag, name in (*(("--policy", policy) for policy in request.policies),
                       *(("--compare", policy) for policy in request.compare), ("--model", request.model)):
        check_name(name, flag, what="name")
    for label in request.parallel:
        try:
            parse_parallel(label)
        except ValueError as exc:
            raise ConfigurationError(str(exc), field="--parallel") from None
    if request.parallel and (len(request.tps) > 1 or request.tps[0] != DEFAULT_TP):
        raise ConfigurationError("give the parallelism by --parallel or by --tp, not both (--parallel tp4,dp8ep8 "
                                 "searches TP 4 too)", field="--parallel")
    for flag, values in (("--policy", request.policies), ("--compare", request.compare), ("--tp", request.tps),
                         ("--parallel", tuple(request.parallel)),
                         ("--kv-cache", tuple(request.kv_cache)), ("--engine", tuple(request.engine)),
                         ("--disagg", tuple(request.disagg))):
        repeated = sorted({str(value) for value in values if values.count(value) > 1})
        if repeated:
            raise ConfigurationError(f"{', '.join(repeated)} given more than once", field=flag)
    if isinstance(request.trace, dict):
        check_name(request.trace.get("generate"), "--workload", what="generator name")
        from simroute.errors import UnknownNameError
        from simroute.workload.generators import get_generator
        try:
            get_generator(str(request.trace["generate"]))
        except UnknownNameError as exc:
            raise ConfigurationError(str(exc), field="--workload") from None
        params = request.trace.get("params") or {}
        for name, value in (("qps", request.qps), ("concurrency", request.concurrency)):
            if name in params and value is not None:
                raise ConfigurationError(f"the load is given twice: -p {name}={params[name]} and --{name} {value:g}; "
                                         "give one", field=f"--{name}")
    else:
        check_not_empty("trace", request.trace)
    if request.gpu is not None:
        from simroute.calib import load_profile
        load_profile(request.calib).check_gpu_entry(request.gpu, field="--gpu")


def run_plan(request: PlanRequest, out: str | Path, *, jobs: int | None = None, progress: bool | None = None,
             announce: Any = None, report: bool = False) -> tuple[Any, dict[str, Any], Path]:
    """Run (or resume) the plan's study into `out`, then write plan.yaml, plan.json and plan.md there (and,
    with `report`, its HTML report).

    Everything is checked before `announce()` (the CLI's header) and before the first write: the flags, the
    study the plan stands for (validated from memory as `out`/plan.yaml, input paths made absolute: no
    temporary file), every point's deployment and load, the output directory and what a resume reads, and that
    the plan's own files and report may be replaced. The answer files (and the report) are written last, all
    or none (`ioutil.atomic_files`): a plan whose command failed leaves no new answer beside its study.
    """
    from simroute.study import load_study, run_study
    out = Path(out)
    check_request(request)
    doc = request.study_document(name=study_name(out))
    for key in ("topology", "calib", "trace"):
        value = doc["base"][key]
        if isinstance(value, str) and Path(value).exists():
            doc["base"][key] = str(Path(value).resolve())
    text = "# written by simroute plan; rerun with: simroute sweep plan.yaml\n" + yaml.safe_dump(doc, sort_keys=False)
    plan_file = out.resolve() / PLAN_FILE
    try:
        study = load_study(plan_file, document=doc)
    except ConfigurationError as exc:
        own = exc.file is None or Path(exc.file) == plan_file
        from simroute.study.resolve import RELATIVE_TO_STUDY
        raise ConfigurationError(exc.problem.replace(RELATIVE_TO_STUDY, "") if own else exc.problem,
                                 file=None if own else exc.file,
                                 field=_plan_flag(exc.field, request) if own else exc.field) from None
    base = doc["base"]
    if isinstance(base["trace"], str):       # an imported trace: every request within the model's window
        from simroute.shipped import resolve_input
        from simroute.sim.runner import check_trace_window
        check_trace_window(resolve_input("trace", base["trace"]), request.model, mode=base.get("over_window", "refuse"),
                           max_requests=request.max_requests)

    def before_writing() -> None:
        check_plan_outputs(out, report=report)
        if announce is not None:
            announce()
    run = run_study(study, out, jobs=jobs, progress=progress, before_writing=before_writing)
    if run.discarded:           # every run failed: the study kept no directory, so there is no plan to write
        raise ConfigurationError(f"every one of its {run.executed} runs failed, the first with: "
                                 f"{' '.join(run.first_error.split())[:300]}; nothing was kept", file=out)
    answer, memo = write_plan(out, text, report=report)
    return run, answer, memo


PLAN_OUTPUTS = (PLAN_FILE, "plan.json", "plan.md")


def check_plan_outputs(out: Path, *, report: bool = False) -> None:
    """The plan's own files beside its study: each new, or one simroute wrote there unchanged (its manifest
    lists it); the report directory simroute's own. Checked before the study runs."""
    from simroute.ioutil import check_new_file
    from simroute.study.runner import listed_files
    legacy = out.is_dir() and not listed_files(out)
    for name in PLAN_OUTPUTS:
        target = out / name
        if legacy and target.is_file() and not target.is_symlink():
            continue            # a plan an older simroute wrote (its manifest listed no files): its own
        check_new_file(target, flag="--out")
    if report and out.is_dir():
        from simroute.study.report import check_report_out
        check_report_out(out, out / "report")


# ---- reading the answer back -------------------------------------------------------------------------------
def plan_answer(directory: str | Path) -> dict[str, Any]:
    """The plan's answer from a finished plan directory (study.json, points/, search.json, runs/*/summary.json):
    per deployment (one search group) its fewest hosts, probes, non-monotone edges and binding constraint; the
    answer (the candidate deployment with the fewest GPUs; ties: the lower TPOT); the throughput-per-GPU / TPOT
    frontier over every probe."""
    from simroute.sim import slo as slos
    from simroute.study.store import Store
    plan_dir = Path(directory)
    searches = load_json(plan_dir / "search.json") if (plan_dir / "search.json").exists() else None
    if not isinstance(searches, list) or not searches:
        raise ConfigurationError("holds no finished search (search.json); run `simroute plan` into it first",
                                 file=plan_dir)
    study = load_json(plan_dir / "study.json") if (plan_dir / "study.json").exists() else {}
    candidates = ((study.get("plan") or {}).get("candidates") or {}) if isinstance(study, dict) else {}
    frame = Store(plan_dir).read()
    slo = slos.parse(searches[0]["slo"])
    varied = [axis for axis in searches[0]["labels"]
              if len({str(search["labels"].get(axis)) for search in searches}) > 1 or axis == "policy"]
    deployments: dict[str, dict[str, Any]] = {}
    for search in searches:
        labels = search["labels"]
        rows = frame
        for axis, label in labels.items():
            if f"axis:{axis}" in rows:
                rows = rows[rows[f"axis:{axis}"].astype(str) == str(label)]
        entry = _deployment_answer(plan_dir, search, rows, slo)
        entry["labels"] = labels
        entry["candidate"] = all(str(labels.get(axis)) in map(str, allowed) for axis, allowed in candidates.items())
        deployments[deployment_name(labels, varied)] = entry
    chosen = [(name, entry) for name, entry in deployments.items() if entry["candidate"] and entry["hosts"] is not None]
    best = min(chosen, key=lambda item: (item[1]["gpus"] if item[1]["gpus"] is not None else math.inf,
                                         _tpot(item[1]["at_answer"]), list(deployments).index(item[0])),
               default=None)
    primary = best[0] if best else next(name for name, entry in deployments.items() if entry["candidate"])
    own = deployments[primary]
    return {"deployment": primary, "policy": str(own["labels"].get("policy", "paper")), "slo": list(slo.texts),
            "answer_hosts": own["hosts"], "answer_gpus": own["gpus"], "status": own["status"],
            "nonmonotone": [{"deployment": name, **edge} for name, entry in deployments.items()
                            for edge in entry["nonmonotone"]],
            "deployments": deployments, "frontier": frontier(deployments)}


def deployment_name(labels: dict[str, Any], varied: list[str]) -> str:
    """A deployment's name in the memo: the policy, after the other choices that vary ('tp 4, fp8 KV, paper')."""
    words = {"tp": lambda value: f"tp {value}", "kv_cache": lambda value: f"{value} KV", "parallel": str,
             "engine": lambda value: f"engine {value}",
             "disagg": lambda value: "aggregated" if value == "none" else f"P:D {value}"}
    parts = [words.get(axis, lambda value, axis=axis: f"{axis}={value}")(labels[axis])
             for axis in varied if axis != "policy" and axis in labels]
    return ", ".join([*parts, str(labels.get("policy", "paper"))])


def _tpot(probe: dict[str, Any] | None) -> float:
    value = (probe or {}).get("tpot_ms_p99")
    return math.inf if value is None else float(value)


def _deployment_answer(plan_dir: Path, search: dict[str, Any], rows: Any, slo: Any) -> dict[str, Any]:
    hosts = search["answer"]
    probes = []
    host_counts = sorted({int(count) for count in rows["axis:hosts"].dropna()}) if "axis:hosts" in rows else []
    for value in host_counts:
        rows_at = [row for row in rows.to_dict("records") if int(row["axis:hosts"]) == value]
        done = [row for row in rows_at if finished(row)]
        meet = [row for row in done if not slo.violated(row)]
        summaries = [load_json(path) for row in done
                     if (path := plan_dir / "runs" / row["key"] / "summary.json").exists()]
        probes.append({"hosts": value, "gpus": _gpus(summaries, value), "seeds": len(rows_at), "served": len(done),
                       "met": len(meet),
                       **{cond.column: _mean([row.get(cond.column) for row in done]) for cond in slo.conditions},
                       "tpot_ms_p99": _mean([row.get("tpot_ms_p99") for row in done]),
                       "output_tokens_per_s_per_gpu": _mean([row.get("output_tokens_per_s_per_gpu") for row in done]),
                       "slo_attainment": _mean([row.get("slo_attainment") for row in done]),
                       "n_route": _mean([row.get("n_route") for row in done]),
                       "n_fetch": _mean([row.get("n_fetch") for row in done]),
                       "n_local": _mean([row.get("n_local") for row in done]),
                       "n_resident": _mean([row.get("n_resident") for row in done]),
                       "resources": resource_use(summaries),
                       "keys": [row["key"] for row in rows_at],
                       "error": next((str(row["error"]).strip().splitlines()[0] for row in rows_at
                                      if isinstance(row.get("error"), str) and row["error"].strip()), None)})
    for probe in probes:
        probe["busiest"] = busiest(probe["resources"])
    answer = next((probe for probe in probes if probe["hosts"] == hosts), None)
    failing = [probe for probe in probes if hosts is None or probe["hosts"] < hosts]
    below = failing[-1] if failing else None
    any_met = [probe["hosts"] for probe in probes if probe["met"] > 0]
    return {"hosts": hosts, "gpus": answer["gpus"] if answer else None, "status": search["status"],
            "probes": probes, "grid": search.get("grid"), "nonmonotone": nonmonotone(probes),
            "band": [min(any_met), hosts] if any_met and hosts is not None else None,
            "at_answer": answer, "binding": _binding(plan_dir, below, slo) if below else None}


def _gpus(summaries: list[dict[str, Any]], hosts: int) -> int | None:
    """GPUs of a probe's cluster (its runs' summary `gpus`; every seed runs the same cluster)."""
    counts = [summary.get("gpus") for summary in summaries if isinstance(summary.get("gpus"), int)]
    return counts[0] if counts else None


def nonmonotone(probes: list[dict[str, Any]]) -> list[dict[str, int]]:
    """Adjacent probed host counts where more hosts did worse: every seed met the SLO at `meets` hosts, not at
    the larger `fails` (search.Refinement.nonmonotone, from the stored probes)."""
    verdicts = [(probe["hosts"], probe["seeds"] > 0 and probe["met"] == probe["seeds"]) for probe in probes]
    return [{"meets": below, "fails": above}
            for (below, ok_below), (above, ok_above) in zip(verdicts, verdicts[1:]) if ok_below and not ok_above]


def resource_use(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """How close a probe's runs came to each resource (means over seeds, shares 0-1): `network` the most utilised
    link (summary network.max_link_utilisation) and its tier, `hbm` the KV room in use at the busiest moment
    (running KV, pinned chunks and copies over HBM less weights; 1 when a sequence was preempted, a copy refused
    or a request's KV never fit), `compute` the busiest engine's busy share of the simulated time."""
    if not summaries:
        return {}
    network, hbm, compute, tiers = [], [], [], []
    for summary in summaries:
        net, engine = summary.get("network") or {}, summary.get("engine") or {}
        network.append(net.get("max_link_utilisation"))
        tiers.append(((net.get("bottlenecks") or {}).get("most_saturated_tier")))
        memory = engine.get("hbm") or {}
        peak = memory.get("at_peak") or {}
        room = ((memory.get("capacity_gb_per_gpu") or 0.0) - (memory.get("weights_gb_per_gpu") or 0.0)
                - (memory.get("outside_pool_gb_per_gpu") or 0.0))         # the KV pool
        used = sum(peak.get(key) or 0.0 for key in ("running_kv_gb", "pinned_chunks_gb", "copies_gb"))
        squeezed = (engine.get("preemptions") or memory.get("copies_refused")
                    or (summary.get("dropped_by_reason") or {}).get("KV never fits in HBM"))
        hbm.append(1.0 if squeezed else (used / room if room > 0 else None))
        compute.append((summary.get("holders") or {}).get("max_busy_share"))
    tier = next((name for name in tiers if name), None)
    return {"network": _mean(network), "network_tier": tier, "hbm": _mean(hbm), "compute": _mean(compute)}


def busiest(resources: dict[str, Any]) -> str:
    """The resource a probe used most of, in words ('network 62% (leaf-spine)', 'HBM 91%', 'engine busy 88%': busy
    is not saturated, a small decode batch keeps an engine busy too)."""
    shares = {name: resources.get(name) for name in ("network", "hbm", "compute") if resources.get(name) is not None}
    if not shares:
        return "-"
    name = max(shares, key=lambda key: shares[key])
    label = {"network": "network", "hbm": "HBM", "compute": "engine busy"}[name]
    where = f" ({resources['network_tier']})" if name == "network" and resources.get("network_tier") else ""
    return f"{label} {shares[name]:.0%}{where}"


def frontier(deployments: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The Pareto frontier of output tokens/s per GPU (higher) against TPOT p99 (lower) over every served probe of
    every deployment: no other probe has both a lower TPOT and more throughput per GPU."""
    points = [{"deployment": name, "hosts": probe["hosts"], "gpus": probe["gpus"], "tpot_ms_p99": probe["tpot_ms_p99"],
               "output_tokens_per_s_per_gpu": probe["output_tokens_per_s_per_gpu"],
               "meets": probe["seeds"] > 0 and probe["met"] == probe["seeds"], "busiest": probe["busiest"],
               "resources": probe["resources"]}
              for name, entry in deployments.items() for probe in entry["probes"]
              if probe["served"] and probe["tpot_ms_p99"] is not None and probe["output_tokens_per_s_per_gpu"]]
    points.sort(key=lambda point: (point["tpot_ms_p99"], -point["output_tokens_per_s_per_gpu"]))
    out: list[dict[str, Any]] = []
    for point in points:
        if not out or point["output_tokens_per_s_per_gpu"] > out[-1]["output_tokens_per_s_per_gpu"]:
            out.append(point)
    return out


def _mean(values: list[Any]) -> float | None:
    clean = [float(value) for value in values
             if value is not None and not (isinstance(value, float) and math.isnan(value))]
    return sum(clean) / len(clean) if clean else None


def _binding(plan_dir: Path, probe: dict[str, Any], slo: Any) -> dict[str, Any]:
    """What failed at the largest host count that did not meet the SLOs, and the resource behind it."""
    summaries = [load_json(path) for key in probe["keys"]
                 if (path := plan_dir / "runs" / key / "summary.json").exists()]
    if not summaries:       # e.g. a P:D ratio whose pools this many hosts cannot hold: the run was refused
        failed = probe.get("error")
        return {"hosts": probe["hosts"], "violated": ["not served: the run was refused"] if failed else [],
                "resource": f"refused: {failed}" if failed else "unknown (no run summary stored)"}
    summary = summaries[0]
    violated = [str(cond) for cond in slo.conditions
                if probe.get(cond.column) is None or not cond.holds({cond.column: probe[cond.column]})]
    if probe["served"] < probe["seeds"]:
        violated.insert(0, f"not served (completed under {MIN_COMPLETION:.0%}, or arrivals outran service)")
    if not violated and probe["met"] < probe["seeds"]:      # the mean over seeds meets every condition, a seed not
        missed: dict[str, dict[str, Any]] = {}
        for one in summaries:
            row = flatten(one)
            for cond in slo.conditions:
                if row.get(cond.column) is None or not cond.holds({cond.column: row[cond.column]}):
                    missed.setdefault(str(cond), one)
        summary = next(iter(missed.values()), summary)
        violated = [f"{probe['seeds'] - probe['met']} of {probe['seeds']} seeds missed "
                    f"{', '.join(missed) or 'the SLO'} (the mean over seeds meets it)"]
    return {"hosts": probe["hosts"], "violated": violated, "resource": binding_resource(summary, violated)}


def binding_resource(summary: dict[str, Any], violated: list[str]) -> str:
    """The resource a failing run ran out of, from its summary: HBM, a network tier, a holder, or compute."""
    engine, holders = summary.get("engine", {}), summary.get("holders", {})
    reasons = summary.get("dropped_by_reason", {})
    if reasons.get("KV never fits in HBM") or engine.get("preemptions", 0) > 0 or holders.get("copies_refused", 0):
        return (f"HBM: {engine.get('preemptions', 0):,} preemptions, {holders.get('copies_refused', 0):,} copies "
                f"refused, {reasons.get('KV never fits in HBM', 0):,} requests whose KV never fits")
    tier = ((summary.get("network") or {}).get("bottlenecks") or {}).get("most_saturated_tier")
    if tier:
        return f"network tier {tier} (p99 window utilisation above half its capacity)"
    busiest = (holders.get("busiest") or {}).get("work_share") or 0.0
    if busiest > 0.5:
        return (f"holder fan-in: the busiest holder spends {busiest:.0%} of its time on routed partials "
                f"(max fan-in {holders.get('max_fan_in')})")
    parts = summary.get("ttft_breakdown_ms") or {}
    if any("tpot" in violation for violation in violated) and not any("ttft" in violation for violation in violated):
        itl = engine.get("itl_ms") or {}
        if (itl.get("p99") or 0.0) > 4 * (itl.get("p50") or math.inf):      # a few iterations far slower than most
            return (f"compute: prefill interference (inter-token latency p99 {itl['p99']:.1f} ms vs p50 "
                    f"{itl['p50']:.1f} ms: decode iterations that carried other requests' prefill chunks; "
                    "a disaggregated decode pool runs none)")
        return "compute: the decode step time of the batch each instance runs (TPOT)"
    largest = max(((part, seconds) for part, seconds in parts.items() if seconds), key=lambda item: item[1],
                  default=(None, 0.0))
    where = {"queueing": "requests queue for busy engines", "prefill_compute": "prefill compute",
             "transfer": "fetch transfers", "exchanges": "routed exchanges", "holder_wait": "waiting on holders"}
    return f"compute: TTFT is mostly {where.get(largest[0], largest[0] or 'unknown')} ({largest[1]:.0f} ms mean)"


# ---- the memo ------------------------------------------------------------------------------------------------
def plan_markdown(answer: dict[str, Any], request_doc: dict[str, Any]) -> str:
    """The memo: one paragraph of answer, the deployments, non-monotone host counts, the frontier, and the probes
    behind the answer."""
    base = request_doc.get("base", {})
    name = answer["deployment"]
    own = answer["deployments"][name]
    slo = " and ".join(answer["slo"])
    trace = base.get("trace")
    if isinstance(trace, dict):
        params = ", ".join(f"{key}={value}" for key, value in (trace.get("params") or {}).items())
        workload = f"{trace['generate']} ({params})"
    else:
        workload = Path(str(trace)).name
    load = (f"at {base['qps']} requests/s" if base.get("qps") else f"time scale {base['time_scale']}"
            if base.get("time_scale") else "at the trace's own load")
    if isinstance(trace, dict) and (trace.get("params") or {}).get("qps"):
        load = f"at {trace['params']['qps']} requests/s"
    limit = base.get("concurrency") or (isinstance(trace, dict) and (trace.get("params") or {}).get("concurrency"))
    if limit:
        load = (f"at most {limit} requests in flight" if load == "at the trace's own load"
                else f"{load}, at most {limit} in flight")
    gpu = f" ({base['gpu']} GPUs)" if base.get("gpu") else ""
    axes = request_doc.get("axes") or {}
    tps = axes.get("tp") or [base.get("tp")]
    shape = (f"parallelism {', '.join(axes['parallel'])}" if isinstance(axes.get("parallel"), dict)
             else f"TP {base.get('tp')}, DP attention {base['dp_attention']}, EP {base.get('ep', 1)}"
             if base.get("dp_attention", 1) > 1 else f"TP {', '.join(map(str, tps))}")
    search = request_doc.get("search") or {}
    lines = [f"# Capacity plan: {base.get('model')} at {shape} on "
             f"{Path(str(base.get('topology'))).stem}{gpu}",
             "", f"Workload: {workload}, {load}; SLO: {slo}, every one of {request_doc.get('seeds')} seeds. "
             f"Searched: {len(answer['deployments'])} deployment(s) ({', '.join(answer['deployments'])}), hosts "
             f"{search.get('lo')}-{search.get('hi')}: a coarse grid, then refinement at every boundary "
             "(no monotonicity assumed).", ""]
    if own["hosts"] is None:
        lines.append(f"**No candidate deployment meets the SLO with {search.get('lo')}-{search.get('hi')} hosts** "
                     f"({name}: {own['status']}).")
    else:
        band = own["band"]
        lines.append(f"**Answer: {_gpus_words(own)}** with {name} ({own['status']}; some seed meets the SLO from "
                     f"{hosts_words(band[0])})." if band else f"**Answer: {_gpus_words(own)}** with {name}.")
        at_answer = own["at_answer"] or {}
        if at_answer:
            lines.append(f"At the answer: route {_fmt(at_answer.get('n_route'))}, "
                         f"fetch {_fmt(at_answer.get('n_fetch'))}, local {_fmt(at_answer.get('n_local'))}, "
                         f"resident {_fmt(at_answer.get('n_resident'))} (chunk, request) "
                         "pairs per run (mean over seeds; resident: the chunk was already on the requester); "
                         f"busiest resource {at_answer.get('busiest', '-')}.")
    if own["binding"]:
        binding = own["binding"]
        lines.append(f"Binding below the answer (at {hosts_words(binding['hosts'])}): "
                     f"{', '.join(binding['violated']) or '-'}; {binding['resource']}.")
    if answer["nonmonotone"]:
        lines += ["", "**Non-monotone:** more hosts did worse here (every seed met the SLO at the smaller count, "
                  "not at the larger): "
                  + "; ".join(f"{edge['deployment']}: meets at {hosts_words(edge['meets'])}, fails at "
                              f"{hosts_words(edge['fails'])}" for edge in answer["nonmonotone"])
                  + ". The fewest hosts is the smallest count that meets; a larger count is no safe margin."]
    lines += ["", "| deployment | fewest hosts | GPUs | status | non-monotone | binding below it |",
              "|---|---|---|---|---|---|"]
    for entry_name, entry in answer["deployments"].items():
        binding = entry["binding"]
        fewest = entry["hosts"] if entry["hosts"] is not None else "none in range"
        role = "" if entry["candidate"] else " (compared)"
        edges = ", ".join(f"{edge['meets']} meets, {edge['fails']} fails" for edge in entry["nonmonotone"]) or "-"
        lines.append(f"| {entry_name}{role} | {fewest} | {_fmt(entry['gpus'])} | {entry['status']} | {edges} | "
                     f"{(', '.join(binding['violated']) + '; ' + binding['resource']) if binding else '-'} |")
    if answer["frontier"]:
        lines += ["", "Frontier of output throughput per GPU against TPOT p99 (every served probe of every deployment "
                  "that no other beats on both; busiest resource: the most utilised link, HBM's KV room at the "
                  "busiest moment, or the busiest engine's busy time):", "",
                  "| deployment | hosts | GPUs | TPOT p99 (ms) | output tokens/s per GPU | meets the SLO | busiest "
                  "resource |", "|---|---|---|---|---|---|---|"]
        for point in answer["frontier"]:
            lines.append(f"| {point['deployment']} | {point['hosts']} | {_fmt(point['gpus'])} | "
                         f"{_fmt(point['tpot_ms_p99'])} | {_fmt(point['output_tokens_per_s_per_gpu'])} | "
                         f"{'yes' if point['meets'] else 'no'} | {point['busiest']} |")
    cols = [column for column in own["probes"][0]
            if column not in ("keys", "hosts", "gpus", "seeds", "served", "met", "resources", "busiest")] \
        if own["probes"] else []
    lines += ["", f"Probes of {name} (seeds: met the SLO / served / run; served: completed at least "
              f"{MIN_COMPLETION:.0%} of its requests with arrivals that did not outrun service, i.e. not "
              "overloaded; only a served run can meet the SLO):", "",
              "| hosts | seeds met / served / run | " + " | ".join(cols) + " | busiest resource |",
              "|---" * (3 + len(cols)) + "|"]
    for entry in own["probes"]:
        lines.append(f"| {entry['hosts']} | {entry['met']} / {entry['served']} / {entry['seeds']} | "
                     + " | ".join(_fmt(entry[column]) for column in cols) + f" | {entry['busiest']} |")
    return "\n".join(lines) + "\n"


def _gpus_words(entry: dict[str, Any]) -> str:
    hosts = hosts_words(entry["hosts"])
    return f"{entry['gpus']} GPUs ({hosts})" if entry.get("gpus") else hosts


def hosts_words(count: int) -> str:
    """"1 host", "2 hosts": the count as plan.md and `plan` print it."""
    return f"{count} host" + ("" if count == 1 else "s")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if isinstance(value, float) else str(value)


def write_plan(directory: str | Path, text: str | None = None, *,
               report: bool = False) -> tuple[dict[str, Any], Path]:
    """plan.yaml (`text`; else the one there), plan.json and plan.md of a finished plan directory, and with
    `report` its report: all read and composed first, then renamed into place together, so a failure (a full
    disk while the report is written) leaves none of them new."""
    from simroute.ioutil import atomic_files
    plan_dir = Path(directory)
    answer = plan_answer(plan_dir)
    if text is None:
        text = (plan_dir / PLAN_FILE).read_text() if (plan_dir / PLAN_FILE).exists() else ""
    doc = yaml.safe_load(text) if text else {}
    memo = plan_dir / "plan.md"
    with atomic_files(plan_dir, PLAN_OUTPUTS, flag="--out") as tmp:
        tmp[PLAN_FILE].write_text(text)
        tmp["plan.json"].write_text(json.dumps(answer, indent=2, default=str) + "\n")
        tmp["plan.md"].write_text(plan_markdown(answer, doc if isinstance(doc, dict) else {}))
        if report:
            from simroute.study.report import write_report
            write_report(plan_dir, plan=answer)
    return answer, memo
