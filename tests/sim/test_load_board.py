"""The engines' `LoadBoard` (what the replica choice reads of each holder) against the engines themselves: at
every replica choice of a run, each engine's published queue length and layer wait equal its state read
directly, and the least loaded holders the choice finds equal those of `read_holder_loads` (the
engine-by-engine reading), as do the board's `holder_loads`."""

from __future__ import annotations

import pytest

import simroute.sim.holder as holder
from simroute.calib import default_profile_path
from simroute.network import default_topology_path
from simroute.sim import RunConfig, Simulation
from simroute.sim.config import default_trace_path
from simroute.workload import generate


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A corpus of popular chunks with several replicas each: most requests choose among holders."""
    return generate("corpus", tmp_path_factory.mktemp("board") / "corpus.parquet", seed=3,
                    params={"requests": 160, "chunks": 40, "qps": 400.0})


def _checked_run(monkeypatch, cfg: RunConfig) -> list[int]:
    """Runs `cfg` with every replica choice among several equally routed holders checked: the board against
    every engine, and the least loaded holders against `read_holder_loads`' least. Returns [checks, holders
    compared, checks where a holder had requesters routing to it]."""
    real = holder.ReplicaChoice._least_loaded
    seen = [0, 0, 0]

    def checked(self, holders):
        ctx = self.ctx
        board, engines = ctx.engines.board, ctx.engines.engines
        assert board is not None and len(board.sequences) == len(engines)
        for engine in engines:
            assert board.sequences[engine.eid] == len(engine.running) + len(engine.waiting), engine.eid
            inline = engine.busy and engine.partials._waits_for_layer
            assert board.layer_wait_s[engine.eid] == (engine.layer_s / 2 if inline else 0.0), engine.eid
            assert board.asked[engine.eid] or not engine.partials.demand, engine.eid    # demand is flagged
        least = real(self, holders)
        loads = holder.read_holder_loads(ctx, holders, self.requester.id)
        assert least == [h for h, load in zip(holders, loads) if load == min(loads)]
        assert holder.holder_loads(ctx, holders, self.requester.id) == loads
        seen[0] += 1
        seen[1] += len(holders)
        seen[2] += any(engines[h].partials.demand for h in holders)
        return least

    monkeypatch.setattr(holder.ReplicaChoice, "_least_loaded", checked)
    Simulation(cfg).run()
    return seen


@pytest.mark.parametrize("extra", [
    {"policy": "paper"},
    {"policy": "paper", "engine": "sglang", "scheduler_recv_interval": 4},   # arrivals wait in the inbox
    {"policy": "adaptive", "engine": "trtllm"},
], ids=["paper", "sglang-recv4", "trtllm-adaptive"])
def test_the_board_shows_every_engine_as_it_is_at_each_choice(corpus, monkeypatch, extra):
    cfg = RunConfig(topology=str(default_topology_path()), trace=str(corpus), calib=str(default_profile_path()),
                    router="least-loaded", **extra)
    calls, read, _ = _checked_run(monkeypatch, cfg)
    assert calls > 10 and read > 2 * calls      # choices among several holders were made and checked


def test_holders_that_requesters_route_to_are_read_from_their_engines(monkeypatch):
    """The default run routes some chunks: choices among holders with demand (their M/D/1 wait) agree too."""
    cfg = RunConfig(topology=str(default_topology_path()), trace=str(default_trace_path()),
                    calib=str(default_profile_path()), policy="paper")
    calls, _, with_demand = _checked_run(monkeypatch, cfg)
    assert calls > 10 and with_demand > 0


def test_a_run_with_dp_groups_reads_the_engines(corpus):
    """DP ranks are planned by their group and publish nothing: such a run has no board."""
    cfg = RunConfig(topology=str(default_topology_path()), trace=str(corpus), calib=str(default_profile_path()),
                    dp_attention=8, ep=8, max_requests=4)
    assert Simulation(cfg).ctx.engines.board is None

