"""`simroute plan`: the fewest hosts that meet the SLOs at a load, and what binds below that.

A plan is a study the planner need not write: a search over `hosts` (the topology's family resized, a generated
corpus sized with it), one group per policy so that the answer comes with what the other policies would need,
repeated over seeds (an answer holds only when every seed meets every SLO). The study lands in the plan's
directory (`plan.yaml`, resumable with `simroute sweep plan.yaml`), and `plan_answer` reads it back into the
memo: the answer, a band over seeds, the binding constraint at the largest host count that failed, route /
fetch / local counts at the answer, and the other policies' answers. Anchors: AIConfigurator's `recommend`
(fewest GPUs meeting a target) and Vidur's capacity search; neither models the network or shared documents.
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
from simroute.study.search import Goal, finished

DEFAULT_SLO = ("p99 ttft_ms <= 2000", "p99 tpot_ms <= 50")
DEFAULT_COMPARE = ("always-route", "always-fetch")
PLAN_FILE = "plan.yaml"


@dataclass(frozen=True)
class PlanRequest:
    """What a planner asks: a workload at a load, a model, SLOs, and the host range to search."""

    trace: str | dict[str, Any] = DEFAULT_TRACE          # a trace path / shipped name, or {generate, params}
    model: str = DEFAULT_MODEL
    tp: int = DEFAULT_TP
    topology: str = DEFAULT_TOPOLOGY
    gpu: str | None = None                              # the instances' GPU entry (default: the topology's hosts.gpu)
    calib: str = DEFAULT_CALIB
    slo: tuple[str, ...] = DEFAULT_SLO
    qps: float | None = None
    time_scale: float | None = None
    concurrency: int | None = None                      # at most this many requests in flight (a closed loop)
    hosts_min: int = 1
    hosts_max: int = 64
    policy: str = "paper"
    compare: tuple[str, ...] = DEFAULT_COMPARE
    seeds: int = 3
    max_requests: int | None = None
    base: dict[str, Any] = field(default_factory=dict)   # further RunConfig fields

    def study_document(self, name: str = "plan") -> dict[str, Any]:
        """The study this plan runs (written as plan.yaml beside its results)."""
        base: dict[str, Any] = {"topology": self.topology, "calib": self.calib, "model": self.model, "tp": self.tp,
                                "trace": self._trace(), **self.base}
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
        policies = [self.policy, *[policy for policy in self.compare if policy != self.policy]]
        return {"name": name, "description": f"simroute plan: fewest hosts meeting {' and '.join(self.slo)}",
                "base": base, "axes": {"policy": policies}, "seeds": self.seeds, "keep": Keep.SUMMARY.value,
                "search": {"field": "hosts", "goal": Goal.MIN.value, "lo": self.hosts_min, "hi": self.hosts_max,
                           "integer": True, "slo": list(self.slo)}}

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


def study_name(out: Path) -> str:
    """The plan's study name: its directory's name, made a valid study name."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", out.resolve().name)[:100]
    return name if re.match(r"[A-Za-z0-9_]", name) else "plan"


