"""SGLang's default batching: a chunked prefill batch runs alone whenever one can be formed; decodes wait."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simroute.sim.schedulers.base import SCHEDULERS, EngineView, Plan, Scheduler, SchedulerOptions, decoding
from simroute.sim.vocab import PREFILL

if TYPE_CHECKING:
    from simroute.sim.engine.sequence import Sequence


@SCHEDULERS.register("sglang")
class SglangScheduler(Scheduler):
    """prefill-first, chunked: a prefill batch of at most min(prefill chunk, token budget) tokens runs alone.

    SGLang 0.5.14's scheduler without --enable-mixed-chunk (docs/ENGINES.md): whenever a prefill batch can be
    formed, it runs and the running decodes wait (`get_next_batch_to_run`: "Run prefill first if possible"); the
    batch takes the chunked sequence's next chunk first, then new sequences in order, until its tokens reach
    `chunked_prefill_size` (`prefill_chunk`) or `max_prefill_tokens` (`token_budget`), the last one chunked
    (`PrefillAdder`); otherwise every running sequence decodes one token. A sequence whose KV arrived prefilled
    (PD's decode side) takes no prefill tokens."""

    completes_in_order = True
    # new_token_ratio (managers/scheduler.py, sglang 0.5.9 lines 811-823; environ.py lines 225-229): starts at
    # SGLANG_INIT_NEW_TOKEN_RATIO 0.7 x schedule_conservativeness 1.0, falls by (0.7 - 0.7 x 0.14) / 600 per decode
    # iteration to 0.098, returns to 0.7 when the scheduler idles; a running request's future tokens are clipped at
    # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION 4096 (schedule_policy.py line 54)
    token_ratio = (0.7, 0.7 * 0.14, (0.7 - 0.7 * 0.14) / 600)
    token_ratio_clip = 4096

    def prefill_chunk(self, options: SchedulerOptions) -> float:
        return float(min(options.prefill_chunk, options.token_budget))

    def admissions(self, engine: EngineView) -> int:
        """As many as the prefill batch takes after the running chunked sequences: each its next chunk."""
        options = engine.options
        budget = min(options.prefill_chunk, options.token_budget)
        for seq in engine.running:
            if seq.phase == PREFILL:
                budget -= min(seq.to_prefill, budget)
        count = 0
        for seq in engine.waiting:
            tokens = seq.to_prefill
            if tokens > 0:
                if budget <= 0:
                    break
                budget -= min(tokens, budget)
            count += 1
        return count

    def plan(self, running: list[Sequence], options: SchedulerOptions) -> Plan:
        budget = min(options.prefill_chunk, options.token_budget)
        prefill: list[tuple[Sequence, int]] = []
        for seq in running:
            if seq.phase == PREFILL and budget > 0:
                tokens = min(seq.to_prefill, budget)
                prefill.append((seq, tokens))
                budget -= tokens
        if prefill:
            return Plan(prefill=prefill)
        return Plan(decode=decoding(running), macro=True)
