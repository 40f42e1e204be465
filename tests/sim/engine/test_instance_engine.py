"""The instance engine on its own: iteration timing, schedulers, HBM, preemption, holders, exchanges."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import simpy

from fakes import Fabric, FakeStep, NoNet
from simroute.sim.engine import RouteExchange, RouteShare, Sequence, blocks_for

STEP = FakeStep()


def _run_lone(make_engine, prompt, output, resident=0.0, **opts):
    env = simpy.Environment()
    eng = make_engine(env, **opts)
    seq = Sequence(0, prompt, output, resident_tokens=resident)
    eng.submit(seq)
    env.run()
    return seq, eng


def _decode_closed_form(prompt, output, resident=0.0):
    """Sum of the decode iterations of a lone sequence: context prompt + g + resident at step g."""
    return sum(STEP.iteration_s(1, 1, resident + prompt + g, resident + prompt + g) for g in range(1, output))


@pytest.mark.parametrize("steps", [1, 8, 64])
def test_lone_request_equals_step_model(make_engine, steps):
    prompt, output, resident = 3000, 40, 20000.0
    seq, _ = _run_lone(make_engine, prompt, output, resident, steps_per_event=steps, token_budget=4096,
                       prefill_chunk=4096)
    pairs = prompt * resident + prompt * (prompt + 1) / 2
    ttft = STEP.iteration_s(prompt, 1, resident + prompt, pairs, prefill_pairs=pairs)
    assert seq.t_first_token == pytest.approx(ttft, rel=1e-9)
    tpot = (seq.t_done - seq.t_first_token) / (output - 1)
    assert tpot == pytest.approx(_decode_closed_form(prompt, output, resident) / (output - 1), rel=1e-3)


def test_chunked_prefill_costs_what_the_chunks_cost(make_engine):
    seq, eng = _run_lone(make_engine, 5000, 2, token_budget=2048, prefill_chunk=2048)
    chunks = [(0, 2048), (2048, 2048), (4096, 904)]
    want = sum(STEP.iteration_s(t, 1, o + t, t * o + t * (t + 1) / 2, t * o + t * (t + 1) / 2) for o, t in chunks)
    assert seq.t_first_token == pytest.approx(want, rel=1e-9)
    assert eng.log.iterations == 4


def test_decode_iteration_follows_the_roofline(make_engine):
    """Flat while the weights dominate (memory-bound linear term), then rising with KV bytes read."""
    times = []
    for batch in (1, 2, 4, 8, 32, 128, 256):
        env = simpy.Environment()
        eng = make_engine(env, steps_per_event=1)
        for i in range(batch):
            eng.submit(Sequence(i, 1, 3, resident_tokens=500.0))
        env.run()
        cols = eng.log.cols
        dec = [d for d, n in zip(cols["duration_s"], cols["decode_seqs"]) if n == batch]
        times.append(dec[0])
    # flat: 1 -> 8 sequences cost < 10% more (weight-bound); then rising with KV bytes
    assert times[3] < times[0] * 1.1
    assert times[4] < times[5] < times[6]
    assert times[6] > 2 * times[0]


def _open_loop(make_engine, qps, n=200, scheduler="sarathi", prompt=1500, output=64, seed=0, **opts):
    env = simpy.Environment()
    eng = make_engine(env, scheduler=scheduler, **opts)
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / qps, n))
    seqs = [Sequence(i, prompt, output) for i in range(n)]

    def feed():
        for t, s in zip(arrivals, seqs):
            yield env.timeout(t - env.now)
            eng.submit(s)
    env.process(feed())
    env.run()
    ttft = np.array([s.t_first_token - s.t_submit for s in seqs])
    tpot = np.array([(s.t_done - s.t_first_token) / (output - 1) for s in seqs])
    return ttft, tpot, eng


def test_tpot_rises_with_qps(make_engine):
    tpots = [np.mean(_open_loop(make_engine, q)[1]) for q in (1, 10, 40)]
    assert tpots[0] < tpots[1] < tpots[2]


def test_vllm_vs_sarathi_trade(make_engine):
    """Prefill-first gives lower TTFT and stalls decodes (higher TPOT, spikier inter-token gaps);
    decode-first with chunked prefill the reverse."""
    tv, pv, ev = _open_loop(make_engine, 25, scheduler="vllm", prompt=3000, token_budget=8192)
    ts, ps, es = _open_loop(make_engine, 25, scheduler="sarathi", prompt=3000, token_budget=512,
                            prefill_chunk=512)
    assert np.mean(tv) < np.mean(ts)
    assert np.mean(pv) > np.mean(ps)
    assert ev.log.itl_percentiles()["max"] > es.log.itl_percentiles()["max"]


def test_hbm_invariant_and_preemption_under_pressure(make_engine):
    """KV for 40 sequences of 4000+800 tokens does not fit in 60k tokens: preemptions (recompute), every
    sequence still finishes, and the invariant (check_hbm) held at every iteration."""
    env = simpy.Environment()
    eng = make_engine(env, hbm_tokens=60_000, scheduler="sarathi", steps_per_event=4)
    seqs = [Sequence(i, 4000, 800) for i in range(40)]
    for s in seqs:
        eng.submit(s)
    env.run()
    assert all(s.generated == 800 for s in seqs)
    assert eng.preemptions > 0
    assert eng.hbm.kv_blocks == 0
    assert max(eng.log.cols["kv_bytes"]) <= eng.hbm.capacity_blocks * eng.hbm.block_bytes


def test_copies_evicted_before_preemption(make_engine):
    env = simpy.Environment()
    eng = make_engine(env, hbm_tokens=20_000)
    for key in range(4):
        assert eng.hbm.add_copy(key, blocks_for(4000))
    seq = Sequence(0, 9000, 50)
    eng.submit(seq)
    env.run()
    assert eng.hbm.evictions >= 2 and eng.preemptions == 0
    assert seq.generated == 50


def test_admission_waits_for_blocks(make_engine):
    env = simpy.Environment()
    eng = make_engine(env, hbm_tokens=10_000)
    a, b = Sequence(0, 6000, 100), Sequence(1, 6000, 10)
    eng.submit(a)
    eng.submit(b)
    env.run()
    assert b.t_scheduled >= a.t_done           # b waited for a's blocks
    assert eng.preemptions == 0


def test_lone_oversized_prompt_is_refused(make_engine):
    env = simpy.Environment()
    eng = make_engine(env, hbm_tokens=1000)
    seq = Sequence(0, 5000, 10)
    eng.submit(seq)
    env.run()
    assert seq.output == -1 and eng.rejected == 1


def _routed_pair(make_engine, holder_load: int, mode="inline", route_output=64):
    env = simpy.Environment()
    net = NoNet()
    ex = RouteExchange(net, lambda a, b: Fabric, q_bytes=1152, p_bytes=1032, tp=1, merge_s=2e-6,
                       exchanges_per_step=FakeStep.layers)
    holder = make_engine(env, 1, exchange=ex, steps_per_event=1, holder_mode=mode)
    req = make_engine(env, 0, exchange=ex, steps_per_event=1)
    own = [Sequence(100 + i, 200, 60) for i in range(holder_load)]
    for s in own:
        holder.submit(s)
    routed = Sequence(0, 100, route_output, routes=(RouteShare(holder, 20000.0),))
    req.submit(routed)
    env.run()
    return holder, req, routed, own, net


def test_holder_serving_partials_has_longer_iterations(make_engine):
    busy_holder, *_ = _routed_pair(make_engine, holder_load=4)
    env = simpy.Environment()
    idle_ref = make_engine(env, 1, steps_per_event=1)
    own = [Sequence(100 + i, 200, 60) for i in range(4)]
    for s in own:
        idle_ref.submit(s)
    env.run()
    served = np.sum(busy_holder.log.cols["duration_s"])
    alone = np.sum(idle_ref.log.cols["duration_s"])
    assert busy_holder.partials.charged_s > 0
    assert served > alone
    assert served == pytest.approx(alone + busy_holder.partials.charged_s, rel=1e-9)


def test_holder_work_is_charged_alike_however_many_iterations_an_event_stands_for(make_engine):
    """Routed work that begins in the middle of a holder's 64-iteration event lengthens that event (it is
    not lumped into the holder's next iteration): the holder's own sequences finish as when it runs one
    iteration per event, and it is charged the same partial work."""
    out = {}
    for steps in (1, 64):
        env = simpy.Environment()
        ex, holder, req = _exchange_pair(make_engine, env, steps_per_event=8)
        holder.options = replace(holder.options, steps_per_event=steps)
        own = [Sequence(100 + i, 200, 300) for i in range(4)]
        for seq in own:
            holder.submit(seq)
        _submit_at(env, req, Sequence(0, 2000, 200, routes=(RouteShare(holder, 400000.0),)), 0.05)
        env.run()
        cols = holder.log.cols
        out[steps] = (np.mean([s.t_done for s in own]), holder.partials.charged_s, max(cols["holder_work_s"]))
    assert out[1][1] > 0.01
    assert out[64][0] == pytest.approx(out[1][0], rel=0.01)
    assert out[64][1] == pytest.approx(out[1][1], rel=0.05)


def test_idle_holder_reproduces_the_kernel_floor(make_engine):
    holder, req, routed, _, _ = _routed_pair(make_engine, holder_load=0, route_output=10)
    assert holder.partials.charged_s == 0      # an idle holder's GPU had room: nobody waited
    kernel = 15e-6
    rt = 20e-6 + 16 * 1152 / 10e9 + kernel + 5e-6 + 16 * 1032 / 10e9 + 2e-6
    decode = _decode_closed_form(100, 10)
    assert (routed.t_done - routed.t_first_token) == pytest.approx(decode + 9 * FakeStep.layers * rt, rel=1e-9)


def test_holder_kernel_charges_each_query_its_own_rows_and_keys(make_engine):
    """One long prefill over a long context and one short query in one batch, routed to one holder: the
    kernel is the sum over queries of rows x keys (hand count), not two average queries (half of it here)."""
    env = simpy.Environment()
    _ex, holder, req = _exchange_pair(make_engine, env, steps_per_event=1, token_budget=4096)
    req.submit(Sequence(99, 5, 1))                    # keeps the engine busy while the two arrive
    req.submit(Sequence(0, 1000, 1, routes=(RouteShare(holder, 60000.0),)))
    req.submit(Sequence(1, 10, 1, routes=(RouteShare(holder, 100.0),)))
    env.run()
    assert list(req.log.cols["prefill_seqs"]) == [1, 2]      # both routed prefills in one iteration
    rows_long, rows_short = 16 * 1000, 16 * 10
    by_query = (rows_long * 60000 + rows_short * 100) * 1e-12
    averaged = 2 * ((rows_long + rows_short) / 2) * ((60000 + 100) / 2) * 1e-12
    assert list(holder.partials.kernel_s) == [pytest.approx(by_query, rel=1e-12)]
    assert by_query > 1.9 * averaged
    assert holder.partials.queries == 2 * FakeStep.layers


def test_route_bytes_hand_count(make_engine):
    """rows x (q+p) x exchanges per (request, holder): prefill rows = 16 heads x 100 tokens, then 16 rows
    for each of the 63 decode steps, 10 exchanges each, one holder."""
    *_, routed, _, net = _routed_pair(make_engine, holder_load=0, route_output=64)
    rows = 16 * 100 + 16 * 63
    assert routed.routed_rows == rows
    assert routed.routed_rows * (1152 + 1032) * FakeStep.layers == rows * 2184 * 10


def test_one_message_per_holder_per_layer(make_engine):
    """Two sequences of one batch routing to one holder: one query message and one partial per layer."""
    env = simpy.Environment()
    net = NoNet()
    ex = RouteExchange(net, lambda a, b: Fabric, q_bytes=1152, p_bytes=1032, tp=1, merge_s=0.0,
                       exchanges_per_step=FakeStep.layers)
    holder = make_engine(env, 1)
    req = make_engine(env, 0, exchange=ex, steps_per_event=1)
    for i in range(2):
        req.submit(Sequence(i, 10, 5, routes=(RouteShare(holder, 4096.0),)))
    env.run()
    events_with_both = sum(1 for n, p in zip(req.log.cols["decode_seqs"], req.log.cols["prefill_seqs"])
                           if n + p == 2)
    assert ex.messages == 2 * FakeStep.layers * req.log.iterations
    assert net.calls == 2 * req.log.events
    assert events_with_both >= 4
    cols = req.log.cols
    sequences_x_iterations = sum((n + p) * k for n, p, k in zip(cols["decode_seqs"], cols["prefill_seqs"],
                                                                 cols["iterations"]))
    assert holder.partials.queries == pytest.approx(FakeStep.layers * sequences_x_iterations)


def _exchange_pair(make_engine, env, **req_options):
    """(exchange, holder, requester): a requester engine routing to an otherwise idle holder over NoNet."""
    ex = RouteExchange(NoNet(), lambda a, b: Fabric, q_bytes=1152, p_bytes=1032, tp=1, merge_s=0.0,
                       exchanges_per_step=FakeStep.layers)
    return ex, make_engine(env, 1), make_engine(env, 0, exchange=ex, **req_options)


def _submit_at(env, engine, seq, at_s):
    def late():
        yield env.timeout(at_s)
        engine.submit(seq)
    env.process(late())


def test_overlap_hides_exchange_time(make_engine):
    res = {}
    for overlap in (False, True):
        env = simpy.Environment()
        _ex, holder, req = _exchange_pair(make_engine, env, overlap=overlap)
        s = Sequence(0, 100, 50, routes=(RouteShare(holder, 4096.0),))
        req.submit(s)
        env.run()
        res[overlap] = (s.t_done, req.hidden_s, req.exchange_total_s)
    assert res[True][0] < res[False][0]
    assert res[False][1] == 0 and 0 < res[True][1] <= res[True][2]


def test_arrival_cuts_a_macro_step(make_engine):
    """A long-decoding sequence in 64-iteration events: a second arrival starts at the next iteration
    boundary, exactly as with one iteration per event."""
    out = {}
    for steps in (1, 64):
        env = simpy.Environment()
        eng = make_engine(env, steps_per_event=steps)
        a, b = Sequence(0, 100, 500), Sequence(1, 100, 20)
        eng.submit(a)
        _submit_at(env, eng, b, 0.05)
        env.run()
        out[steps] = (a.t_done, b.t_first_token, b.t_done)
    assert out[64] == pytest.approx(out[1], rel=1e-3)


def test_a_cut_event_accounts_only_the_iterations_it_ran(make_engine):
    """A routed sequence decoding in 64-iteration events, cut by a late arrival: its rows, the messages, the
    holder's kernel calls and the log count the iterations that ran, as with one iteration per event."""
    out = {}
    for steps in (1, 64):
        env = simpy.Environment()
        ex, holder, req = _exchange_pair(make_engine, env, steps_per_event=steps)
        a = Sequence(0, 100, 300, routes=(RouteShare(holder, 4096.0),))
        req.submit(a)
        _submit_at(env, req, Sequence(1, 100, 20), 0.05)
        env.run()
        assert a.routed_rows == 16 * 100 + 16 * 299
        assert holder.partials.calls == pytest.approx(FakeStep.layers * 300)      # 1 prefill + 299 decodes
        assert ex.messages == 2 * FakeStep.layers * 300
        assert req.log.iterations == sum(req.log.cols["iterations"])
        out[steps] = (req.cuts, req.log.iterations, np.sum(req.log.cols["duration_s"]))
    assert out[1][0] == 0 and out[64][0] > 0
    assert out[64][1] == out[1][1]
    assert out[64][2] == pytest.approx(out[1][2], rel=1e-3)


