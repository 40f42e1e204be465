"""The trtllm preset's context (prefill) step on the TensorRT-LLM H200 rows' launches, term by term, against what
the rows measure (docs/VALIDATION.md, "TensorRT-LLM on H200: the ~1k and ~8k TTFT, read against the sources").

Part 1 builds the run's step model exactly as a replay of the row does (`scenarios.serving.engine_values`, the
run's calibration: the preset's tables, `HostCosts` and the group step of TP 8 + EP 8) and times one context step
of the workload's median prompt (the benchmark draws lengths uniformly in [0.8 L, L]: 922 tokens for ~1k, 7373 for
~8k) with no decode beside it: its kernels by term, the eager launch floor (layers x the preset's eager launch of
an MLA + MoE layer) and the step the preset charges (max of the two: overlap). Part 2 replays every TensorRT-LLM
H200 row of the default scorecard (`validate --serving`) and prints measured and simulated median TTFT, mean TPOT
and output tok/s per GPU. With `--what-if`, part 2 also replays each row with every eager step charged launch
+ kernels (the launch not hidden behind the step's kernels): a reading of what the rows say, not the model (no
TensorRT-LLM source shows a host synchronisation inside a context step, docs/VALIDATION.md). Nothing is fitted.

With `--eager-scan US[,US...]` it replays instead every TensorRT-LLM ~1k row of the default scorecard (H200 and
B200) with the preset's eager launch of an MLA + MoE layer set to each value (the rule patched in this process, as
bench/fit_sglang_eager_prefill.py does SGLang's) and prints the TTFT ratios by GPU and version.

    python bench/trtllm_h200_context_step.py [--what-if]
    python bench/trtllm_h200_context_step.py --eager-scan 1500,1770,2500
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MEDIAN_PROMPT = 0.9      # the median of uniform[0.8 L, L] over L (InferenceX's random-range-ratio 0.8)
TERMS = ("experts", "collective", "attention_gemms", "attention", "mlp_gemms", "elementwise", "lm_head")


def trtllm_h200_rows() -> list:
    """The TensorRT-LLM H200 rows of the default scorecard, in table order."""
    from simroute.scenarios.serving import cases
    return [row for row in cases()[0] if row.framework == "trtllm" and row.gpu == "h200-sxm"]


def context_step(row, prompt: int) -> dict[str, float]:
    """One context step of `prompt` tokens (nothing else batched) under the row's replay settings, in ms: each
    kernel term, the kernels, the eager launch floor and the step the preset charges."""
    from simroute.calib import default_profile_path
    from simroute.model.steptime import BatchShape
    from simroute.network import default_topology_path, load_topology
    from simroute.scenarios.serving import engine_values
    from simroute.sim import RunConfig
    from simroute.sim.calibration import resolve_calibration
    cfg = RunConfig(topology=str(default_topology_path()), trace="unused.parquet", calib=str(default_profile_path()),
                    hosts=1, seed=0, **engine_values(row))
    calibration = resolve_calibration(cfg, load_topology(cfg.topology, hosts=cfg.hosts).spec)
    group = calibration.group           # TP 8 + EP 8: the group step (dpstep.DeploymentStep) with the preset's host
    result = group.iteration(BatchShape.uniform(0, 0, prefill_tokens=prompt))
    terms = result.as_ms()["terms_ms"]
    out = {name: terms.get(name, 0.0) for name in TERMS}
    out["step"] = result.iteration_s * 1e3
    out["kernels"] = out["step"] - terms["overhead"]
    out["launch_floor"] = group.geometry.layers * calibration.engine.host.launch_s_per_layer * 1e3
    return out


def replay_row(row, directory: Path) -> dict[str, float]:
    from simroute.scenarios.serving import simulate_row
    return simulate_row(row, directory)


class _Serial:
    """The what-if: an eager step takes host + launch + kernels (nothing of the launch hidden), graphed steps as
    the model charges them. Patched into `HostCosts.period_s` inside this process only."""

    def __enter__(self):
        from simroute.model.steptime import HostCosts
        self.original = HostCosts.period_s

        def serial(costs, kernels_s, sequences, layers, graphed):
            if graphed:
                return self.original(costs, kernels_s, sequences, layers, graphed)
            return costs.host_s_per_sequence * sequences + costs.launch_s_per_layer * layers + kernels_s
        HostCosts.period_s = serial
        return self

    def __exit__(self, *exc):
        from simroute.model.steptime import HostCosts
        HostCosts.period_s = self.original
        return False


METRICS = (("ttft", "ttft_median_ms"), ("tpot", "tpot_mean_ms"), ("tok/s/GPU", "output_throughput_per_gpu_tok_s"))


def eager_scan(values: list[float]) -> None:
    """TTFT ratio ranges of the TensorRT-LLM ~1k rows (both GPUs) with the eager launch of an MLA + MoE layer at each
    value (us)."""
    from simroute.scenarios.serving import cases, simulate_row
    from simroute.sim.frameworks.base import Setting
    from simroute.sim.frameworks.trtllm import Trtllm
    rows = [row for row in cases()[0] if row.framework == "trtllm" and row.isl == 1024]
    rule = Trtllm.rule
    for us in values:
        def patched(self, key, preset, deployment, resolved, us=us):
            if key == "eager_launch_us_per_layer" and deployment.mla and deployment.moe:
                return Setting(us, "candidate")
            return rule(self, key, preset, deployment, resolved)
        Trtllm.rule = patched
        groups: dict[tuple[str, str], list[float]] = {}
        try:
            with tempfile.TemporaryDirectory() as scratch:
                for row in rows:
                    ratio = simulate_row(row, Path(scratch))["ttft_median_ms"] / row.metric("ttft_median_ms")
                    groups.setdefault((row.gpu, row.framework_version), []).append(ratio)
        finally:
            Trtllm.rule = rule
        print(f"{us:g} us per layer: " + "; ".join(f"{gpu} {version} ({len(r)}) {min(r):.2f}-{max(r):.2f}"
                                                   for (gpu, version), r in sorted(groups.items())))


def main() -> None:
    if "--eager-scan" in sys.argv[1:]:
        eager_scan([float(v) for v in sys.argv[sys.argv.index("--eager-scan") + 1].split(",")])
        return
    what_if = "--what-if" in sys.argv[1:]
    rows = trtllm_h200_rows()
    print("part 1: one context step of the median prompt, trtllm preset, the rows' launch (H200, TP 8, EP 8, FP8 KV)")
    print(f"{'launch':>34} {'prompt':>6} " + " ".join(f"{t[:10]:>10}" for t in TERMS)
          + f" {'kernels':>8} {'floor':>7} {'step':>7}  (ms)")
    seen = set()
    for row in rows:
        prompt = round(MEDIAN_PROMPT * row.isl)
        key = (row.framework_version, row.max_num_tokens, prompt)
        if key in seen:
            continue
        seen.add(key)
        terms = context_step(row, prompt)
        label = f"{row.framework_version} max_num_tokens {row.max_num_tokens}"
        print(f"{label:>34} {prompt:>6} " + " ".join(f"{terms[t]:>10.1f}" for t in TERMS)
              + f" {terms['kernels']:>8.1f} {terms['launch_floor']:>7.1f} {terms['step']:>7.1f}")
    print()
    print("part 2: every TensorRT-LLM H200 row of the default scorecard (measured / simulated = ratio)"
          + ("; what-if: eager steps charged launch + kernels" if what_if else ""))
    groups: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for row in rows:
            sim = replay_row(row, Path(scratch))
            alt = None
            if what_if:
                with _Serial():
                    alt = replay_row(row, Path(scratch))
            cells = []
            for name, key in METRICS:
                measured = row.metric(key)
                if measured is None:
                    cells.append(f"{name} -")
                    continue
                ratio = sim[key] / measured
                groups.setdefault(name, {}).setdefault("model", []).append(abs(ratio - 1))
                cell = f"{name} {measured:.1f}/{sim[key]:.1f}={ratio:.2f}"
                if alt is not None:
                    alt_ratio = alt[key] / measured
                    groups[name].setdefault("what-if", []).append(abs(alt_ratio - 1))
                    cell += f" (what-if {alt_ratio:.2f})"
                cells.append(cell)
            print(f"{row.id[3:]:<40} {row.framework_version:<15} " + "  ".join(cells))
    print()
    for name, runs in groups.items():
        print(f"median |ratio - 1| {name}: " + ", ".join(f"{run} {100 * statistics.median(v):.1f}% (n {len(v)})"
                                                      for run, v in runs.items()))


if __name__ == "__main__":
    main()
