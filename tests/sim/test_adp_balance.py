"""TensorRT-LLM's attention-DP balancing (`attention_dp_config`; py_executor.py `_balance_adp_requests`) in the DP
group engine (`GroupEngine._adp_hold`): the rule counted by hand on two ranks, then whole runs."""

from __future__ import annotations

import pytest

from simroute.errors import ConfigurationError
from simroute.sim.engine.group import GroupEngine
from simroute.sim.runner import Simulation
from simroute.sim.schedulers.base import Plan
from tests.sim.test_dp_attention import _cfg, _one, _trace


class _Rank:
    """What `_adp_hold` reads of a rank beside its plan: whether it holds any request."""

    def __init__(self, busy: bool = True) -> None:
        self.running = [object()] if busy else []
        self.waiting: list = []
        self._inbox: list = []


def _group(timeout: int, batching_wait: int = 0, max_running: int = 8, ranks: int = 2) -> GroupEngine:
    group = GroupEngine.__new__(GroupEngine)         # the rule's state only: no simulation behind it
    group.ranks = [_Rank() for _ in range(ranks)]
    group._adp = (timeout, batching_wait, max_running)
    group.adp_waited = group.adp_batched = group.adp_held = 0
    return group


def _plan(prompts: int = 0, decodes: int = 1) -> Plan:
    return Plan(prefill=[(object(), 64)] * prompts, decode=[object()] * decodes)


@pytest.mark.parametrize("timeout", [1, 4, 60])
def test_a_prompt_on_one_rank_of_two_waits_for_the_timeout(timeout):
    """Both ranks generating, rank 0 with a prompt, rank 1 none: every iteration the counter grows; the prompt is
    held while it is below timeout_iters and runs in the iteration it reaches it (held timeout - 1 iterations,
    counted from a counter at 0), which restarts the counter."""
    group = _group(timeout)
    plans = [_plan(prompts=1), _plan()]
    held = [group._adp_hold(plans) for _ in range(timeout)]
    assert held == [True] * (timeout - 1) + [False]
    assert group.adp_waited == 0 and group.adp_held == timeout - 1
    assert group._adp_hold(plans) is (timeout > 1)          # the counter restarted: the next prompt waits again


def test_the_counter_runs_in_iterations_without_prompts():
    """The timeout counter grows in every iteration where some rank has no context request, prompts or not (the
    source keeps no arrival time): a prompt arriving after 3 prompt-free iterations waits timeout - 4 more."""
    group = _group(10)
    for _ in range(3):
        assert group._adp_hold([_plan(), _plan()]) and group.adp_waited in (1, 2, 3)
    held = [group._adp_hold([_plan(prompts=1), _plan()]) for _ in range(7)]
    assert held == [True] * 6 + [False] and group.adp_held == 6


def test_prompts_on_every_rank_run_at_once_and_restart_the_timeout():
    """Every rank with a context request and a free slot, batching_wait_iters 0: they run at once and the timeout
    counter restarts (a half-run timeout is lost)."""
    group = _group(60)
    for _ in range(5):
        group._adp_hold([_plan(prompts=1), _plan()])
    assert group.adp_waited == 5
    assert group._adp_hold([_plan(prompts=1), _plan(prompts=2)]) is False
    assert (group.adp_waited, group.adp_batched) == (0, 0)


def test_batching_wait_holds_prompts_on_every_rank_that_many_iterations():
    """batching_wait_iters 2: prompts on every rank (all generating) wait 2 iterations, run in the third, and the
    batching counter restarts; without generation on some rank they run at once."""
    group = _group(60, batching_wait=2)
    both = [_plan(prompts=1), _plan(prompts=1)]
    assert [group._adp_hold(both) for _ in range(4)] == [True, True, False, True]
    assert group.adp_batched == 1
    group = _group(60, batching_wait=2)
    assert group._adp_hold([_plan(prompts=1), _plan(prompts=1, decodes=0)]) is False


def test_a_rank_without_generation_lets_prompts_run_at_once():
    """Some rank has a context request but no generation request (it would otherwise idle): the prompts run at
    once and the timeout counter restarts."""
    group = _group(60)
    for _ in range(5):
        group._adp_hold([_plan(prompts=1), _plan()])
    assert group._adp_hold([_plan(prompts=1), _plan(prompts=1, decodes=0)]) is False
    assert group.adp_waited == 0
    group = _group(60)
    group.ranks[1].running = []
    group.ranks[1].waiting = [object()]             # a rank whose queued prompt does not fit runs nothing
    assert group._adp_hold([_plan(prompts=1), None]) is False


def test_an_empty_rank_counts_a_dummy_generation_request():
    """A rank with no request at all runs TensorRT-LLM's dummy generation request (_pad_attention_dp_dummy_request):
    every rank counts as generating, so another rank's prompt waits for the timeout."""
    group = _group(3)
    group.ranks[1] = _Rank(busy=False)
    assert [group._adp_hold([_plan(prompts=1), None]) for _ in range(3)] == [True, True, False]


