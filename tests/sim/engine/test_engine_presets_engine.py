"""What an engine preset changes in the engine and the step time, by hand (docs/ENGINES.md): overlap scheduling's
one-iteration admission lag, the CPU side of an iteration (host work overlapped or not, eager launches past the
CUDA-graph limit), and the per-request path in TTFT and E2E."""

from __future__ import annotations

import pytest
import simpy

from fakes import FakeStep
from simroute.model.geometry import get_model
from simroute.model.steptime import GpuSpec, HostCosts, StepTimeModel
from simroute.sim.engine import Sequence


def _decode_s(context: float) -> float:
    return FakeStep().iteration_s(1, 1, context, context)


def _arrival_mid_decode(make_engine, schedule_ahead: bool, steps: int = 1):
    """A decodes alone from t = 0; B (a 100-token prompt) arrives 50 ms in, in the middle of an iteration."""
    env = simpy.Environment()
    eng = make_engine(env, steps_per_event=steps, schedule_ahead=schedule_ahead, token_budget=4096,
                      prefill_chunk=4096)
    a, b = Sequence(0, 100, 200), Sequence(1, 100, 3)
    eng.submit(a)
    state = {}

    def late():
        yield env.timeout(0.05)
        state["generated"] = a.generated
        eng.submit(b)
    env.process(late())
    env.run()
    return eng, b, state


def test_overlap_scheduling_puts_an_arrival_one_iteration_later(make_engine):
    """Without it B joins the iteration after the one running at its arrival; with it the CPU had planned that
    iteration already (A's decode alone), so B joins the one after: B's prefill starts one decode iteration of A
    later (over A's prompt and the tokens it had when B arrived, plus the one in flight)."""
    _, plain, _ = _arrival_mid_decode(make_engine, False)
    _, ahead, state = _arrival_mid_decode(make_engine, True)
    inserted = _decode_s(100 + state["generated"] + 1)
    assert ahead.t_scheduled - plain.t_scheduled == pytest.approx(inserted, rel=1e-9)
    assert ahead.t_first_token - plain.t_first_token > inserted        # and B's iteration carries a longer A


def test_overlap_scheduling_lag_holds_across_a_cut_macro_event(make_engine):
    """An arrival cuts a macro event at the next iteration boundary either way; under overlap one event of exactly
    one decode iteration of A alone then runs before B is scheduled."""
    eng_plain, plain, _ = _arrival_mid_decode(make_engine, False, steps=8)
    eng, ahead, _ = _arrival_mid_decode(make_engine, True, steps=8)
    rows = eng.log.table().to_pandas()
    before = rows[(rows.t_start_s + rows.duration_s - ahead.t_scheduled).abs() < 1e-12].iloc[0]
    assert (before.iterations, before.decode_seqs, before.prefill_seqs) == (1, 1, 0)
    assert before.t_start_s == pytest.approx(plain.t_scheduled, rel=1e-12)
    assert ahead.t_scheduled - plain.t_scheduled == pytest.approx(before.duration_s, rel=1e-12)


def _one_arrival_at_10ms(make_engine, **kw):
    """An idle engine and one 100-token sequence submitted at 10 ms, run to the end."""
    env = simpy.Environment()
    eng = make_engine(env, **kw)
    seq = Sequence(0, 100, 2)

    def arrive():
        yield env.timeout(0.01)
        eng.submit(seq)
    env.process(arrive())
    env.run()
    return eng, seq


def test_an_idle_engine_schedules_an_arrival_at_once_under_overlap(make_engine):
    eng, seq = _one_arrival_at_10ms(make_engine, schedule_ahead=True)
    assert seq.t_scheduled == 0.01 and not eng._arriving


# ---- the CPU side of an iteration (`HostCosts`), by hand on the roofline ----------------------------------------
def _roofline_model(host: HostCosts | None) -> StepTimeModel:
    gpu = GpuSpec(name="g", peak_flops=1e15, hbm_Bps=3e12, hbm_bytes=80e9, hbm_efficiency=1.0,
                  gemm_efficiency=1.0, attention_efficiency=1.0, iteration_overhead_s=3e-4)
    return StepTimeModel(get_model("llama-3.1-8b"), gpu, 1, host=host)


