"""Planted behavioural bugs: do the tests catch each one?

Each bug is a one-line textual change to a copy of the repository (never to the checkout itself); a test
subset runs on the copy and the bug counts as caught when a test fails. The sets:
- `engine` (BUGS): behaviours on a request's path in simroute/sim/ (and the step model's causal pairs), run
  against the fast component subset of tests/sim (FAST_TESTS);
- `factors` (FACTOR_BUGS, issue 23): a wrong constant factor, rounding or threshold inside a number, in
  sim/, model/ and network/, each run against the tests of its own layer (LAYER_TESTS: tests/model for
  simroute/model, tests/network for simroute/network, FAST_TESTS for simroute/sim);
- `accounting` (ACCOUNTING_BUGS, issue 39): what a run reports and a study concludes (the summary's and the
  `serving` block's aggregation, the SLO comparison, the plan's answer), copies' KV accounting, ECMP / ARK path
  choice and the closed-loop arrivals, each against its layer's component subset (SUBSET_TESTS);
- `admission` (ADMISSION_BUGS, issue 39): SGLang's admission and new-token ratio, TensorRT-LLM's batch waiting, the
  framework's KV pool, the host costs of group steps and one-rank groups, the replay's per-row settings, against
  the files that pin them (ADMISSION_TESTS);
- `serving` (SERVING_BUGS, issue 39): SGLang's default memory fraction, the reserve outside the KV pool, TensorRT-LLM's
  attention-DP balancing, `validate --serving --dp-attention`'s rows and the scorecard's summaries, the clients'
  length draws (`client_seed`) and gaps, the engines' load board, against SERVING_TESTS.
- `network` (NETWORK_BUGS, issue 39): where a GPU sits on each topology kind and the paths built from it, ECMP's
  per-switch hash, ARK, the max-min solvers, message delays, telemetry, the run summary's network block and the
  studies' sweep aggregation and plan, against NETWORK_SET_SUBSETS.
`--planted` runs each bug against its layer's `test_planted_*.py` files alone (PLANTED_TESTS): a few seconds a
bug, and a bug they catch is caught by the layer's subset too (which holds them and passes unmutated).
Prints one line per bug and the total; exits 1 if any bug survives, 2 (before running any) if a bug's text
is not in its file exactly once, a test file is missing or a subset fails on the unmutated code.
Deterministic (no sampling); the engine set takes a few minutes on two cores, the factors set longer.

    python3 bench/planted_bugs.py [--set engine|factors|accounting|admission|serving|network|all] [--only NAME ...]
                                  [--tests tests/sim/... ...] [--planted]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAST_TESTS = ["tests/sim/test_servers.py", "tests/sim/test_cluster.py", "tests/sim/test_replica.py",
              "tests/sim/test_policies.py",
              "tests/sim/test_semantics.py", "tests/sim/test_config.py", "tests/sim/engine/test_instance_engine.py",
              "tests/sim/engine/test_engine_closed_form.py", "tests/sim/test_sparse_engine.py",
              "tests/sim/engine/test_engine_progress.py", "tests/sim/engine/test_scheduler.py",
              "tests/sim/test_serving_benchmark.py"]
# the exact-value tests first: they fail in seconds where a bug would make an engine test hang
FAST_TESTS = [name for name in ("tests/sim/test_exact_numbers.py",) if (ROOT / name).exists()] + FAST_TESTS
FAST_TESTS += sorted(str(path.relative_to(ROOT)) for path in ROOT.glob("tests/sim/**/test_planted_*.py"))
FAST_TESTS += [name for name in ("tests/sim/engine/test_hbm.py",) if (ROOT / name).exists()]

ENGINE, EXCHANGE, HBM = "simroute/sim/engine/engine.py", "simroute/sim/engine/exchange.py", "simroute/sim/engine/hbm.py"
SARATHI, VLLM = "simroute/sim/schedulers/sarathi.py", "simroute/sim/schedulers/vllm.py"
SELECTION = "simroute/sim/selection.py"

# name -> (file, exact text, replacement): each a behaviour on a request's path a reviewer would call a bug
BUGS = {
    # HBM budget (engine/hbm.py): eviction order, pins, placement's pinned chunks
    "lru-evicts-most-recent": (HBM, "for key, size in self.copies.items():",
                               "for key, size in reversed(self.copies.items()):"),
    "touch-does-not-refresh": (HBM, "def touch(self, key: Hashable) -> None:\n        if key in self.copies:",
                               "def touch(self, key: Hashable) -> None:\n        if False:"),
    "pins-ignored-on-eviction": (HBM, "if evictable(key):", "if True:"),
    "pinned-chunk-overcommits-hbm": (HBM, "if blocks > self.free_blocks:", "if False:"),
    # engine admission, preemption, iteration cost
    "running-cap-ignored": (ENGINE, "if len(self.running) >= self.options.max_running or", "if False or"),
    "preempts-earliest-admitted": (ENGINE, "self._preempt(max(self.running, key=lambda s: s.admit_order))",
                                   "self._preempt(min(self.running, key=lambda s: s.admit_order))"),
    "preempted-goes-to-the-back": (ENGINE, "self._held.append(seq)\n        self.waiting.appendleft(seq)",
                                   "self._held.append(seq)\n        self.waiting.append(seq)"),
    "recompute-forgets-generated": (ENGINE, "seq.recompute = seq.prompt + seq.generated if seq.generated else 0",
                                    "seq.recompute = seq.prompt if seq.generated else 0"),
    "prefill-pairs-drop-causal-triangle": ("simroute/model/steptime.py",
                                           "return tokens * earlier + tokens * (tokens + 1) / 2",
                                           "return tokens * earlier + tokens"),
    "decode-ignores-resident-chunks": (ENGINE, "ctx = seq.resident_tokens + seq.prompt + seq.generated",
                                       "ctx = seq.prompt + seq.generated"),
    "macro-event-past-a-completion": (ENGINE, "if left < least:\n                    least = left",
                                      "if left > least:\n                    least = left"),
    # progress under HBM pressure (issue 24): a sequence that can never fit, the growth room admission keeps,
    # a victim re-admitted in the plan that preempted it, an idle engine behind a head that does not fit
    "never-fits-judged-by-prompt": (ENGINE, "if blocks_for(seq.peak_tokens) >", "if blocks_for(seq.prompt) >"),
    "admission-forgets-growth": (ENGINE, "decoding * self._growth_blocks) if decoding else 0",
                                 "len(self.running)) if self.running else 0"),
    "victim-readmitted-at-once": (ENGINE, "or (self._held and seq in self._held):", ":"),
    "idle-engine-waits-behind-head": (ENGINE, "plan = self._plan_past_the_head()", "pass"),
    "overlap-hides-all-compute": (ENGINE, "dt = max(compute, compute / 2 + exch)", "dt = max(compute, exch)"),
    # schedulers
    "sarathi-decodes-outside-budget": (SARATHI, "budget = options.token_budget - len(decode)",
                                       "budget = options.token_budget"),
    "vllm-token-budget-ignored": (VLLM, "if prefilling and used + tokens > budget:", "if False:"),
    # routed exchanges (engine/exchange.py): per (request, holder, layer), holder waits
    "merge-time-dropped": (EXCHANGE, "rt = out + kernel + back + merge_s", "rt = out + kernel + back"),
    "exchange-once-not-per-layer": (EXCHANGE, "return ex * worst,", "return worst,"),
    "exchange-waits-for-first-holder": (EXCHANGE, "if rt + wait > worst:", "if not worst:"),
    "holder-queue-wait-ignored": (EXCHANGE, "wait = kernel_s * rho / (2 * (1 - rho)) if rho > 0 else 0.0",
                                  "wait = 0.0"),
    "holder-layer-wait-ignored": (EXCHANGE, "wait += holder_layer_s / 2", "wait += 0.0"),
    "query-message-ignores-tp": (EXCHANGE, "total_rows * q_bytes / tp,", "total_rows * q_bytes,"),
    "holder-partials-free-for-holder": (EXCHANGE, "charge = self._busy_charge if holder_busy else 0.0",
                                        "charge = 0.0"),
    # sparse selection (selection.py)
    "sparse-fanout-waits-for-one": (SELECTION, "self.routes = {h: max(share, 1.0) for h in self.remote}",
                                    "self.routes = {self.remote[0]: max(share, 1.0)}"),
    "sparse-gather-in-parallel": (SELECTION, "wait += max(per_holder_s, self.gather_bytes / share_Bps)",
                                  "wait = max(wait, per_holder_s, self.gather_bytes / share_Bps)"),
    "sparse-share-ignores-requester": (SELECTION,
                                       "share = topk / (len(self.remote) + (1 if here_tokens > 0 else 0))",
                                       "share = topk / len(self.remote)"),
    # replica choice, placement, fetch, policy
    "nearest-replica-ignored": ("simroute/sim/holder.py", "latency = list(map(row.__getitem__, holders))",
                                "latency = [0.0] * len(holders)"),
    "placement-capacity-ignored": ("simroute/sim/placements/base.py",
                                   "if used[inst] + size <= capacity_bytes and inst not in holders[ci]:",
                                   "if inst not in holders[ci]:"),
    "staging-joins-ignored": ("simroute/model/staging.py",
                              "host_s=copies * params.dispatch_s + used * params.join_s",
                              "host_s=copies * params.dispatch_s"),
    "staging-copy-engines-ignored": ("simroute/model/staging.py", "if len(running) >= params.copy_engines:",
                                     "if False:"),
    "tp-ignored-in-fetch": ("simroute/sim/cluster.py", "share = nbytes / self.config.instance_gpus",
                            "share = nbytes"),
    "splice-not-charged": ("simroute/sim/request.py", "self.env.timeout(self.splice_s(self.tokens))",
                           "self.env.timeout(0.0)"),
    "adaptive-ignores-holder-queue": ("simroute/sim/policies/adaptive.py",
                                      "route += live.holder_wait_s * (1 + s.steps) * exchanges", "route += 0.0"),
}


# Issue 23: wrong constant factors, rounding and thresholds, the kind of bug a test that checks a number only
# by order (`slow > fast > 0`) lets through. Each is caught by an exact-value or property test of its layer.
STEP, OPSTEP, COST = "simroute/model/steptime.py", "simroute/model/opstep.py", "simroute/model/cost.py"
FACTOR_BUGS = {
    # the step model's terms (model/steptime.py, model/opstep.py)
    "allreduce-ring-steps-halved": (STEP, "ring_steps = 2.0 * (tp_size - 1)", "ring_steps = 1.0 * (tp_size - 1)"),
    # the ring over the host fabric (allreduce_Bps), not the switched board's bus: the line below the bus branch
    "allreduce-bytes-not-split": (STEP, "ring_steps / tp_size * geometry.hidden * WEIGHT_BYTES\n"
                                        "                                    / allreduce_Bps)",
                                  "ring_steps * geometry.hidden * WEIGHT_BYTES\n"
                                  "                                    / allreduce_Bps)"),
    "attention-flops-halved": (STEP, "self._attn_flops_pair_layer = 2.0 * heads_per_gpu",
                               "self._attn_flops_pair_layer = 1.0 * heads_per_gpu"),
    "holder-partial-ignores-tp": (STEP, "* geometry.token_fraction / tp_size\n"
                                       "                                   / self._attn_rate)",
                                  "* geometry.token_fraction\n"
                                  "                                   / self._attn_rate)"),
    "fanout-moves-the-whole-copy": (STEP, "return latency + (self.tp - 1) / self.tp * copy_bytes / rate",
                                    "return latency + copy_bytes / rate"),
    "norm-reads-half": (STEP, "NORM_ACCESSES = 4 ", "NORM_ACCESSES = 2 "),
    "kv-capacity-off-by-a-token": (STEP, "return max(int(free // self.kv_bytes_per_token_per_gpu), 0)",
                                   "return max(int(free // self.kv_bytes_per_token_per_gpu) - 1, 0)"),
    "measured-allreduce-once-per-layer": (OPSTEP, "allreduce = (2.0 * curve.seconds(",
                                          "allreduce = (1.0 * curve.seconds("),
    "prefill-length-from-pairs-wrong": (OPSTEP, "isl = (math.sqrt(8.0 * per_seq + 1.0) - 1.0) / 2.0",
                                        "isl = (math.sqrt(4.0 * per_seq + 1.0) - 1.0) / 2.0"),
    # the closed form (model/cost.py)
    "route-wire-ignores-tp": (COST, "return StepParts(probe, wire if unit_tp else wire / tp,",
                              "return StepParts(probe, wire,"),
    "host-return-one-probe": (COST, "ret_extra = 2.0 * probe if", "ret_extra = 1.0 * probe if"),
    # metrics, HBM blocks, thresholds (sim/)
    "summary-p95-at-p90": ("simroute/sim/metrics.py", "np.percentile(x, [50, 95, 99])",
                           "np.percentile(x, [50, 90, 99])"),
    "itl-percentile-unweighted": ("simroute/sim/engine/log.py",
                                  "ends = np.cumsum(np.rint(np.asarray(weights)[order]).astype(np.int64))",
                                  "ends = np.arange(1, len(order) + 1)"),
    "kv-blocks-round-down": ("simroute/sim/engine/hbm.py", "return -(-n // BLOCK_TOKENS) if n > 0 else 0",
                             "return n // BLOCK_TOKENS + (n % BLOCK_TOKENS > BLOCK_TOKENS // 2) if n > 0 else 0"),
    "affinity-headroom-off-by-one": ("simroute/sim/routers/affinity.py",
                                     "return bool(load[inst] > load.min() + self.HEADROOM)",
                                     "return bool(load[inst] >= load.min() + self.HEADROOM)"),
    "adaptive-pull-ignores-tp": ("simroute/sim/policies/adaptive.py", "* g.layers / s.tp * (1 / min(bulk, share)",
                                 "* g.layers * (1 / min(bulk, share)"),
    "placement-stride-not-coprime": ("simroute/sim/placements/hashed.py",
                                     "step = stride if gcd(stride, n_instances) == 1 else 1", "step = stride"),
    # network/: hashing, messages, topology
    "mix64-last-shift": ("simroute/network/hashing.py", "return x ^ (x >> 31)", "return x ^ (x >> 30)"),
    "flow-key-port-overlaps": ("simroute/network/hashing.py", "((sport << 24) | (dport << 8) | proto)",
                               "((sport << 16) | (dport << 8) | proto)"),
    "nic-miss-holds-wire-as-unmissed": ("simroute/network/messages.py", "hold = nbytes / self._miss_factor",
                                        "hold = nbytes"),
    "bisection-counts-both-directions": ("simroute/network/topology.py",
                                         "spec.hosts * spec.nics_per_host * spec.nic_Bps / 2]",
                                         "spec.hosts * spec.nics_per_host * spec.nic_Bps]"),
}
# Issue 39: what a run reports and what a study concludes from it. The run summary's aggregation (summary.json's
# percentiles, attainment, goodput, the `serving` block of benchmark figures, inter-token statistics, overload,
# holders), the studies' SLO comparison (conditions, seeds, finished points, bisection, frontier, the plan's answer,
# the stored columns), copies' KV accounting (a copy that already exists, re-prefilled duplicates, evictions,
# pins), ECMP / ARK path choice (per-switch salts, the 5-tuple, reservations) and the closed-loop arrivals
# (`ConcurrencyLimit`). Each runs against its layer's subset (SUBSET_TESTS).
METRICS_PY, LOG_PY = "simroute/sim/metrics.py", "simroute/sim/engine/log.py"
SLO_PY = "simroute/sim/slo.py"
SEARCH, REPORT, PLAN, STORE = ("simroute/study/search.py", "simroute/study/report.py", "simroute/study/plan.py",
                               "simroute/study/store.py")
SERVING, REQUEST, ARRIVALS = "simroute/sim/engine/serving.py", "simroute/sim/request.py", "simroute/sim/arrivals.py"
SWITCHES, PATHS = "simroute/network/switches.py", "simroute/network/paths.py"
ROUTING, HASHING = "simroute/network/routing.py", "simroute/network/hashing.py"
# the SLO's per-request attainment, a run's verdict and a study point's (sim/slo.py since the one SLO module)
_ATTAIN = "attainment = slo_attainment(slo, latencies, rec.output_tokens[done])"
_GOODPUT = '"goodput_requests_per_s": float(attainment * done.sum() / sim_time_s)'
_EVERY = ('{key: np.where(np.isnan(value), 0.0, value) for key, value in {"ttft_ms": rec.ttft * 1e3, '
          '"tpot_ms": rec.tpot * 1e3, "e2e_ms": rec.e2e * 1e3}.items()}, rec.output_tokens')
_PER_REQUEST = "good = OPS[condition.op](values, condition.value)"
_ALL_MET = ("ok = np.ones(tokens.size, dtype=bool)\n    for metric, conditions in judged.items():\n"
            "        values = np.asarray(latencies_ms[metric], dtype=float)\n        for condition in conditions:\n"
            "            with np.errstate(invalid=\"ignore\"):\n                " + _PER_REQUEST + "\n"
            "            if metric == \"tpot_ms\":\n                good |= tokens <= 1\n            ok &= good")
_MET = "return served(row) and not self.violated(row)"
_MEETS = "return bool(rows) and all(judged.met(row) for row in rows)"
_SALT = "mix64(seed ^ self.topology.switch_id(switch))"
_ADD_EXISTING = ("        if key in self.copies:\n            self.copies.move_to_end(key)\n            return True\n")
_KV_TO_COPY = ("        self.kv_blocks -= blocks\n"
               "        if key in self.copies:          # already there (another request made it): the new blocks "
               "are freed\n            self.copies.move_to_end(key)\n            return\n")
ACCOUNTING_BUGS = {
    # the run summary (sim/metrics.py summarise, percentiles)
    "summary-mean-is-median": (METRICS_PY, '{"mean": float(x.mean() * scale),',
                               '{"mean": float(np.median(x) * scale),'),
    "summary-p99-from-p95": (METRICS_PY, '"p99": float(q[2])', '"p99": float(q[1])'),
    "summary-ttft-of-dropped": (METRICS_PY, '"ttft_ms": percentiles(ttft),', '"ttft_ms": percentiles(rec.ttft),'),
    "summary-tpot-of-one-token-outputs": (METRICS_PY, '"tpot_ms": percentiles(tpot[rec.output_tokens[done] > 1]),',
                                          '"tpot_ms": percentiles(tpot),'),
    "summary-e2e-of-dropped": (METRICS_PY, '"e2e_ms": percentiles(rec.e2e[done]),', '"e2e_ms": percentiles(rec.e2e),'),
    "summary-breakdown-over-every-request": (METRICS_PY, '_mean_ms(getattr(rec, f"ttft_{name}")[done])',
                                             '_mean_ms(getattr(rec, f"ttft_{name}"))'),
    "attainment-strict": (SLO_PY, _PER_REQUEST, _PER_REQUEST.replace("OPS[condition.op]",
                                                                      'OPS[condition.op.rstrip("=")]')),
    "attainment-either-target": (SLO_PY, _ALL_MET, _ALL_MET.replace("np.ones", "np.zeros").replace("&=", "|=")),
    "attainment-over-every-request": (METRICS_PY, _ATTAIN, "attainment = (lambda share: None if share is None else "
                                      "share * done.sum() / rec.n)(slo_attainment(slo, latencies, "
                                      "rec.output_tokens[done]))"),
    "goodput-either-target": (METRICS_PY, _GOODPUT, '"goodput_requests_per_s": float(np.sum(np.any([__import__('
                              '"simroute.sim.slo", fromlist=["OPS"]).OPS[c.op](latencies[m], c.value) | ((m == '
                              '"tpot_ms") & (rec.output_tokens[done] <= 1)) for m, cs in slo.per_request().items() '
                              'for c in cs], axis=0)) / sim_time_s)'),
    "slo-ttft-target-in-seconds": (SLO_PY, _PER_REQUEST, _PER_REQUEST.replace(
        "condition.value)", 'condition.value * (1e-3 if metric == "ttft_ms" else 1.0))')),
    "slo-tpot-against-ttft-target": (SLO_PY, _PER_REQUEST, _PER_REQUEST.replace(
        "condition.value)", 'judged["ttft_ms"][0].value if metric == "tpot_ms" and "ttft_ms" in judged '
        'else condition.value)')),
    "throughput-counts-dropped-tokens": (METRICS_PY, "float(rec.output_tokens[done].sum() / sim_time_s)",
                                         "float(rec.output_tokens.sum() / sim_time_s)"),
    "fetch-bytes-include-fanout": (METRICS_PY, '"fetch": float(rec.bytes_fetch.sum()),',
                                   '"fetch": float(rec.bytes_fetch.sum() + rec.bytes_fanout.sum()),'),
    "incomplete-pending-counts-dropped": (METRICS_PY, 'pending = requests - completed - int(summary["dropped"])',
                                          "pending = requests - completed"),
    # the `serving` block (sim/metrics.py serving_summary, the runner's GPU count)
    "serving-duration-from-first-completed-send": (METRICS_PY, "float(end.max() - rec.arrival[started].min())",
                                                   "float(end.max() - rec.arrival[done].min())"),
    "serving-duration-to-last-first-token": (METRICS_PY, "end = rec.arrival[done] + rec.e2e[done]",
                                             "end = rec.arrival[done] + rec.ttft[done]"),
    "serving-completed-counts-sent": (METRICS_PY, '"completed": int(done.sum())}', '"completed": int(started.sum())}'),
    "serving-request-rate-counts-sent": (METRICS_PY, '"requests_per_s": rate(float(done.sum()))',
                                         '"requests_per_s": rate(float(started.sum()))'),
    "serving-input-tokens-of-every-request": (METRICS_PY, "inputs, outputs = int(rec.input_tokens[done].sum()),",
                                              "inputs, outputs = int(rec.input_tokens.sum()),"),
    "serving-total-tokens-without-input": (METRICS_PY, '"total_tokens_per_s": rate(float(inputs + outputs))',
                                           '"total_tokens_per_s": rate(float(outputs))'),
    "serving-per-gpu-over-instances": ("simroute/sim/runner.py",
                                       "gpus=(len(instances) * cfg.instance_gpus if cluster.layout is None",
                                       "gpus=(len(instances) if cluster.layout is None"),
    "serving-std-with-ddof-1": (METRICS_PY, '"std": lambda: x.std()', '"std": lambda: x.std(ddof=1)'),
    "serving-median-is-mean": (METRICS_PY, '"median": lambda: np.median(x)', '"median": lambda: x.mean()'),
    "serving-p99-at-p95": (METRICS_PY, '"p99": lambda: np.percentile(x, 99)', '"p99": lambda: np.percentile(x, 95)'),
    "serving-ttft-of-dropped": (METRICS_PY, '"ttft_ms": _client_stats(rec.ttft[done]),',
                                '"ttft_ms": _client_stats(rec.ttft[started]),'),
    "serving-tpot-of-one-token-outputs": (METRICS_PY, "_client_stats(rec.tpot[done & (rec.output_tokens > 1)])",
                                          "_client_stats(rec.tpot[done])"),
    "serving-in-flight-from-ttft": (METRICS_PY, "float(rec.e2e[done].sum() / duration)",
                                    "float(rec.ttft[done].sum() / duration)"),
    # inter-token latency (sim/engine/log.py)
    "itl-mean-unweighted": (LOG_PY, "mean = float((gaps_s * tokens).sum() / total)", "mean = float(gaps_s.mean())"),
    "itl-std-unweighted": (LOG_PY, "float(np.sqrt((tokens * (gaps_s - mean) ** 2).sum() / total))",
                           "float(np.sqrt(((gaps_s - mean) ** 2).mean()))"),
    "weighted-percentile-off-by-one": (LOG_PY, "position = (q / 100.0) * (int(ends[-1]) - 1)",
                                       "position = (q / 100.0) * int(ends[-1])"),
    "itl-summary-p50-is-mean": (LOG_PY, '"p50": stats["median"]', '"p50": stats["mean"]'),
    "itl-max-is-p99": (LOG_PY, '"max": float(gaps_s.max()) * 1e3',
                       '"max": weighted_percentile(gaps_s, tokens, 99.0) * 1e3'),
    # overload and the holders' figures (sim/metrics.py)
    "overload-either-condition": (METRICS_PY, "growth >= OVERLOAD_GROWTH and late >= OVERLOAD_MIN_TTFT_S",
                                  "growth >= OVERLOAD_GROWTH or late >= OVERLOAD_MIN_TTFT_S"),
    "overload-ignores-arrival-order": (METRICS_PY, 'order = np.argsort(arrival_s, kind="stable")',
                                       "order = np.arange(len(arrival_s))"),
    "overload-early-is-first-quarter": (METRICS_PY, "np.median(ttft[quarter:2 * quarter])",
                                        "np.median(ttft[:quarter])"),
    "holder-fan-in-unweighted": (METRICS_PY,
                                 'float((cols["mean_fan_in"][answered] * cols["calls"][answered]).sum() / calls)',
                                 'float(cols["mean_fan_in"][answered].mean())'),
    "busiest-holder-by-calls": (METRICS_PY, 'i = int(np.argmax(cols["work_s"]))', 'i = int(np.argmax(cols["calls"]))'),
    # the SLO comparison (sim/slo.py, the one SLO module; the seeds and the search: study/search.py)
    "slo-le-is-lt": (SLO_PY, '"<=": operator.le', '"<=": operator.lt'),
    "slo-ge-is-gt": (SLO_PY, '">=": operator.ge', '">=": operator.gt'),
    "slo-missing-metric-meets": (SLO_PY, "math.isnan(measured)):\n            return False",
                                 "math.isnan(measured)):\n            return True"),
    "slo-p99-reads-p95": (SLO_PY, 'col = f"{metric}_{stat}" if stat else metric',
                          'col = f"{metric}_{\'p95\' if stat == \'p99\' else stat}" if stat else metric'),
    "slo-any-seed": (SEARCH, _MEETS, _MEETS.replace("all(", "any(")),
    "slo-any-condition": (SLO_PY, _MET, "return served(row) and len(self.violated(row)) < len(self.conditions)"),
    "slo-unfinished-can-meet": (SLO_PY, _MET, "return not self.violated(row)"),
    "finished-completion-strict": (SLO_PY, "completed >= MIN_COMPLETION * requests",
                                   "completed > MIN_COMPLETION * requests"),
    "finished-ignores-overload": (SLO_PY, ' and row.get("overloaded") != 1.0)', ")"),
    "bisection-min-keeps-the-wrong-half": (SEARCH, "self.answer = min(feasible) if self.goal == Goal.MIN else "
                                           "max(feasible)", "self.answer = max(feasible) if self.goal == Goal.MIN "
                                           "else min(feasible)"),
    # the report's aggregation over seeds and its frontier (study/report.py)
    "aggregate-meets-on-first-seed": (REPORT, 'point["meets"] = meets(records, tuple(slo))',
                                      'point["meets"] = meets(records[:1], tuple(slo))'),
    "aggregate-ci-t-of-seeds": (REPORT, "T95.get(seeds - 1, 1.96)", "T95.get(seeds, 1.96)"),
    "aggregate-ci-population-std": (REPORT, "float(group[col].std(ddof=1))", "float(group[col].std(ddof=0))"),
    "aggregate-completion-of-best-seed": (REPORT, '(group["completed"] / group["requests"]).min()',
                                          '(group["completed"] / group["requests"]).max()'),
    "aggregate-counts-failed-seeds": (REPORT, 'succeeded = frame[frame["status"] == "ok"].copy()',
                                      "succeeded = frame.copy()"),
    "frontier-picks-the-wrong-end": (REPORT, "pick = values.idxmin() if goal == Goal.MIN else values.idxmax()",
                                     "pick = values.idxmax() if goal == Goal.MIN else values.idxmin()"),
    "frontier-dotted-resource-axis-is-load": (REPORT, 'return Goal.MIN if axis.split(".")[-1] in RESOURCE_AXES',
                                              "return Goal.MIN if axis in RESOURCE_AXES"),
    # the plan's answer (study/plan.py) and the stored columns (study/store.py)
    "plan-band-from-largest-met": (PLAN, '"band": [min(any_met), hosts]', '"band": [max(any_met), hosts]'),
    "plan-met-counts-unfinished-seeds": (PLAN, "meet = [row for row in done if",
                                         "meet = [row for row in rows_at if"),
    "plan-binding-at-smallest-failing": (PLAN, "below = failing[-1] if failing else None",
                                         "below = failing[0] if failing else None"),
    "plan-binding-includes-the-answer": (PLAN, 'probe["hosts"] < hosts]', 'probe["hosts"] <= hosts]'),
    "plan-probe-means-over-unfinished": (PLAN, "_mean([row.get(cond.column) for row in done])",
                                         "_mean([row.get(cond.column) for row in rows_at])"),
    "store-itl-p50-not-the-median": (SLO_PY, 'itl.get("median" if stat == "p50" else stat)', "itl.get(stat)"),
    "store-per-gpu-is-the-total": (SLO_PY, 'row[f"{key}_per_gpu"] = per_gpu.get(key)',
                                   'row[f"{key}_per_gpu"] = rate.get(key)'),
    "store-peak-spine-is-the-least": (SLO_PY, 'row["peak_spine_flows"] = max(', 'row["peak_spine_flows"] = min('),
    # copies' KV accounting (engine/hbm.py, engine/serving.py, request.py)
    "existing-copy-re-reserved": (HBM, _ADD_EXISTING, _ADD_EXISTING.replace("if key in self.copies:", "if False:")),
    "existing-copy-not-refreshed": (HBM, _ADD_EXISTING,
                                    _ADD_EXISTING.replace("            self.copies.move_to_end(key)\n", "")),
    "reprefilled-duplicate-kept-as-kv": (HBM, _KV_TO_COPY,
                                         _KV_TO_COPY.replace("        self.kv_blocks -= blocks\n", "")
                                         + "        self.kv_blocks -= blocks\n"),
    "reprefilled-duplicate-counted-twice": (HBM, _KV_TO_COPY,
                                            _KV_TO_COPY.replace("if key in self.copies:", "if False:")),
    "reprefill-releases-all-its-kv": (SERVING, "eng.hbm.release_kv(left)", "eng.hbm.release_kv(seq.blocks)"),
    "room-made-when-it-cannot-suffice": (HBM, "        if freed < blocks:\n            return False",
                                         "        if freed < 0:\n            return False"),
    "evictions-counted-once-per-call": (HBM, "self.evictions += len(victims)", "self.evictions += 1"),
    "refused-copy-not-counted": (HBM, "            self.refused += 1\n            return False",
                                 "            return False"),
    "duplicate-arrival-adds-a-holder": (SERVING,
                                        "            if ci not in held_here:\n                held_here.add(ci)",
                                        "            if True:\n                held_here.add(ci)"),
    "eviction-keeps-the-holder": (SERVING, "                holders[ci].remove(eid)", "                pass"),
    "fits-counts-pinned-copies": (SERVING, "            if evictable(key):\n                room += blocks",
                                  "            if True:\n                room += blocks"),
    "fetch-reserve-ignores-own-kv": (SERVING, "self._blocks, blocks_for(keep_free_tokens)\n", "self._blocks, 0\n"),
    "copy-in-flight-fetched-again": (REQUEST, "if chunk in held_here or chunk in pending_here:",
                                     "if chunk in held_here:"),
    "unpin-drops-every-reader": (REQUEST, "                if left:\n                    pins[chunk] = left",
                                 "                if False:\n                    pins[chunk] = left"),
    "fetch-bytes-per-rank": (REQUEST, "ctx.recorder.bytes_fetch[self.spec.request_id] += nbytes\n",
                             "ctx.recorder.bytes_fetch[self.spec.request_id] += nbytes / ctx.config.tp\n"),
    # ECMP and ARK (network/switches.py, paths.py, routing.py, hashing.py)
    "ecmp-one-salt-for-every-switch": (SWITCHES, _SALT, "mix64(seed)"),
    "ecmp-salt-ignores-the-seed": (SWITCHES, _SALT, "mix64(self.topology.switch_id(switch))"),
    "fattree-core-hashed-at-the-leaf": (SWITCHES, "self.hash_at(self._agg_names[src_leaf // half][agg], flow_key",
                                        "self.hash_at(self._leaf_names[src_leaf], flow_key"),
    "flow-key-without-source-port": (HASHING, "((sport << 24) | (dport << 8) | proto)", "((dport << 8) | proto)"),
    "flow-key-without-destination": (HASHING, "mix64(mix64((src << 32) | dst)", "mix64(mix64(src << 32)"),
    "message-port-ignores-the-seed": (PATHS, "mix64(self.seed ^ (src_index << 20) ^ dst_index)",
                                      "mix64((src_index << 20) ^ dst_index)"),
    "ark-reservation-never-released": (PATHS, "            table[link] -= 1", "            pass"),
    "ark-mice-reserve-too": (ROUTING, "if nbytes < ark.elephant_bytes:", "if False:"),
    "ark-aims-at-the-busiest-path": (ROUTING, "best = min(scores)", "best = max(scores)"),
    "ark-keeps-the-drawn-port": (ROUTING, "                sport = port\n                break",
                                 "                break"),
    "ark-controller-free": (ROUTING, "self.reserve(src_index, dst_index, choice), ark.delay_s)",
                            "self.reserve(src_index, dst_index, choice), 0.0)"),
    # the closed loop (sim/arrivals.py)
    "limit-queue-is-lifo": (ARRIVALS, "self._launch(self.queue.popleft())", "self._launch(self.queue.pop())"),
    "limit-one-over": (ARRIVALS, "if self.free > 0:", "if self.free >= 0:"),
    "limit-slot-freed-and-handed-on": (ARRIVALS, "        else:\n            self.free += 1",
                                       "        if True:\n            self.free += 1"),
    "limit-peak-counts-the-queue": (ARRIVALS, "in_flight = self.limit - self.free",
                                    "in_flight = self.limit - self.free + len(self.queue)"),
    "child-of-dropped-parent-runs": (ARRIVALS, "if ctx.recorder.status[parent] == Status.DROPPED:", "if False:"),
    "think-time-ignored": (ARRIVALS, "            yield ctx.env.timeout(think_s)",
                           "            yield ctx.env.timeout(0.0)"),
    "offered-rate-counts-requests-not-gaps": (ARRIVALS, "own = (count - 1) / (last - first)",
                                              "own = count / (last - first)"),
    # second round (issue 39's list: a percentile over the wrong population, throughput per instance, unfinished
    # requests counted as meeting the SLO, ECMP without the switch or the ports, a re-fetch counted twice in HBM)
    "summary-nan-latency-counted-as-zero": (METRICS_PY, "    x = x[np.isfinite(x)]\n    if x.size == 0:",
                                            "    x = np.nan_to_num(x)\n    if x.size == 0:"),
    "serving-nan-latency-counted-as-zero": (METRICS_PY, "    x = x[np.isfinite(x)]\n    if not x.size:",
                                            "    x = np.nan_to_num(x)\n    if not x.size:"),
    "summary-tpot-of-dropped-multi-token": (METRICS_PY, "percentiles(tpot[rec.output_tokens[done] > 1])",
                                            "percentiles(rec.tpot[rec.output_tokens > 1])"),
    "summary-max-is-p99": (METRICS_PY, '"max": float(x.max() * scale)}', '"max": float(q[2])}'),
    "attainment-unfinished-count-as-met": (METRICS_PY, _ATTAIN, "attainment = slo_attainment(slo, " + _EVERY + ")"),
    "goodput-unfinished-count-as-met": (METRICS_PY, _GOODPUT, '"goodput_requests_per_s": float(slo_attainment(slo, '
                                        + _EVERY + ') * rec.n / sim_time_s)'),
    "attainment-nothing-completed-is-met": (SLO_PY, "    if not tokens.size or not judged:\n        return None",
                                            "    if not judged:\n        return None\n    if not tokens.size:\n"
                                            "        return 1.0"),
    "serving-per-gpu-per-tp-only": ("simroute/sim/runner.py",
                                    "gpus=(len(instances) * cfg.instance_gpus if cluster.layout is None",
                                    "gpus=(cfg.instance_gpus if cluster.layout is None"),
    "serving-e2e-of-dropped": (METRICS_PY, '"e2e_ms": _client_stats(rec.e2e[done])',
                               '"e2e_ms": _client_stats(rec.e2e[started])'),
    "slo-lt-is-le": (SLO_PY, '"<": operator.lt', '"<": operator.le'),
    "slo-gt-is-ge": (SLO_PY, '">": operator.gt', '">": operator.ge'),
    "slo-no-seeds-meets": (SEARCH, _MEETS, _MEETS.replace("bool(rows) and ", "")),
    "store-p99-is-the-p95": (SLO_PY, 'row[f"{metric}_{stat}"] = summary[metric].get(stat)',
                             'row[f"{metric}_{stat}"] = summary[metric].get("p95" if stat == "p99" else stat)'),
    "aggregate-finished-if-any-seed-finished": (REPORT, 'point["finished"] = all(finished(row) for row in records)',
                                                'point["finished"] = any(finished(row) for row in records)'),
    "aggregate-mean-is-the-first-seed": (REPORT, "point[col] = float(group[col].mean())",
                                         "point[col] = float(group[col].iloc[0])"),
    "frontier-compares-number-labels-as-text": (REPORT, "    if values.notna().all():", "    if False:"),
    "resident-copy-fetched-again": (REQUEST, "if chunk in held_here or chunk in pending_here:",
                                    "if chunk in pending_here:"),
    "resident-copy-needs-room-again": (HBM, _ADD_EXISTING,
                                       _ADD_EXISTING.replace("if key in self.copies:",
                                                             "if key in self.copies and self._make_room(keep_free):")),
    "evicted-copy-keeps-its-blocks": (HBM, "self.copy_blocks -= copies.pop(first)", "copies.pop(first)"),
    "reprefill-first-chunk-takes-every-block": (SERVING, "take = blocks if blocks < left else left", "take = left"),
    "reserver-ignores-own-kv": (SERVING, "return lambda ci: add_copy(ci, blocks[ci], keep_free)",
                                "return lambda ci: add_copy(ci, blocks[ci])"),
    "ecmp-hash-ignores-the-flow": (SWITCHES, "return mix64(flow_key ^ salt) % ports", "return mix64(salt) % ports"),
    "ecmp-salts-shared-across-seeds": (SWITCHES, "salt = self._salts.get((switch, seed))\n        if salt is None:\n"
                                       "            salt = self._salts[(switch, seed)] =",
                                       "salt = self._salts.get(switch)\n        if salt is None:\n"
                                       "            salt = self._salts[switch] ="),
    "leafspine-hashed-at-the-destination-leaf": (SWITCHES, "self.hash_at(self._leaf_names[src_leaf], flow_key, seed, "
                                                 "self.spec.spines)", "self.hash_at(self._leaf_names[dst_leaf], "
                                                 "flow_key, seed, self.spec.spines)"),
    "fattree-core-hashed-in-the-destination-pod": (SWITCHES, "self.hash_at(self._agg_names[src_leaf // half][agg]",
                                                   "self.hash_at(self._agg_names[dst_leaf // half][agg]"),
    "flow-key-without-destination-port": (HASHING, "((sport << 24) | (dport << 8) | proto)", "((sport << 24) | proto)"),
    "flow-key-without-source": (HASHING, "mix64(mix64((src << 32) | dst)", "mix64(mix64(dst)"),
}
# Issue 39's last additions (2026-12-07): SGLang's admission (PrefillAdder's ignore-EOS path: the new-token ratio's
# decay, its resets, the future tokens held back, the completion-order check), TensorRT-LLM's batch waiting, the
# framework's KV pool (--mem-fraction, the start-up free memory), the host costs a DP / EP group's step and a
# one-rank group (`OneRankStep`) charge, and the replay's per-row settings (EP, the framework-only columns). Each
# runs against ADMISSION_TESTS (the files that pin them, ~15 s on an idle box).
SGLANG_SCHED, FRAMEWORK_BASE = "simroute/sim/schedulers/sglang.py", "simroute/sim/frameworks/base.py"
STEPTIME, DPSTEP, GROUP = "simroute/model/steptime.py", "simroute/model/dpstep.py", "simroute/sim/engine/group.py"
REPLAY = "simroute/scenarios/serving.py"
ADMISSION_BUGS = {
    # the new-token ratio: decays k x decay per event of k decode iterations, floored, reset idle and on retraction
    "ratio-decay-one-iteration-short": (ENGINE, "self._ratio = max(self._ratio - k * decay, floor)",
                                        "self._ratio = max(self._ratio - (k - 1) * decay, floor)"),
    "ratio-decays-once-per-event": (ENGINE, "self._ratio = max(self._ratio - k * decay, floor)",
                                    "self._ratio = max(self._ratio - decay, floor)"),
    "ratio-floor-ignored": (ENGINE, "self._ratio = max(self._ratio - k * decay, floor)",
                            "self._ratio = max(self._ratio - k * decay, 0.0)"),
    "ratio-decay-over-60-iterations": (SGLANG_SCHED, "(0.7 - 0.7 * 0.14) / 600)", "(0.7 - 0.7 * 0.14) / 60)"),
    "ratio-not-reset-when-idle": (ENGINE, "self._ratio = self.scheduler.token_ratio[0]     # SGLang's "
                                  "self_check_during_idle", "pass"),
    "ratio-not-reset-on-retraction": (ENGINE, "if self.scheduler.completes_in_order and self.running:",
                                      "if False:"),
    "retraction-ratio-without-reserve-steps": (ENGINE, "+ 20 * len(self.running)", ""),
    # the future tokens held back and the completion-order check
    "held-ignores-the-ratio": (ENGINE, "held += left if other.generated == 0 else left * ratio", "held += left"),
    "prefilling-sequence-held-at-the-ratio": (ENGINE, "held += left if other.generated == 0 else left * ratio",
                                              "held += left * ratio"),
    "future-tokens-not-clipped": (ENGINE, "left = min(other.output - other.generated, clip)",
                                  "left = other.output - other.generated"),
    "completion-order-unsorted": (ENGINE, "states.sort(key=lambda state: state[0])", "pass"),
    "completion-order-no-token-to-spare": (ENGINE, "if free + freed - left * alive <= alive:",
                                           "if free + freed - left * alive < 0:"),
    "completion-order-frees-only-the-last": (ENGINE, "freed += kv_tokens", "freed = kv_tokens"),
    "completion-order-copies-not-free": (ENGINE, "free = (self.hbm.free_blocks + self.hbm.copy_blocks - need)",
                                         "free = (self.hbm.free_blocks - need)"),
    # TensorRT-LLM's batch waiting
    "batch-wait-timeout-strict": (ENGINE, "if self._batch_waited >= options.batch_wait_iters or",
                                  "if self._batch_waited > options.batch_wait_iters or"),
    "batch-wait-ratio-strict": (ENGINE, "or tokens >= options.batch_wait_ratio * options.token_budget:",
                                "or tokens > options.batch_wait_ratio * options.token_budget:"),
    "batch-wait-tokens-without-decodes": (ENGINE, "tokens = len(plan.decode)\n", "tokens = 0\n"),
    "batch-wait-not-restarted": (ENGINE, "self._batch_waited = 0      # the prompts run with decodes", "pass"),
    "batch-wait-counts-events": (ENGINE, "self._batch_waited += hold.k", "self._batch_waited += 1"),
    "batch-wait-past-the-timeout": (ENGINE, "plan.k = max(wait_left, 1)", "pass"),
    "batch-wait-in-dp-groups": (ENGINE, "if plan.prefill and plan.decode and self.group is None and",
                                "if plan.prefill and plan.decode and"),
    # the KV pool as the framework sizes it
    "pool-from-capacity-not-startup-free": (FRAMEWORK_BASE, "        return found\n",
                                            "        return Setting(deployment.hbm_gib, found.source)\n"),
    "sglang-pool-fraction-of-what-weights-leave": ("simroute/sim/frameworks/sglang.py",
                                                   "return max(fraction * free_bytes - weight_bytes, 0.0)",
                                                   "return max(fraction * (free_bytes - weight_bytes), 0.0)"),
    "trtllm-pool-fraction-of-startup-free": ("simroute/sim/frameworks/trtllm.py",
                                             "return max(fraction * (free_bytes - weight_bytes), 0.0)",
                                             "return max(fraction * free_bytes - weight_bytes, 0.0)"),
    "pool-past-what-weights-leave": (HBM, "min(hbm_bytes - weight_bytes, pool_bytes)", "pool_bytes"),
    "hbm-override-keeps-startup-figure": (FRAMEWORK_BASE, "if deployment.hbm_override:", "if False:"),
    # host costs: the TP step's formula over a group's ranks; a one-rank group's instance
    "lockstep-host-of-the-last-rank": (STEPTIME, "if sequences > most:\n                most = sequences",
                                       "if True:\n                most = sequences"),
    "lockstep-graphed-if-any-rank-is": (STEPTIME, "if graphed and not self.graphed(new_tokens <= decodes, sequences, "
                                        "new_tokens):\n                graphed = False",
                                        "if self.graphed(new_tokens <= decodes, sequences, new_tokens):\n"
                                        "                graphed = True\n            else:\n"
                                        "                graphed = False"),
    "group-step-without-host-costs": (DPSTEP, "total = host.step_s(kernels, self.geometry.layers, launched)",
                                      "total = kernels"),
    "one-rank-step-charges-overhead-twice": (GROUP, 'kernels = step.iteration_s - step.terms_s["overhead"] if host '
                                             'is not None else step.iteration_s', "kernels = step.iteration_s"),
    "one-rank-step-without-host-costs": (GROUP, "return kernels if host is None else host.step_s(kernels, "
                                         "self._layers, ((new_tokens, sequences, decodes),))", "return kernels"),
    "one-rank-step-terms-keyed-without-decodes": (GROUP, "key = (new_tokens, sequences, decodes)",
                                                  "key = (new_tokens, sequences, 0.0)"),
    # the replay's per-row settings
    "replay-drops-the-ep": (REPLAY, 'values["ep"] = row.ep', "pass"),
    "replay-drops-framework-only-settings": (REPLAY, "if value is not None and name in has:", "if False:"),
}
# The code of 2026-12-07's later sessions (issue 39 "Mutation: held-back planted bugs of this kind will be run again"):
# SGLang's default --mem-fraction-static (`default_mem_fraction`, the port of sglang 0.5.14's
# _handle_gpu_memory_settings), TensorRT-LLM's preset fraction 0.9, the reserve outside the KV pool
# (`outside_pool_gb_per_gpu`), TensorRT-LLM's attention-DP balancing (`GroupEngine._adp_hold`, the `--adp-*` settings),
# `validate --serving --dp-attention`'s row selection, its summaries and the scorecard's fitted / judged split and
# verdicts, `trace gen serving -p client_seed=S`, the engines' `LoadBoard` and the replica choice reading it, the
# serving clients' lengths and gaps. Each runs against SERVING_TESTS (~25 s on an idle box).
SGLANG_FW, SCORECARD = "simroute/sim/frameworks/sglang.py", "simroute/scenarios/serving.py"
VALIDATE_CMD, SERVING_GEN = "simroute/cli/validate_cmd.py", "simroute/workload/generators_serving.py"
# the per framework / GPU group's band count (the per-metric one above it reads the same)
_GROUP_BAND = ('"median_abs_err": statistics.median(abs(r - 1) for r in ratios),\n' + " " * 37
               + '"outside_band": sum(not (BAND[0] <= r <= BAND[1])')
SERVING_BUGS = {
    # SGLang's default memory fraction: (capacity - reserved) / capacity, rounded to 3 places
    "sglang-fraction-chunk-floor-dropped": (SGLANG_FW, "max(chunk, 2048) * 1.5)", "chunk * 1.5)"),
    "sglang-fraction-graph-slots-at-1-mib": (SGLANG_FW, "graph_max_bs * 2.0)", "graph_max_bs * 1.0)"),
    "sglang-fraction-tp-term-floored": (SGLANG_FW, "tp / 8 * 1024)", "tp // 8 * 1024)"),
    "sglang-fraction-dp-extra-from-300": (SGLANG_FW, "if graph_max_bs > 300:", "if graph_max_bs >= 300:"),
    "sglang-fraction-floor-on-small-gpus": (SGLANG_FW, "if gpu_mib > 60 * 1024 and reserved < 10 * 1024:",
                                            "if gpu_mib < 60 * 1024 and reserved < 10 * 1024:"),
    "sglang-fraction-rounded-to-2-places": (SGLANG_FW, "/ gpu_mib, 3), terms", "/ gpu_mib, 2), terms"),
    "sglang-fraction-prefill-graphs-under-dp": (SGLANG_FW, "    elif prefill_graph_tokens > 0:",
                                                "    if prefill_graph_tokens > 0:"),
    "sglang-fraction-of-the-gpu-entry-memory": (SGLANG_FW,
                                                'deployment)\n        if found.value:\n            return found',
                                                'deployment)\n        if False:\n            return found'),
    "sglang-fraction-of-hbm-gb-in-mb": (SGLANG_FW, 'return Setting(deployment.hbm_bytes / MIB, "the run',
                                        'return Setting(deployment.hbm_bytes / 1e6, "the run'),
    "sglang-fraction-without-dp-attention": ("simroute/sim/presets.py",
                                             "hbm_override=hbm_bytes is not None, dp_attention=cfg.dp_attention,",
                                             "hbm_override=hbm_bytes is not None,"),
    "trtllm-preset-fraction-ignored": (FRAMEWORK_BASE, 'if "mem_fraction" in preset.constants:', "if False:"),
    # the reserve outside the KV pool
    "outside-pool-counts-the-weights": (HBM, "max(hbm_bytes - weight_bytes - max(room, 0.0), 0.0)",
                                        "max(hbm_bytes - max(room, 0.0), 0.0)"),
    "outside-pool-in-gib": ("simroute/sim/engine/build.py", "es[0].hbm.outside_pool_bytes / 1e9",
                            "es[0].hbm.outside_pool_bytes / 2**30"),
    "plan-hbm-share-over-all-after-weights": ("simroute/study/plan.py",
                                              '- (memory.get("outside_pool_gb_per_gpu") or 0.0))', "- 0.0)"),
    # TensorRT-LLM's attention-DP balancing
    "adp-full-rank-has-a-free-slot": (GROUP, "free = free and gen < max_running", "free = free and gen <= max_running"),
    "adp-empty-rank-counts-no-dummy": (GROUP, "gen = 0 if (rank.running or rank.waiting or rank._inbox) else 1",
                                       "gen = 0"),
    "adp-timeout-one-late": (GROUP, "if self.adp_waited >= timeout or not all_gen:",
                             "if self.adp_waited > timeout or not all_gen:"),
    "adp-batching-wait-one-more": (GROUP, "if self.adp_batched < batching_wait:",
                                   "if self.adp_batched <= batching_wait:"),
    "adp-batching-counter-not-reset": (GROUP, "                self.adp_batched = 0\n            return False",
                                       "                pass\n            return False"),
    "adp-timeout-not-restarted-when-balanced": (GROUP, "if free and all_ctx:\n            self.adp_waited = 0",
                                                "if free and all_ctx:\n            pass"),
    "adp-prefilling-rank-counts-as-generating": (GROUP, "all_gen = all_gen and gen > 0",
                                                 "all_gen = all_gen and gen >= 0"),
    "adp-settings-swapped": ("simroute/sim/presets.py", 'int(self.settings["adp_timeout_iters"].value), '
                             'int(self.settings["adp_batching_wait_iters"].value))',
                             'int(self.settings["adp_batching_wait_iters"].value), '
                             'int(self.settings["adp_timeout_iters"].value))'),
    # validate --serving: the DP-attention rows, the scorecard's split, ratios and summaries
    "validate-dp-flag-admits-mtp-dp-rows": (SCORECARD, 'not (dp_attention and row.deployment == "dp-attention")',
                                            'not (dp_attention and row.deployment.endswith("dp-attention"))'),
    "validate-dp-rows-in-the-default-summary": (VALIDATE_CMD, "points = [p for p in every if p.id not in dp_ids]",
                                                "points = every"),
    "validate-dp-summary-of-the-default-set": (VALIDATE_CMD, '"summary": dp_counts}', '"summary": counts}'),
    "validate-strict-ignores-dp-rows": (VALIDATE_CMD, 'if (counts["failed"] or dp_counts["failed"]) and strict:',
                                        'if counts["failed"] and strict:'),
    "scorecard-ratio-inverted": (SCORECARD, "ratio = simulated / measured if measured > 0",
                                 "ratio = measured / simulated if measured > 0"),
    "scorecard-fitted-rows-judged": (SCORECARD, '", ".join(fitted_by_row.get(row.id, []))', '""'),
    "summary-holdout-counts-fitted-points": (SCORECARD, '("holdout", [p for p in judged if p.holdout])',
                                             '("holdout", [p for p in points if p.holdout])'),
    "summary-groups-count-fitted-points": (SCORECARD, "ratios = [p.ratio for p in judged if (p.framework, p.gpu",
                                           "ratios = [p.ratio for p in points if (p.framework, p.gpu"),
    "summary-median-error-is-the-mean": (SCORECARD, 'statistics.median(abs(r - 1) for r in ratios),\n'
                                         '                "min_ratio"', 'statistics.mean(abs(r - 1) for r in ratios),\n'
                                         '                "min_ratio"'),
    "summary-groups-band-ends-outside": (SCORECARD, _GROUP_BAND, _GROUP_BAND.replace("BAND[0] <= r <= BAND[1]",
                                                                                     "BAND[0] < r < BAND[1]")),
    # trace gen serving -p client_seed=S: the lengths SGLang's bench_serving draws
    "client-seed-output-high-exclusive": (SERVING_GEN, "p.output_tokens + 1, size=p.requests)",
                                          "p.output_tokens, size=p.requests)"),
    "client-seed-zero-token-output-kept": (SERVING_GEN, "np.maximum(output, 1).astype(np.int32)",
                                           "output.astype(np.int32)"),
    "client-seed-each-batch-from-the-start": (SERVING_GEN, "drawn[0][start:start + n], drawn[1][start:start + n]",
                                              "drawn[0][:n], drawn[1][:n]"),
    "replay-drops-the-client-seed": (SCORECARD, 'params["client_seed"] = row.client_seed', "pass"),
    # the serving clients' lengths and gaps
    "vllm-length-high-floored": (SERVING_GEN, "math.ceil(length * (1.0 + ratio))",
                                 "math.floor(length * (1.0 + ratio))"),
    "serving-gaps-ignore-burstiness": (SERVING_GEN, "rng.gamma(p.burstiness, 1.0 / (p.qps * p.burstiness), size=n)",
                                       "rng.gamma(p.burstiness, 1.0 / p.qps, size=n)"),
    "serving-first-request-after-a-gap": (SERVING_GEN, "np.concatenate(([0.0], np.cumsum(gaps[:-1])))",
                                          "np.cumsum(gaps)"),
    # the LoadBoard and the replica choice reading it
    "board-sequences-without-the-waiting": (ENGINE, "board.sequences[eid] = len(self.running) + len(self.waiting)",
                                            "board.sequences[eid] = len(self.running)"),
    "board-layer-wait-a-whole-layer": (ENGINE, "board.layer_wait_s[eid] = 0.0 + self.layer_s / 2 if",
                                       "board.layer_wait_s[eid] = 0.0 + self.layer_s if"),
    "board-not-published-after-a-submit": (ENGINE, "self._publish()     # its queue changed (or not)",
                                           "pass     # its queue changed (or not)"),
    "board-not-published-after-a-poke": (ENGINE, "            self._start()\n            self._publish()",
                                         "            self._start()"),
    "board-demand-never-flagged": (EXCHANGE, "asked[self.slot] = True", "asked[self.slot] = False"),
    "board-least-wait-is-the-most": ("simroute/sim/holder.py", "wait = min(waits)", "wait = max(waits)"),
    "board-loads-ignore-routed-demand": ("simroute/sim/holder.py",
                                         "if board is None or any(map(_DEMAND, map(board.partials.__getitem__, "
                                         "holders))):", "if board is None:"),
}
# Issue 39, held-back kinds again (2026-12-07): the network and topology layer and what the studies conclude from
# runs. Where a GPU sits on each topology kind (fat-tree, rail-optimised, NVLink domains larger than a host), the
# paths and cuts built from it, ECMP's per-switch hash and the message queue pair's port, ARK / least-loaded
# scores, the max-min solvers (progressive filling's residual capacity and flow counts, the array solver's ties,
# the object solver's completions and load), message delays (round-robin wait, slowest link, wire time, queue
# pairs and the NIC context cache), telemetry (link clocks, utilisation, window merging, the tier p99), the run
# summary's network block and the studies' sweep aggregation and plan. Each runs against NETWORK_SET_SUBSETS.
BASE_KIND, RAIL_KIND = "simroute/network/kinds/base.py", "simroute/network/kinds/rail_optimized.py"
NVL_KIND, TOPOLOGY = "simroute/network/kinds/nvlink_domain.py", "simroute/network/topology.py"
FILE_LIMITS = "simroute/network/file_limits.py"     # the NVLink domain's rail group default, read by both readers
MAXMIN, OBJECTS = "simroute/network/maxmin.py", "simroute/network/solvers/objects.py"
GROUPS, BULK = "simroute/network/solvers/groups.py", "simroute/network/bulk.py"
MESSAGES, TELEMETRY = "simroute/network/messages.py", "simroute/network/telemetry.py"
RUNNER = "simroute/sim/runner.py"
_SCORES = "(max(table[link] for link in links), sum(table[link] for link in links))"
NETWORK_BUGS = {
    # where a GPU sits, per kind (network/kinds/), and the paths and cuts built from it (network/topology.py)
    "fattree-partial-leaf-dropped": (BASE_KIND, "return -(-self.spec.hosts // self.spec.hosts_per_leaf)",
                                     "return self.spec.hosts // self.spec.hosts_per_leaf"),
    "oversubscription-inverted": (BASE_KIND, "down / (n_up * over)", "down * over / n_up"),
    "pcie-socket-by-modulo": (BASE_KIND,
                              "same_socket = (src % per_host) // per_socket == (dst % per_host) // per_socket",
                              "same_socket = (src % per_host) // per_socket == (dst % per_host) % per_socket"),
    "rail-leaf-ignores-the-group": (RAIL_KIND, "// self.spec.hosts_per_leaf * self.rails + self.rail_of(gpu)",
                                    "// self.spec.hosts_per_leaf + self.rail_of(gpu)"),
    "rail-leaf-down-counts-every-nic": (RAIL_KIND, "return self.spec.hosts_per_leaf * self.spec.nic_Bps",
                                        "return self.spec.hosts_per_leaf * self.spec.nics_per_host * "
                                        "self.spec.nic_Bps"),
    "nvl-domain-of-the-gpu-index": (NVL_KIND, "return self.host_of(gpu) // self.hosts_per_domain",
                                    "return gpu // self.hosts_per_domain"),
    "nvl-domains-rounded-down": (NVL_KIND, "return -(-self.spec.hosts // self.hosts_per_domain)",
                                 "return self.spec.hosts // self.hosts_per_domain"),
    "nvl-path-leaves-by-the-downlink": (NVL_KIND, "(ids[(gpus[src], switch)], ids[(switch, gpus[dst])])",
                                        "(ids[(switch, gpus[src])], ids[(switch, gpus[dst])])"),
    "nvl-fabric-by-host": (NVL_KIND, "same = self.topology.domain_index(src) == self.topology.domain_index(dst)",
                           "same = self.topology.host_of(src) == self.topology.host_of(dst)"),
    "nvl-rail-group-one-host": (FILE_LIMITS, '{**data, "hosts_per_leaf": data["hosts_per_domain"]}',
                                '{**data, "hosts_per_leaf": 1}'),
    "path-down-from-the-source": (TOPOLOGY, "return self._up[ia] + middle + self._down[ib], spine",
                                  "return self._up[ia] + middle + self._down[ia], spine"),
    "fattree-path-agg-and-core-swapped": (SWITCHES, "agg, core = divmod(choice, half)",
                                          "core, agg = divmod(choice, half)"),
    # ECMP's per-switch hash, the message queue pair's port, ARK and least-loaded scores
    "ecmp-salt-after-the-mix": (SWITCHES, "return mix64(flow_key ^ salt) % ports",
                                "return (mix64(flow_key) ^ salt) % ports"),
    # (replaces `message-port-ignores-the-destination`, equivalent: docs/MUTATION.md)
    "message-route-takes-the-first-path": (PATHS, "return self.path(src_index, dst_index, choice)[0]",
                                           "return self.path(src_index, dst_index, 0)[0]"),
    "ark-scores-sum-before-max": (PATHS, _SCORES, "(sum(table[link] for link in links), max(table[link] for link "
                                  "in links))"),
    "ark-port-search-one-try": (ROUTING, "for step in range(1, ark.port_search):", "for step in range(1, 2):"),
    "least-loaded-picks-the-busiest": (ROUTING, "choice = scores.index(min(scores))",
                                       "choice = scores.index(max(scores))"),
    # max-min fair rates: progressive filling (maxmin.fill), the array solver, the object solver
    "fill-own-share-not-given-back": (MAXMIN, "rem[l] = cap[l] - load[l] + own", "rem[l] = cap[l] - load[l]"),
    "fill-residual-per-group-not-per-flow": (MAXMIN, "moved = share * g.n", "moved = share"),
    "fill-count-per-group-not-per-flow": (MAXMIN, "cnt[l] -= g.n", "cnt[l] -= 1"),
    "arrays-tied-links-not-ready": (MAXMIN, "ready = lm >= s", "ready = lm > s"),
    "arrays-residual-per-group-not-per-flow": (MAXMIN, "np.subtract.at(rem, lfr, np.tile(mf * nf, K))",
                                               "np.subtract.at(rem, lfr, np.tile(mf, K))"),
    "objects-finish-ignores-work-done": (OBJECTS,
                                         "heapq.heappush(heap, (now + (group.flows[0][0] - group.work) / fresh,",
                                         "heapq.heappush(heap, (now + group.flows[0][0] / fresh,"),
    "objects-load-moves-one-flow": (OBJECTS, "delta = (fresh - group.rate) * group.n", "delta = fresh - group.rate"),
    "objects-completion-without-latency": (OBJECTS, "complete(flow, now + flow.latency)", "complete(flow, now)"),
    "join-finish-from-zero-work": (GROUPS, "flow.finish_work = group.work + flow.nbytes",
                                   "flow.finish_work = flow.nbytes"),
    "link-share-ignores-the-new-flow": (BULK, "cap / (flows + 1))", "cap / flows)"),
    # message delays and routes (network/messages.py)
    "message-wait-fifo-not-round-robin": (MESSAGES, "waited += left if left < mine else mine", "waited += left"),
    "message-waits-summed-over-links": (MESSAGES,
                                        "                if waited > wait:\n                    wait = waited",
                                        "                wait += waited"),
    "message-wire-at-link-capacity": (MESSAGES, "wire.append((link, occupancy / share))",
                                      "wire.append((link, occupancy / bulk.cap[link]))"),
    "message-queue-pair-per-direction": (MESSAGES, "pair = (src, dst) if src <= dst else (dst, src)",
                                         "pair = (src, dst)"),
    "context-cache-misses-when-just-full": (MESSAGES, "if len(pairs) > slots and times[0] >= horizon:",
                                            "if len(pairs) >= slots and times[0] >= horizon:"),
    # telemetry (network/telemetry.py)
    "telemetry-link-clock-not-advanced": (TELEMETRY, "                        self.series.append((link, float(start), "
                                          "now, float(load / self._cap_list[link])))\n"
                                          "                link_t[link] = now",
                                          "                        self.series.append((link, float(start), now, "
                                          "float(load / self._cap_list[link])))"),
    "mean-utilisation-without-messages": (TELEMETRY, '"mean_utilisation": (self.link_bytes + messages) / '
                                          '(self._cap * span),', '"mean_utilisation": self.link_bytes / '
                                          '(self._cap * span),'),
    "tier-p99-at-p95": (TELEMETRY, '"p99_utilisation": float(np.percentile(tier_util, 99)),',
                        '"p99_utilisation": float(np.percentile(tier_util, 95)),'),
    "window-merge-drops-the-first": (TELEMETRY, "[a if b is None else b if a is None else a + b for a, b in pairs]",
                                     "[a if b is None else b for a, b in pairs]"),
    # the run summary's network block (sim/runner.py)
    "summary-fct-p95-at-p90": (RUNNER, '"p95": float(np.percentile(a, 95) * 1e3)}',
                               '"p95": float(np.percentile(a, 90) * 1e3)}'),
    "summary-spine-peak-is-the-last": (RUNNER, "peaks[spine] = max(peaks.get(spine, 0), c)", "peaks[spine] = c"),
    "summary-message-bytes-of-one-rank": (RUNNER, "+ float(messages[k]) * tp for k in bulk}",
                                          "+ float(messages[k]) for k in bulk}"),
    # the studies: the sweep's aggregation over seeds, its order, the plan and the search
    "aggregate-ci-over-root-n-minus-one": (REPORT, "/ np.sqrt(seeds)", "/ np.sqrt(seeds - 1)"),
    "aggregate-overload-needs-every-seed": (REPORT, 'float(group["overloaded"].fillna(0).max())',
                                            'float(group["overloaded"].fillna(0).min())'),
    "aggregate-drops-the-sweep-axis": (REPORT, 'for name in series + ([axis] if axis else []) if',
                                       "for name in series if"),
    "aggregate-orders-numbers-as-text": (REPORT, 'num if num.notna().all() else agg[axis].astype(str)',
                                         "agg[axis].astype(str)"),
    "plan-frontier-keeps-ties": (PLAN, 'if not out or point["output_tokens_per_s_per_gpu"] > out[-1]',
                                 'if not out or point["output_tokens_per_s_per_gpu"] >= out[-1]'),
    "plan-mean-counts-missing-as-zero": (PLAN, "return sum(clean) / len(clean) if clean else None",
                                         "return sum(clean) / len(values) if clean else None"),
    "search-bound-at-the-good-end": (SEARCH, "bad_end = self.value(self.lo) if self.goal == Goal.MIN else "
                                     "self.value(self.hi)", "bad_end = self.value(self.hi) if self.goal == Goal.MIN "
                                     "else self.value(self.lo)"),
}
SERVING_TESTS = ["tests/sim/test_frameworks.py", "tests/calib/test_engine_presets.py", "tests/sim/test_adp_balance.py",
                 "tests/sim/engine/test_hbm.py", "tests/test_default_run.py", "tests/sim/test_kv_cache_dtype.py",
                 "tests/study/test_plan.py", "tests/sim/test_dp_attention.py",
                 "tests/scenarios/test_validate_serving.py",
                 "tests/calib/test_serving_table.py", "tests/workload/test_serving_generator.py",
                 "tests/sim/test_load_board.py", "tests/sim/test_replica.py", "tests/sim/test_holder_load.py",
                 "tests/sim/test_planted_serving.py", "tests/study/test_planted_resources.py",
                 "tests/scenarios/test_planted_scorecard.py", "tests/workload/test_planted_serving_clients.py",
                 "tests/sim/engine/test_planted_board.py"]
STUDY_TESTS = ["tests/study/test_search.py", "tests/study/test_plan.py", "tests/study/test_spec.py",
               "tests/study/test_concurrency_axis.py", "tests/study/test_modes.py", "tests/study/test_report.py"]
STUDY_TESTS += sorted(str(path.relative_to(ROOT)) for path in ROOT.glob("tests/study/test_planted_*.py"))
NETWORK_TESTS = ["tests/network/test_exact_values.py", "tests/network/test_routing.py",
                 "tests/network/test_topology.py", "tests/network/test_api.py", "tests/network/test_engine.py"]
NETWORK_TESTS += sorted(str(path.relative_to(ROOT)) for path in ROOT.glob("tests/network/test_planted_*.py"))
# the accounting set's subsets, by the planted file's layer (the network's and the study's: their component files,
# without the large-topology, solver-replay and worker-pool tests, which take most of those directories' time)
# the one SLO module (sim/slo.py) serves runs and studies alike: its bugs run against both layers' tests
SUBSET_TESTS = {SLO_PY: FAST_TESTS + STUDY_TESTS, "simroute/sim/": FAST_TESTS, "simroute/study/": STUDY_TESTS,
                "simroute/network/": NETWORK_TESTS}
ADMISSION_TESTS = ["tests/sim/engine/test_engine_progress.py", "tests/sim/engine/test_engine_presets_engine.py",
                   "tests/sim/engine/test_hbm.py", "tests/sim/test_frameworks.py",
                   "tests/model/test_group_host_costs.py", "tests/sim/test_dp_attention.py",
                   "tests/scenarios/test_validate_serving.py", "tests/calib/test_engine_presets.py",
                   "tests/sim/engine/test_planted_admission.py", "tests/model/test_group_iteration.py"]
# the network set's subsets: the network's component files (without the large-topology, CLI, cascade and replay
# files, which run whole scenarios: about a minute in all on an idle box), the study's, and for the run summary's
# network block the sim files that run small scenarios end to end
NETWORK_SET_TESTS = NETWORK_TESTS + [name for name in (
    "tests/network/test_kinds.py", "tests/network/test_maxmin.py", "tests/network/test_messages.py",
    "tests/network/test_telemetry.py", "tests/network/test_solvers.py", "tests/network/test_message_charge.py",
    "tests/network/test_rank_shortcut.py", "tests/network/test_online.py") if name not in NETWORK_TESTS]
RUN_NETWORK_TESTS = ["tests/sim/test_run_invariants.py", "tests/sim/test_rank_flows.py", "tests/sim/test_load_axes.py"]
RUN_NETWORK_TESTS += sorted(str(path.relative_to(ROOT)) for path in ROOT.glob("tests/sim/**/test_planted_*.py"))
NETWORK_SET_SUBSETS = {RUNNER: RUN_NETWORK_TESTS, "simroute/study/": STUDY_TESTS,
                       "simroute/network/": NETWORK_SET_TESTS}
SETS = {"engine": BUGS, "factors": FACTOR_BUGS, "accounting": ACCOUNTING_BUGS, "admission": ADMISSION_BUGS,
        "serving": SERVING_BUGS, "network": NETWORK_BUGS}
ALL_BUGS = {**BUGS, **FACTOR_BUGS, **ACCOUNTING_BUGS, **ADMISSION_BUGS, **SERVING_BUGS, **NETWORK_BUGS}
LAYER_TESTS = {"simroute/model/": ["tests/model"], "simroute/network/": ["tests/network"],
               "simroute/sim/": FAST_TESTS}
# each layer's planted-bug pins alone (--planted): the fast screen
PLANTED_TESTS = {prefix: sorted(str(path.relative_to(ROOT))
                                for path in ROOT.glob(f"tests/{layer}/**/test_planted_*.py"))
                 for prefix, layer in (("simroute/sim/", "sim"), ("simroute/study/", "study"),
                                       ("simroute/network/", "network"), ("simroute/model/", "model"))}
PLANTED_TESTS = {SLO_PY: PLANTED_TESTS["simroute/sim/"] + PLANTED_TESTS["simroute/study/"], **PLANTED_TESTS}


def tests_for(name: str, override: list[str] | None, planted: bool = False) -> list[str]:
    """The subset a bug runs against: `--tests` if given; the engine set's FAST_TESTS; a factor bug's layer."""
    if override:
        return override
    if planted:
        path = ALL_BUGS[name][0]
        pins = next((tests for prefix, tests in PLANTED_TESTS.items() if path.startswith(prefix)), [])
        if pins:
            return pins
    if name in BUGS:
        return FAST_TESTS
    if name in ADMISSION_BUGS:
        return ADMISSION_TESTS
    if name in SERVING_BUGS:
        return SERVING_TESTS
    if name in NETWORK_BUGS:
        path = NETWORK_BUGS[name][0]
        return next(tests for prefix, tests in NETWORK_SET_SUBSETS.items() if path.startswith(prefix))
    if name in ACCOUNTING_BUGS:
        path = ACCOUNTING_BUGS[name][0]
        return next(tests for prefix, tests in SUBSET_TESTS.items() if path.startswith(prefix))
    path = FACTOR_BUGS[name][0]
    return next(tests for prefix, tests in LAYER_TESTS.items() if path.startswith(prefix))


def stale(bugs: list[str], root: Path = ROOT) -> list[str]:
    """The bugs whose text is not in their file exactly once (the code moved): each one named, with why."""
    problems = []
    for name in bugs:
        rel, old, new = ALL_BUGS[name]
        path = root / rel
        count = path.read_text().count(old) if path.is_file() else -1
        if count != 1 or old == new:
            why = "no such file" if count < 0 else "replacement equals the text" if old == new else \
                f"the text occurs {count} times, not once"
            problems.append(f"{name}: {rel}: {why}")
    return problems


TIMEOUT_S = 600      # a subset still running after this is stopped: the bug made it hang (counted as caught)


def _pytest(copy: Path, tests: list[str], timeout_s: float | None = None) -> int:
    """pytest's exit status on the copy; -1 if it ran past `timeout_s` (stopped)."""
    try:
        return subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                              cwd=copy, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        return -1


