"""The embedded engine's KV cache: one preallocated slab per layer, shared by the whole batch.

Every layer keeps one [batch, kv_heads, capacity, head_dim] slab; all rows share one time axis
(left padding), so a decode step appends one column for everyone and needs no per-row
bookkeeping. `SlabLayer` is the HF cache layer the model writes into, plus the batch surgery
the scheduler needs: merging new rows (the shorter side padded on the left), dropping rows (an
index_select) and trimming all-padding columns on the left.
"""

from __future__ import annotations

from typing import Any

import torch

# KV time-axis capacity grows in chunks of this many columns (amortises reallocation).
KV_GROW = 256

try:  # transformers >= 5: cache layers are objects the model calls `update` on
    from transformers.cache_utils import Cache, DynamicLayer
except ImportError:  # pragma: no cover - tandem pins transformers 5
    Cache = DynamicLayer = None


class SlabLayer(DynamicLayer):
    """A cache layer over a preallocated slab: appending a column is a slice write, not a cat."""

    def __init__(self) -> None:
        super().__init__()
        self.kbuf: torch.Tensor | None = None
        self.vbuf: torch.Tensor | None = None
        self.length = 0

    # HF API -------------------------------------------------------------
    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.dtype = key_states.dtype
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        end = self.length + n
        if self.kbuf is None:
            b, h, _, d = key_states.shape
            cap = end + KV_GROW
            self.kbuf = key_states.new_zeros((b, h, cap, d))
            self.vbuf = value_states.new_zeros((b, h, cap, value_states.shape[-1]))
        elif end > self.kbuf.shape[2]:
            self.reserve(end + KV_GROW)
        assert self.kbuf is not None and self.vbuf is not None  # allocated above
        self.kbuf[:, :, self.length:end] = key_states
        self.vbuf[:, :, self.length:end] = value_states
        self.length = end
        self.keys = self.kbuf[:, :, :end]
        self.values = self.vbuf[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    # tandem batch surgery -----------------------------------------------
    def reserve(self, cap: int) -> None:
        assert self.kbuf is not None and self.vbuf is not None
        if cap <= self.kbuf.shape[2]:
            return
        b, h, _, d = self.kbuf.shape
        k = self.kbuf.new_zeros((b, h, cap, d))
        v = self.vbuf.new_zeros((b, h, cap, self.vbuf.shape[-1]))
        k[:, :, :self.length] = self.kbuf[:, :, :self.length]
        v[:, :, :self.length] = self.vbuf[:, :, :self.length]
        self.kbuf, self.vbuf = k, v

    def select_rows(self, idx: torch.Tensor) -> None:
        assert self.kbuf is not None and self.vbuf is not None
        self.kbuf = self.kbuf.index_select(0, idx)
        self.vbuf = self.vbuf.index_select(0, idx)
        self.keys = self.kbuf[:, :, :self.length]
        self.values = self.vbuf[:, :, :self.length]

    def trim_left(self, cols: int) -> None:
        assert self.kbuf is not None and self.vbuf is not None
        self.kbuf = self.kbuf[:, :, cols:].clone()
        self.vbuf = self.vbuf[:, :, cols:].clone()
        self.length -= cols
        self.keys = self.kbuf[:, :, :self.length]
        self.values = self.vbuf[:, :, :self.length]

    @staticmethod
    def merge(a: "SlabLayer", b: "SlabLayer") -> "SlabLayer":
        """Rows of a then rows of b on one right-aligned time axis of max(len a, len b)."""
        assert a.kbuf is not None and b.kbuf is not None and a.vbuf is not None and b.vbuf is not None
        t = max(a.length, b.length)
        cap = t + KV_GROW
        ba, bb = a.kbuf.shape[0], b.kbuf.shape[0]
        h, d, dv = a.kbuf.shape[1], a.kbuf.shape[3], a.vbuf.shape[3]
        out = SlabLayer()
        out.device, out.dtype, out.is_initialized = a.device, a.dtype, True
        out.kbuf = a.kbuf.new_zeros((ba + bb, h, cap, d))
        out.vbuf = a.vbuf.new_zeros((ba + bb, h, cap, dv))
        out.kbuf[:ba, :, t - a.length:t] = a.kbuf[:, :, :a.length]
        out.vbuf[:ba, :, t - a.length:t] = a.vbuf[:, :, :a.length]
        out.kbuf[ba:, :, t - b.length:t] = b.kbuf[:, :, :b.length]
        out.vbuf[ba:, :, t - b.length:t] = b.vbuf[:, :, :b.length]
        out.length = t
        out.keys = out.kbuf[:, :, :t]
        out.values = out.vbuf[:, :, :t]
        return out


def new_cache(num_layers: int) -> Any:
    return Cache(layers=[SlabLayer() for _ in range(num_layers)])


__all__ = ["KV_GROW", "Cache", "SlabLayer", "new_cache"]
