"""DP attention + EP across hosts sharing the spine with routed queries (issue 36, "Must show"; docs/STEP_TIME.md,
"DP attention in a run").

DeepSeek-V3 on two H200 hosts of the ARK leaf-spine (one host per leaf, 4 spines), the shipped agents trace, every
chunk routed: DP 16 + EP 16 (DeepEP across the hosts) with the step's all-to-all on the links, against the same run
with the all-to-all timed by the tables alone (`--no-ep-flows`: routed queries alone on the links), and against DP 8
+ EP 8 per host (the all-to-all on NVLink only: no EP bytes on the spine). Figures: the routed round trip's network
time, the summed exchange seconds, TPOT / e2e, the all-to-all's flow time against the tables' per step, and its
bytes by link. Wall time is this box's (2 shared cores: noisy).

    python3 bench/bench_dp_spine.py [--requests 60] [--no-record]
"""

from __future__ import annotations

import argparse
import time

from _common import record

from simroute.calib import default_profile_path
from simroute.network import shipped_topology
from simroute.sim import RunConfig, simulate
from simroute.sim.config import default_trace_path

CASES = {   # name -> RunConfig fields beside the common ones
    "ep_on_links": {"tp": 16, "dp_attention": 16, "ep": 16},
    "ep_tables_only": {"tp": 16, "dp_attention": 16, "ep": 16, "ep_flows": False},
    "ep_in_host": {"tp": 8, "dp_attention": 8, "ep": 8},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    for name, fields in CASES.items():
        cfg = RunConfig(topology=str(shipped_topology("ark-leafspine")), trace=str(default_trace_path()),
                        calib=str(default_profile_path()), gpu="h200-sxm", hosts=2, policy="always-route",
                        max_requests=args.requests, telemetry=False, **fields)
        start = time.process_time()
        s = simulate(cfg).summary
        cpu = time.process_time() - start
        engine, group = s["engine"], s["engine"]["group"]
        steps = max(1, group["steps"])
        record(f"dp_spine_{name}", {
            "requests": args.requests, "completed": s["completed"],
            "routed_rt_network_us": engine["routed_round_trip_network_us"] or 0.0,
            "exchange_s": engine["exchange_s"], "tpot_mean_ms": s["tpot_ms"]["mean"],
            "tpot_p99_ms": s["tpot_ms"]["p99"], "e2e_mean_ms": s["e2e_ms"]["mean"],
            "a2a_flow_ms_per_step": group["a2a_flow_s"] / steps * 1e3,
            "a2a_table_ms_per_step": group["table_collective_s"] / steps * 1e3,
            "a2a_extra_s": group["a2a_flow_extra_s"], "a2a_rdma_gb": group["a2a_bytes"]["rdma"] / 1e9,
            "a2a_nvlink_gb": group["a2a_bytes"]["nvlink"] / 1e9, "steps": group["steps"], "cpu_s": cpu})


if __name__ == "__main__":
    main()