def run(bugs: list[str], override: list[str] | None = None, planted: bool = False) -> int:
    """0 if every bug is caught, 1 if one survives, 2 if the run cannot mean anything: a bug's text is gone (a
    stale bug would otherwise count as caught or silently drop out), a test file is missing, or a subset
    already fails on the unmutated code (every bug would look caught)."""
    subsets = {name: tests_for(name, override, planted) for name in bugs}
    needed = sorted({t for tests in subsets.values() for t in tests})
    problems = stale(bugs) + [f"{t}: no such test file" for t in needed if not (ROOT / t).exists()]
    if problems:
        print("planted_bugs: cannot run:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    survived = 0
    with tempfile.TemporaryDirectory(prefix="simroute-planted-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", "results", "__pycache__", ".mutmut-cache"))
        for tests in {tuple(t) for t in subsets.values()}:
            if _pytest(copy, list(tests)) != 0:
                print(f"planted_bugs: {' '.join(tests)} fails on the unmutated code; fix it first", file=sys.stderr)
                return 2
        for name in bugs:
            rel, old, new = ALL_BUGS[name]
            path = copy / rel
            original = path.read_text()
            path.write_text(original.replace(old, new))
            try:
                status = _pytest(copy, subsets[name], TIMEOUT_S)
            finally:
                path.write_text(original)
            caught = status != 0
            survived += not caught
            label = "the fast sim subset" if subsets[name] == FAST_TESTS else \
                "the admission subset" if subsets[name] == ADMISSION_TESTS else \
                "the serving subset" if subsets[name] == SERVING_TESTS else " ".join(subsets[name])
            verdict = "caught (hung: stopped)" if status == -1 else "caught" if caught else "SURVIVED"
            print(f"{name:36s} {verdict}  ({label})", flush=True)
    print(f"{len(bugs) - survived} of {len(bugs)} planted bugs caught")
    return 1 if survived else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=[*SETS, "all"], default="engine", help="which planted set (default: engine)")
    ap.add_argument("--only", nargs="*", choices=list(ALL_BUGS), help="bug names (default: the whole set)")
    ap.add_argument("--tests", nargs="*", help="one test subset for every bug (default: per set and layer)")
    ap.add_argument("--planted", action="store_true",
                    help="each bug against its layer's test_planted_*.py files alone (the fast screen), e.g. "
                         "--set accounting --planted")
    a = ap.parse_args()
    chosen = ALL_BUGS if a.set == "all" else SETS[a.set]
    return run(a.only or list(chosen), a.tests, a.planted)


if __name__ == "__main__":
    raise SystemExit(main())
