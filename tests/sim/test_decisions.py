"""A dense request's decisions (`RequestDecisions`): one per holder block, memoised per (block shape, live state)
and measured once per holder, they must equal the per-block reference (a fresh `DecisionContext` for every
(holder, cached offset) block on its summed tokens, HBM room summed over every copy) on randomized cluster states: holder engines' partials and layers, link load, a
requester HBM nearly full of copies (some pinned), chunks of mixed sizes repeated within the request."""

from __future__ import annotations

import numpy as np
import pytest

from simroute.calib import default_profile_path
from simroute.network import shipped_topology
from simroute.scenarios.traces import write_trace
from simroute.sim import RunConfig, Simulation
from simroute.sim.engine.exchange import DemandEntry
from simroute.sim.request_spec import RequestSpec
from simroute.sim.policies.base import RequestShape
from simroute.sim.request import DenseRequest, RemoteChunks, build_decision_context, holder_blocks
from simroute.sim.vocab import Primitive
from simroute.defaults import PAPER_DEPLOYMENT

REQUESTER = 4
SIZES = (64, 448, 512, 2048, 8192)
REMOTE_CHUNKS = 40          # chunks 0..39 are attended remotely; 40..59 are copies on the requester


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    chunks = [{"chunk_id": i, "tokens": SIZES[i % len(SIZES)], "canonical": True, "holder_hint": i % 8,
               "cached_offset": 0} for i in range(REMOTE_CHUNKS + 20)]
    reqs = [{"arrival_s": 0.0, "requester_hint": REQUESTER, "prompt_tokens": 16, "output_tokens": 4,
             "chunk_ids": [0], "chunk_at_cached_offset": [True]}]
    return write_trace(tmp_path_factory.mktemp("decisions") / "t.parquet", reqs, chunks)


def _state(trace, seed: int, policy: str = "adaptive") -> tuple[Simulation, RequestSpec, RemoteChunks]:
    """A fresh simulation put into the seed's random state, and the request's remote chunks."""
    sim = Simulation(RunConfig(**PAPER_DEPLOYMENT, topology=str(shipped_topology("paper-testbed")), trace=str(trace),
                               calib=str(default_profile_path()), policy=policy))
    rng = np.random.default_rng(seed)
    ctx, instances = sim.ctx, sim.ctx.cluster.instances
    others = [i for i in range(len(instances)) if i != REQUESTER]
    for _ in range(int(rng.integers(0, 4))):          # bulk flows into the requester: tighter path shares
        src = instances[int(rng.choice(others))]
        ctx.network.transfer(src.gpu, instances[REQUESTER].gpu, 1e12)
    sim.env.run(until=1e-3)
    for h in others:                                  # holders: other requesters' partials, a current layer
        engine = ctx.engines[h]
        if rng.random() < 0.6:
            # from, until, rate
            engine.partials.demand.append(DemandEntry(0.0, 1.0, float(rng.uniform(0.0, 0.9)), 99, 0.0))
        engine.busy = bool(rng.random() < 0.5)
        engine.layer_s = float(rng.uniform(0.0, 3e-3))
    hbm = ctx.engines[REQUESTER].hbm                  # requester: copies (LRU order, some pinned), little free
    for ci in range(REMOTE_CHUNKS, REMOTE_CHUNKS + int(rng.integers(0, 20))):
        assert hbm.add_copy(ci, int(rng.integers(1, 64)))
        if rng.random() < 0.4:
            ctx.cluster.chunks.pin(ci, REQUESTER)
    assert hbm.reserve_kv(hbm.free_blocks - int(rng.integers(0, 300)))
    n = int(rng.integers(1, 30))
    chunks = [int(c) for c in rng.integers(0, REMOTE_CHUNKS, size=n)]          # repeats allowed
    cached = [bool(c) for c in rng.random(n) < 0.5]
    remote = RemoteChunks.from_columns(chunks, [int(rng.choice(others)) for _ in chunks], cached)
    prompt, output = (int(np.exp(rng.uniform(0.0, np.log(top)))) for top in (8192, 1000))   # log-uniform
    spec = RequestSpec(0, REQUESTER, -1, prompt, output, chunks, cached, 0, 0)
    return sim, spec, remote


def _room_blocks(hbm) -> int:
    """The definition: free blocks plus every unpinned copy's."""
    return hbm.free_blocks + sum(b for key, b in hbm.copies.items() if hbm.evictable(key))


