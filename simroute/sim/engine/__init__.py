"""Every instance is a GPU serving engine: iteration-level continuous batching (schedulers), one HBM
budget in KV blocks, holder partial attention as GPU work, routed exchanges on the critical path."""

from simroute.sim.engine.engine import EngineOptions, InstanceEngine, StepTime
from simroute.sim.engine.exchange import HolderPartials, RouteExchange
from simroute.sim.engine.hbm import BLOCK_TOKENS, HbmBudget, blocks_for
from simroute.sim.engine.log import IterationLog
from simroute.sim.engine.sequence import RouteShare, Sequence

__all__ = ["BLOCK_TOKENS", "EngineOptions", "HbmBudget", "HolderPartials", "InstanceEngine",
           "IterationLog", "RouteExchange", "RouteShare", "Sequence", "StepTime", "blocks_for"]
