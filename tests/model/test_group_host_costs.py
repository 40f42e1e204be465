"""The framework's CPU side (`HostCosts`: host work per sequence, the eager launch floor of a batch outside the
captured CUDA graphs, overlap scheduling) is charged to a DP-attention / expert-parallel group's step by the
formula a TP instance's step is charged by (`HostCosts.step_s`), by hand on the shipped H200 tables
(docs/STEP_TIME.md, "DP attention and expert parallelism"; docs/ENGINES.md)."""

from __future__ import annotations

import pytest

from simroute.calib import load_profile, shipped_dir
from simroute.model.dpstep import DeploymentStep, group_iteration
from simroute.model.geometry import get_model
from simroute.model.parallel import Deployment
from simroute.model.steptime import BatchShape, HostCosts, StepTimeModel

V3 = get_model("deepseek-v3")
LAYERS = V3.layers                                        # 61
IDLE = BatchShape(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
GRAPHS = 32                                               # decode batches of up to 32 sequences replay a graph


def _host(overlap: bool, per_sequence: float = 0.0, launch: float = 0.0) -> HostCosts:
    return HostCosts(overlap=overlap, host_s_per_sequence=per_sequence, launch_s_per_layer=launch,
                     graph_max_batch=GRAPHS)


@pytest.fixture(scope="module")
def h200():
    return load_profile(shipped_dir() / "gpus" / "h200-sxm.yaml").gpu_spec("h200-sxm")


def _group(gpu, deployment: Deployment, host: HostCosts | None) -> DeploymentStep:
    return DeploymentStep(V3, gpu, deployment, cuda_graphs=True, host=host)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_group_of_one_rank_at_ep_1_charges_the_tp_instances_host_costs_by_hand(h200, overlap):
    """DP 1, EP 1, TP 8: the group is the TP instance. Its kernels are read with host costs of zero (no GPU entry
    constant is charged under a preset); the host costs are then, by hand, 50 us per sequence and 1 ms per layer
    launched eagerly: serial host + max(kernels, launch), or max(kernels, host + launch) when overlapped. A decode
    of 16 replays its graph; a decode of 64 (past 32) and a prefill launch every layer."""
    per_sequence, launch = 50e-6, 1e-3
    host = _host(overlap, per_sequence, launch)
    group = _group(h200, Deployment(tp=8), host)
    bare = _group(h200, Deployment(tp=8), _host(overlap))
    tp = StepTimeModel(V3, h200, 8, cuda_graphs=True, host=host)
    cases = [(BatchShape.uniform(decode_seqs=16, context=2048), 16, False),
             (BatchShape.uniform(decode_seqs=64, context=2048), 64, True),
             (BatchShape.uniform(prefill_tokens=1024), 1, True)]
    for batch, sequences, eager in cases:
        kernels = bare.iteration(batch).iteration_s
        cpu = per_sequence * sequences
        floor = LAYERS * launch if eager else 0.0
        by_hand = max(kernels, cpu + floor) if overlap else cpu + max(kernels, floor)
        step = group.iteration(batch)
        assert step.iteration_s == pytest.approx(by_hand, rel=1e-12)
        assert step.terms_s["overhead"] == pytest.approx(by_hand - kernels, abs=1e-15)
        assert step.sources["overhead"].startswith("engine preset: " + ("eager launches" if eager else "CUDA graph"))
        # the TP engine's step of the same batch: the same figure (one formula)
        assert tp.iteration_s(batch.new_tokens, batch.sequences, batch.kv_read_tokens, batch.attention_pairs,
                              batch.prefill_pairs, batch.decode_sequences) == pytest.approx(by_hand, rel=1e-12)
        assert tp.iteration(batch).overhead_s == pytest.approx(step.terms_s["overhead"], rel=1e-9, abs=1e-15)
    # the 1k prefill's kernels are shorter than 61 eager launches: the launch floor sets the step
    assert group.iteration(BatchShape.uniform(prefill_tokens=1024)).iteration_s == pytest.approx(
        LAYERS * launch + per_sequence)


@pytest.mark.parametrize("deployment", [Deployment(tp=8, ep=8), Deployment(tp=8, dp=8, ep=8)],
                         ids=["tp8-ep8", "dp8-ep8"])
def test_a_batch_past_the_cuda_graph_limit_pays_the_launch_floor_in_a_group_too(h200, deployment):
    """A launch of 10 ms per layer dwarfs any decode kernel here. Every rank within the captured sizes (or idle):
    the step replays its graph and takes its kernels' time (the host work, 1 us per sequence, hides behind them).
    One rank's decode past 32 sequences, or one rank's prefill, makes the whole group launch eagerly (SGLang takes
    the min of `can_cuda_graph` over the DP ranks): 61 x 10 ms plus the busiest rank's host work."""
    launch, per_sequence = 10e-3, 1e-6
    group = _group(h200, deployment, _host(True, per_sequence, launch))
    bare = _group(h200, deployment, _host(True))
    dp = deployment.dp
    within = [BatchShape.uniform(decode_seqs=GRAPHS, context=2048)] + [IDLE] * (dp - 1)
    past = [BatchShape.uniform(decode_seqs=GRAPHS + 1, context=2048)] + [IDLE] * (dp - 1)
    prefill = [BatchShape.uniform(decode_seqs=4, context=2048, prefill_tokens=256)] + [IDLE] * (dp - 1)
    assert group.iteration(within).iteration_s == bare.iteration(within).iteration_s < LAYERS * launch
    assert group.iteration(past).iteration_s == pytest.approx(LAYERS * launch + (GRAPHS + 1) * per_sequence)
    assert group.iteration(prefill).iteration_s == pytest.approx(LAYERS * launch + 5 * per_sequence)
    if dp > 1:
        # the eager rank need not be the busiest: one rank's 256-token prefill (one sequence) beside ranks of 32
        # graphable decodes takes every rank eager; the host work is the busiest rank's (32 sequences), not the
        # group's sum
        mixed = [BatchShape.uniform(decode_seqs=GRAPHS, context=2048)] * (dp - 1) + [
            BatchShape.uniform(prefill_tokens=256)]
        assert group.iteration(mixed).iteration_s == pytest.approx(LAYERS * launch + GRAPHS * per_sequence)
    # the simulator's call carries it (group_iteration's seconds are the step's)
    assert group_iteration(group, past, traffic=False).seconds == group.iteration(past).iteration_s


def test_serial_host_work_is_the_busiest_ranks_not_the_groups_sum(h200):
    """DP 8: each rank's scheduler prepares its own batch beside the others'. Serial host work of 100 us per
    sequence, no launch cost: ranks of 1..8 decodes add 8 x 100 us to the kernels, not 36 x."""
    per_sequence = 100e-6
    deployment = Deployment(tp=8, dp=8, ep=8)
    group = _group(h200, deployment, _host(False, per_sequence))
    bare = _group(h200, deployment, _host(False))
    ranks = [BatchShape.uniform(decode_seqs=n, context=1024) for n in range(1, 9)]
    assert group.iteration(ranks).iteration_s == pytest.approx(bare.iteration(ranks).iteration_s + 8 * per_sequence,
                                                               rel=1e-12)


def test_without_a_preset_a_group_of_one_rank_at_ep_1_adds_the_gpu_entry_s_constant_as_the_tp_instance(h200):
    """No engine preset (`host` None): the group's step is its kernels plus the GPU entry's constant overhead (the
    H200 entry's 300 us `iteration_overhead_us`; it has no CUDA-graph figure), the TP instance's figure for the same
    batch."""
    group = _group(h200, Deployment(tp=8), None)
    tp = StepTimeModel(V3, h200, 8, cuda_graphs=True)
    assert h200.iteration_overhead_graph_s is None
    constant = h200.iteration_overhead_s
    assert constant == pytest.approx(300e-6, rel=1e-12)
    for batch in (BatchShape.uniform(decode_seqs=16, context=2048), BatchShape.uniform(prefill_tokens=1024)):
        step = group.iteration(batch)
        assert step.terms_s["overhead"] == pytest.approx(constant, rel=1e-12)
        assert step.iteration_s == pytest.approx(tp.iteration_s(batch.new_tokens, batch.sequences,
                                                                batch.kv_read_tokens, batch.attention_pairs,
                                                                batch.prefill_pairs, batch.decode_sequences),
                                                 rel=1e-12)