@pytest.mark.parametrize("scheduler", ["vllm", "sarathi"])
def test_prefilled_sequences_decode_right_away(make_engine, scheduler):
    """PD's decode side: a sequence whose KV arrived prefilled decodes on an idle engine (no prefill)."""
    env = simpy.Environment()
    eng = make_engine(env, scheduler=scheduler)
    seq = Sequence(0, 5000, 20)
    seq.prefilled, seq.generated = 5000, 1
    eng.submit(seq)
    env.run()
    assert seq.generated == 20 and seq.t_done > 0
    assert sum(eng.log.cols["prefill_seqs"]) == 0


def test_fully_cached_prompt_still_runs_one_token(make_engine):
    """A request whose whole input is cached chunks (prompt 0) runs its last token to produce the first."""
    from simroute.sim.engine.serving import serve

    class OneEngine(list):
        step = FakeStep()
    env = simpy.Environment()
    engines = OneEngine([make_engine(env)])
    seq, first, done = serve(engines, 0, 0, prompt=0, output=10, resident_tokens=4096.0)
    env.run()
    assert first.triggered and seq.t_first_token > 0 and seq.generated == 10
    assert seq.t_done - seq.t_first_token > 0


class _SpyStep(FakeStep):
    def __init__(self):
        self.calls = []

    def iteration_s(self, *args):
        self.calls.append(args)
        return super().iteration_s(*args)


def test_prefill_chunks_pass_their_pairs_in_the_prefill_form_and_a_one_token_chunk_decodes(make_engine):
    """Chunks of more than one token give their pairs as `prefill_pairs`; a fully cached prompt's one-token
    run is a decode-form query (vLLM's MLA backend classifies a one-token query as a decode)."""
    env = simpy.Environment()
    eng = make_engine(env, token_budget=4096, prefill_chunk=4096)
    eng.step = spy = _SpyStep()
    eng.submit(Sequence(0, 300, 1, resident_tokens=1000.0))
    env.run()
    pairs = 300 * 1000 + 300 * 301 / 2
    assert spy.calls == [(300, 1, 1300.0, pairs, pairs, 0)]        # no sequence in the decode form
    spy.calls.clear()
    eng.submit(Sequence(1, 1, 1, resident_tokens=5000.0))
    env.run()
    assert spy.calls == [(1, 1, 5001.0, 5001.0, 0.0, 1)]           # the one-token chunk: one decode-form query
