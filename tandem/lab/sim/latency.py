"""The latency model of one SGLang engine on one GPU, as closed-form functions.

Decode. Continuous batching runs one forward per step for the whole running batch; every
request gains one token per step. A dense model's decode step is memory-bound at small
batch (all weights are read once per step) and adds compute per sequence and attention
reads per cached token, so

    step(B, T) = base + per_seq * B + per_kv_token * T

with B running requests holding T KV tokens in total. Because every request grows by one
token per step, T grows by B per step while the batch is unchanged, and k consecutive steps
take the arithmetic series

    D(k) = k * step(B, T) + per_kv_token * B * k (k - 1) / 2.

That closed form is what lets the sim jump from event to event (arrival, finish) instead of
simulating token by token: CPU cost is per request, not per token.

Prefill. A prefill forward over n new tokens that sit after p cached/previous tokens costs

    P(n, p) = per_token * n + attn * (n * p + n (n - 1) / 2)

(the attention term is each new token attending to everything before it), plus `base` per
forward; prompts longer than the chunk size take several forwards (chunked prefill).

All times are in model seconds, i.e. what the real GPU would take; `time_scale` divides
them only where the engine sleeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from tandem.lab.sim.profiles import EngineProfile, load_engine_profile, resolve_profile_path


@dataclass(frozen=True)
class LatencyModel:
    decode_base_s: float
    decode_per_seq_s: float
    decode_per_kv_token_s: float
    prefill_base_s: float
    prefill_per_token_s: float
    prefill_attn_s: float
    """Seconds per (new token x context token) pair."""
    chunk_tokens: int
    reload_s: float

    @classmethod
    def from_profile(cls, p: EngineProfile) -> "LatencyModel":
        return cls(
            decode_base_s=p.decode.base_ms * 1e-3,
            decode_per_seq_s=p.decode.per_seq_ms * 1e-3,
            decode_per_kv_token_s=p.decode.per_kv_token_us * 1e-6,
            prefill_base_s=p.prefill.base_ms * 1e-3,
            prefill_per_token_s=p.prefill.per_token_us * 1e-6,
            prefill_attn_s=p.prefill.attn_us_per_token_per_1k_ctx * 1e-6 / 1000.0,
            chunk_tokens=p.prefill.chunk_tokens,
            reload_s=p.weights.reload_s,
        )

    # ---- decode
    def decode_step_s(self, batch: int, kv_tokens: int) -> float:
        """One decode step of `batch` requests holding `kv_tokens` KV tokens in total."""
        if batch <= 0:
            return 0.0
        return self.decode_base_s + self.decode_per_seq_s * batch + self.decode_per_kv_token_s * kv_tokens

    def decode_steps_s(self, k: int, batch: int, kv_tokens: int) -> float:
        """k consecutive steps of an unchanged batch; KV grows by `batch` tokens per step."""
        if k <= 0 or batch <= 0:
            return 0.0
        return k * self.decode_step_s(batch, kv_tokens) + self.decode_per_kv_token_s * batch * k * (k - 1) / 2.0

    def steps_within(self, elapsed_s: float, batch: int, kv_tokens: int) -> int:
        """How many whole steps of `decode_steps_s` fit in elapsed_s (inverse of D(k))."""
        if elapsed_s <= 0 or batch <= 0:
            return 0
        a = self.decode_per_kv_token_s * batch / 2.0   # D(k) = a k^2 + b k
        b = self.decode_step_s(batch, kv_tokens) - a
        if a <= 0:
            k = int(elapsed_s / b)
        else:
            k = int((-b + math.sqrt(b * b + 4 * a * elapsed_s)) / (2 * a))
        # Guard float error on exact boundaries: make D(k) <= elapsed < D(k + 1).
        while k > 0 and self.decode_steps_s(k, batch, kv_tokens) > elapsed_s * (1 + 1e-12):
            k -= 1
        while self.decode_steps_s(k + 1, batch, kv_tokens) <= elapsed_s * (1 + 1e-12):
            k += 1
        return k

    # ---- prefill
    def prefill_tokens_s(self, new_tokens: int, prev_tokens: int) -> float:
        """Compute for `new_tokens` prompt tokens placed after `prev_tokens` tokens (no base)."""
        n, p = new_tokens, prev_tokens
        if n <= 0:
            return 0.0
        return self.prefill_per_token_s * n + self.prefill_attn_s * (n * p + n * (n - 1) / 2.0)

    def prefill_s(self, parts: list[tuple[int, int]]) -> float:
        """One prefill of a batch: parts are (new_tokens, prev_tokens) per request.

        Every `chunk_tokens` new tokens cost one forward's fixed `base`.
        """
        total_new = sum(n for n, _ in parts)
        if total_new <= 0:
            return 0.0
        forwards = math.ceil(total_new / self.chunk_tokens)
        return forwards * self.prefill_base_s + sum(self.prefill_tokens_s(n, p) for n, p in parts)


def decode_step_time(profile_path: str, per_wire_token: int = 1) -> Callable[[float, float], float]:
    """One engine's decode step time at (batch, KV tokens on the wire) from an engine profile's
    latency model (each wire token stands for `per_wire_token` KV tokens, the sim engine's
    token_scale); infinite past its KV capacity or running-request limit (requests would queue).
    The autoscaler's target policy reads it (tandem.registry's "decode_step_time")."""
    profile = load_engine_profile(resolve_profile_path(profile_path))
    model = LatencyModel.from_profile(profile)

    def decode_step_s(batch: float, wire_tokens: float) -> float:
        kv = wire_tokens * per_wire_token
        if kv > profile.capacity.max_total_tokens or batch > profile.capacity.max_running_requests:
            return float("inf")
        return model.decode_step_s(max(1, round(batch)), int(kv))
    return decode_step_s
