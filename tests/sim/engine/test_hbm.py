"""The HBM budget on its own: copies are evicted least recently used first, never a pinned one, and only as
many as needed; a copy that cannot fit is refused and changes nothing."""

from __future__ import annotations

import pytest

from simroute.sim.engine import HbmBudget


def _budget(blocks: int) -> HbmBudget:
    """A budget of `blocks` free blocks (one byte per token: 64 bytes a block) beside 1 kB of weights."""
    return HbmBudget(hbm_bytes=1000.0 + blocks * 64, weight_bytes=1000.0, kv_bytes_per_token=1.0)


def test_lru_evicts_the_least_recently_used_copy():
    hbm = _budget(3)
    for key in (0, 1, 2):
        assert hbm.add_copy(key, 1)
    hbm.touch(0)                                   # 1 is now the least recently used
    assert hbm.add_copy(3, 1)
    assert list(hbm.copies) == [2, 0, 3]
    assert hbm.evictions == 1 and hbm.copy_blocks == 3
    hbm.check()


def test_readding_a_resident_copy_refreshes_it_without_a_second_copy():
    hbm = _budget(3)
    for key in (0, 1, 2):
        hbm.add_copy(key, 1)
    assert hbm.add_copy(0, 1)
    assert list(hbm.copies) == [1, 2, 0] and hbm.copy_blocks == 3 and hbm.evictions == 0


def test_pinned_copies_are_never_evicted_and_a_copy_that_cannot_fit_is_refused():
    hbm = _budget(2)
    evicted = []
    pinned = {0}
    hbm.evictable = lambda key: key not in pinned
    hbm.on_evict = evicted.append
    hbm.add_copy(0, 1)
    hbm.add_copy(1, 1)
    assert hbm.add_copy(2, 1)                      # evicts 1 (unpinned), not 0
    assert list(hbm.copies) == [0, 2] and evicted == [1]
    pinned.add(2)
    assert not hbm.add_copy(3, 1)                  # both resident copies pinned
    assert hbm.refused == 1 and list(hbm.copies) == [0, 2] and evicted == [1]
    assert not hbm.reserve_kv(1) and hbm.kv_blocks == 0     # running KV cannot take pinned copies' blocks either


def test_eviction_frees_only_as_many_copies_as_needed():
    hbm = _budget(4)
    for key in range(4):
        hbm.add_copy(key, 1)
    assert hbm.reserve_kv(2)
    assert list(hbm.copies) == [2, 3] and hbm.evictions == 2 and hbm.free_blocks == 0
    hbm.check()


def test_pinned_chunks_reduce_free_blocks_and_the_invariant_catches_overcommit():
    hbm = _budget(10)
    assert hbm.pin(6) and not hbm.pin(5)
    assert hbm.free_blocks == 4
    hbm.kv_blocks = 5                              # what a bookkeeping bug would do
    with pytest.raises(AssertionError, match="over-committed"):
        hbm.check()


def test_a_framework_s_kv_pool_bounds_the_blocks_never_above_what_the_weights_leave():
    """The pool the framework allocates (its memory fraction) is the KV room: 10 blocks of 64 one-byte tokens in a
    pool of 640 bytes + 63, beside 1 kB of weights in 1 kB + 6400 of HBM; a pool larger than that HBM leaves 100."""
    assert HbmBudget(1000.0 + 6400, 1000.0, 1.0, pool_bytes=640.0 + 63).capacity_blocks == 10
    assert HbmBudget(1000.0 + 6400, 1000.0, 1.0, pool_bytes=1e9).capacity_blocks == 100
    assert HbmBudget(1000.0 + 6400, 1000.0, 1.0).capacity_blocks == 100
