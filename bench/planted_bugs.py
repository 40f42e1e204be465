"""Planted behavioural bugs in simroute/sim/: does the fast component test subset catch each one?

Each bug is a one-line textual change to a copy of the repository (never to the checkout itself); the
subset runs on the copy and the bug counts as caught when a test fails. Prints one line per bug and the
total; exits 1 if any bug survives. Deterministic (no sampling), a few minutes on two cores.

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
              "tests/sim/test_policies.py", "tests/sim/test_semantics.py", "tests/sim/test_config.py"]

# name -> (file, exact text, replacement): each a behaviour a reviewer would call a bug
BUGS = {
    "lru-evicts-most-recent": ("simroute/sim/cluster.py", "for old, old_size in inst.copies.items():",
                               "for old, old_size in reversed(inst.copies.items()):"),
    "touch-does-not-refresh": ("simroute/sim/cluster.py", "            inst.copies.move_to_end(chunk)",
                               "            pass"),
    "pins-ignored-on-eviction": ("simroute/sim/cluster.py", "if (old, inst.id) not in self.pins:", "if True:"),
    "nearest-replica-ignored": ("simroute/sim/holder.py", "(ctx.path_latency_s(here, instances[h]), self._load(h),",
                                "(0.0, self._load(h),"),
    "staging-elbow-ignored": ("simroute/sim/holder.py", "return r / (1 - self.gain * (c - 1) / (e - 1))",
                              "return r"),
    "staging-oversubscription-ignored": ("simroute/sim/holder.py",
                                         "return r / (1 - self.gain) * max(1 - self.loss * (c - e) / e, 0.05)",
                                         "return r / (1 - self.gain)"),
    "holder-premium-summed": ("simroute/sim/holder.py", "* max(query.premium for query in rest)",
                              "* sum(query.premium for query in rest)"),
    "holder-window-ignored": ("simroute/sim/holder.py", "deadline = self.env.now + self.window * weight",
                              "deadline = self.env.now"),
    "tp-ignored-in-fetch": ("simroute/sim/request.py", "nbytes / ctx.config.tp,", "nbytes,"),
    "decode-base-time-dropped": ("simroute/sim/request.py", "self.step_base_s = ctx.config.decode_base_ms * 1e-3",
                                 "self.step_base_s = 0.0"),
    "merge-time-dropped": ("simroute/sim/request.py", "yield ctx.env.timeout(ctx.params.merge_s * exchanges)",
                           "yield ctx.env.timeout(0.0)"),
    "splice-not-charged": ("simroute/sim/request.py", "for item in items if not item.cached)",
                           "for item in items if False)"),
    "dispatcher-never-coalesces": ("simroute/sim/dispatcher.py", "window = self.open.get(key)", "window = None"),
    "partial-return-leg-free": ("simroute/sim/dispatcher.py", "service.env.timeout(back_s)",
                                "service.env.timeout(0.0)"),
    "placement-capacity-ignored": ("simroute/sim/placement.py",
                                   "if used[inst] + size <= capacity_bytes and inst not in holders[ci]:",
                                   "if inst not in holders[ci]:"),
    "adaptive-ignores-holder-queue": ("simroute/sim/policies/adaptive.py",
                                      "route += live.holder_wait_s * (1 + s.steps) * exchanges", "route += 0.0"),
    "sparse-fanout-waits-for-one": ("simroute/sim/selection.py", "yield ctx.env.all_of(waits)",
                                    "yield waits[0]"),
}


def run(bugs: list[str], tests: list[str]) -> int:
    survived = 0
    with tempfile.TemporaryDirectory(prefix="simroute-planted-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", "results", "__pycache__", ".mutmut-cache"))
        for name in bugs:
            rel, old, new = BUGS[name]
            path = copy / rel
            original = path.read_text()
            if original.count(old) != 1:
                print(f"{name:36s} NOT APPLIED ({rel} does not hold the text exactly once)")
                survived += 1
                continue
            path.write_text(original.replace(old, new))
            try:
                rc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                                    cwd=copy, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
            finally:
                path.write_text(original)
            caught = rc != 0
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
