"""Planted behavioural bugs: do the tests catch each one?

Each bug is a one-line textual change to a copy of the repository (never to the checkout itself); a test
subset runs on the copy and the bug counts as caught when a test fails. Two sets:
- `engine` (BUGS): behaviours on a request's path in simroute/sim/ (and the step model's causal pairs), run
  against the fast component subset of tests/sim (FAST_TESTS);
- `factors` (FACTOR_BUGS, issue 23): a wrong constant factor, rounding or threshold inside a number, in
  sim/, model/ and network/, each run against the tests of its own layer (LAYER_TESTS: tests/model for
  simroute/model, tests/network for simroute/network, FAST_TESTS for simroute/sim).
Prints one line per bug and the total; exits 1 if any bug survives, 2 (before running any) if a bug's text
is not in its file exactly once, a test file is missing or a subset fails on the unmutated code.
Deterministic (no sampling); the engine set takes a few minutes on two cores, the factors set longer.

    python3 bench/planted_bugs.py [--set engine|factors|all] [--only NAME ...] [--tests tests/sim/... ...]
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
              "tests/sim/engine/test_engine_progress.py", "tests/sim/engine/test_scheduler.py"]
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
    "tp-ignored-in-fetch": ("simroute/sim/cluster.py", "share = nbytes / self.config.tp", "share = nbytes"),
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
SETS = {"engine": BUGS, "factors": FACTOR_BUGS}
ALL_BUGS = {**BUGS, **FACTOR_BUGS}
LAYER_TESTS = {"simroute/model/": ["tests/model"], "simroute/network/": ["tests/network"],
               "simroute/sim/": FAST_TESTS}


def tests_for(name: str, override: list[str] | None) -> list[str]:
    """The subset a bug runs against: `--tests` if given; the engine set's FAST_TESTS; a factor bug's layer."""
    if override:
        return override
    if name in BUGS:
        return FAST_TESTS
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


def run(bugs: list[str], override: list[str] | None = None) -> int:
    """0 if every bug is caught, 1 if one survives, 2 if the run cannot mean anything: a bug's text is gone (a
    stale bug would otherwise count as caught or silently drop out), a test file is missing, or a subset
    already fails on the unmutated code (every bug would look caught)."""
    subsets = {name: tests_for(name, override) for name in bugs}
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
            label = "the fast sim subset" if subsets[name] == FAST_TESTS else " ".join(subsets[name])
            verdict = "caught (hung: stopped)" if status == -1 else "caught" if caught else "SURVIVED"
            print(f"{name:36s} {verdict}  ({label})", flush=True)
    print(f"{len(bugs) - survived} of {len(bugs)} planted bugs caught")
    return 1 if survived else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=[*SETS, "all"], default="engine", help="which planted set (default: engine)")
    ap.add_argument("--only", nargs="*", choices=list(ALL_BUGS), help="bug names (default: the whole set)")
    ap.add_argument("--tests", nargs="*", help="one test subset for every bug (default: per set and layer)")
    a = ap.parse_args()
    chosen = ALL_BUGS if a.set == "all" else SETS[a.set]
    return run(a.only or list(chosen), a.tests)


if __name__ == "__main__":
    raise SystemExit(main())
