"""The capacity question of the plan issue, end to end: DeepSeek-V3 FP8 at TP 8 on HGX H200 hosts of the shipped
leaf-spine, 256 sub-agents forking one 96k-token immutable document at 8 requests/s; the fewest hosts holding TTFT
p99 <= 2 s and TPOT p99 <= 50 ms on every one of 3 seeds, with what always-route and always-fetch would need.

Run: python bench/bench_plan.py [--no-record] [--engine NAME]   (target: answered in <= 120 s wall on the 2-core box)
`--engine` sets every run's serving framework preset (docs/ENGINES.md; default: the run default, `auto`).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))     # this checkout's simroute, not an installed one
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_rss_mb, record  # noqa: E402


def main() -> None:
    from simroute.study.plan import PlanRequest, run_plan
    engine = sys.argv[sys.argv.index("--engine") + 1] if "--engine" in sys.argv else None
    request = PlanRequest(trace={"generate": "agents", "params": {"documents": 1, "doc_tokens": 98_304,
                                                                  "subagents": 256, "requests_per_agent": 2}},
                          qps=8.0, hosts_max=16, seeds=3, base={"engine": engine} if engine else {})
    with tempfile.TemporaryDirectory(prefix="simroute-bench-plan-") as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        run, answer, memo = run_plan(request, Path(tmp) / "plan", jobs=2)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(memo.read_text())
    policies = answer["deployments"]
    record("plan_agents256_doc96k_qps8" + (f" --engine {engine}" if engine else ""), {
        "wall_s": wall, "driver_cpu_s": cpu, "runs": run.executed, "answer_hosts": str(answer["answer_hosts"]),
        "always_route_hosts": str(policies.get("always-route", {}).get("hosts")),
        "always_fetch_hosts": str(policies.get("always-fetch", {}).get("hosts")),
        "nonmonotone": str([f"{edge['deployment']}: {edge['meets']}<{edge['fails']}"
                            for edge in answer["nonmonotone"]]),
        "peak_rss_MiB": peak_rss_mb()}, target="<= 120 s wall")


if __name__ == "__main__":
    main()
