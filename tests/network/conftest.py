"""Shared fixtures for the network tests."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOPO_DIR = ROOT / "topologies"


@pytest.fixture
def topo_dir() -> Path:
    return TOPO_DIR
