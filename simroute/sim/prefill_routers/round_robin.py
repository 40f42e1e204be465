"""Prefill instances in turn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from simroute.sim.prefill_routers.base import PREFILL_ROUTERS, PrefillRouter
from simroute.sim.request_spec import RequestSpec


@PREFILL_ROUTERS.register("round-robin")
class RoundRobin(PrefillRouter):
    """Prefill instances in turn, blind to their queues (SGLang router's round_robin policy)."""

    def pick(self, request: RequestSpec, requester: Any, pool: Sequence[Any], queued: np.ndarray) -> int:
        self.rotation = (self.rotation + 1) % len(pool)
        return self.rotation
