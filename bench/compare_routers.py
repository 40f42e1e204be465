"""Requester routers side by side: TTFT p50 / p99, SLO attainment and primitive counts per router.

Usage: python3 bench/compare_routers.py TRACE [TRACE ...] [--routers affinity,hint,hash,locality]
(e.g. a Mooncake conversation import and `simroute trace gen agents`). Prints one table per trace.
"""

from __future__ import annotations

import argparse
import sys
from simroute.defaults import PAPER_DEPLOYMENT
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--routers", default="affinity,hint,hash,locality")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from simroute.calib import default_profile_path
    from simroute.network import default_topology_path
    from simroute.sim import RunConfig, simulate
    for trace in args.traces:
        print(f"\n{trace.name}: router, TTFT p50 / p99 ms, SLO attainment, fetch / local / resident, wall s")
        for router in args.routers.split(","):
            res = simulate(RunConfig(**PAPER_DEPLOYMENT,
                                     topology=str(default_topology_path()), trace=str(trace), router=router,
                                     calib=str(default_profile_path()), seed=args.seed, telemetry=False,
                                     over_window="drop"))
            s = res.summary
            pc = s["primitive_counts"]
            print(f"  {router:<12} {s['ttft_ms']['p50']:9.1f} {s['ttft_ms']['p99']:9.1f}   "
                  f"{s['slo']['attainment']:.3f}   {pc['fetch']:>6} / {pc['local']:>5} / {pc['resident']:>6}"
                  f"   {res.perf['wall_s']:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
