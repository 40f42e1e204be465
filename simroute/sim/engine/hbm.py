"""One HBM budget per instance, in KV blocks of 64 tokens (as paged-attention engines allocate).

HBM = weights + running sequences' KV + pinned canonical chunks + fetched / re-prefilled copies. Copies are
the only evictable part (least recently used first, never one a running request relies on); running
sequences' KV is freed only by the engine preempting them. `check()` is the invariant: nothing negative and
the four parts never above capacity.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

BLOCK_TOKENS = 64


def blocks_for(tokens: float) -> int:
    """KV blocks that hold `tokens` tokens (a partly filled block is a whole block)."""
    n = int(tokens)
    return -(-n // BLOCK_TOKENS) if n > 0 else 0


class HbmBudget:
    """Block accounting of one instance's HBM.

    Contract: `reserve_kv` either reserves the blocks (evicting unpinned copies, LRU first) and returns True,
    or changes nothing and returns False; `add_copy` likewise. `evictable(key)` tells whether a copy may go
    (the request flow pins copies in use); `on_evict(key)` tells the owner of the copy that it went.
    """

    __slots__ = ("block_bytes", "capacity_blocks", "weight_bytes", "outside_pool_bytes", "kv_blocks", "pinned_blocks", "copy_blocks",
                 "copies", "evictable", "on_evict", "evictions", "refused", "peak_kv_blocks")

    def __init__(self, hbm_bytes: float, weight_bytes: float, kv_bytes_per_token: float,
                 pool_bytes: float | None = None) -> None:
        """`pool_bytes`: the KV pool the framework allocates (its memory fraction, docs/ENGINES.md), where it is
        modelled; the pool never exceeds the HBM the weights leave. What the pool leaves of that HBM
        (`outside_pool_bytes`: the framework's activations, CUDA graphs and context) holds no KV."""
        self.block_bytes = kv_bytes_per_token * BLOCK_TOKENS
        self.weight_bytes = weight_bytes
        room = hbm_bytes - weight_bytes if pool_bytes is None else min(hbm_bytes - weight_bytes, pool_bytes)
        self.outside_pool_bytes = max(hbm_bytes - weight_bytes - max(room, 0.0), 0.0)
        self.capacity_blocks = max(0, int(room // self.block_bytes)) if self.block_bytes > 0 else 0
        self.kv_blocks = 0
        self.pinned_blocks = 0
        self.copy_blocks = 0
        self.copies: OrderedDict[Hashable, int] = OrderedDict()
        self.evictable: Callable[[Hashable], bool] = lambda _key: True
        self.on_evict: Callable[[Hashable], None] = lambda _key: None
        self.evictions = 0
        self.refused = 0
        self.peak_kv_blocks = 0

    @property
    def free_blocks(self) -> int:
        return self.capacity_blocks - self.kv_blocks - self.pinned_blocks - self.copy_blocks

    @property
    def free_bytes(self) -> float:
        return self.free_blocks * self.block_bytes

    # ---- running sequences' KV -----------------------------------------------------------------------
    def reserve_kv(self, blocks: int) -> bool:
        if blocks <= 0:
            return True
        if not self._make_room(blocks):
            return False
        self.kv_blocks += blocks
        if self.kv_blocks > self.peak_kv_blocks:
            self.peak_kv_blocks = self.kv_blocks
        return True

    def release_kv(self, blocks: int) -> None:
        self.kv_blocks -= blocks

    # ---- chunks --------------------------------------------------------------------------------------
    def pin(self, blocks: int) -> bool:
        """Pin a canonical chunk (placement); False if it does not fit (nothing evicted for it)."""
        if blocks > self.free_blocks:
            return False
        self.pinned_blocks += blocks
        return True

    def add_copy(self, key: Hashable, blocks: int, keep_free: int = 0) -> bool:
        """Make a copy resident (LRU-evicting others), leaving `keep_free` blocks free; False, and counted as
        refused, if it cannot fit."""
        if key in self.copies:
            self.copies.move_to_end(key)
            return True
        if not self._make_room(blocks + keep_free):
            self.refused += 1
            return False
        self.copies[key] = blocks
        self.copy_blocks += blocks
        return True

    def kv_to_copy(self, key: Hashable, blocks: int) -> None:
        """A re-prefilled chunk's KV becomes a copy in place (no new blocks)."""
        self.kv_blocks -= blocks
        if key in self.copies:          # already there (another request made it): the new blocks are freed
            self.copies.move_to_end(key)
            return
        self.copies[key] = blocks
        self.copy_blocks += blocks

    def touch(self, key: Hashable) -> None:
        if key in self.copies:
            self.copies.move_to_end(key)

    def _make_room(self, blocks: int) -> bool:
        """Evict unpinned copies (LRU first) until `blocks` are free; evict nothing if that cannot suffice."""
        free = self.capacity_blocks - self.kv_blocks - self.pinned_blocks - self.copy_blocks   # free_blocks
        if free >= blocks:
            return True
        # the LRU-first evictable copies that free enough: most often the first one alone (no list built)
        first, victims, freed, evictable = None, None, free, self.evictable
        for key, size in self.copies.items():
            if evictable(key):
                if first is None:
                    first = key
                elif victims is None:
                    victims = [first, key]
                else:
                    victims.append(key)
                freed += size
                if freed >= blocks:
                    break
        if freed < blocks:
            return False
        copies, on_evict = self.copies, self.on_evict
        if victims is None:
            self.copy_blocks -= copies.pop(first)
            on_evict(first)
            self.evictions += 1
            return True
        for key in victims:
            self.copy_blocks -= copies.pop(key)
            on_evict(key)
        self.evictions += len(victims)
        return True

    # ---- invariant -----------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise AssertionError if HBM is over-committed or any part is negative."""
        parts = (self.kv_blocks, self.pinned_blocks, self.copy_blocks)
        if min(parts) < 0 or sum(parts) > self.capacity_blocks:
            raise AssertionError(f"HBM over-committed: kv {self.kv_blocks} + pinned {self.pinned_blocks} + copies "
                                 f"{self.copy_blocks} blocks > capacity {self.capacity_blocks}")
        if self.copy_blocks != sum(self.copies.values()):
            raise AssertionError("copy blocks disagree with the copies held")
