"""Issue 20's peer comparison, checked indirectly: the same run under the roofline and under the operator tables.

Issue 20 measured the OLD simroute (a datasheet roofline) against a profile-driven peer simulator on the Azure
2023 conversation trace (Sarathi, chunk 512, batch cap 128, 2 replicas): simroute's mean iteration was 30% shorter
than the peer's for Llama-2-7b on A100 TP 1 and 50% shorter for Llama-2-70b on H100 TP 4, so the peer's is the old
one / 0.70 and / 0.50. The peer cannot run here (its profiling data is not installable offline), so this bench
replays the first N requests of that same trace (`--trace conversation`, the default: Azure LLM inference trace
2023, conversation, CC-BY-4.0, shipped as bench/data/azure_llm_2023_conv.csv, see bench/data/NOTICE) or of the
2023 **code** trace (`--trace code`, ../shared/traces/azure_llm_2023_code.csv) at the trace's own arrival times,
three times per deployment, one `simroute run` each, same inputs and seed:
- `old`: the step model the issue measured, simroute at f44bfd7 (the last commit before the operator tables),
  exported with `git archive` into a temporary directory and run from there (it has no `--gpu`: the topology's
  intra-host fabric names the GPU, the same entry);
- `roofline`: today's code with the GPU entry stripped of `operator_tables` (a profile written here that includes
  the shipped `paper-all` and overrides the entry with a copy lacking that one key): today's roofline fallback,
  which since f44bfd7 has kernel floors and the NVSwitch all-reduce (docs/STEP_TIME.md), so it is not the old model;
- `tables`: the shipped GPU entry with its operator tables (NVIDIA's measured database from aiconfigurator-core
  0.12.0: A100 SXM under SGLang 0.5.10, H100 SXM under SGLang 0.5.14).
Reported: mean iteration (iteration-log durations over iterations), tokens per iteration, TTFT and TPOT p50 / p99,
old / tables and roofline / tables, and tables / implied peer with implied peer = old / 0.70 (7b) or / 0.50 (70b)
(and, as the brief put it, today's roofline / 0.70 or / 0.50). On the conversation trace the mean-iteration
ratio is the issue's own; how the peer was driven (its arrival times, any clipping of long prompts) is not
recorded in the issue, so the replay here uses the trace's arrivals and token counts as they are. At the trace's
own rate the replicas may queue, so TTFT and TPOT measure queueing as much as the step time.

Sarathi here: `--scheduler sarathi --token-budget 512 --prefill-chunk 512 --max-running-seqs 128`; two
instances (2 hosts x tp GPUs), round-robin router (requests carry no chunks: no route / fetch / local).

Run: PYTHONPATH=. python3 bench/bench_peer_ratio.py [--trace conversation|code] [--requests 2000] [--old f44bfd7]
     [--no-record]
Target: tables / implied peer (from the old model) within [0.8, 1.25] for both deployments (the issue's gap
closed to within 25%).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from _common import record

ROOT = Path(__file__).resolve().parent.parent
TRACES = {"conversation": ROOT / "bench" / "data" / "azure_llm_2023_conv.csv",     # Vidur's processed copy
          "code": ROOT.parent / "shared" / "traces" / "azure_llm_2023_code.csv"}        # Azure's own columns
AZURE_BASE = pd.Timestamp("2023-11-16")    # any date: the importer reads only differences between arrivals
OLD_COMMIT = "f44bfd7"          # the last commit before the operator tables (b0bc3f3): the step model issue 20 measured


@dataclass(frozen=True)
class Deployment:
    """One of the issue's two deployments and the old roofline's shortfall the issue measured against the peer."""
    label: str
    model: str
    gpu: str
    tp: int
    intra_fabric: str
    old_over_peer: float    # issue 20: old simroute's mean iteration / the peer's


DEPLOYMENTS = (Deployment("llama2-7b-a100-tp1", "llama-2-7b", "a100-80gb", 1, "a100-nvlink3", 0.70),
               Deployment("llama2-70b-h100-tp4", "llama-2-70b", "h100-sxm", 4, "h100-nvlink4", 0.50))

SARATHI = ["--scheduler", "sarathi", "--token-budget", "512", "--prefill-chunk", "512", "--max-running-seqs", "128"]


def topology_yaml(deployment: Deployment) -> dict:
    """Two hosts of `tp` GPUs: two replicas of one TP group each."""
    return {"name": f"peer-2x{deployment.tp}", "description": f"2 hosts x {deployment.tp} {deployment.gpu}",
            "hosts": {"count": 2, "gpus_per_host": deployment.tp, "gpu": deployment.gpu,
                      "intra": {"kind": "nvlink-mesh", "link_GBps": 125, "latency_us": 0.6,
                                "fabric": deployment.intra_fabric}},
            "nic": {"per": "gpu", "rate_GBps": 25, "latency_us": 1.0, "fabric": "h100-ibgda"},
            "network": {"tiers": 2, "hosts_per_leaf": 2, "spines": 1, "latency_us": 0.6}}


def shipped_entry(gpu: str) -> dict:
    """A copy of the shipped GPU entry `gpu` (calib/gpus/<gpu>.yaml), to override keys of."""
    return dict(yaml.safe_load((ROOT / "calib" / "gpus" / f"{gpu}.yaml").read_text())["gpus"][gpu])


def tables_with_overhead(gpu: str, overhead_us: float) -> dict:
    """`paper-all` with GPU entry `gpu` charging `overhead_us` per iteration (its tables kept): what an iteration
    charge the tables lack (a peer's per-call launch costs, summed per iteration) does to the answer."""
    entry = shipped_entry(gpu)
    tables = dict(entry["operator_tables"])
    tables["path"] = str((ROOT / "calib" / "gpus" / tables["path"]).resolve())     # read from a profile elsewhere
    entry["operator_tables"] = tables
    entry["iteration_overhead_us"] = {"value": overhead_us, "unit": "us", "provenance": {
        "kind": "default", "ref": f"bench_peer_ratio.py --iteration-overhead-us {overhead_us:g} (a what-if)"}}
    return {"schema": "simroute.calib/1", "name": f"paper-all-{gpu}-overhead-{overhead_us:g}us",
            "description": f"paper-all with {gpu} charging {overhead_us:g} us per iteration (bench_peer_ratio.py)",
            "include": ["shipped:paper-all"], "gpus": {gpu: entry}}


def tables_without(gpu: str, kinds: list[str], out: Path) -> dict:
    """`paper-all` with GPU entry `gpu` reading a copy of its shipped tables that lacks the op `kinds` (those terms
    fall back to the roofline, the rest stay measured): what the tables' answer owes to those kinds."""
    entry = shipped_entry(gpu)
    source = (ROOT / "calib" / "gpus" / entry["operator_tables"]["path"]).resolve()
    index = yaml.safe_load((source / "tables.yaml").read_text())
    missing = [kind for kind in kinds if kind not in index["tables"]]
    if missing:
        sys.exit(f"bench_peer_ratio: --without {','.join(missing)}: not a table of {source} "
                 f"(it has {', '.join(index['tables'])})")
    out.mkdir(parents=True)
    for kind in index["tables"]:
        if kind not in kinds:
            (out / f"{kind}.parquet").write_bytes((source / f"{kind}.parquet").read_bytes())
    index["tables"] = {kind: table for kind, table in index["tables"].items() if kind not in kinds}
    (out / "tables.yaml").write_text(yaml.safe_dump(index, sort_keys=False))
    entry["operator_tables"] = {"path": str(out), "note": f"{source.name} without {', '.join(kinds)} (bench)"}
    return {"schema": "simroute.calib/1", "name": f"paper-all-{gpu}-without-{'-'.join(kinds)}",
            "description": f"paper-all with {gpu}'s tables less {', '.join(kinds)} (bench_peer_ratio.py)",
            "include": ["shipped:paper-all"], "gpus": {gpu: entry}}


def roofline_profile_yaml(gpu: str) -> dict:
    """`paper-all` with GPU entry `gpu` overridden by the shipped one minus `operator_tables`: the roofline alone."""
    entry = shipped_entry(gpu)
    entry.pop("operator_tables")
    return {"schema": "simroute.calib/1", "name": f"paper-all-roofline-{gpu}",
            "description": f"paper-all with {gpu} on the roofline alone (bench_peer_ratio.py)",
            "include": ["shipped:paper-all"], "gpus": {gpu: entry}}


def azure_csv(source: Path, out: Path) -> Path:
    """`source` with Azure's own columns (TIMESTAMP, ContextTokens, GeneratedTokens), as `simroute trace import
    azure` reads them: unchanged when it has them, converted from Vidur's processed columns (arrived_at seconds,
    num_prefill_tokens, num_decode_tokens) otherwise."""
    frame = pd.read_csv(source)
    if "TIMESTAMP" in frame.columns:
        return source
    # to the microsecond the file holds (rounded: a float's seconds truncated to ns could lose the last digit)
    stamps = AZURE_BASE + pd.to_timedelta((frame["arrived_at"] * 1e6).round(), unit="us")
    pd.DataFrame({"TIMESTAMP": stamps.dt.strftime("%Y-%m-%d %H:%M:%S.%f"),
                  "ContextTokens": frame["num_prefill_tokens"],
                  "GeneratedTokens": frame["num_decode_tokens"]}).to_csv(out, index=False)
    return out


def run_once(deployment: Deployment, trace: Path, calib: str, topology: Path, requests: int, out: Path,
             code: Path = ROOT) -> dict:
    """One `simroute run` of the simroute at `code`; mean iteration from the iteration log, TTFT / TPOT from
    summary.json. The old code has no --gpu (the topology's fabric names it) and no --min-completion."""
    today = code == ROOT
    command = [sys.executable, "-m", "simroute", "run", "--topology", str(topology), "--trace", str(trace),
               "--calib", calib, "--model", deployment.model, "--tp", str(deployment.tp),
               *(["--gpu", deployment.gpu, "--min-completion", "0"] if today else []),
               *SARATHI, "--router", "round-robin", "--max-requests", str(requests), "--seed", "0",
               "--no-progress", "--json", "-o", str(out)]
    print(f"  $ PYTHONPATH={code} " + " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True, cwd=code, stdout=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": str(code)})
    summary = json.loads((out / "summary.json").read_text())
    iterations = pd.read_parquet(out / "iterations.parquet")
    count = int(iterations["iterations"].sum())
    tokens = float((iterations["new_tokens"] * iterations["iterations"]).sum())
    return {"iter_ms": 1e3 * float(iterations["duration_s"].sum()) / count, "iterations": count,
            "tokens_per_iter": tokens / count,
            "ttft_p50_ms": summary["ttft_ms"]["p50"], "ttft_p99_ms": summary["ttft_ms"]["p99"],
            "tpot_p50_ms": summary["tpot_ms"]["p50"], "tpot_p99_ms": summary["tpot_ms"]["p99"],
            "completed": summary["completed"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="replay the trace's first N requests")
    parser.add_argument("--trace", choices=sorted(TRACES), default="conversation",
                        help="the Azure 2023 trace to replay (conversation: the issue's)")
    parser.add_argument("--trace-csv", type=Path, default=None, help="its CSV, where not the default file")
    parser.add_argument("--old", default=OLD_COMMIT, help="the commit whose step model the issue measured")
    parser.add_argument("--without", action="append", default=[], metavar="KIND[,KIND]",
                        help="also run the tables less these op kinds (roofline for them), e.g. attention_decode; "
                             "repeatable: one more run per use")
    parser.add_argument("--iteration-overhead-us", action="append", default=[], type=float, metavar="US",
                        help="also run the tables with this per-iteration overhead (the shipped entries charge 300 "
                             "us); repeatable: one more run per use")
    parser.add_argument("--only", default="", help="comma-separated deployment labels (default: both), e.g. "
                                                   "llama2-7b-a100-tp1")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    trace_csv = args.trace_csv or TRACES[args.trace]
    if not trace_csv.is_file():
        sys.exit(f"bench_peer_ratio: {trace_csv}: not found (the Azure 2023 {args.trace} trace)")
    with tempfile.TemporaryDirectory(prefix="peer-ratio-") as tmp_name:
        tmp = Path(tmp_name)
        trace = tmp / f"azure_{args.trace}.parquet"
        subprocess.run([sys.executable, "-m", "simroute", "trace", "import", "azure",
                        str(azure_csv(trace_csv, tmp / "azure.csv")), "-o", str(trace)],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        old_code = tmp / "old"
        old_code.mkdir()
        archive = subprocess.run(["git", "archive", args.old], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old_code)], input=archive, check=True)
        figures: dict[str, float | int | str] = {"trace": f"azure_llm_2023_{args.trace}", "requests": args.requests,
                                                 "old": args.old}
        chosen = [d for d in DEPLOYMENTS if not args.only or d.label in args.only.split(",")]
        if not chosen:
            sys.exit(f"bench_peer_ratio: --only {args.only}: no such deployment "
                     f"({', '.join(d.label for d in DEPLOYMENTS)})")
        for deployment in chosen:
            topology = tmp / f"{deployment.label}-topology.yaml"
            topology.write_text(yaml.safe_dump(topology_yaml(deployment), sort_keys=False))
            profile = tmp / f"{deployment.label}-roofline.yaml"
            profile.write_text(yaml.safe_dump(roofline_profile_yaml(deployment.gpu), sort_keys=False))
            print(f"{deployment.label}:")
            old = run_once(deployment, trace, "paper-all", topology, args.requests, tmp / "old-run", old_code)
            roofline = run_once(deployment, trace, str(profile), topology, args.requests, tmp / "roofline")
            tables = run_once(deployment, trace, "paper-all", topology, args.requests, tmp / "tables")
            runs = {"old": old, "roofline": roofline, "tables": tables}
            for kinds in args.without:
                name = "tables-" + "-".join(kinds.split(","))
                without = tmp / f"{deployment.label}-{name}.yaml"
                without.write_text(yaml.safe_dump(tables_without(deployment.gpu, kinds.split(","),
                                                                 tmp / f"{deployment.label}-{name}"), sort_keys=False))
                runs[name] = run_once(deployment, trace, str(without), topology, args.requests, tmp / name)
            for overhead_us in args.iteration_overhead_us:
                name = f"tables+{overhead_us:g}us"
                with_overhead = tmp / f"{deployment.label}-{name}.yaml"
                with_overhead.write_text(yaml.safe_dump(tables_with_overhead(deployment.gpu, overhead_us),
                                                        sort_keys=False))
                runs[name] = run_once(deployment, trace, str(with_overhead), topology, args.requests, tmp / name)
            implied_peer_ms = old["iter_ms"] / deployment.old_over_peer
            implied_peer_today_ms = roofline["iter_ms"] / deployment.old_over_peer
            width = max(len(name) for name in runs)
            print(f"  {'':{width}} {'iter ms':>8} {'tok/iter':>8} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} "
                  f"{'TPOT p99':>9} {'iters':>8}")
            for name, result in runs.items():
                print(f"  {name:{width}} {result['iter_ms']:8.3f} {result['tokens_per_iter']:8.1f} "
                      f"{result['ttft_p50_ms']:9.1f} {result['ttft_p99_ms']:9.1f} {result['tpot_p50_ms']:9.2f} "
                      f"{result['tpot_p99_ms']:9.2f} {result['iterations']:8d}")
            print(f"  implied peer mean iteration {implied_peer_ms:.3f} ms (old / {deployment.old_over_peer}): "
                  f"tables / implied peer {tables['iter_ms'] / implied_peer_ms:.3f}; from today's roofline "
                  f"{implied_peer_today_ms:.3f} ms: {tables['iter_ms'] / implied_peer_today_ms:.3f}")
            prefix = deployment.label
            for metric in ("iter_ms", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms"):
                for name, result in runs.items():
                    figures[f"{prefix}_{metric}_{name}"] = result[metric]
                figures[f"{prefix}_{metric}_old_over_tables"] = old[metric] / tables[metric]
                figures[f"{prefix}_{metric}_roofline_over_tables"] = roofline[metric] / tables[metric]
            for name, result in runs.items():
                figures[f"{prefix}_tokens_per_iter_{name}"] = result["tokens_per_iter"]
            figures[f"{prefix}_implied_peer_iter_ms"] = implied_peer_ms
            figures[f"{prefix}_tables_over_implied_peer"] = tables["iter_ms"] / implied_peer_ms
            figures[f"{prefix}_tables_over_implied_peer_from_today_roofline"] = (tables["iter_ms"]
                                                                                 / implied_peer_today_ms)
            figures[f"{prefix}_completed"] = "/".join(str(result["completed"]) for result in runs.values())
    figures["tables"] = " / ".join(f"{d.gpu} {Path(shipped_entry(d.gpu)['operator_tables']['path']).name}"
                                   for d in chosen) + " (aiconfigurator-core 0.12.0)"
    record(f"peer ratio (issue 20, indirect: Azure {args.trace} trace, old step model / roofline / tables)", figures,
           target="tables / implied peer mean iteration in [0.8, 1.25]")


if __name__ == "__main__":
    main()
