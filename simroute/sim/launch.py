"""Starting a request: the router picks its requester, the trace's hint its prefill instance, and its kind
(a dense request or a sparse selection) runs as a SimPy process. Its own module, above both kinds, so the
request flow (request.py) and the selection (selection.py, a kind of dense request) do not import each other.
"""

from __future__ import annotations

from simroute.sim.context import SimContext
from simroute.sim.request import DenseRequest
from simroute.sim.request_spec import RequestSpec
from simroute.sim.selection import SelectionRequest
from simroute.sim.vocab import DropReason


def launch(ctx: SimContext, spec: RequestSpec) -> None:
    """Start one request: its requester from the router, its prefill instance from the prefill pool (--disagg)
    or the trace's hint."""
    pool = ctx.prefill_pool
    requester = ctx.router.pick(spec, ctx.cluster.router_view)
    instances = ctx.cluster.instances
    if requester is None or (pool is None and spec.prefill_hint >= len(instances)):
        ctx.recorder.drop(spec.request_id, DropReason.REQUESTER_OUT_OF_RANGE)
        ctx.done_event(spec.request_id).succeed()
        return
    if pool is not None:        # --disagg: the prefill pool prefills every request (the trace's hint is not read)
        prefill = pool.pick(spec, requester)
    else:
        prefill = instances[spec.prefill_hint] if spec.prefill_hint >= 0 else None
    kind = SelectionRequest if spec.topk > 0 else DenseRequest
    ctx.env.process(kind(ctx, spec, requester, prefill).run())