def _reference(sim: Simulation, spec: RequestSpec, remote: RemoteChunks) -> tuple[list, list[bool]]:
    """Per holder block ((holder, cached offset), in the order of its first chunk): live state and HBM room
    measured afresh, one DecisionContext on the block's summed tokens, then each chunk's reservation."""
    ctx = sim.ctx
    requester, chunks = ctx.cluster.instances[REQUESTER], ctx.cluster.chunks
    hbm = ctx.engines[REQUESTER].hbm
    heads = ctx.params.geometry.heads_q
    blocks: dict[tuple[int, bool], list[int]] = {}
    for i, key in enumerate(zip(remote.holders, remote.cached)):
        blocks.setdefault(key, []).append(i)
    chosen: list = [None] * len(remote)
    fitted = []
    for (holder_id, cached), members in blocks.items():
        holder = ctx.cluster.instances[holder_id]
        block = [remote.chunks[i] for i in members]
        shape = RequestShape(mq_first=heads * spec.prompt_tokens, mq_step=heads, steps=spec.output_tokens - 1,
                             tokens=float(sum(chunks.tokens[c] for c in block)),
                             fabric=ctx.cluster.fabric_id(requester, holder), cached=cached, tp=ctx.config.tp)
        copy_bytes = float(sum(chunks.bytes[c] for c in block))
        fits = _room_blocks(hbm) >= sum(ctx.copies.blocks(c) for c in block)
        fitted.append(fits)
        primitive = ctx.policy.choose(build_decision_context(ctx, requester, [holder], shape, copy_bytes,
                                                             copy_bytes * 2 if fits else 0.0))
        for i in members:
            chosen[i] = primitive
            if primitive == Primitive.FETCH and not ctx.copies.reserve(
                    remote.chunks[i], REQUESTER, spec.prompt_tokens + spec.output_tokens):
                chosen[i] = Primitive.ROUTE
                ctx.copies.fell_back += 1
            chunks.pin(remote.chunks[i], remote.holders[i] if chosen[i] == Primitive.ROUTE else REQUESTER)
    return chosen, fitted


def _after(sim: Simulation) -> tuple:
    hbm = sim.ctx.engines[REQUESTER].hbm
    return (list(hbm.copies.items()), hbm.free_blocks, hbm.evictions, hbm.refused, sim.ctx.copies.fell_back,
            dict(sim.ctx.cluster.chunks.pins))


@pytest.mark.parametrize("policy,seeds", [("adaptive", 30), ("paper", 8)])
def test_memoised_decisions_equal_the_per_block_reference_on_random_states(trace, policy, seeds):
    seen, flipped = set(), 0
    for seed in range(seeds):
        sim, spec, remote = _state(trace, seed, policy)
        expected, fitted = _reference(sim, spec, remote)
        reference_after = _after(sim)
        sim, spec, remote = _state(trace, seed, policy)
        request = DenseRequest(sim.ctx, spec, sim.ctx.cluster.instances[REQUESTER], None)
        request.decide(remote)
        assert remote.primitives == expected, f"seed {seed}"
        assert _after(sim) == reference_after, f"seed {seed}"
        seen.update(expected)
        flipped += len(set(fitted)) > 1
    # the states exercise the decision: more than one primitive, and a request whose own fetches used up
    # the room (a block's copies fitted for an early block and not for a later one)
    assert len(seen) >= 2
    if policy == "adaptive":
        assert flipped > 0


def test_fits_stops_early_but_agrees_with_the_room_it_sums(trace):
    for seed in range(6):
        sim, _spec, _remote = _state(trace, seed)
        hbm, copies = sim.ctx.engines[REQUESTER].hbm, sim.ctx.copies
        for ci in range(REMOTE_CHUNKS):
            assert copies.fits(ci, REQUESTER) == (_room_blocks(hbm) >= copies.blocks(ci))
        for need in (1, 64, 300, 5000):
            assert copies.fits_blocks(need, REQUESTER) == (_room_blocks(hbm) >= need)


def test_primitive_labels_are_the_numpy_conversions_column():
    """decisions.parquet's primitive column taken in arrow: the labels in order, and the very buffers (no
    validity bitmap) of the numpy array of labels it replaced, empty included."""
    import numpy as np
    import pyarrow as pa

    from simroute.sim.metrics import primitive_labels
    from simroute.sim.vocab import Primitive

    names = np.array([p.label for p in Primitive])
    for codes in (np.array([0, 4, 1, 1, 3, 2, 0], np.int8), np.zeros(0, np.int8)):
        got = primitive_labels(codes)
        want = pa.table({"p": names[codes]}).column("p").combine_chunks()
        assert got.type == pa.string() and got.buffers()[0] is None
        assert [b.to_pybytes() for b in got.buffers()[1:]] == [b.to_pybytes() for b in want.buffers()[1:]]
    assert primitive_labels(np.array([0, 4, 1], np.int8)).to_pylist() == ["route", "first-touch", "fetch"]


def test_a_block_decided_local_marks_every_chunk_of_it_local_across_its_runs(trace):
    """A holder block's chunks come in runs broken by other holders' chunks: the block's primitive reaches
    every one of them (the per-block reference), under a policy that chooses local for every block."""
    multi_run = 0
    for seed in range(6):
        sim, spec, remote = _state(trace, seed, "always-local")
        expected, _ = _reference(sim, spec, remote)
        reference_after = _after(sim)
        sim, spec, remote = _state(trace, seed, "always-local")
        DenseRequest(sim.ctx, spec, sim.ctx.cluster.instances[REQUESTER], None).decide(remote)
        assert remote.primitives == expected == [Primitive.LOCAL] * len(remote), f"seed {seed}"
        assert _after(sim) == reference_after, f"seed {seed}"
        multi_run += any(len(runs) > 1 for runs in holder_blocks(remote).values())
    assert multi_run > 0          # some block did come in more than one run
