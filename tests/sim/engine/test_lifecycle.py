"""The engine's lifecycle catalogue (docs/ARCHITECTURE.md, "The engine's lifecycle") against the code, and the
cut-by-arrival event's hand-back of KV pinned by hand counts."""

from __future__ import annotations

import re
from pathlib import Path

import simpy

from simroute.sim.engine import InstanceEngine
from simroute.sim.engine.group import GroupEngine
from simroute.sim.engine.sequence import Sequence

ROOT = Path(__file__).resolve().parents[3]
OWNERS = {"InstanceEngine": InstanceEngine, "GroupEngine": GroupEngine}


def catalogue() -> list[tuple[str, list[str], str]]:
    """(event, owners, handler) per row of the lifecycle table."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("### The engine's lifecycle", 1)[1].split("\n### ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] in ("event", "---"):
            continue
        owners = re.findall(r"`(\w+)`", cells[1])
        handler = re.fullmatch(r"`(\w+)`", cells[2])
        assert owners and handler, line
        rows.append((cells[0], owners, handler.group(1)))
    return rows


def test_every_event_has_one_handler_per_owner_whose_docstring_is_its_contract():
    rows = catalogue()
    assert [name for name, _owners, _handler in rows] == [
        "arrival", "HBM freed", "iteration planned", "cut by arrival", "partial absorbed", "all-to-all done",
        "iteration end",
        "preempted", "refused", "request finished"]
    for name, owners, handler in rows:
        for owner in owners:
            method = getattr(OWNERS[owner], handler)
            assert (method.__doc__ or "").find(f"Event *{name}*") >= 0, f"{owner}.{handler} does not say {name}"


def test_the_group_writes_none_of_a_ranks_fields():
    """The DP group asks its ranks through their methods: no assignment to a rank's own fields (`rank._x = `)
    in group.py (it sets the public `group` and `draft_tokens` once, when it is built)."""
    source = (ROOT / "simroute" / "sim" / "engine" / "group.py").read_text()
    assert re.findall(r"\brank\._\w+\s*[-+*/]?=(?!=)", source) == []
    assert re.findall(r"\brank\.\w+\s*[-+*/]?=(?!=)", source) == ["rank.group =", "rank.draft_tokens ="]


def test_a_cut_hands_back_the_blocks_of_the_iterations_not_run(make_engine):
    """Prompt 100, output 500, 64 iterations per event (FakeStep: one iteration ~10.21 ms). The prefill ends at
    ~10.21 ms with one token out; the first decode event plans k = 64 and reserves blocks for 100 + 1 + 64 = 165
    tokens: 3 blocks of 64. An arrival at 36 ms is 2.5 iterations in: the event is cut after 3, and the sequence
    keeps the blocks of 100 + 1 + 3 = 104 tokens: 2."""
    env = simpy.Environment()
    eng = make_engine(env, steps_per_event=64)
    a, b = Sequence(0, 100, 500), Sequence(1, 100, 20)
    seen = {}

    def arrive():
        yield env.timeout(0.036)
        seen["before"] = (eng._plan.k, a.blocks, eng.hbm.kv_blocks, eng.log.iterations)
        eng.submit(b)
        seen["after"] = (eng._plan.k, a.blocks, eng.hbm.kv_blocks, eng.log.iterations, eng.cuts)

    eng.submit(a)
    env.process(arrive())
    env.run()
    assert seen["before"] == (64, 3, 3, 1 + 64)
    assert seen["after"] == (3, 2, 2, 1 + 3, 1)
    assert a.generated == 500 and b.generated == 20
