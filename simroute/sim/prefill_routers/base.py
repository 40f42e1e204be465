"""Which prefill-pool instance prefills a request (disaggregated serving, `simroute/sim/pools.py`).

SGLang's router in PD mode picks a (prefill, decode) worker pair per request, each pool with its own policy
(`--prefill-policy` / `--decode-policy`: cache_aware, power_of_two, round_robin, random); Dynamo's prefill
workers pull remote-prefill requests from one shared queue, so the next request goes to whichever frees first.
A router here sees the request, its decode instance (already picked by the run's router) and the prompt tokens
each prefill instance has queued or is prefilling.

To add one: a module in `simroute/sim/prefill_routers/` with a `PrefillRouter` subclass decorated by
`@PREFILL_ROUTERS.register("name")`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from simroute.sim.registry import Registry, registry
from simroute.sim.request_spec import RequestSpec

if TYPE_CHECKING:
    from simroute.sim.config import RunConfig


class PrefillRouter(ABC):
    """Picks the prefill-pool instance of a request. Deterministic (randomness only from `from_run`'s rng)."""

    name: ClassVar[str]

    def __init__(self) -> None:
        self.rotation = 0

    @classmethod
    def from_run(cls, config: RunConfig, rng: np.random.Generator) -> PrefillRouter:
        return cls()

    @abstractmethod
    def pick(self, request: RequestSpec, requester: Any, pool: Sequence[Any], queued: np.ndarray) -> int:
        """The index in `pool` of the instance that prefills `request` (`queued[i]`: prompt tokens instance i
        has queued or is prefilling; `requester`: the request's decode instance)."""


PREFILL_ROUTERS: Registry[type[PrefillRouter]] = registry("prefill-router")
