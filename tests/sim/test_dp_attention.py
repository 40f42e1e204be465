"""DP attention in a run (docs/STEP_TIME.md, "DP attention in a run"): every attention rank its own instance (its
own latent KV, HBM budget, flows), the group stepping in lockstep at `group_iteration`'s time, the all-to-all on
the links, MTP's tokens per step. Hand counts throughout."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simroute.calib import default_profile_path
from simroute.model.dpstep import A2aLoad, GroupIteration, group_iteration
from simroute.model.parallel import A2A, LayerTraffic, Mtp, a2a_layer_traffic, rank_hit_probability
from simroute.model.steptime import BatchShape, causal_pairs
from simroute.network import shipped_topology
from simroute.scenarios.traces import write_trace
from simroute.sim import RunConfig
from simroute.sim.engine.group import GroupEngine
from simroute.sim.runner import Simulation

LITE = "deepseek-v2-lite"       # MLA + MoE, small: a DP group of it fits any GPU


def _trace(path, requests: list[dict], chunks: list[dict] | None = None):
    chunks = chunks or [{"chunk_id": 99, "tokens": 64, "canonical": True, "holder_hint": 0, "cached_offset": 0}]
    return str(write_trace(path, requests, chunks, name="dp"))


def _cfg(trace, **kw) -> RunConfig:
    base = {"topology": str(shipped_topology("fattree")), "trace": str(trace), "calib": str(default_profile_path()),
            "model": LITE, "engine": "none", "seed": 1, "hosts": 1}
    return RunConfig(**{**base, **kw})


def _one(prompt: int, output: int, requester: int, arrival: float = 0.0) -> dict:
    return {"arrival_s": arrival, "requester_hint": requester, "prompt_tokens": prompt, "output_tokens": output,
            "chunk_ids": [], "chunk_at_cached_offset": []}


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    return _trace(tmp_path_factory.mktemp("dp") / "t.parquet", [_one(64, 2, 0)])


def test_each_rank_holds_its_own_latent_dp8_has_8x_tp8s_kv_room(quiet):
    """The same free HBM per GPU: a TP 8 instance holds the latent on all 8 GPUs (one copy's room), DP 8 gives
    each GPU its own: 8x the tokens per host. By hand: free // (bytes per token x 64) blocks of 64 tokens."""
    free_gb = 10.0
    tp = Simulation(_cfg(quiet, tp=8))
    dp_probe = Simulation(_cfg(quiet, tp=8, dp_attention=8, ep=8))
    tp_weights = tp.ctx.engines[0].hbm.weight_bytes
    dp_weights = dp_probe.ctx.engines[0].hbm.weight_bytes
    assert dp_weights > tp_weights          # every rank keeps the whole attention
    tp = Simulation(_cfg(quiet, tp=8, hbm_gb=tp_weights / 1e9 + free_gb))
    dp = Simulation(_cfg(quiet, tp=8, dp_attention=8, ep=8, hbm_gb=dp_weights / 1e9 + free_gb))
    per_token = tp.ctx.engines.step.kv_bytes_per_token_per_gpu
    assert dp.ctx.engines.group_step.kv_bytes_per_token_per_gpu == per_token       # one latent row per token
    blocks = int(free_gb * 1e9 // (per_token * 64))
    assert len(tp.instances) == 1 and len(dp.instances) == 8
    assert tp.ctx.engines[0].hbm.capacity_blocks == blocks
    assert [engine.hbm.capacity_blocks for engine in dp.ctx.engines.engines] == [blocks] * 8
    # each rank an instance of one GPU, on its own GPU
    assert [inst.gpus for inst in dp.instances] == [(gpu,) for gpu in dp.ctx.topology.gpus[:8]]
    assert len(dp.ctx.engines.groups) == 1 and len(dp.ctx.engines.groups[0].ranks) == 8


def test_the_group_steps_in_lockstep_at_group_iterations_time(tmp_path):
    """Two requests on ranks 0 and 3 of one DP 8 group arrive at t = 0, rank 0's first: its prefill is planned
    alone (seven idle ranks join) and lasts `group_iteration` over the batches built by hand; rank 3's joins the
    next step, and from then on every step of the two starts and ends at the same instants."""
    trace = _trace(tmp_path / "t.parquet", [_one(1000, 4, 0), _one(2000, 3, 3)])
    sim = Simulation(_cfg(trace, tp=8, dp_attention=8, ep=8, ep_flows=False))
    result = sim.run()
    rows = result.tables["iterations"].to_pandas()
    zero, three = rows[rows["instance"] == 0], rows[rows["instance"] == 3]
    span = lambda r: [(round(t, 12), round(t + d, 12)) for t, d in zip(r["t_start_s"], r["duration_s"])]
    assert len(three) >= 3 and set(span(three)) <= set(span(zero))
    assert span(zero)[1] == span(three)[0]
    idle = BatchShape(0.0, 0.0, 0.0, 0.0)
    prefill = lambda n: BatchShape(new_tokens=n, sequences=1, kv_read_tokens=n, attention_pairs=causal_pairs(n, 0),
                                   prefill_pairs=causal_pairs(n, 0), decode_sequences=0)
    expected = group_iteration(sim.ctx.engines.group_step, [prefill(1000)] + [idle] * 7, traffic=False).seconds
    assert zero["duration_s"].iloc[0] == pytest.approx(expected, rel=1e-12)
    decode = BatchShape(new_tokens=1, sequences=1, kv_read_tokens=1001, attention_pairs=1001, decode_sequences=1)
    both = [decode, idle, idle, prefill(2000)] + [idle] * 4
    assert zero["duration_s"].iloc[1] == pytest.approx(group_iteration(sim.ctx.engines.group_step, both,
                                                                       traffic=False).seconds, rel=1e-12)
    assert result.summary["engine"]["group"]["steps"] == len(zero)      # rank 0 runs in every step until done


def test_a_dp_ranks_fetch_is_one_flow_of_all_its_bytes(tmp_path):
    """A DP rank is one GPU: its fetch is its own flow carrying the whole copy (no rank pairs to stand for), and
    the summary counts each link byte once (issue 36, item 5). Host 0's rank 0 fetches host 1's rank 9's chunk."""
    tokens = 8192
    chunks = [{"chunk_id": 0, "tokens": tokens, "canonical": True, "holder_hint": 9, "cached_offset": 0}]
    request = {**_one(16, 1, 0), "chunk_ids": [0], "chunk_at_cached_offset": [False]}
    trace = _trace(tmp_path / "t.parquet", [request], chunks)
    sim = Simulation(_cfg(trace, tp=8, dp_attention=8, ep=8, hosts=2, policy="always-fetch", rank_flows="every"))
    assert sim.ctx.cluster.rank_flows == (False, False)        # one GPU per instance: its flow is every rank's
    assert set(sim.ctx.cluster.tier_planes().values()) == {1}
    summary = sim.run().summary
    nbytes = tokens * sim.ctx.compute.kv_bytes_per_token
    assert summary["bytes"]["fetch"] == pytest.approx(nbytes, rel=1e-12)
    assert summary["network"]["fct_ms_fetch"]["flows"] == 1
    # up the source NIC's link and down the destination's: twice on the nic-leaf tier (the all-to-all of a
    # group inside one host stays on NVLink)
    assert summary["network"]["bytes_by_tier"]["nic-leaf"] == pytest.approx(2 * nbytes, rel=1e-9)


def _stub_step(sim, nbytes: float, ranks: int) -> None:
    """The group's step as a stub: 10 ms, 4 of them collectives, moving `nbytes` from GPU 0 (host 0) to GPU 8
    (host 1) of a 16-GPU group of `ranks` attention ranks."""
    matrix = [[0.0] * 16 for _ in range(16)]
    matrix[0][8] = nbytes
    zeros = tuple(tuple(0.0 for _ in range(16)) for _ in range(16))
    load = A2aLoad("target", LayerTraffic(A2A.DEEPEP, tuple(map(tuple, matrix)), zeros, tuple([0] * 8 + [1] * 8)), 1)
    sim.ctx.engines.groups[0]._iterate = lambda step, batches, traffic=True: GroupIteration(
        0.010, 0.004, 0, 1.0, (0.0,) * ranks, (load,), 0)


def test_the_step_waits_for_its_all_to_all_flows_never_less_than_the_table(tmp_path):
    """A stub step of 10 ms, 4 of them collectives, moving 250 MB between a GPU of host 0 and one of host 1 over
    25 GB/s NICs (ark-leafspine): the flow takes 10 ms, so the step is 6 + max(4, 10) = 16 ms. With 25 MB the
    flow takes 1 ms and the table's 4 ms stand: 10 ms."""
    trace = _trace(tmp_path / "t.parquet", [_one(64, 1, 0)])
    durations = {}
    for megabytes in (250, 25):
        sim = Simulation(_cfg(trace, topology=str(shipped_topology("ark-leafspine")), hosts=2, tp=16,
                              dp_attention=16, ep=16, telemetry=False))
        _stub_step(sim, megabytes * 1e6, 16)
        summary = sim.run().summary
        durations[megabytes] = summary["engine"]["group"]["step_s"]
        assert summary["engine"]["group"]["a2a_bytes"]["rdma"] == pytest.approx(megabytes * 1e6)
    nic = 25e9
    assert durations[250] == pytest.approx(0.006 + 250e6 / nic, rel=1e-3)     # latency: microseconds
    assert durations[25] == pytest.approx(0.010, rel=1e-9)


def test_ep_flows_and_routed_queries_slow_each_other_on_the_links(tmp_path):
    """The same stub step with 250 MB across hosts: a KV fetch on the same NIC pair shares its links and the
    step waits longer; and a routed message sent while the all-to-all moves waits for the bytes it shares."""
    ark = str(shipped_topology("ark-leafspine"))
    trace = _trace(tmp_path / "t.parquet", [_one(64, 1, 0)])
    sim = Simulation(_cfg(trace, topology=ark, hosts=2, tp=16, dp_attention=16, ep=16, telemetry=False))
    network, gpus = sim.ctx.network, sim.ctx.topology.gpus
    quiet = network.message_delay(gpus[0], gpus[8], 4096, t_probe_s=10e-6, single_block_Bps=25e9)
    network.transfer(gpus[0], gpus[8], 250e6, tag="a2a")      # the group's all-to-all leg, as the group starts it
    sim.env.run(until=1e-3)
    busy = network.message_delay(gpus[0], gpus[8], 4096, t_probe_s=10e-6, single_block_Bps=25e9)
    assert busy > quiet
    # and a KV fetch beside the all-to-all: the step's flow shares the NIC, the step lasts longer
    steps = {}
    for fetch in (False, True):
        sim = Simulation(_cfg(trace, topology=ark, hosts=2, tp=16, dp_attention=16, ep=16, telemetry=False))
        _stub_step(sim, 250e6, 16)
        if fetch:
            sim.ctx.network.transfer(sim.ctx.topology.gpus[0], sim.ctx.topology.gpus[8], 1e9, tag="fetch")
        steps[fetch] = sim.run().summary["engine"]["group"]["step_s"]
    # two flows on one 25 GB/s NIC: the step's 250 MB move at half rate, 20 ms, the step 26 ms
    assert steps[False] == pytest.approx(0.016, rel=1e-3)
    assert steps[True] == pytest.approx(0.006 + 2 * 250e6 / 25e9, rel=1e-3)


@pytest.mark.parametrize("rank_flows", ["shortcut", "every"])
def test_all_to_all_bytes_count_once_where_an_attention_rank_is_two_gpus(tmp_path, rank_flows):
    """DP 8 over TP 16 (attention ranks of 2 GPUs): a tier where one rank pair's KV flow stands for two counts
    bulk bytes twice, but a group's all-to-all goes as every GPU pair's flow, so its bytes count once in
    `bytes_by_tier`: 250 MB per step from host 0's GPU 0 to host 1's GPU 8 cross the nic-leaf tier twice (up,
    down), whatever --rank-flows says."""
    ark = str(shipped_topology("ark-leafspine"))
    trace = _trace(tmp_path / "t.parquet", [_one(64, 1, 0)])
    sim = Simulation(_cfg(trace, topology=ark, hosts=2, tp=16, dp_attention=8, ep=16, a2a="allgather",
                          rank_flows=rank_flows))
    assert sim.cfg.instance_gpus == 2
    _stub_step(sim, 250e6, 8)
    summary = sim.run().summary
    steps = summary["engine"]["group"]["steps"]
    assert steps >= 1
    assert summary["engine"]["group"]["a2a_bytes"]["rdma"] == pytest.approx(steps * 250e6)
    assert summary["engine"]["group"]["a2a_tier_bytes"]["nic-leaf"] == pytest.approx(steps * 2 * 250e6)
    assert summary["network"]["bytes_by_tier"]["nic-leaf"] == pytest.approx(steps * 2 * 250e6, rel=1e-9)


def test_deepep_normal_mode_reaches_a_host_once():
    """Prefill all-to-all across two hosts (EP 16 over 256 experts, 16 per GPU): a token crosses the fabric once
    per host it hits, P = 1 - C(128, 8) / C(256, 8), not once per GPU it hits (8 x (1 - C(240, 8) / C(256, 8)));
    NVLink fans it out there. The legs' RDMA bytes are the end-to-end ones x that ratio."""
    from simroute.model.geometry import get_model
    from simroute.model.parallel import Deployment
    geometry = get_model("deepseek-v3")
    deployment = Deployment(tp=16, dp=16, ep=16, gpus_per_host=8, a2a=A2A.DEEPEP)
    traffic = a2a_layer_traffic(geometry, deployment, [100.0] * 16, prefill=True)
    host = 1 - math.comb(128, 8) / math.comb(256, 8)
    gpu = 1 - math.comb(240, 8) / math.comb(256, 8)
    assert rank_hit_probability(256, 128, 8) == pytest.approx(host)
    assert traffic.relay and traffic.relay_share == pytest.approx(host / (8 * gpu), rel=1e-12)
    legs = traffic.legs()
    cross = lambda pairs: sum(v for (s, d), v in pairs if (s < 8) != (d < 8))
    end_to_end = traffic.by_link()["dispatch"]["rdma"] + traffic.by_link()["combine"]["rdma"]
    assert cross(legs.items()) == pytest.approx(end_to_end * host / (8 * gpu), rel=1e-12)
    # decode (low-latency mode) sends every (token, expert) message itself: legs are the matrix's pairs
    ll = a2a_layer_traffic(geometry, deployment, [100.0] * 16, prefill=False)
    assert not ll.relay and sum(ll.legs().values()) == pytest.approx(
        sum(v["nvlink"] + v["rdma"] for v in ll.by_link().values()), rel=1e-12)


def test_mtp_draws_average_the_models_tokens_per_step():
    """nextn 2 at acceptance 0.6: 1 + 0.6 + 0.36 = 1.96 tokens per step; 40,000 seeded draws within 0.02."""
    mtp = Mtp(2, accept_rate=0.6)
    assert mtp.tokens_per_step == pytest.approx(1.96)
    draws = GroupEngine._draw(_Draws(mtp), 40_000)
    assert np.mean(draws) == pytest.approx(1.96, abs=0.02)
    assert set(draws) <= {1, 2, 3}


class _Draws:
    """What `GroupEngine._draw` reads."""

    def __init__(self, mtp: Mtp) -> None:
        self._lengths = np.asarray(mtp.length_probabilities())
        self._rng = np.random.default_rng(7)


@pytest.mark.parametrize("rate, decode_steps", [(1.0, 3), (0.0, 9)])
def test_mtp_a_sequence_of_ten_tokens_ends_in_the_expected_steps(tmp_path, rate, decode_steps):
    """One request, 10 output tokens: the prefill step emits the first; with nextn 2 every draft accepted each
    decode step emits 3 (9 / 3 = 3 steps), none accepted 1 (9 steps). TPOT is those steps over 9 tokens."""
    trace = _trace(tmp_path / "t.parquet", [_one(64, 10, 0)])
    cfg = _cfg(trace, model="deepseek-v3", gpu="h200-sxm", tp=8, nextn=2, accept_rate=rate)
    result = Simulation(cfg).run()
    summary = result.summary
    group = summary["engine"]["group"]
    assert group["steps"] == 1 + decode_steps
    assert group["decode_tokens"] == 9 and group["decode_steps"] == decode_steps
    assert summary["completed"] == 1
    steps = result.tables["iterations"].to_pandas()["duration_s"]
    assert summary["tpot_ms"]["mean"] == pytest.approx(steps.iloc[1:].sum() / 9 * 1e3, rel=1e-9)
    # the MTP module's weights sit in HBM beside the target's
    plain = Simulation(_cfg(tmp_path / "t.parquet", model="deepseek-v3", gpu="h200-sxm", tp=8, ep=8))
    assert summary["engine"]["hbm"]["weights_gb_per_gpu"] > plain.ctx.engines[0].hbm.weight_bytes / 1e9


def test_impossible_groups_are_refused_naming_the_field(quiet):
    from simroute.errors import ConfigurationError
    with pytest.raises(ConfigurationError, match="ep") as err:
        _cfg(quiet, tp=8, dp_attention=8, ep=3)
    assert err.value.field == "ep"
    with pytest.raises(ConfigurationError) as err:
        _cfg(quiet, tp=8, dp_attention=3)
    assert err.value.field == "dp_attention"
    with pytest.raises(ConfigurationError) as err:
        _cfg(quiet, tp=8, nextn=2)                       # an acceptance is needed, and v2-lite has no MTP module
    assert err.value.field == "nextn"


@pytest.mark.parametrize("parallel", [dict(ep=8), dict(dp_attention=8, ep=8)], ids=["tp8-ep8", "dp8-ep8"])
def test_an_engine_presets_launch_floor_holds_in_a_group_as_on_a_tp_instance(tmp_path, parallel):
    """TensorRT-LLM's preset on H200, DeepSeek-V3: a 1000-token prompt's context batch runs eagerly (its CUDA
    graphs hold decode-only batches), so it lasts no less than 61 layers x the preset's MLA + MoE launch, plus one
    sequence's host work (overlapped): on a TP 8 instance, and in a TP 8 + EP 8 or DP 8 + EP 8 group the same
    (their kernels are shorter than the launches); its decodes replay graphs and take their kernels' time."""
    trace = _trace(tmp_path / "t.parquet", [_one(1000, 3, 0)])
    runs = {}
    for label, extra in (("tp", {}), ("group", parallel)):
        sim = Simulation(_cfg(trace, model="deepseek-v3", gpu="h200-sxm", engine="trtllm", tp=8, ep_flows=False,
                              **extra))
        runs[label] = (sim, sim.run().tables["iterations"].to_pandas())
    sim, rows = runs["group"]
    host = sim.ctx.engines.group_step.host
    assert host is not None and host == runs["tp"][0].ctx.engines.step.host        # the preset's, both ways
    floor = 61 * host.launch_s_per_layer + host.host_s_per_sequence
    planned = group_iteration(sim.ctx.engines.group_step,
                           [BatchShape(1000, 1, 1000, causal_pairs(1000, 0), causal_pairs(1000, 0), 0)]
                           + [BatchShape(0.0, 0.0, 0.0, 0.0)] * (sim.ctx.engines.group_step.deployment.dp - 1),
                           traffic=False)
    first = rows[rows["instance"] == 0]["duration_s"]
    assert first.iloc[0] == pytest.approx(floor, rel=1e-12) == planned.seconds
    assert runs["tp"][1]["duration_s"].iloc[0] == pytest.approx(floor, rel=1e-12)
    assert 0 < first.iloc[1] < floor / 4                                 # a decode of one: a graph replay


def test_a_group_of_one_rank_steps_alone_as_a_tp_instance_on_the_groups_step(tmp_path):
    """TP 8 + EP 8 (one attention rank, no MTP): nothing to keep in lockstep, so the instance runs as a TP instance
    does: after its 1000-token prefill, one event stands for 8 identical decode iterations (of its 9 left) and
    lasts 8 x the group's step at their mid-point context (1000 + 1 + 3.5 tokens); no lockstep figures."""
    trace = _trace(tmp_path / "t.parquet", [_one(1000, 10, 0)])
    sim = Simulation(_cfg(trace, tp=8, ep=8))
    result = sim.run()
    step = sim.ctx.engines.group_step
    assert step.deployment.ep == 8 and step.deployment.dp == 1 and not sim.ctx.engines.groups
    rows = result.tables["iterations"].to_pandas()
    prefill = BatchShape(1000, 1, 1000, causal_pairs(1000, 0), causal_pairs(1000, 0), 0)
    assert rows["duration_s"].iloc[0] == pytest.approx(group_iteration(step, [prefill], traffic=False).seconds,
                                                       rel=1e-12)
    assert rows["iterations"].iloc[1] == 8
    mid = 1000 + 1 + 3.5
    decode = BatchShape(new_tokens=1, sequences=1, kv_read_tokens=mid, attention_pairs=mid, decode_sequences=1)
    assert rows["duration_s"].iloc[1] == pytest.approx(8 * group_iteration(step, [decode], traffic=False).seconds,
                                                       rel=1e-12)
    group = result.summary["engine"]["group"]
    assert (group["ep"], group["dp_attention"], group["lockstep"], group["groups"]) == (8, 1, False, 1)
    assert (group["nextn"], group["mtp_tokens_per_step"]) == (0, 1.0)       # no MTP
    assert "steps" not in group
    # the embedding and LM head split over the attention rank's 8 GPUs in bf16: 2 x (102,400 / 8) x 2048 x 2 B, in GB
    assert group["weights_gb_by_part"]["embedding_and_head"] == pytest.approx(2 * 12_800 * 2048 * 2 / 1e9, rel=1e-12)


@pytest.mark.parametrize("preset", [True, False], ids=["host-costs", "gpu-constant"])
def test_a_one_rank_instances_step_is_group_iterations_for_any_batch(preset):
    """`OneRankStep` keeps the token-count terms and reads the attention per batch: the same seconds as
    `group_iteration` over 200 seeded batches of decodes (some past the CUDA-graph limit) and prefill chunks,
    DeepSeek-V3 at TP 8 + EP 8 on the H200 tables, with a preset's host costs and without."""
    from simroute.calib import load_profile, shipped_dir
    from simroute.model.dpstep import DeploymentStep
    from simroute.model.geometry import get_model
    from simroute.model.parallel import Deployment
    from simroute.model.steptime import HostCosts, StepTimeModel
    from simroute.sim.engine.group import OneRankStep
    gpu = load_profile(shipped_dir() / "gpus" / "h200-sxm.yaml").gpu_spec("h200-sxm")
    host = HostCosts(overlap=True, host_s_per_sequence=2e-5, launch_s_per_layer=1.77e-3, graph_max_batch=64,
                     prefill_graph_max_tokens=512) if preset else None
    geometry = get_model("deepseek-v3")
    group = DeploymentStep(geometry, gpu, Deployment(tp=8, ep=8), cuda_graphs=True, host=host)
    step = OneRankStep(StepTimeModel(geometry, gpu, 8, host=host), group)
    rng = np.random.default_rng(7)
    for _ in range(200):
        decodes = int(rng.choice([0, 1, 4, 64, 65, 200]))
        context = float(rng.integers(1, 9000))
        chunk = int(rng.choice([0, 0, 300, 512, 513, 4096]))
        if decodes == 0 and chunk == 0:
            continue
        pairs = causal_pairs(chunk, 100.0) if chunk else 0.0
        shape = (decodes + chunk, decodes + (1 if chunk else 0), decodes * context + (100 + chunk if chunk else 0),
                 decodes * context + pairs, pairs, decodes)
        assert step.iteration_s(*shape) == pytest.approx(
            group_iteration(group, [BatchShape(*shape)], traffic=False).seconds, rel=1e-12)


@pytest.mark.parametrize("preset", [True, False], ids=["host-costs", "gpu-constant"])
def test_a_one_rank_instances_step_tells_a_one_token_chunk_from_a_decode(preset):
    """Two batches of 5 new tokens and 5 sequences: 4 decodes beside the last token of a prompt (a one-token prefill
    chunk), and 5 decodes. They share the token counts but not the decode rows, so `OneRankStep` keeps their token
    terms apart: read one after the other, in either order, each is `group_iteration`'s seconds for that batch."""
    from simroute.calib import load_profile, shipped_dir
    from simroute.model.dpstep import DeploymentStep
    from simroute.model.geometry import get_model
    from simroute.model.parallel import Deployment
    from simroute.model.steptime import HostCosts, StepTimeModel
    from simroute.sim.engine.group import OneRankStep
    gpu = load_profile(shipped_dir() / "gpus" / "h200-sxm.yaml").gpu_spec("h200-sxm")
    host = HostCosts(overlap=True, host_s_per_sequence=2e-5, launch_s_per_layer=1.77e-3, graph_max_batch=64,
                     prefill_graph_max_tokens=512) if preset else None
    geometry = get_model("deepseek-v3")
    group = DeploymentStep(geometry, gpu, Deployment(tp=8, ep=8), cuda_graphs=True, host=host)
    pairs = causal_pairs(1, 100.0)
    chunk_and_decodes = (5, 5, 4 * 2000.0 + 101, 4 * 2000.0 + pairs, pairs, 4)
    decodes = (5, 5, 5 * 2000.0, 5 * 2000.0, 0.0, 5)
    for first, second in ((chunk_and_decodes, decodes), (decodes, chunk_and_decodes)):
        step = OneRankStep(StepTimeModel(geometry, gpu, 8, host=host), group)
        for shape in (first, second):
            assert step.iteration_s(*shape) == pytest.approx(
                group_iteration(group, [BatchShape(*shape)], traffic=False).seconds, rel=1e-12)
