"""Workload benchmark: generate, import and summarise an N-request trace (default 1M; try 10M).

Each phase runs in its own subprocess so its peak RSS is its own:
  gen     `corpus` generator, N requests -> Parquet
  jsonl   write a synthetic N-line Mooncake JSONL (shared prefixes + unique tails; not a simroute cost)
  import  `mooncake` importer on that file
  info    `trace_info` of the imported trace (plus an LRU replay when --lru)

    python bench/bench_trace.py                       # 1M requests
    python bench/bench_trace.py --requests 10000000   # 10M: every phase must stay < 4 GB peak RSS
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_rss_mb, record  # noqa: E402


def write_mooncake_jsonl(path: Path, n: int, seed: int = 0) -> None:
    """Mooncake-format lines: a Zipf-popular document prefix (0-24 blocks) plus 1-6 unique blocks."""
    rng = np.random.default_rng(seed)
    docs, max_blocks, block = 2000, 24, 512
    weights = 1.0 / np.arange(1, docs + 1) ** 1.1
    cdf = np.cumsum(weights / weights.sum())
    next_id = docs * max_blocks
    t_ms = 0.0
    with path.open("w") as f:
        for start in range(0, n, 100_000):
            m = min(100_000, n - start)
            doc = np.minimum(np.searchsorted(cdf, rng.random(m)), docs - 1)
            shared = rng.integers(0, max_blocks + 1, size=m)
            own = rng.integers(1, 7, size=m)
            last = rng.integers(1, block + 1, size=m)
            gaps = rng.exponential(1000.0 / 1000.0, size=m)  # ~1000 req/s
            out = rng.integers(1, 512, size=m)
            lines = []
            for i in range(m):
                t_ms += gaps[i]
                k = int(shared[i])
                u = int(own[i])
                base = int(doc[i]) * max_blocks
                ids = list(range(base, base + k)) + list(range(next_id, next_id + u))
                next_id += u
                inp = block * (k + u - 1) + int(last[i])
                lines.append(f'{{"timestamp": {int(t_ms)}, "input_length": {inp}, '
                             f'"output_length": {int(out[i])}, "hash_ids": {ids}}}\n')
            f.write("".join(lines))


def phase(name: str, n: int, work: Path, lru: int | None) -> dict[str, float]:
    from simroute.workload import generate, import_trace, trace_info
    t0 = time.perf_counter()
    extra: dict[str, float] = {}
    if name == "gen":
        generate("corpus", work / "gen.parquet", seed=0, params={"requests": n})
    elif name == "jsonl":
        write_mooncake_jsonl(work / "mooncake.jsonl", n)
        extra["jsonl_mb"] = (work / "mooncake.jsonl").stat().st_size / 2**20
    elif name == "import":
        import_trace("mooncake", work / "mooncake.jsonl", work / "imported.parquet")
    elif name == "info":
        info = trace_info(work / "imported.parquet", lru_capacity_tokens=lru)
        extra.update(reuse=info.reuse_unbounded, requests=info.requests)
        if lru is not None:
            extra["lru_hit"] = info.lru_hit_ratio or 0.0
    return {"wall_s": time.perf_counter() - t0, "peak_mb": peak_rss_mb(), **extra}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--lru", type=int, default=None, help="also replay an LRU of this many tokens in `info`")
    ap.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--work", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args.requests, Path(args.work), args.lru)))
        return
    work = Path(tempfile.mkdtemp(prefix="bench_trace."))
    figures: dict[str, float | int | str] = {"requests": args.requests}
    try:
        for name in ("gen", "jsonl", "import", "info"):
            cmd = [sys.executable, __file__, "--phase", name, "--requests", str(args.requests), "--work", str(work)]
            if args.lru is not None:
                cmd += ["--lru", str(args.lru)]
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            for key, value in res.items():
                figures[f"{name}_{key}" if key in ("wall_s", "peak_mb") else key] = value
            print(name, res, flush=True)
        figures["import_req_per_s"] = args.requests / float(figures["import_wall_s"])
        figures["trace_mb"] = sum(p.stat().st_size for p in (work / "imported.parquet").iterdir()) / 2**20
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record("trace", figures, target="10M: every phase < 4096 MB peak RSS")


if __name__ == "__main__":
    main()