def test_overlapped_host_work_hides_behind_the_kernels_and_serial_host_work_adds():
    bare = _roofline_model(HostCosts(overlap=True, host_s_per_sequence=0.0, launch_s_per_layer=0.0,
                                     graph_max_batch=1024))
    kernels = bare.iteration_s(64, 64, 64 * 1000, 64 * 1000, 0.0, 64)
    small = dict(host_s_per_sequence=kernels / 128, launch_s_per_layer=0.0, graph_max_batch=1024)
    big = dict(host_s_per_sequence=kernels / 32, launch_s_per_layer=0.0, graph_max_batch=1024)
    shape = (64, 64, 64 * 1000, 64 * 1000, 0.0, 64)
    assert _roofline_model(HostCosts(overlap=True, **small)).iteration_s(*shape) == kernels       # hidden: 0.5 x
    assert _roofline_model(HostCosts(overlap=True, **big)).iteration_s(*shape) == pytest.approx(2 * kernels)
    assert _roofline_model(HostCosts(overlap=False, **small)).iteration_s(*shape) == pytest.approx(1.5 * kernels)
    # the GPU entry's constant 0.3 ms is not charged under a preset, and is without one
    assert _roofline_model(None).iteration_s(*shape) == pytest.approx(kernels + 3e-4)


def test_a_decode_batch_past_the_cuda_graph_limit_pays_its_eager_launches():
    layers = get_model("llama-3.1-8b").layers                  # 32
    host = HostCosts(overlap=True, host_s_per_sequence=0.0, launch_s_per_layer=1e-3, graph_max_batch=8)
    model, bare = _roofline_model(host), _roofline_model(HostCosts(True, 0.0, 0.0, 8))
    at_limit, past = (8, 8, 8000, 8000, 0.0, 8), (9, 9, 9000, 9000, 0.0, 9)
    assert model.iteration_s(*at_limit) == bare.iteration_s(*at_limit)          # replayed: no launch cost
    assert bare.iteration_s(*past) < layers * 1e-3                              # kernels shorter than launches
    assert model.iteration_s(*past) == pytest.approx(layers * 1e-3)             # eager: launch-bound, 32 ms
    prefill = (512, 1, 512, 512 * 513 / 2, 512 * 513 / 2, 0)                    # never graphed (a prefill chunk)
    assert model.iteration_s(*prefill) == pytest.approx(max(bare.iteration_s(*prefill), layers * 1e-3))
    serial = _roofline_model(HostCosts(False, 1e-5, 1e-3, 8))
    assert serial.iteration_s(*past) == pytest.approx(9 * 1e-5 + layers * 1e-3)
    terms = model.iteration(_batch(*past))
    assert terms.iteration_s == model.iteration_s(*past) and "eager launches" in terms.sources["overhead"]


def _batch(new, seqs, kv, pairs, prefill_pairs, decodes):
    from simroute.model.steptime import BatchShape
    return BatchShape(new_tokens=new, sequences=seqs, kv_read_tokens=kv, attention_pairs=pairs,
                      prefill_pairs=prefill_pairs, decode_sequences=decodes)


def test_past_the_graph_limit_the_measured_all_reduce_is_the_eager_rows():
    """DeepSeek-V3 at TP 8 on H200 (SGLang 0.5.14's tables): a 9-sequence decode batch reads the CUDA-graph
    all-reduce rows when graphs reach 9 sequences and the eager rows when they stop at 8."""
    from simroute.calib import default_profile_path, load_profile
    profile = load_profile(default_profile_path())
    spec = profile.find_gpu_spec("h200-sxm")
    graphed = profile.step_model("deepseek-v3", tp=8, gpu_spec=spec, host=HostCosts(True, 0.0, 0.0, 9))
    eager = profile.step_model("deepseek-v3", tp=8, gpu_spec=spec, host=HostCosts(True, 0.0, 0.0, 8))
    measured = graphed._measured
    elements = 9 * graphed.geometry.hidden
    want_graph = 2 * measured._ar_curve(True, elements).seconds(elements)
    want_eager = 2 * measured._ar_curve(False, elements).seconds(elements)
    assert want_eager > want_graph
    assert graphed._token_terms(9, 9, 9)[1] == want_graph and eager._token_terms(9, 9, 9)[1] == want_eager


