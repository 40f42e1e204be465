"""Tiny studies (a few 40-request corpus runs each) so the whole study suite stays well under a minute."""

from __future__ import annotations

from pathlib import Path

import pytest

from studyutil import GRID


@pytest.fixture
def grid_file(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.yaml"
    p.write_text(GRID)
    return p

