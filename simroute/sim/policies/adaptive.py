"""The paper's predicate plus live state: the holder's queue, the path's current share, the requester's HBM."""

from __future__ import annotations

from simroute.sim.policies.base import POLICIES, DecisionContext, HorizonCosts, Policy
from simroute.sim.vocab import Primitive


@POLICIES.register("adaptive")
class AdaptivePolicy(Policy):
    """Predicate plus live state (holder queue, path share, free HBM).

    - Every routed exchange of the horizon waits behind the holder's current queue.
    - A path whose bottleneck share is below the single-block rate slows route's messages, and below the
      link peak slows fetch's pull (a sparse gather pulls its top-k entries every step).
    - A copy that cannot stay resident must be re-made every step (fetch of a dense chunk, and local).
    """

    needs_live_state = True

    def choose(self, ctx: DecisionContext) -> Primitive:
        return self.adjusted(ctx).cheapest()

    @staticmethod
    def adjusted(ctx: DecisionContext) -> HorizonCosts:
        route, fetch, local = ctx.horizon()
        live, s, p = ctx.live, ctx.shape, ctx.params
        if live is None:
            return HorizonCosts(route, fetch, local)
        exchanges = p.exchanges
        route += live.holder_wait_s * (1 + s.steps) * exchanges
        share = live.path_share_Bps
        if share is not None and share > 0:
            fabric, g = p.fabrics[s.fabric], p.geometry
            single, bulk = fabric.single_block_Bps, fabric.bulk_Bps
            query_rows = s.mq_first + s.steps * s.mq_step
            route += exchanges * query_rows * g.qp_bytes / s.tp * (1 / min(single, share) - 1 / single)
            pulled_tokens = s.topk * (1 + s.steps) if s.topk > 0 else s.tokens
            fetch += pulled_tokens * g.token_fraction * g.b_kv * g.layers / s.tp * (1 / min(bulk, share) - 1 / bulk)
        if not live.hbm_free:
            if s.topk == 0:
                fetch *= 1 + s.steps
            local *= 1 + s.steps
        return HorizonCosts(route, fetch, local)
