"""Pins for what the planted `serving` set (bench/planted_bugs.py --set serving) and its mutation sample found the
tests let through (docs/MUTATION.md): a DP group woken after it went idle, and the edges of SGLang's default memory
fraction, each counted by hand from sglang's own rule (0.5.14 python/sglang/srt/server_args.py
`_handle_gpu_memory_settings`: reserved MiB = 512 + 1.5 x max(chunked_prefill_size, 2048) + 2 x cuda_graph_max_bs +
tp x pp / 8 x 1024, with DP attention + 3 x cuda_graph_max_bs x dp_size and, when cuda_graph_max_bs > 300, + 1.5 x
cuda_graph_max_bs x dp_size; on a GPU of more than 60 x 1024 MiB at least 10 x 1024 reserved; the fraction
round((capacity - reserved) / capacity, 3))."""

from __future__ import annotations

import pytest

from simroute.calib.engines import load_engine_preset
from simroute.sim.frameworks import FRAMEWORKS, Deployment
from simroute.sim.frameworks.sglang import default_mem_fraction
from simroute.sim.runner import Simulation
from tests.sim.test_dp_attention import _cfg, _one, _trace

GIB = float(1 << 30)


def test_a_chunk_under_2048_tokens_reserves_the_activations_of_2048():
    """max(chunked_prefill_size, 2048) x 1.5: a 1,024-token chunk reserves 3,072 MiB, as a 2,048-token one does. On a
    48 GiB GPU (49,152 MiB: under the 60 GiB floor's threshold) at TP 1, 80 graph slots, no prefill graphs: 512 +
    3,072 + 160 + 128 = 3,872 MiB; 45,280 / 49,152 = 0.92122 -> 0.921 (1,536 MiB for the chunk would give 0.952)."""
    fraction, terms = default_mem_fraction(49_152, 1024, 80, 1, mla=False, prefill_graph_tokens=0)
    assert fraction == 0.921
    assert sum(value for _, value in terms) == 512 + 3072 + 160 + 128
    assert default_mem_fraction(49_152, 2048, 80, 1, mla=False, prefill_graph_tokens=0)[0] == 0.921


def test_a_flagged_small_chunk_moves_the_framework_s_default_fraction_by_the_2048_token_floor():
    """End to end through the sglang preset: a 40 GiB GPU without a published nvidia-smi figure (40,960 MiB, the
    entry's memory), TP 1 (the preset's 32 decode graph slots at that size), --chunked-prefill-size 1024 (non-MLA:
    piecewise prefill graphs up to the chunk, 38 sizes of 4-1024 at 8 MiB = 304 MiB): 512 + 3,072 + 64 + 128 + 304 =
    4,080 MiB reserved; 36,880 / 40,960 = 0.90039 -> 0.900."""
    deployment = Deployment(gpu="h100-sxm", hbm_bytes=40.0 * GIB, tp=1, layers=61, kv_capacity_tokens=794_880)
    resolved = FRAMEWORKS.get("sglang")().settings(load_engine_preset("sglang"), deployment, {"prefill_chunk": 1024})
    assert resolved["cuda_graph_max_batch"].value == 32 and resolved["prefill_graph_max_tokens"].value == 1024
    assert resolved["mem_fraction"].value == 0.9
    assert "4080 MiB reserved" in resolved["mem_fraction"].source


@pytest.mark.parametrize("slots, reserved, fraction", [
    # 512 + 1.5 x 8192 + 2 x 300 + 8 / 8 x 1024 + 3 x 300 x 8 = 21,624; 122,147 / 143,771 = 0.84959 -> 0.850
    (300, 21_624, 0.85),
    # 301 slots: + 1.5 x 301 x 8 = 3,612 on top of 512 + 12,288 + 602 + 1,024 + 7,224: 25,262; 0.82429 -> 0.824
    (301, 25_262, 0.824),
])
def test_dp_attention_s_extra_reserve_starts_above_300_graph_slots(slots, reserved, fraction):
    got, terms = default_mem_fraction(143_771, 8192, slots, 8, mla=True, prefill_graph_tokens=2048, dp_attention=8)
    assert sum(value for _, value in terms) == reserved and got == fraction


