"""The scheduler model's radix (prefix) cache: which prompt blocks an engine still holds.

SGLang keeps the KV of earlier sequences in a radix tree and reuses it for any request that
starts with the same tokens. The model keeps that at block granularity (a chained hash per
full block, so a prefix match is a hash match), with reference counts so blocks in use by a
running request are never evicted, and LRU eviction of the rest when KV is needed.
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    """Blocks of `block_tokens` tokens keyed by a chained hash, LRU, with reference counts."""

    def __init__(self, block_tokens: int, enabled: bool = True):
        self.block_tokens = block_tokens
        self.enabled = enabled
        self.blocks: OrderedDict[int, int] = OrderedDict()   # hash -> refcount; oldest first
        self.unreferenced = 0                                 # blocks with refcount 0

    @staticmethod
    def block_hashes(token_ids: list[int], block_tokens: int) -> list[int]:
        """Chained hashes of the full blocks of a token sequence (a prefix match is a hash match)."""
        out: list[int] = []
        h = 0
        for i in range(0, len(token_ids) - block_tokens + 1, block_tokens):
            h = hash((h, tuple(token_ids[i:i + block_tokens])))
            out.append(h)
        return out

    @property
    def size_tokens(self) -> int:
        return len(self.blocks) * self.block_tokens

    @property
    def evictable_tokens(self) -> int:
        return self.unreferenced * self.block_tokens

    def match(self, hashes: list[int]) -> int:
        """Number of leading blocks of `hashes` present in the cache."""
        if not self.enabled:
            return 0
        n = 0
        for h in hashes:
            if h not in self.blocks:
                break
            n += 1
        return n

    def acquire(self, hashes: list[int]) -> None:
        for h in hashes:
            ref = self.blocks[h]
            if ref == 0:
                self.unreferenced -= 1
            self.blocks[h] = ref + 1
            self.blocks.move_to_end(h)

    def release(self, hashes: list[int]) -> None:
        for h in hashes:
            ref = self.blocks.get(h)
            if ref is None:
                continue
            self.blocks[h] = ref - 1
            if ref == 1:
                self.unreferenced += 1

    def adopt(self, hashes: list[int]) -> None:
        """A running request's freshly prefilled blocks join the tree (SGLang caches unfinished
        requests), so siblings with the same prompt share them instead of holding copies."""
        for h in hashes:
            ref = self.blocks.get(h)
            if ref is None:
                self.blocks[h] = 1
            else:
                if ref == 0:
                    self.unreferenced -= 1
                self.blocks[h] = ref + 1
            self.blocks.move_to_end(h)

    def insert(self, hashes: list[int], budget_tokens: int) -> None:
        """Cache a finished sequence's blocks, but only within `budget_tokens` of free KV."""
        if not self.enabled:
            return
        for h in hashes:
            if h in self.blocks:
                self.blocks.move_to_end(h)
                continue
            if budget_tokens < self.block_tokens:
                break
            self.blocks[h] = 0
            self.unreferenced += 1
            budget_tokens -= self.block_tokens

    def evict(self, tokens: float) -> int:
        """Evict least-recently-used unreferenced blocks until `tokens` are freed; returns freed."""
        freed = 0
        if tokens <= 0 or self.unreferenced == 0:
            return 0
        for h in list(self.blocks):
            if freed >= tokens:
                break
            if self.blocks[h] == 0:
                del self.blocks[h]
                self.unreferenced -= 1
                freed += self.block_tokens
        return freed

    def clear(self) -> int:
        """Drop every unreferenced block (flush_cache); returns tokens freed."""
        return self.evict(self.size_tokens)
