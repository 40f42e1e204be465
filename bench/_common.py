"""Shared helpers for the benchmark scenarios: timing, peak memory, and appending to RESULTS.md.

Benchmarks print figures and append one row per run to bench/RESULTS.md (date, commit, figures);
they never assert, since performance is measured here, not tested.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import platform
import resource
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)bench/RESULTS.md"], capture_output=True, text=True,
                               cwd=Path(__file__).parent.parent).stdout.strip()   # our own appends do not count
        return out + ("+dirty" if dirty else "")
    except Exception:
        return "unknown"


def record(benchmark: str, figures: dict[str, float | int | str], *, target: str = "") -> None:
    """Print the figures and append a row to RESULTS.md (file-locked: benches may run concurrently)."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    parts = []
    for k, v in figures.items():
        parts.append(f"{k}={v:,.4g}" if isinstance(v, float) else f"{k}={v:,}" if isinstance(v, int) else f"{k}={v}")
    line = f"| {now} | {git_commit()} | {benchmark} | {'; '.join(parts)} | {target} |"
    print(f"[{benchmark}] " + "; ".join(parts) + (f"   (target: {target})" if target else ""))
    if "--no-record" in sys.argv:
        return
    with RESULTS.open("a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        if not f.read().strip():
            f.write("# Benchmark results\n\nAppended by `bench/*.py` (machine: "
                    f"{platform.machine()}, {platform.python_version()}). One row per run.\n\n"
                    "| date (UTC) | commit | benchmark | figures | target |\n|---|---|---|---|---|\n")
        f.write(line + "\n")
        fcntl.flock(f, fcntl.LOCK_UN)
