"""`RequestSpec`, one request as the trace gives it: a leaf module (it imports nothing of the simulator), so
routers, arrivals and the request flow can all name it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request as the trace gives it (chunk ids already resolved to chunk indices)."""

    request_id: int
    requester_hint: int       # instance to serve it (-1 = the router decides)
    prefill_hint: int         # instance that prefills its prompt (-1 = the requester; PD disaggregation)
    prompt_tokens: int
    output_tokens: int
    chunk_indices: list[int]
    cached: list[bool]        # per chunk: served at the offset it was cached at
    topk: int                 # sparse selection budget (0 = dense)
    holders_spanned: int      # holders a sparse selection spans
