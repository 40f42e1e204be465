"""The fit of calib/engines/sglang-0.5.14.yaml `eager_launch_us_per_layer_mla_moe` (docs/VALIDATION.md "Serving").

SGLang 0.5.5-0.5.9 run a DeepSeek prefill batch eagerly (no piecewise CUDA graphs by default), so a ~1k prompt's
prefill takes no less than the eager launch of its 61 layers. No published figure of that launch was reachable,
so it is fitted here to the six ~1k-prompt median TTFTs of one run (InferenceX H200 SGLang 0.5.5, 2025-12-15)
and judged by `simroute validate --serving` on every other row. For each candidate (us per layer) this prints the
six points' simulated / measured TTFT and their median; the shipped value is where the median is 1 (to 10 us).

    python bench/fit_sglang_eager_prefill.py 1750 1770 1780
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simroute.calib.serving import load_serving_table  # noqa: E402
from simroute.scenarios import serving as sv  # noqa: E402
from simroute.sim.frameworks.base import Setting  # noqa: E402
from simroute.sim.frameworks.sglang import Sglang  # noqa: E402

FIT_ROWS = [f"ix-2025-12-15-h200-sglang-{w}-tp8ep1-c{c}" for w in ("1k1k", "1k8k") for c in (4, 16, 64)]


def ratios(us_per_layer: float) -> list[float]:
    rule = Sglang.rule

    def patched(self, key, preset, deployment, resolved):
        if key == "eager_launch_us_per_layer" and deployment.mla and deployment.moe:
            return Setting(us_per_layer, "candidate")
        return rule(self, key, preset, deployment, resolved)
    Sglang.rule = patched
    try:
        rows = {r.id: r for r in load_serving_table()}
        out = []
        for row_id in FIT_ROWS:
            with tempfile.TemporaryDirectory() as scratch:
                sim = sv.simulate_row(rows[row_id], Path(scratch))
            out.append(sim["ttft_median_ms"] / rows[row_id].metric("ttft_median_ms"))
        return out
    finally:
        Sglang.rule = rule


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["1770"]:
        found = ratios(float(arg))
        print(f"{arg} us/layer: median {statistics.median(found):.3f}  " + " ".join(f"{r:.2f}" for r in found))
