"""Framework self-test probes (hidden): a hang, a missing library, a crash. They show what a user sees
when a real probe misbehaves, and the tests use them to prove the other probes still run."""

from __future__ import annotations

import time
from typing import Any


def hang(args: dict[str, Any]) -> dict:
    """A probe whose wait never completes (a lost signal without a deadline)."""
    while True:
        time.sleep(0.05)


def needs_missing(args: dict[str, Any]) -> dict:
    import simroute_no_such_library  # noqa: F401  (the dependency this probe lacks)
    return {}


def crash(args: dict[str, Any]) -> dict:
    raise RuntimeError("deliberate failure")


def tiny(args: dict[str, Any]) -> dict:
    return {"results": {"answer": 42}, "samples": [{"series": "tiny", "x": 1.0, "value": 2.0, "unit": "s"}]}
