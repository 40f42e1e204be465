"""TensorRT-LLM's DP-attention rows of calib/serving/measured.csv replayed through simroute's DP-attention group,
outside the scorecard (docs/VALIDATION.md, "The two TensorRT-LLM queueing rows").

`validate --serving` skips every DP-attention row (not the baseline engine; a group steps once per engine event,
so each row costs 15-150 CPU s). This replays the TensorRT-LLM ones with a closed loop of random prompts and no
MTP as they launched: the scorecard's flags for the row (`engine_values`: preset, `max_num_tokens`, CUDA-graph
limit, memory fraction, `ep`) plus `--dp-attention` = the row's TP, on one host of the shipped fat-tree, the
workload as `trace gen serving` writes it (seed 0). Every one of these launches (InferenceX's TensorRT-LLM
scripts) sets `attention_dp_config: {enable_balance: true, timeout_iters: 60, batching_wait_iters: 0}` (the table's
`adp_*` columns): each row is replayed without it (`before`: balancing off, TensorRT-LLM's default) and with it
(`after`: the group holds every rank's prompts by `_balance_adp_requests`' rule, docs/ENGINES.md). Nothing is
fitted. Prints one line per row and run, and appends one row per run to bench/RESULTS.md (`--no-record`: print
only).

    python bench/bench_trtllm_dp_attention.py [--no-record] [--rows SUBSTRING]
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

RUNS = ("before", "after")
ADP = ("adp_balance", "adp_timeout_iters", "adp_batching_wait_iters")
METRICS = (("ttft", "ttft_median_ms"), ("tpot", "tpot_mean_ms"), ("tok/s/GPU", "output_throughput_per_gpu_tok_s"))


def rows():
    """TensorRT-LLM DP-attention rows without MTP: closed loops of random prompts on one host, in table order."""
    from simroute.calib.serving import load_serving_table
    return [r for r in load_serving_table() if r.framework == "trtllm" and r.deployment == "dp-attention"
            and r.dataset == "random" and r.concurrency is not None and r.nodes == 1 and r.gpus == r.tp == 8]


def main() -> None:
    from simroute.scenarios.serving import engine_values, replay, trace_params
    from simroute.workload import generate
    args = sys.argv[1:]
    chosen = rows()
    if "--rows" in args:
        chosen = [r for r in chosen if args[args.index("--rows") + 1] in r.id]
    ratios = {run: {name: [] for name, _ in METRICS} for run in RUNS}
    cpu = dict.fromkeys(RUNS, 0.0)
    with tempfile.TemporaryDirectory() as tmp:
        for i, row in enumerate(chosen):
            trace = generate("serving", Path(tmp) / f"t{i}.parquet", seed=0, params=trace_params(row))
            for run in RUNS:
                values = {**engine_values(row), "dp_attention": row.tp}
                if run == "before":
                    for name in ADP:
                        values.pop(name, None)
                started = time.process_time()
                sim = replay(trace, values)
                cpu[run] += time.process_time() - started
                cells = []
                for name, column in METRICS:
                    measured = row.metrics.get(column)
                    if measured is None:
                        cells.append(f"{name} {sim[column]:.1f} (not printed)")
                        continue
                    ratios[run][name].append(sim[column] / measured)
                    cells.append(f"{name} {sim[column]:.1f} / {measured:.1f} = {sim[column] / measured:.2f}")
                print(f"| {row.id} | {run} | " + " | ".join(cells) + " |", flush=True)
    for run in RUNS:
        figures: dict[str, float | int | str] = {"rows": len(chosen)}
        for name, found in ratios[run].items():
            if found:
                figures[f"{name}_median_err"] = statistics.median(abs(x - 1) for x in found)
                figures[f"{name}_range"] = f"{min(found):.2f}-{max(found):.2f}"
        figures["cpu_s"] = cpu[run]
        label = ("ADP balancing off (before)" if run == "before"
                 else "attention_dp_config as launched: enable_balance, timeout_iters 60, batching_wait_iters 0")
        record(f"trtllm_dp_attention (TensorRT-LLM DP-attention rows, measured.csv; {label})", figures,
               target="diagnostic, outside the scorecard; nothing fitted")


if __name__ == "__main__":
    main()
