"""Fixtures of the engine tests (fakes in fakes.py)."""

from __future__ import annotations

import pytest
import simpy

from fakes import FakeStep
from simroute.sim.engine import EngineOptions, HbmBudget, InstanceEngine, IterationLog


@pytest.fixture
def make_engine():
    """make_engine(env, eid=0, hbm_tokens=..., exchange=None, **options) -> InstanceEngine."""
    def make(env: simpy.Environment, eid: int = 0, hbm_tokens: int = 1 << 20, exchange=None, log=None,
             **options) -> InstanceEngine:
        opts = EngineOptions(**{"check_hbm": True, **options})
        hbm = HbmBudget(hbm_bytes=1e9 + hbm_tokens * 100.0, weight_bytes=1e9, kv_bytes_per_token=100.0)
        return InstanceEngine(env, eid, f"g{eid}", FakeStep(), hbm, opts, layers=FakeStep.layers, heads=16,
                              exchange=exchange, log=log or IterationLog())
    return make
