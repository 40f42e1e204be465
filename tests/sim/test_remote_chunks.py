"""`RemoteChunks` and `holder_blocks`: a request's remote chunks as columns, grouped into holder blocks as runs
of positions. The runs must cover exactly the positions a per-chunk grouping finds, in the same order."""

from __future__ import annotations

import numpy as np
import pytest

from simroute.sim.request import RemoteChunks, holder_blocks
from simroute.sim.vocab import Primitive


def _per_position(remote: RemoteChunks) -> dict[tuple[int, bool], list[int]]:
    blocks: dict[tuple[int, bool], list[int]] = {}
    for position, key in enumerate(zip(remote.holders, remote.cached)):
        blocks.setdefault(key, []).append(position)
    return blocks


@pytest.mark.parametrize("seed", range(20))
def test_holder_blocks_runs_cover_the_per_chunk_grouping_in_order(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 200))
    # long runs on one holder (a conversation's history) broken by others, both offsets
    holders = np.repeat(rng.integers(0, 4, size=n // 8 + 1), 8)[:n].tolist()
    cached = (rng.random(n) < 0.8).tolist()
    remote = RemoteChunks.from_columns(list(range(100, 100 + n)), holders, cached)
    blocks = holder_blocks(remote)
    expected = _per_position(remote)
    assert list(blocks) == list(expected)                      # blocks in the order of their first chunk
    for key, runs in blocks.items():
        assert [p for start, end in runs for p in range(start, end)] == expected[key]
        assert all(end > start for start, end in runs)
        assert all(a[1] < b[0] for a, b in zip(runs, runs[1:]))     # runs are maximal: a gap between them


def test_from_columns_routes_every_chunk_until_decided_and_only_keeps_one_primitive():
    remote = RemoteChunks.from_columns([7, 8, 9, 10], [1, 1, 2, 2], [True, False, True, True])
    assert len(remote) == 4 and remote.primitives == [Primitive.ROUTE] * 4
    remote.primitives[1] = remote.primitives[3] = Primitive.LOCAL
    local = remote.only(Primitive.LOCAL)
    assert (local.chunks, local.holders, local.cached, local.primitives) == \
        ([8, 10], [1, 2], [False, True], [Primitive.LOCAL] * 2)
    assert len(remote.only(Primitive.FETCH)) == 0


def test_columns_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="differ in length"):
        RemoteChunks.from_columns([1, 2], [0], [True, True])
