"""Edges of the closed form that a mutation sample over simroute/model found unpinned (docs/MUTATION.md,
issue 23): a selection of one entry, the reductions' defaults, the Fig 1b sweep, the MLA latent widths."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simroute.calib import load_profile
from simroute.model.cost import FLOATS, CostParams, Shape, costs, holder_compute_s, step_parts
from simroute.model.geometry import MODELS
from simroute.model.sweeps import cost_vs_chunk

REL = 1e-12


@pytest.fixture(scope="module")
def params() -> CostParams:
    return load_profile("h100-ibgda").cost_params("deepseek-v2-lite")


def test_a_selection_of_one_entry_is_sparse(params):
    # topk = 1 is a selection (gathered every step, never pulled): layers x (base / k_ref x 1 + per-holder x M)
    parts = step_parts(64.0, 2048.0, 0, 1, 2, 1, False, params, FLOATS)
    assert parts.pull is None and parts.splice is None and parts.sparse
    want = params.geometry.layers * (params.gather_base_s / params.gather_k_ref + params.gather_per_holder_s * 2)
    assert parts.gather == pytest.approx(want, rel=REL)


def test_the_reductions_are_off_unless_asked(params):
    """Built with only the required constants, CostParams is the paper's baseline regime: no host overhead and
    none of the three reductions; in the host regime the holder's compute is then not amortised."""
    required = {field.name: getattr(params, field.name) for field in dataclasses.fields(CostParams)
                if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING}
    bare = CostParams(**required)
    assert (bare.host_overhead, bare.collapsed_response, bare.holder_amortisation, bare.dispatcher_batching) == \
        (False, False, False, False)
    hosted = bare.with_(host_overhead=True)
    parts = step_parts(64.0, 2048.0, 0, 0, 1, 1, False, hosted, FLOATS)
    assert parts.compute == holder_compute_s(64.0, 2048.0, 0, hosted, FLOATS)
    assert parts.ret_extra == 2.0 * parts.probe                  # no collapsed response: (o, m, l) in three puts


def test_cost_vs_chunk_is_the_closed_form_at_each_chunk(params):
    chunks = np.array([256.0, 2048.0])
    sweep = cost_vs_chunk(params, chunks, mq=256, bw_Bps=25e9, prefill_band_us=(0.5, 1.5))
    at_bw = params.with_(fabrics=(dataclasses.replace(params.fabrics[0], single_block_Bps=25e9, bulk_Bps=25e9),
                                  *params.fabrics[1:]))
    central = costs(Shape(mq=256, ct=chunks), at_bw)
    for primitive in ("route", "fetch", "local"):
        np.testing.assert_allclose(sweep[f"{primitive}_s"], central[primitive]["total"], rtol=REL)
    # the band moves local's re-prefill only: layers x ct x c for c = 0.5 and 1.5 us
    layers = params.geometry.layers
    for column, per_token_us in (("local_lo_s", 0.5), ("local_hi_s", 1.5)):
        np.testing.assert_allclose(sweep[column], central["local"]["attend"] + layers * chunks * per_token_us * 1e-6,
                                   rtol=1e-9)


@pytest.mark.parametrize("name", sorted(name for name, model in MODELS.items() if model.is_mla))
def test_mla_latent_widths(name):
    # absorbed MLA (DeepSeek-V2 §2.1): a key is kv_lora_rank 512 + the decoupled RoPE 64 = 576 wide, a value 512
    assert (MODELS[name].d_qk, MODELS[name].d_v) == (576, 512)