# ---- SGLang's --scheduler-recv-interval (`EngineOptions.recv_interval`, the engine's `_poll`) ------------------
def _arrival_under_polls(make_engine, interval: int, at: float = 0.05):
    """A (a 100-token prompt) decodes alone from t = 0; B arrives `at` s in; SGLang's scheduler under overlap."""
    env = simpy.Environment()
    eng = make_engine(env, scheduler="sglang", schedule_ahead=True, recv_interval=interval, token_budget=4096,
                      prefill_chunk=4096)
    a, b = Sequence(0, 100, 200), Sequence(1, 100, 3)
    eng.submit(a)

    def late():
        yield env.timeout(at)
        eng.submit(b)
    env.process(late())
    env.run()
    return eng, b


def _decodes_before(eng, t: float) -> int:
    """Decode iterations (A's alone) the log shows starting before `t`."""
    cols = eng.log.cols
    return int(sum(k for start, k, pre in zip(cols["t_start_s"], cols["iterations"], cols["prefill_seqs"])
                   if start < t - 1e-12 and pre == 0))


@pytest.mark.parametrize("interval", [10, 30])
def test_an_arrival_waits_for_the_scheduler_s_poll_every_interval_decode_iterations(make_engine, interval):
    """A's prefill batch resets the poll counter (weight 1000); each decode iteration then adds 1 and the poll
    after launching the `interval`-th one takes B in, so B's prefill runs right after it: exactly `interval`
    decode iterations of A come before B is scheduled, whenever in them B arrived (50 ms is the 5th)."""
    eng, b = _arrival_under_polls(make_engine, interval)
    assert _decodes_before(eng, b.t_scheduled) == interval
    assert b.t_scheduled > 0.05 + _decode_s(100)                       # later than the next iteration boundary
    _, plain = _arrival_under_polls(make_engine, 1)
    assert _decodes_before(eng, plain.t_scheduled) < interval           # every iteration polls: the next one


def test_an_idle_engine_polls_at_once_whatever_the_interval(make_engine):
    eng, seq = _one_arrival_at_10ms(make_engine, scheduler="sglang", schedule_ahead=True, recv_interval=30)
    assert seq.t_scheduled == 0.01 and not eng._inbox


def test_a_recv_interval_below_one_is_refused():
    from simroute.errors import ConfigurationError
    from simroute.sim.engine import EngineOptions
    with pytest.raises(ConfigurationError, match="recv_interval"):
        EngineOptions(recv_interval=0)


def test_a_prefill_within_the_piecewise_graphs_launches_nothing_eagerly():
    """HostCosts with prefill graphs to 2048 tokens: a 1024-token prefill batch takes its kernels' time, a
    4096-token one (past the captured sizes) no less than layers x the eager launch; with none captured (0, SGLang
    <= 0.5.9's default) the 1024-token one is eager too."""
    launch = 1.0                     # s per layer: far above any kernel time here, so the bound shows
    graphs = HostCosts(overlap=True, host_s_per_sequence=0.0, launch_s_per_layer=launch, graph_max_batch=256,
                       prefill_graph_max_tokens=2048)
    none = HostCosts(overlap=True, host_s_per_sequence=0.0, launch_s_per_layer=launch, graph_max_batch=256)
    model, eager = _roofline_model(graphs), _roofline_model(none)
    layers = get_model("llama-3.1-8b").layers
    short = (1024, 1, 1024, 1024 * 1025 / 2, 1024 * 1025 / 2, 0)
    long_ = (4096, 1, 4096, 4096 * 4097 / 2, 4096 * 4097 / 2, 0)
    assert model.iteration_s(*short) < 1.0
    assert model.iteration_s(*long_) == pytest.approx(layers * launch)
    assert eager.iteration_s(*short) == pytest.approx(layers * launch)
    assert graphs.graphed(False, 1, 2048) and not graphs.graphed(False, 1, 2049) and graphs.graphed(True, 256, 256)


