"""simroute's composed DeepSeek-V3.2 decode attention against the measured DSA module (docs/STEP_TIME.md, "Sparse
attention").

aiconfigurator-core 0.12.0 measured DeepSeek-V3.2's whole decode attention module on H200 under SGLang 0.5.14
(sparse_attention/sglang/0.5.14/dsa_generation_module_perf: the q / kv projections, the lightning indexer with its
top-k, the sparse MLA kernel, the output projection; 16 heads per rank at TP 8); `simroute calib import
aiconfigurator` ships the rows as the `dsa_decode` table. simroute composes the same block from its other tables
(the projections' GEMMs and absorbed BMMs, the dense MLA decode kernel at min(context, k) keys) and the indexer's
roofline with one fitted constant (`steptime.INDEXER_ROW_TOKENS_PER_S`, fitted at batch 1 from 2,048 to 131,072
tokens). This bench prints both per (batch, context) and their ratio; the step model's own elementwise kernels
(the latent norms, RoPE) are in its `elementwise` term, not in this sum.

Run: PYTHONPATH=. python3 bench/bench_dsa_module.py [--no-record]
"""

from __future__ import annotations

import pyarrow.parquet as pq

from _common import record

from simroute.calib import load_profile
from simroute.calib.profile import shipped_dir
from simroute.model.opstep import _fused
from simroute.model.steptime import BatchShape

SHAPES = ((1, 2048), (1, 16384), (1, 131072), (2, 131072), (4, 65536), (8, 2048), (8, 32768), (16, 16384),
          (32, 4096), (64, 4096), (128, 2048), (256, 1024))
ATTENTION_OPS = ("q_a+kv_a", "q_b", "o")


def main() -> None:
    profile = load_profile("paper-all")
    spec = profile.find_gpu_spec("h200-sxm")
    table = pq.read_table(shipped_dir() / "ops" / "h200-sxm" / "sglang-0.5.14" / "dsa_decode.parquet").to_pandas()
    table = table[(table.architecture == "DeepseekV32ForCausalLM") & (table.heads == 16)]
    figures: dict[str, float | int | str] = {}
    print(f"{'kv':5s} {'batch':>5s} {'context':>7s} {'measured us':>11s} {'composed':>9s} {'proj':>6s} {'attn':>6s} "
          f"{'indexer':>7s} {'ratio':>6s}")
    for kv, table_kv in (("bf16", "bf16"), ("fp8", "fp8")):
        step = profile.step_model("deepseek-v3.2", tp=8, intra_host_fabric="h100-nvlink4", gpu_spec=spec,
                                  cache_dtype=kv)
        measured_step = step._measured                                   # the composed terms' own curves
        ops = [op for op in _fused(step.geometry.linear_ops(8, "moe")) if op.name in ATTENTION_OPS]
        ratios = []
        for batch, context in SHAPES:
            rows = table[(table.kv_dtype == table_kv) & (table.batch == batch) & (table.context == context + 1)]
            if rows.empty:
                continue
            measured = float(rows.latency_us.mean())
            proj = (sum(measured_step._gemm_curve(op).seconds(batch) for op in ops)
                    + measured_step._bmm_curve().seconds(batch)) * 1e6
            terms = step.iteration(BatchShape.uniform(batch, context))
            attention, indexer = terms.attention_s_per_layer * 1e6, terms.indexer_s_per_layer * 1e6
            composed = proj + attention + indexer
            ratios.append(composed / measured)
            print(f"{kv:5s} {batch:5d} {context:7d} {measured:11.1f} {composed:9.1f} {proj:6.1f} {attention:6.1f} "
                  f"{indexer:7.1f} {composed / measured:6.2f}")
        figures[f"{kv}_ratio_min"], figures[f"{kv}_ratio_max"] = round(min(ratios), 3), round(max(ratios), 3)
    record("dsa_module", figures, target="composed / measured DeepSeek-V3.2 decode attention module (H200, SGLang "
                                         "0.5.14); bf16 within 0.75-1.0 (the elementwise kernels are elsewhere)")


if __name__ == "__main__":
    main()
