"""The built-in prefill routers (which prefill-pool instance prefills a request under `--disagg`): every module
of this package is imported (`discover`) and registers its class in `PREFILL_ROUTERS`; a new one is one new
module here."""

from simroute.sim.prefill_routers.base import PREFILL_ROUTERS, PrefillRouter
from simroute.sim.registry import discover

discover(__name__, __path__)

__all__ = ["PREFILL_ROUTERS", "PrefillRouter"]