def test_a_full_rank_sends_every_rank_to_the_timeout_branch():
    """A rank at max_batch_size generation requests has no free slot: even with prompts on every rank the
    timeout counter grows."""
    group = _group(60, max_running=4)
    assert group._adp_hold([_plan(prompts=1, decodes=4), _plan(prompts=1)]) is True
    assert group.adp_waited == 1


# ---- whole runs: deepseek-v2-lite, TP 2 with DP attention 2 and EP 2, TensorRT-LLM's preset ------------------------
def _run(tmp_path, **adp):
    """Requests on ranks 0 and 1 at t = 0 (long outputs), a third on rank 0 at 50 ms (during their decodes)."""
    trace = _trace(tmp_path / "t.parquet", [_one(64, 200, 0), _one(64, 200, 1), _one(64, 2, 0, arrival=0.05)])
    sim = Simulation(_cfg(trace, engine="trtllm", tp=2, dp_attention=2, ep=2, ep_flows=False, **adp))
    result = sim.run()
    rows = result.tables["iterations"].to_pandas()
    return result, rows[rows["instance"] == 0].reset_index(drop=True)


def test_off_and_a_timeout_of_one_run_as_before(tmp_path):
    """The preset's default (off) and balancing on with timeout_iters 1 / batching_wait_iters 0 (never holds: the
    counter reaches 1 in every iteration) give the same requests and iterations; on, the group counts no held
    step."""
    off, off_rows = _run(tmp_path)
    on, on_rows = _run(tmp_path, adp_balance=True, adp_timeout_iters=1, adp_batching_wait_iters=0)
    assert on.tables["requests"].equals(off.tables["requests"])
    assert on_rows.equals(off_rows)
    assert "adp_held_steps" not in off.summary["engine"]["group"]
    assert on.summary["engine"]["group"]["adp_held_steps"] == 0


def test_a_lone_prompt_runs_at_the_first_step_the_counter_reaches_the_timeout(tmp_path):
    """The third request reaches rank 0 while both ranks decode and rank 1 has no prompt. The two first prompts
    ran in step 0 (rank 1's a step later, with no generation on rank 1: at once, counter at 0), so the counter
    reaches timeout_iters 7 at step 1 + 7 = 8 counted from rank 1's prompt step: rank 0's prefill rows (steps
    where it runs a prompt) are 0 and 8, against 0 and the arrival's step (3) when off; its first token comes at
    the end of step 8 instead of step 3."""
    off, off_rows = _run(tmp_path)
    on, on_rows = _run(tmp_path, adp_balance=True, adp_timeout_iters=7, adp_batching_wait_iters=0)
    assert off_rows.index[off_rows["prefill_seqs"] > 0].tolist() == [0, 3]
    assert on_rows.index[on_rows["prefill_seqs"] > 0].tolist() == [0, 8]
    assert on.summary["engine"]["group"]["adp_held_steps"] == 5
    late_off = off.tables["requests"].to_pandas()["ttft_s"].iloc[2]
    late_on = on.tables["requests"].to_pandas()["ttft_s"].iloc[2]
    end = lambda rows, step: rows["t_start_s"].iloc[step] + rows["duration_s"].iloc[step]
    assert on_rows.iloc[:3].equals(off_rows.iloc[:3])       # the same steps until the prompt arrives
    assert late_on - late_off == pytest.approx(end(on_rows, 8) - end(off_rows, 3), rel=1e-9)
    assert late_on - late_off > 4 * on_rows["duration_s"].iloc[4]     # five decode steps at least


def test_the_settings_are_trtllm_s_and_refused_elsewhere(tmp_path):
    """The preset's defaults are TensorRT-LLM's AttentionDpConfig's (off, 50, 10); a run's flags win; another
    engine refuses them naming the setting."""
    trace = _trace(tmp_path / "t.parquet", [_one(64, 2, 0)])
    sim = Simulation(_cfg(trace, engine="trtllm", tp=2, dp_attention=2, ep=2))
    assert sim.engine.adp_balance == (False, 0, 0)
    assert [sim.engine.settings[k].value for k in ("adp_balance", "adp_timeout_iters", "adp_batching_wait_iters")] \
        == [False, 50, 10]
    assert "AttentionDpConfig" in sim.engine.settings["adp_timeout_iters"].source
    on = Simulation(_cfg(trace, engine="trtllm", tp=2, dp_attention=2, ep=2, adp_balance=True, adp_timeout_iters=60))
    assert on.engine.adp_balance == (True, 60, 10)
    assert on.ctx.engines.groups[0]._adp == (60, 10, on.ctx.engines[0].options.max_running)
    with pytest.raises(ConfigurationError, match="adp_timeout_iters.*only of: trtllm"):
        Simulation(_cfg(trace, engine="sglang", tp=2, dp_attention=2, ep=2, adp_timeout_iters=60))
    with pytest.raises(ConfigurationError, match="adp_balance"):
        _cfg(trace, engine="none", adp_balance=True)