# ---- TensorRT-LLM's batch waiting (`EngineOptions.batch_wait_iters` / `batch_wait_ratio`, the engine's `_batch_wait`)
def _arrivals_while_decoding(make_engine, arrivals: tuple[float, ...] = (0.05,), **options):
    """A (a 100-token prompt, 300 tokens out) decodes alone from t = 0; a 100-token prompt (3 tokens out) arrives at
    each of `arrivals` (s); the trtllm scheduler, no overlap (an arrival joins the next iteration)."""
    env = simpy.Environment()
    eng = make_engine(env, scheduler="trtllm", token_budget=options.pop("token_budget", 8192), **options)
    a = Sequence(0, 100, 300)
    late = [Sequence(i + 1, 100, 3) for i in range(len(arrivals))]
    eng.submit(a)

    def arrive(at, seq):
        yield env.timeout(at)
        eng.submit(seq)
    for at, seq in zip(arrivals, late):
        env.process(arrive(at, seq))
    env.run()
    return eng, late


def _first_prefill_after(eng, t: float) -> float:
    cols = eng.log.cols
    return min(start for start, pre in zip(cols["t_start_s"], cols["prefill_seqs"]) if pre > 0 and start > t)


def _decodes_between(eng, t0: float, t1: float) -> int:
    """Decode-only iterations the log shows starting in [t0, t1)."""
    cols = eng.log.cols
    return int(sum(k for start, k, pre in zip(cols["t_start_s"], cols["iterations"], cols["prefill_seqs"])
                   if t0 - 1e-12 <= start < t1 - 1e-12 and pre == 0))


@pytest.mark.parametrize("iters", [10, 40])
def test_a_prompt_waits_batch_wait_timeout_iters_decode_iterations(make_engine, iters):
    """B's 100 tokens + A's decode (101) stay under 0.8 x 8192: B waits exactly `iters` decode iterations of A
    (counted from the first step that could have taken it, the one after its arrival) and then prefills; without
    batch waiting it prefills in that first step."""
    eng, (b,) = _arrivals_while_decoding(make_engine, batch_wait_iters=iters, batch_wait_ratio=0.8,
                                         steps_per_event=8)
    plain, (b0,) = _arrivals_while_decoding(make_engine, steps_per_event=8)
    first_chance = _first_prefill_after(plain, 0.05)        # the boundary after B's arrival: plain B's prefill
    prefill = _first_prefill_after(eng, 0.05)
    assert _decodes_between(eng, first_chance, prefill) == iters
    assert _decodes_between(plain, 0.05, first_chance) == 0
    assert b.t_first_token > b0.t_first_token + iters * _decode_s(100)


def test_a_cut_during_the_wait_counts_only_the_iterations_that_ran(make_engine):
    """C arrives 5 iterations into B's wait and cuts the 8-iteration decode event there; B and C (201 tokens with
    A's decode, still under the threshold) prefill together after 10 held iterations in all, not 5 + 8 + ..."""
    eng, (b, c) = _arrivals_while_decoding(make_engine, arrivals=(0.05, 0.05 + 5.5 * _decode_s(150)),
                                           batch_wait_iters=10, batch_wait_ratio=0.8, steps_per_event=8)
    plain, _ = _arrivals_while_decoding(make_engine, steps_per_event=8)
    first_chance = _first_prefill_after(plain, 0.05)
    prefill = _first_prefill_after(eng, 0.05)
    assert eng.cuts >= 1
    assert _decodes_between(eng, first_chance, prefill) == 10
    assert b.t_first_token == pytest.approx(c.t_first_token, abs=1e-12)     # one prefill batch took both


def test_a_batch_at_the_token_threshold_does_not_wait(make_engine):
    """A token budget of 120: B's 100 tokens + 1 decode reach 0.8 x 120 = 96, so B prefills at the first chance."""
    eng, (b,) = _arrivals_while_decoding(make_engine, batch_wait_iters=40, batch_wait_ratio=0.8, token_budget=120)
    plain, (b0,) = _arrivals_while_decoding(make_engine, token_budget=120)
    assert b.t_first_token == pytest.approx(b0.t_first_token, rel=1e-12)


