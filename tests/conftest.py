"""Shared fixtures: the repository root, the real public traces beside it, CLI invocation."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACES = ROOT.parent / "shared" / "traces"


@pytest.fixture
def shared_traces() -> Path:
    if not SHARED_TRACES.exists():
        pytest.skip(f"real traces not found at {SHARED_TRACES} (the project expects ../shared/traces)")
    return SHARED_TRACES


@pytest.fixture
def cli(capsys):
    """Run the simroute CLI in-process; returns (exit code, stdout, stderr)."""
    from simroute.cli.main import main

    def run(*args: str) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
