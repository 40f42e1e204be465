"""`plan`'s resource use of a probe (simroute.study.plan.resource_use, busiest) on summaries written by hand: the HBM
share is the KV in use at the busiest moment over the KV pool, i.e. the GPU's memory less the weights and less what
the framework keeps outside its pool (summary engine.hbm.outside_pool_gb_per_gpu: activations, CUDA graphs)."""

from __future__ import annotations

import pytest

from simroute.study.plan import busiest, resource_use


def _summary(running: float, pinned: float, copies: float, outside: float = 16.0, **extra) -> dict:
    """One GPU of 141 GB holding 85 GB of weights and `outside` GB beside its pool (40 GB of pool at 16)."""
    return {"engine": {"hbm": {"capacity_gb_per_gpu": 141.0, "weights_gb_per_gpu": 85.0,
                               "outside_pool_gb_per_gpu": outside,
                               "at_peak": {"running_kv_gb": running, "pinned_chunks_gb": pinned, "copies_gb": copies}},
                       **extra},
            "network": {"max_link_utilisation": 0.2, "bottlenecks": {"most_saturated_tier": "leaf-spine"}},
            "holders": {"max_busy_share": 0.3}}


def test_the_hbm_share_is_over_the_kv_pool_not_all_memory_after_the_weights():
    """10 + 4 + 6 = 20 GB in use of a 141 - 85 - 16 = 40 GB pool: 0.5 (over the 56 GB the weights leave: 0.357)."""
    use = resource_use([_summary(10.0, 4.0, 6.0)])
    assert use["hbm"] == pytest.approx(0.5)
    assert busiest(use) == "HBM 50%"
    # a framework without a pool of its own (0 outside): the 56 GB after the weights
    assert resource_use([_summary(28.0, 0.0, 0.0, outside=0.0)])["hbm"] == pytest.approx(0.5)


def test_seeds_average_and_a_squeezed_run_counts_as_full():
    """Two seeds, 20 / 40 and 30 / 40 of the pool: 0.625; a run that preempted counts 1.0, whatever its peak."""
    assert resource_use([_summary(10.0, 4.0, 6.0), _summary(30.0, 0.0, 0.0)])["hbm"] == pytest.approx(0.625)
    squeezed = _summary(1.0, 0.0, 0.0, preemptions=3)
    assert resource_use([_summary(10.0, 4.0, 6.0), squeezed])["hbm"] == pytest.approx(0.75)
    use = resource_use([_summary(10.0, 4.0, 6.0)])
    assert (use["network"], use["network_tier"], use["compute"]) == (0.2, "leaf-spine", 0.3)