@pytest.mark.parametrize("budget, waits", [(202, False), (204, True)])
def test_the_token_threshold_counts_the_prompts_and_one_token_per_decode_and_is_met_at_equality(make_engine, budget,
                                                                                               waits):
    """B's 100 tokens + A's one decode token = 101 against 0.5 x the token budget: at a budget of 202 the step holds
    exactly the threshold (101 >= 101) and B prefills at the first chance; at 204 (threshold 102) B waits its 40
    iterations. Counting B's tokens alone (100) or stopping only past the threshold (>) would make B wait at 202."""
    eng, (b,) = _arrivals_while_decoding(make_engine, batch_wait_iters=40, batch_wait_ratio=0.5, token_budget=budget,
                                         steps_per_event=8)
    plain, (b0,) = _arrivals_while_decoding(make_engine, token_budget=budget, steps_per_event=8)
    first_chance = _first_prefill_after(plain, 0.05)
    assert _decodes_between(eng, first_chance, _first_prefill_after(eng, 0.05)) == (40 if waits else 0)
    if not waits:
        assert b.t_first_token == pytest.approx(b0.t_first_token, rel=1e-12)


def test_a_dp_attention_rank_does_not_batch_wait(make_engine):
    """Batch waiting is TensorRT-LLM's TP scheduling only (`_batch_wait`): a DP group's rank with the same settings
    (40 iterations, 0.8) prefills B in the first group step after its arrival. The group's step is a stub of 10 ms;
    B arrives at 55 ms, the step starting at 60 ms takes it and gives its first token at 70 ms (waiting would put it
    40 steps later)."""
    from types import SimpleNamespace

    from simroute.model.dpstep import GroupIteration
    from simroute.sim.engine.group import GroupEngine

    env = simpy.Environment()
    ranks = [make_engine(env, eid=i, scheduler="trtllm", token_budget=8192, steps_per_event=1, batch_wait_iters=40,
                         batch_wait_ratio=0.8) for i in range(2)]

    def stub(_step, batches, traffic=True):
        return GroupIteration(0.01, 0.0, 0, 1.0, tuple(0.0 for _ in batches), (), 1 << 20)
    GroupEngine(env, ranks, SimpleNamespace(mtp=None), gpus=("g0", "g1"), iterate=stub)
    a, b = Sequence(0, 100, 300), Sequence(1, 100, 3)
    ranks[0].submit(a)

    def arrive():
        yield env.timeout(0.055)
        ranks[0].submit(b)
    env.process(arrive())
    env.run()
    assert a.t_first_token == pytest.approx(0.01, abs=1e-12)
    assert b.t_first_token == pytest.approx(0.07, abs=1e-12) and b.generated == 3


@pytest.mark.parametrize("iters, ratio", [(0, 0.8), (40, 0.0)])
def test_batch_waiting_needs_both_a_timeout_and_a_ratio(make_engine, iters, ratio):
    """TensorRT-LLM stops waiting when waited >= timeout_iters or tokens >= ratio x max_num_tokens: with either at
    0 the condition holds at once, so nothing waits."""
    eng, (b,) = _arrivals_while_decoding(make_engine, batch_wait_iters=iters, batch_wait_ratio=ratio)
    plain, (b0,) = _arrivals_while_decoding(make_engine)
    assert b.t_first_token == pytest.approx(b0.t_first_token, rel=1e-12)


def test_no_prompt_waits_without_decodes(make_engine):
    """An idle engine (no generation requests) prefills an arrival at once, batch waiting or not."""
    eng, seq = _one_arrival_at_10ms(make_engine, scheduler="trtllm", token_budget=8192, batch_wait_iters=40,
                                    batch_wait_ratio=0.8)
    log = eng.log.cols
    assert seq.t_scheduled == 0.01 and log["t_start_s"][0] == 0.01 and log["prefill_seqs"][0] == 1


@pytest.mark.parametrize("field, value", [("batch_wait_iters", -1), ("batch_wait_ratio", 1.5),
                                          ("batch_wait_ratio", -0.1)])
def test_batch_wait_options_out_of_range_are_refused(field, value):
    from simroute.errors import ConfigurationError
    from simroute.sim.engine import EngineOptions
    with pytest.raises(ConfigurationError, match=field):
        EngineOptions(**{field: value})
