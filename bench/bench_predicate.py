"""Decisions per second of the vectorised route/fetch/local predicate over 10^6 request shapes.

Run: python bench/bench_predicate.py [--n 1000000] [--no-record]    (target: >= 20M decisions/s)
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _common import peak_rss_mb, record
from simroute.calib import load_profile
from simroute.model import Shape, decide


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    args, _ = ap.parse_known_args()
    params = load_profile("paper-all").cost_params()
    rng = np.random.default_rng(1)
    n = args.n
    dense = Shape(mq=rng.integers(1, 4097, n).astype(float), ct=rng.integers(16, 8193, n).astype(float),
                  fabric=rng.integers(0, len(params.fabrics), n), reuse=rng.integers(0, 256, n).astype(float),
                  cached=rng.random(n) < 0.3)
    mixed = Shape(mq=dense.mq, ct=dense.ct, fabric=dense.fabric, reuse=dense.reuse, cached=dense.cached,
                  topk=np.where(rng.random(n) < 0.5, 2048, 0), holders=rng.integers(1, 8, n))
    figures: dict[str, float] = {}
    for label, shape in (("dense", dense), ("sparse_mix", mixed)):
        decide(shape, params)  # warm-up
        best = min(_timed(lambda: decide(shape, params)) for _ in range(args.repeat))
        figures[f"{label}_Mdecisions_per_s"] = n / best / 1e6
    figures["n"] = n
    figures["peak_rss_MiB"] = peak_rss_mb()
    record("predicate", figures, target=">= 20M decisions/s, mixed dense and sparse shapes")


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
