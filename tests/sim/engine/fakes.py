"""A step-time model written from the contract (docs/STEP_TIME.md) with round numbers, so that the engine's
tests pin the engine, not the calibration: a linear term weight-bound until 1000 tokens, an attention term
memory-bound on context bytes, a fixed overhead, and a holder kernel floored at 15 us."""

from __future__ import annotations


class FakeStep:
    layers = 10
    weight_s_per_layer = 1e-3          # weights read once per iteration
    flop_s_per_token_layer = 1e-6      # compute-bound beyond 1000 tokens
    kv_s_per_token_layer = 1e-8        # attention bytes of one context token
    pair_s_per_layer = 1e-11           # attention FLOPs per (new token, context token), decode form
    prefill_pair_s_per_layer = 2.5e-12 # the same pair in the prefill form (MLA expanded: fewer FLOPs)
    overhead_s = 2e-4

    def iteration_s(self, new_tokens, sequences, kv_read_tokens, attention_pairs, prefill_pairs=0.0,
                    decode_sequences=None):
        linear = max(self.weight_s_per_layer, new_tokens * self.flop_s_per_token_layer)
        flops = ((attention_pairs - prefill_pairs) * self.pair_s_per_layer
                 + prefill_pairs * self.prefill_pair_s_per_layer)
        attention = max(kv_read_tokens * self.kv_s_per_token_layer, flops)
        return self.overhead_s + self.layers * (linear + attention)

    def holder_partial_s(self, queries, rows_per_query, key_tokens):
        """Scalars (every query alike) or one value per query, as the contract allows."""
        scalar = (int, float)
        if isinstance(rows_per_query, scalar) and isinstance(key_tokens, scalar):
            pairs = queries * rows_per_query * key_tokens
        else:
            rows = [rows_per_query] * len(key_tokens) if isinstance(rows_per_query, scalar) else rows_per_query
            keys = [key_tokens] * len(rows) if isinstance(key_tokens, scalar) else key_tokens
            pairs = sum(r * t for r, t in zip(rows, keys))
        return max(15e-6, pairs * 1e-12)


class NoNet:
    """A network with fixed message delays (probe + bytes at 10 GB/s)."""

    def __init__(self):
        self.calls = 0

    def message_delay(self, src, dst, nbytes, *, t_probe_s, single_block_Bps, include_latency=True):
        self.calls += 1
        return t_probe_s + nbytes / single_block_Bps


class Fabric:
    t_probe_s = 20e-6
    turnaround_s = 5e-6
    single_block_Bps = 10e9
