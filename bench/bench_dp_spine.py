"""DP attention + EP across hosts sharing the spine with routed queries (issue 36, "Must show"; docs/STEP_TIME.md,
"DP attention in a run").

DeepSeek-V3 on two H200 hosts of the ARK leaf-spine (one host per leaf, 4 spines), the shipped agents trace, every
chunk routed: DP 16 + EP 16 (DeepEP across the hosts) with the step's all-to-all on the links, against the same run
with the all-to-all timed by the tables alone (`--no-ep-flows`: routed queries alone on the links), and against DP 8
+ EP 8 per host (the all-to-all on NVLink only: no EP bytes on the spine). Figures: the routed round trip's network
time, the summed exchange seconds, TPOT / e2e, the all-to-all's flow time against the tables' per step, and its
bytes by link. Wall time is this box's (2 shared cores: noisy).

Each slows the other (docs/NETWORK.md, "Messages share the links with bulk flows"): the EP flows with the routed
queries' bytes charged against the links (`ep_on_links`) against the same run with them not charged
(`ep_uncharged`: `FlowEngine.message_charge = False`, the EP flows as if no routed query crossed their links; the
decisions and steps are the same run's, which a policy that never routes would not keep: always-local re-prefills
every remote chunk and changes every step's batch), and against `ep_tables_only` (the routed queries without EP
flows). The `heavy_*` cases repeat the three on a generated agents trace with longer documents, more sub-agents and
shorter think times (`HEAVY`: 16x the routed bytes per request).

    python3 bench/bench_dp_spine.py [--requests 60] [--heavy-requests 120 | --no-heavy] [--no-record]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import record

from simroute.calib import default_profile_path
from simroute.network import FlowEngine, shipped_topology
from simroute.sim import RunConfig, simulate
from simroute.sim.config import default_trace_path

DP16 = {"tp": 16, "dp_attention": 16, "ep": 16}
CASES = {   # name -> (RunConfig fields beside the common ones, routed bytes charged against bulk flows)
    "ep_on_links": (DP16, True),
    "ep_uncharged": (DP16, False),
    "ep_tables_only": (dict(DP16, ep_flows=False), True),
    "ep_in_host": ({"tp": 8, "dp_attention": 8, "ep": 8}, True),
}
HEAVY_CASES = ("ep_on_links", "ep_uncharged", "ep_tables_only")
# the heavy trace: `simroute trace gen agents` with these parameters (seed 0)
HEAVY = {"documents": 4, "doc_tokens": 65536, "subagents": 32, "think_s": 0.2}


def run_case(name: str, trace: str, requests: int, fields: dict, charge: bool, no_record: bool) -> None:
    cfg = RunConfig(topology=str(shipped_topology("ark-leafspine")), trace=trace,
                    calib=str(default_profile_path()), gpu="h200-sxm", hosts=2, policy="always-route",
                    max_requests=requests, telemetry=False, **fields)
    FlowEngine.message_charge = charge
    try:
        start = time.process_time()
        s = simulate(cfg).summary
        cpu = time.process_time() - start
    finally:
        FlowEngine.message_charge = True
    engine, group = s["engine"], s["engine"]["group"]
    steps = max(1, group["steps"])
    figures = {
        "requests": requests, "completed": s["completed"],
        "routed_rt_network_us": engine["routed_round_trip_network_us"] or 0.0,
        "exchange_s": engine["exchange_s"], "tpot_mean_ms": s["tpot_ms"]["mean"],
        "tpot_p99_ms": s["tpot_ms"]["p99"], "e2e_mean_ms": s["e2e_ms"]["mean"],
        "a2a_flow_ms_per_step": group["a2a_flow_s"] / steps * 1e3,
        "a2a_table_ms_per_step": group["table_collective_s"] / steps * 1e3,
        "a2a_extra_s": group["a2a_flow_extra_s"], "a2a_rdma_gb": group["a2a_bytes"]["rdma"] / 1e9,
        "a2a_nvlink_gb": group["a2a_bytes"]["nvlink"] / 1e9, "route_gb": s["bytes"]["route"] / 1e9,
        "steps": group["steps"], "cpu_s": cpu}
    if no_record:
        print(name, figures)
    else:
        record(f"dp_spine_{name}", figures)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--heavy-requests", type=int, default=120)
    ap.add_argument("--no-heavy", action="store_true")
    args = ap.parse_args()
    for name, (fields, charge) in CASES.items():
        run_case(name, str(default_trace_path()), args.requests, fields, charge, args.no_record)
    if args.no_heavy:
        return
    from simroute.workload.generators import generate
    with tempfile.TemporaryDirectory() as tmp:
        trace = str(generate("agents", Path(tmp) / "heavy.parquet", seed=0, params=dict(HEAVY)))
        for name in HEAVY_CASES:
            fields, charge = CASES[name]
            run_case(f"heavy_{name}", trace, args.heavy_requests, fields, charge, args.no_record)

if __name__ == "__main__":
    main()
