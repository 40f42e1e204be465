"""TensorRT-LLM's DP-attention rows of calib/serving/measured.csv replayed through simroute's DP-attention group,
with and without attention-DP balancing (docs/VALIDATION.md, "TensorRT-LLM's attention-DP balancing").

The default `validate --serving` skips every DP-attention row (a group steps once per engine event, so the four
cost ~160 CPU s); `validate --serving --dp-attention` replays them as launched. This takes the same rows (the
scorecard's `cases(dp_attention=True)`: the TensorRT-LLM ones, closed loops of random prompts without MTP) and
the scorecard's replay: the row's flags (`engine_values`: preset, `max_num_tokens`, CUDA-graph limit, memory
fraction, `ep`, `dp_attention` = the row's TP), on one host of the shipped fat-tree, the workload as
`trace gen serving` writes it (seed 0). Every one of these launches (InferenceX's TensorRT-LLM
scripts) sets `attention_dp_config: {enable_balance: true, timeout_iters: 60, batching_wait_iters: 0}` (the table's
`adp_*` columns): each row is replayed without it (`before`: balancing off, TensorRT-LLM's default) and with it
(`after`: the group holds every rank's prompts by `_balance_adp_requests`' rule, docs/ENGINES.md; the
scorecard's figures). Nothing is
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
    """The DP-attention rows `validate --serving --dp-attention` replays (TensorRT-LLM's, without MTP), in table
    order."""
    from simroute.scenarios.serving import cases
    return [r for r in cases(dp_attention=True)[0] if r.dp_attention]


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
                values = engine_values(row)
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
