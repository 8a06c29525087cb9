"""The embedded engine's running batch: the rows decoded together and their per-row tensors.

Batch surgery lives here: left-padding a prefill, building a batch from it, merging new rows
into the running batch (right-aligned on one time axis, see tandem.engine.kv_cache), dropping
finished rows, and trimming leading columns that became padding for every remaining row. A 2D
attention mask marks the padding and per-row position ids keep RoPE correct.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tandem.engine.kv_cache import KV_GROW, Cache, SlabLayer
from tandem.engine.request import GenerateRequest

# Trim left all-padding columns once they exceed this many and a quarter of the time axis.
TRIM_MIN_COLS = 64
# Every per-row tensor of a RunningBatch (row i belongs to reqs[i]).
_ROW_TENSORS = ("mask", "next_pos", "last_tok", "temp", "greedy", "top_p", "top_k", "min_p")


def left_padded(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask), both [len(seqs), longest] on the CPU: each sequence right-aligned, mask True on tokens."""
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, L - len(s):] = torch.tensor(s, dtype=torch.long)
        mask[i, L - len(s):] = True
    return ids, mask


@dataclass
class RunningBatch:
    """Rows being decoded together. Tensors are aligned with `reqs` (row i = reqs[i])."""

    reqs: list[GenerateRequest]
    cache: Any                 # Cache of SlabLayers
    mask: torch.Tensor         # [B, cap] bool; columns [0, length) valid, True = real token
    next_pos: torch.Tensor     # [B] long: position id of the token fed next
    last_tok: torch.Tensor     # [B] long: token fed next
    temp: torch.Tensor         # [B] float: temperature used for scaling (1.0 for greedy rows)
    greedy: torch.Tensor       # [B] bool
    top_p: torch.Tensor        # [B] float
    top_k: torch.Tensor        # [B] long (vocab size when disabled)
    min_p: torch.Tensor        # [B] float

    @property
    def size(self) -> int:
        return len(self.reqs)

    @property
    def length(self) -> int:
        return self.cache.layers[0].length

    @classmethod
    def from_prefill(cls, reqs: list[GenerateRequest], cache: Any, mask: torch.Tensor, next_pos: torch.Tensor,
                     vocab: int, device: torch.device) -> "RunningBatch":
        """The rows just prefilled into `cache` (`mask` their [B, L] padding mask)."""
        temps = [r.sampling.temperature for r in reqs]
        greedy = [r.sampling.greedy for r in reqs]
        B, L = mask.shape
        mbuf = torch.zeros((B, L + KV_GROW), dtype=torch.bool, device=device)
        mbuf[:, :L] = mask
        return cls(
            reqs=list(reqs), cache=cache, mask=mbuf, next_pos=next_pos.clone(),
            last_tok=torch.zeros(B, dtype=torch.long, device=device),
            temp=torch.tensor([1.0 if g else t for t, g in zip(temps, greedy)], dtype=torch.float32, device=device),
            greedy=torch.tensor(greedy, dtype=torch.bool, device=device),
            top_p=torch.tensor([r.sampling.top_p for r in reqs], dtype=torch.float32, device=device),
            top_k=torch.tensor([vocab if r.sampling.top_k < 0 else min(r.sampling.top_k, vocab) for r in reqs],
                               dtype=torch.long, device=device),
            min_p=torch.tensor([r.sampling.min_p for r in reqs], dtype=torch.float32, device=device),
        )

    @staticmethod
    def merge(a: "RunningBatch", b: "RunningBatch") -> "RunningBatch":
        """Rows of a then rows of b, right-aligned on one time axis of max(len a, len b)."""
        ta, tb = a.length, b.length
        t = max(ta, tb)
        layers = [SlabLayer.merge(la, lb) for la, lb in zip(a.cache.layers, b.cache.layers)]
        assert layers[0].kbuf is not None  # merge allocates every layer's slab
        cap = layers[0].kbuf.shape[2]
        mask = torch.zeros((a.size + b.size, cap), dtype=torch.bool, device=a.mask.device)
        mask[:a.size, t - ta:t] = a.mask[:, :ta]
        mask[a.size:, t - tb:t] = b.mask[:, :tb]
        cat = torch.cat
        return RunningBatch(
            reqs=a.reqs + b.reqs, cache=Cache(layers=layers), mask=mask, next_pos=cat([a.next_pos, b.next_pos]),
            last_tok=cat([a.last_tok, b.last_tok]), temp=cat([a.temp, b.temp]), greedy=cat([a.greedy, b.greedy]),
            top_p=cat([a.top_p, b.top_p]), top_k=cat([a.top_k, b.top_k]), min_p=cat([a.min_p, b.min_p]))

    def keep_rows(self, keep: list[int]) -> None:
        """Keep only rows `keep` (non-empty, in order), then trim padding they no longer need."""
        idx = torch.tensor(keep, dtype=torch.long, device=self.mask.device)
        for layer in self.cache.layers:
            layer.select_rows(idx)
        self.reqs = [self.reqs[i] for i in keep]
        for name in _ROW_TENSORS:
            setattr(self, name, getattr(self, name).index_select(0, idx))
        self._maybe_trim()

    def _maybe_trim(self) -> None:
        """Drop leading columns that are padding for every remaining row."""
        t = self.length
        if t < TRIM_MIN_COLS:
            return
        # The longest remaining row is the one with the largest next position.
        longest = int(self.next_pos.max())
        lead = t - longest
        if lead >= TRIM_MIN_COLS and lead * 4 >= t:
            for layer in self.cache.layers:
                layer.trim_left(lead)
            self.mask = self.mask[:, lead:].clone()

    def open_column(self) -> int:
        """Mark the next time column valid for every row (the tokens fed next); returns the mask's
        new valid width."""
        t = self.length
        if t + 1 > self.mask.shape[1]:
            grown = torch.zeros((self.size, t + 1 + KV_GROW), dtype=torch.bool, device=self.mask.device)
            grown[:, :t] = self.mask[:, :t]
            self.mask = grown
        self.mask[:, t] = True
        return t + 1


__all__ = ["RunningBatch", "TRIM_MIN_COLS", "left_padded"]
