"""The prefill instance with the fewest prompt tokens queued or prefilling."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from simroute.sim.prefill_routers.base import PREFILL_ROUTERS, PrefillRouter
from simroute.sim.request_spec import RequestSpec


@PREFILL_ROUTERS.register("least-tokens")
class LeastTokens(PrefillRouter):
    """Fewest prompt tokens queued or prefilling, ties rotating (the default).

    A work-conserving choice, as Dynamo's shared prefill queue that the first free worker pulls from."""

    def pick(self, request: RequestSpec, requester: Any, pool: Sequence[Any], queued: np.ndarray) -> int:
        least = np.flatnonzero(queued == queued.min())
        self.rotation += 1
        return int(least[self.rotation % len(least)])