# A study field's head (in a study error) -> the plan flag that set it.
PLAN_FLAGS = {"policy": "--policy / --compare", "model": "--model", "tp": "--tp", "topology": "--topology",
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
    for flag, name in (("--policy", request.policy), *(("--compare", policy) for policy in request.compare),
                       ("--model", request.model)):
        check_name(name, flag, what="name")
    repeated = sorted({policy for policy in request.compare if request.compare.count(policy) > 1})
    if repeated:
        raise ConfigurationError(f"{', '.join(repeated)} given more than once", field="--compare")
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
        raise ConfigurationError(exc.problem, file=None if own else exc.file,
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
    """The plan's answer from a finished plan directory (study.json, points/, search.json, runs/*/summary.json)."""
    from simroute.study.search import parse_slo
    from simroute.study.store import Store
    plan_dir = Path(directory)
    searches = load_json(plan_dir / "search.json") if (plan_dir / "search.json").exists() else None
    if not isinstance(searches, list) or not searches:
        raise ConfigurationError("holds no finished search (search.json); run `simroute plan` into it first",
                                 file=plan_dir)
    frame = Store(plan_dir).read()
    slo = [parse_slo(text) for text in searches[0]["slo"]]
    by_policy = {}
    for search in searches:
        policy = str(search["labels"].get("policy", "paper"))
        rows = frame[(frame["axis:policy"].astype(str) == policy)] if "axis:policy" in frame else frame
        by_policy[policy] = _policy_answer(plan_dir, search, rows, slo)
    primary = next(iter(by_policy))
    return {"policy": primary, "slo": searches[0]["slo"], "answer_hosts": by_policy[primary]["hosts"],
            "status": by_policy[primary]["status"], "policies": by_policy}


def _policy_answer(plan_dir: Path, search: dict[str, Any], rows: Any, slo: list[Any]) -> dict[str, Any]:
    hosts = search["answer"]
    probes = []
    host_counts = sorted({int(count) for count in rows["axis:hosts"].dropna()}) if "axis:hosts" in rows else []
    for value in host_counts:
        rows_at = [row for row in rows.to_dict("records") if int(row["axis:hosts"]) == value]
        done = [row for row in rows_at if finished(row)]
        meet = [row for row in done if all(condition.holds(row) for condition in slo)]
        probes.append({"hosts": value, "seeds": len(rows_at), "finished": len(done), "met": len(meet),
                       **{cond.column: _mean([row.get(cond.column) for row in done]) for cond in slo},
                       "n_route": _mean([row.get("n_route") for row in done]),
                       "n_fetch": _mean([row.get("n_fetch") for row in done]),
                       "n_local": _mean([row.get("n_local") for row in done]),
                       "n_resident": _mean([row.get("n_resident") for row in done]),
                       "keys": [row["key"] for row in rows_at]})
    answer = next((probe for probe in probes if probe["hosts"] == hosts), None)
    failing = [probe for probe in probes if hosts is None or probe["hosts"] < hosts]
    below = failing[-1] if failing else None
    any_met = [probe["hosts"] for probe in probes if probe["met"] > 0]
    return {"hosts": hosts, "status": search["status"], "probes": probes,
            "band": [min(any_met), hosts] if any_met and hosts is not None else None,
            "at_answer": answer, "binding": _binding(plan_dir, below, slo) if below else None}


def _mean(values: list[Any]) -> float | None:
    clean = [float(value) for value in values
             if value is not None and not (isinstance(value, float) and math.isnan(value))]
    return sum(clean) / len(clean) if clean else None


def _binding(plan_dir: Path, probe: dict[str, Any], slo: list[Any]) -> dict[str, Any]:
    """What failed at the largest host count that did not meet the SLOs, and the resource behind it."""
    summaries = [load_json(path) for key in probe["keys"]
                 if (path := plan_dir / "runs" / key / "summary.json").exists()]
    if not summaries:
        return {"hosts": probe["hosts"], "violated": [], "resource": "unknown (no run summary stored)"}
    summary = summaries[0]
    violated = [str(cond) for cond in slo
                if probe.get(cond.column) is None or not cond.holds({cond.column: probe[cond.column]})]
    if probe["finished"] < probe["seeds"]:
        violated.insert(0, f"completion below {MIN_COMPLETION:.0%}")
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
        return "compute: the decode step time of the batch each instance runs (TPOT)"
    largest = max(((part, seconds) for part, seconds in parts.items() if seconds), key=lambda item: item[1],
                  default=(None, 0.0))
    where = {"queueing": "requests queue for busy engines", "prefill_compute": "prefill compute",
             "transfer": "fetch transfers", "exchanges": "routed exchanges", "holder_wait": "waiting on holders"}
    return f"compute: TTFT is mostly {where.get(largest[0], largest[0] or 'unknown')} ({largest[1]:.0f} ms mean)"


# ---- the memo ------------------------------------------------------------------------------------------------
def plan_markdown(answer: dict[str, Any], request_doc: dict[str, Any]) -> str:
    """The memo: one paragraph of answer, then the table of policies and the probes behind the answer."""
    base = request_doc.get("base", {})
    policy = answer["policy"]
    own = answer["policies"][policy]
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
    lines = [f"# Capacity plan: {base.get('model')} at TP {base.get('tp')} on {Path(str(base.get('topology'))).stem}"
             f"{gpu}",
             "", f"Workload: {workload}, {load}; SLO: {slo}, every one of {request_doc.get('seeds')} seeds.", ""]
    if own["hosts"] is None:
        lines.append(f"**No host count in {request_doc['search']['lo']}-{request_doc['search']['hi']} meets the SLO "
                     f"under policy {policy}** ({own['status']}).")
    else:
        band = own["band"]
        lines.append(f"**Answer: {_hosts(own['hosts'])}** under policy {policy} ({own['status']}; some seed meets the "
                     f"SLO from {_hosts(band[0])})." if band else f"**Answer: {_hosts(own['hosts'])}** under {policy}.")
        at_answer = own["at_answer"] or {}
        if at_answer:
            lines.append(f"At the answer: route {_fmt(at_answer.get('n_route'))}, "
                         f"fetch {_fmt(at_answer.get('n_fetch'))}, local {_fmt(at_answer.get('n_local'))}, "
                         f"resident {_fmt(at_answer.get('n_resident'))} (chunk, request) "
                         "pairs per run (mean over seeds; resident: the chunk was already on the requester).")
    if own["binding"]:
        binding = own["binding"]
        lines.append(f"Binding below the answer (at {binding['hosts']} hosts): "
                     f"{', '.join(binding['violated']) or '-'}; {binding['resource']}.")
    lines += ["", "| policy | fewest hosts | status | binding below it |", "|---|---|---|---|"]
    for name, entry in answer["policies"].items():
        binding = entry["binding"]
        fewest = entry["hosts"] if entry["hosts"] is not None else "none in range"
        lines.append(f"| {name} | {fewest} | {entry['status']} | "
                     f"{(', '.join(binding['violated']) + '; ' + binding['resource']) if binding else '-'} |")
    cols = [column for column in own["probes"][0]
            if column not in ("keys", "hosts", "seeds", "finished", "met")] if own["probes"] else []
    lines += ["", f"Probes of policy {policy}:", "",
              "| hosts | seeds met / finished / run | " + " | ".join(cols) + " |",
              "|---" * (2 + len(cols)) + "|"]
    for entry in own["probes"]:
        lines.append(f"| {entry['hosts']} | {entry['met']} / {entry['finished']} / {entry['seeds']} | "
                     + " | ".join(_fmt(entry[column]) for column in cols) + " |")
    return "\n".join(lines) + "\n"


def _hosts(count: int) -> str:
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