@pytest.mark.parametrize("gpu_mib, fraction", [
    # 512 + 3,072 + 16 + 128 = 3,728 MiB, raised to 10,240 on a GPU above 61,440 MiB: 133,531 / 143,771 = 0.92878
    (143_771, 0.929),
    # at exactly 60 x 1024 MiB no floor: 57,712 / 61,440 = 0.93932
    (61_440, 0.939),
    # one MiB more: the floor, 51,201 / 61,441 = 0.83334
    (61_441, 0.833),
])
def test_a_gpu_above_60_gib_reserves_at_least_10_gib(gpu_mib, fraction):
    got, terms = default_mem_fraction(gpu_mib, 2048, 8, 1, mla=False, prefill_graph_tokens=0)
    assert got == fraction
    assert sum(value for _, value in terms) == (10_240 if gpu_mib > 61_440 else 3_728)


def test_a_dp_group_that_went_idle_starts_a_later_request_as_it_started_the_first(tmp_path):
    """DP attention over 8 ranks + EP 8: one request at t = 0 on rank 0, another at t = 5 s on rank 3, long after the
    first finished and the group went idle. The second is planned the moment it arrives (an idle group plans at
    once) and, the same prompt and output on an idle group, takes the same time to its first token and to its end."""
    trace = _trace(tmp_path / "t.parquet", [_one(64, 2, 0), _one(64, 2, 3, arrival=5.0)])
    result = Simulation(_cfg(trace, tp=8, dp_attention=8, ep=8)).run()
    assert result.summary["completed"] == 2
    requests = result.tables["requests"].to_pandas()
    assert requests["ttft_s"].iloc[1] == pytest.approx(requests["ttft_s"].iloc[0], rel=1e-9)
    assert requests["e2e_s"].iloc[1] == pytest.approx(requests["e2e_s"].iloc[0], rel=1e-9)


def test_a_run_with_dp_attention_takes_sglang_s_dp_reserve_in_its_default_fraction():
    """`--dp-attention 8` on the run reaches the rule: DeepSeek-R1 at TP 8 on an H200 under the sglang preset
    (8,192-token chunk, 512 graph slots, DP attention disabling the piecewise prefill graphs): 512 + 12,288 + 1,024 +
    1,024 + 3 x 512 x 8 + 1.5 x 512 x 8 = 33,280 MiB reserved; 110,491 / 143,771 = 0.76852 -> 0.769 (without DP
    attention 0.886)."""
    from simroute.calib import default_profile_path, load_profile
    from simroute.sim import RunConfig
    from simroute.sim.presets import resolve_engine
    spec = load_profile(default_profile_path()).find_gpu_spec("h200-sxm")
    base = dict(topology="t.yaml", trace="t.parquet", calib="c.yaml", engine="sglang", tp=8, model="deepseek-r1",
                gpu="h200-sxm")
    fractions = [resolve_engine(RunConfig(**base, **parallel), spec, layers=61, kv_capacity_tokens=794_880,
                                mla=True, moe=True)[0].settings["mem_fraction"]
                 for parallel in ({}, {"dp_attention": 8, "ep": 8})]
    assert [setting.value for setting in fractions] == [0.886, 0.769]
    assert "33280 MiB reserved" in fractions[1].source


def test_hbm_gb_is_the_memory_sglang_s_default_fraction_is_a_share_of_in_mib():
    """--hbm-gb sets what nvidia-smi would read: 100 GiB is 102,400 MiB. DeepSeek at TP 8 (8,192-token chunk, 512
    graph slots, MLA prefill graphs): 512 + 12,288 + 1,024 + 1,024 + 1,536 = 16,384 MiB reserved; 86,016 / 102,400 =
    0.84 (the pool itself is not modelled: no published start-up figure for that memory)."""
    deployment = Deployment(gpu="h200-sxm", hbm_bytes=100 * GIB, tp=8, layers=61, kv_capacity_tokens=794_880, mla=True,
                            moe=True, hbm_override=True)
    resolved = FRAMEWORKS.get("sglang")().settings(load_engine_preset("sglang"), deployment, {})
    assert resolved["device_memory_mib"].value == 102_400
    assert resolved["mem_fraction"].value == 0.84 and resolved["startup_free_gib"].value is None
