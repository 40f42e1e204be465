"""Engine presets against measured serving results: the SGLang H200 DeepSeek-R1 closed loops of
calib/serving/measured.csv replayed with and without the sglang preset (docs/ENGINES.md, issue 35 item 1).

Every baseline row of that deployment with a closed loop of random prompts is replayed on one host of the
shipped fat-tree (8 x H200, TP 8) as `trace gen serving` writes it (the row's ISL / OSL, range ratio, prompts and
clients; seed 0) under three engines:

- `launched`: `--engine sglang` with the row's launch flags on top (InferenceX's `--chunked-prefill-size`,
  `--max-prefill-tokens`, `--max-running-requests`, `--cuda-graph-max-bs`): the deployment as it ran;
- `preset`: `--engine sglang` alone (the framework's defaults: what simroute runs when told nothing);
- `none`: `--engine none` (the engine before presets: Sarathi 2048, the GPU entry's constant 0.3 ms).

Per row and engine: simulated / measured median TTFT, mean TPOT and output tokens/s per GPU (summary.json
`serving`), then the median |error| and the range per metric, split by the table's `holdout` column. No preset
constant was fitted to these rows (the presets' `fitted` constants name their own data), so every row judges.
The clients' warm-up requests (2 x clients on the runs from 2026-01-21) are not replayed: the simulated loop
starts cold. Prints the table, appends one row per engine to bench/RESULTS.md (`--no-record`: print only).

    python bench/bench_serving_engines.py [--no-record] [--engines launched,preset,none] [--rows SUBSTRING]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import record  # noqa: E402

METRICS = (("ttft", "ttft_median_ms"), ("tpot", "tpot_mean_ms"), ("tok/s/GPU", "output_throughput_per_gpu_tok_s"))
ENGINES = ("launched", "preset", "none")


def rows():
    """The SGLang H200 DeepSeek-R1 baseline closed loops of random prompts, in table order."""
    from simroute.calib.serving import load_serving_table
    return [r for r in load_serving_table() if r.framework == "sglang" and r.gpu == "h200-sxm"
            and r.model == "deepseek-r1" and r.deployment == "baseline" and r.dataset == "random"
            and r.concurrency is not None]


def engine_values(engine: str, row) -> dict:
    """The RunConfig fields of `engine` for `row` (see the module); `launched` is what `validate --serving` runs."""
    from simroute.scenarios.serving import engine_values as launched
    if engine == "none":
        return {"engine": "none", "model": row.model}
    if engine == "preset":
        return {"engine": "sglang", "model": row.model}
    return launched(row)


def main() -> None:
    from simroute.scenarios.serving import replay, trace_params
    from simroute.workload import generate
    args = sys.argv[1:]
    engines = ENGINES
    if "--engines" in args:
        engines = tuple(args[args.index("--engines") + 1].split(","))
    chosen = rows()
    if "--rows" in args:
        chosen = [r for r in chosen if args[args.index("--rows") + 1] in r.id]
    results: dict[tuple[str, str], dict] = {}        # (row id, engine) -> simulated metrics
    cache: dict[tuple, dict] = {}                    # one run per distinct (workload, engine settings)
    started = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        traces: dict[tuple, Path] = {}
        for row in chosen:
            load = tuple(sorted(trace_params(row).items()))
            if load not in traces:
                traces[load] = generate("serving", Path(tmp) / f"t{len(traces)}.parquet", seed=0,
                                        params=trace_params(row))
            for engine in engines:
                values = engine_values(engine, row)
                key = (load, tuple(sorted(values.items())))
                if key not in cache:
                    cache[key] = replay(traces[load], values)
                results[(row.id, engine)] = cache[key]
                print(f"  {row.id} {engine}: " + ", ".join(f"{m}={cache[key][c]:.1f}" for m, c in METRICS),
                      file=sys.stderr, flush=True)
    cpu_s = time.process_time() - started
    header = "| row | holdout | measured TTFT / TPOT / tok/s/GPU | " + " | ".join(
        f"{e}: TTFT / TPOT / tok/s ratio" for e in engines) + " |"
    print(header)
    print("|" + "---|" * (3 + len(engines)))
    for row in chosen:
        measured = [row.metrics.get(column) for _, column in METRICS]
        cells = []
        for engine in engines:
            sim = results[(row.id, engine)]
            cells.append(" / ".join("-" if m is None else f"{sim[c] / m:.2f}" for (_, c), m in zip(METRICS, measured)))
        print(f"| {row.id} | {str(row.holdout).lower()} | "
              + " / ".join("-" if m is None else f"{m:.1f}" for m in measured) + " | " + " | ".join(cells) + " |")
    for engine in engines:
        figures: dict[str, float | int | str] = {"rows": len(chosen)}
        for name, column in METRICS:
            for split in ("all", "false", "true"):
                ratios = [results[(r.id, engine)][column] / r.metrics[column] for r in chosen
                          if r.metrics.get(column) is not None and (split == "all" or str(r.holdout).lower() == split)]
                if not ratios:
                    continue
                error = statistics.median(abs(x - 1) for x in ratios)
                if split == "all":
                    figures[f"{name}_n"] = len(ratios)
                    figures[f"{name}_median_err"] = error
                    figures[f"{name}_range"] = f"{min(ratios):.2f}-{max(ratios):.2f}"
                else:
                    figures[f"{name}_median_err_holdout_{split}"] = error
        figures["cpu_s"] = cpu_s
        record(f"serving_engines {engine} (SGLang H200 DeepSeek-R1 closed loops, measured.csv)", figures,
               target="issue 35: TPOT and tok/s within 10% median, TTFT 15%; nothing fitted to these rows")


if __name__ == "__main__":
    main()
