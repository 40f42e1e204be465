"""Planted behavioural bugs in simroute/sim/: does the fast component test subset catch each one?

Each bug is a one-line textual change to a copy of the repository (never to the checkout itself); the
subset runs on the copy and the bug counts as caught when a test fails. Prints one line per bug and the
total; exits 1 if any bug survives, 2 (before running any) if a bug's text is not in its file exactly
once, a test file is missing or the subset fails on the unmutated code. Deterministic (no sampling), a few
minutes on two cores.

    python3 bench/planted_bugs.py [--only NAME ...] [--tests tests/sim/test_servers.py ...]
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
              "tests/sim/engine/test_engine_closed_form.py", "tests/sim/test_sparse_engine.py"]
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
    "pins-ignored-on-eviction": (HBM, "if self.evictable(key):", "if True:"),
    "pinned-chunk-overcommits-hbm": (HBM, "if blocks > self.free_blocks:", "if False:"),
    # engine admission, preemption, iteration cost
    "running-cap-ignored": (ENGINE, "if len(self.running) >= self.options.max_running:", "if False:"),
    "preempts-earliest-admitted": (ENGINE, "self._preempt(max(self.running, key=lambda s: s.admit_order))",
                                   "self._preempt(min(self.running, key=lambda s: s.admit_order))"),
    "preempted-goes-to-the-back": (ENGINE, "self.waiting.appendleft(seq)", "self.waiting.append(seq)"),
    "recompute-forgets-generated": (ENGINE, "seq.recompute = seq.prompt + seq.generated if seq.generated else 0",
                                    "seq.recompute = seq.prompt if seq.generated else 0"),
    "prefill-pairs-drop-causal-triangle": ("simroute/model/steptime.py",
                                           "return tokens * earlier + tokens * (tokens + 1) / 2",
                                           "return tokens * earlier + tokens"),
    "decode-ignores-resident-chunks": (ENGINE, "ctx = seq.resident_tokens + seq.prompt + seq.generated",
                                       "ctx = seq.prompt + seq.generated"),
    "macro-event-past-a-completion": (ENGINE, "min(s.remaining_decode for s in decode)",
                                      "max(s.remaining_decode for s in decode)"),
    "overlap-hides-all-compute": (ENGINE, "dt = max(compute, compute / 2 + exch)", "dt = max(compute, exch)"),
    # schedulers
    "sarathi-decodes-outside-budget": (SARATHI, "budget = opts.token_budget - len(decode)",
                                       "budget = opts.token_budget"),
    "vllm-token-budget-ignored": (VLLM, "if prefill and used + tokens > budget:", "if False:"),
    # routed exchanges (engine/exchange.py): per (request, holder, layer), holder waits
    "merge-time-dropped": (EXCHANGE, "rt = out + kernel + back + self.merge_s", "rt = out + kernel + back"),
    "exchange-once-not-per-layer": (EXCHANGE, "return ex * worst,", "return worst,"),
    "exchange-waits-for-first-holder": (EXCHANGE, "if rt + wait > worst:", "if not worst:"),
    "holder-queue-wait-ignored": (EXCHANGE, "wait = kernel_s * rho / (2 * (1 - rho)) if rho > 0 else 0.0",
                                  "wait = 0.0"),
    "holder-layer-wait-ignored": (EXCHANGE, "wait += holder_layer_s / 2", "wait += 0.0"),
    "query-message-ignores-tp": (EXCHANGE, "* self.q_bytes / tp,", "* self.q_bytes,"),
    "holder-partials-free-for-holder": (EXCHANGE, "else self.interference) if holder_busy else 0.0",
                                        "else self.interference) if False else 0.0"),
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
    "staging-elbow-ignored": ("simroute/sim/staging.py", "return r / (1 - self.gain * (c - 1) / (e - 1))",
                              "return r"),
    "staging-oversubscription-ignored": ("simroute/sim/staging.py",
                                         "return r / (1 - self.gain) * max(1 - self.loss * (c - e) / e, 0.05)",
                                         "return r / (1 - self.gain)"),
    "tp-ignored-in-fetch": ("simroute/sim/request.py", "nbytes / ctx.config.tp,", "nbytes,"),
    "splice-not-charged": ("simroute/sim/request.py", "self.env.timeout(self.splice_s(self.tokens))",
                           "self.env.timeout(0.0)"),
    "adaptive-ignores-holder-queue": ("simroute/sim/policies/adaptive.py",
                                      "route += live.holder_wait_s * (1 + s.steps) * exchanges", "route += 0.0"),
}


def stale(bugs: list[str], root: Path = ROOT) -> list[str]:
    """The bugs whose text is not in their file exactly once (the code moved): each one named, with why."""
    problems = []
    for name in bugs:
        rel, old, new = BUGS[name]
        path = root / rel
        count = path.read_text().count(old) if path.is_file() else -1
        if count != 1 or old == new:
            why = "no such file" if count < 0 else "replacement equals the text" if old == new else \
                f"the text occurs {count} times, not once"
            problems.append(f"{name}: {rel}: {why}")
    return problems


def _pytest(copy: Path, tests: list[str]) -> int:
    return subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                          cwd=copy, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode


def run(bugs: list[str], tests: list[str]) -> int:
    """0 if every bug is caught, 1 if one survives, 2 if the run cannot mean anything: a bug's text is gone (a
    stale bug would otherwise count as caught or silently drop out), a test file is missing, or the subset
    already fails on the unmutated code (every bug would look caught)."""
    problems = stale(bugs) + [f"{t}: no such test file" for t in tests if not (ROOT / t).is_file()]
    if problems:
        print("planted_bugs: cannot run:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    survived = 0
    with tempfile.TemporaryDirectory(prefix="simroute-planted-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", "results", "__pycache__", ".mutmut-cache"))
        if _pytest(copy, tests) != 0:
            print("planted_bugs: the test subset fails on the unmutated code; fix it first", file=sys.stderr)
            return 2
        for name in bugs:
            rel, old, new = BUGS[name]
            path = copy / rel
            original = path.read_text()
            path.write_text(original.replace(old, new))
            try:
                caught = _pytest(copy, tests) != 0
            finally:
                path.write_text(original)
            survived += not caught
            print(f"{name:36s} {'caught' if caught else 'SURVIVED'}", flush=True)
    print(f"{len(bugs) - survived} of {len(bugs)} planted bugs caught by {' '.join(tests)}")
    return 1 if survived else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=list(BUGS), help="bug names (default: all)")
    ap.add_argument("--tests", nargs="*", default=FAST_TESTS)
    a = ap.parse_args()
    return run(a.only or list(BUGS), a.tests)


if __name__ == "__main__":
    raise SystemExit(main())
