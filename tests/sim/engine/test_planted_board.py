"""The engines' `LoadBoard` after an outside call starts an idle engine (`InstanceEngine.poke`: HBM freed from
outside, the head of the queue admitted): the board shows the engine as it is once the call returns, busy with its
layer wait, as it does after a submit and after each event (the replica choice reads only the board)."""

from __future__ import annotations

import simpy

from simroute.sim.engine import Sequence
from simroute.sim.engine.engine import LoadBoard


def _shown(board: LoadBoard, eng) -> tuple[int, float]:
    return board.sequences[eng.eid], board.layer_wait_s[eng.eid]


def _state(eng) -> tuple[int, float]:
    inline = eng.busy and eng.partials._waits_for_layer
    return len(eng.running) + len(eng.waiting), (eng.layer_s / 2 if inline else 0.0)


def test_an_engine_a_poke_starts_is_shown_busy_on_the_board(make_engine):
    """4,096 tokens of room, 3,968 held by a copy nobody may evict: a 1,000-token prompt waits on an idle engine.
    The copy goes (its reader left) and the poke admits the prompt: the board shows a busy engine's half-layer wait."""
    env = simpy.Environment()
    eng = make_engine(env, hbm_tokens=4096)
    board = LoadBoard()
    board.join(eng)
    held = {"copy"}
    eng.hbm.evictable = lambda key: key not in held
    assert eng.hbm.add_copy("copy", 62)                 # 62 of the 64 blocks of 64 tokens
    eng.submit(Sequence(0, 1000, 4))
    assert not eng.busy and len(eng.waiting) == 1 and _shown(board, eng) == _state(eng) == (1, 0.0)
    held.clear()                                       # the copy's reader finished: it may go now
    eng.poke()
    assert eng.busy and eng.layer_s > 0
    assert _shown(board, eng) == _state(eng) == (1, eng.layer_s / 2)
    env.run()
    assert _shown(board, eng) == _state(eng) == (0, 0.0)
