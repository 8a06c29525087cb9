"""What one generation request is, identically for every engine backend.

* sampling params (tandem.engine.sampling_params, re-exported here),
* the finish rules (`GenerateRequest.append_token`: max_new_tokens, then stop token ids /
  eos unless ignore_eos, then stop strings), in SGLang's order,
* stop-string detection over a bounded tail of the output (`StopStringMatcher`),
* detokenization and stop-string trimming (`GenerateRequest.output_text`),
* the JSON shape of finish reasons.

A backend mutates a request only through `append_token` / `finish`; `tandem.engine.core`
turns those mutations into the `TokenDelta`s the HTTP layer streams.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

from tandem.engine.sampling_params import DEFAULT_MAX_NEW_TOKENS, InvalidRequest, SamplingParams


# --------------------------------------------------------------------------- finish reasons
@dataclass
class FinishReason:
    """SGLang's finish_reason JSON: {type: stop|length|abort, matched?, length?, message?}."""

    type: Literal["stop", "length", "abort"]
    matched: int | str | None = None
    length: int | None = None
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.type == "stop":
            out["matched"] = self.matched
        elif self.type == "length":
            out["length"] = self.length
        else:
            out["message"] = self.message
        return out

    @staticmethod
    def abort(message: str = "Abort in waiting queue") -> "FinishReason":
        return FinishReason("abort", message=message)


# --------------------------------------------------------------------------- requests
class StopStringMatcher:
    """Detects stop strings by decoding only a bounded tail of the output (no O(n^2) decode).

    The window is one token longer than the longest stop string in UTF-8 bytes, which bounds
    its length in tokens for byte-level / byte-fallback tokenizers.
    """

    def __init__(self, tokenizer: Any, stops: Sequence[str]):
        self.tokenizer = tokenizer
        self.stops = [s for s in stops if s]
        self.window = max((len(s.encode("utf-8")) for s in self.stops), default=0) + 1

    def match(self, output_ids: list[int]) -> str | None:
        if not self.stops:
            return None
        tail = self.tokenizer.decode(output_ids[-self.window:], skip_special_tokens=False)
        for s in self.stops:
            if s in tail:
                return s
        return None


@dataclass(eq=False)
class GenerateRequest:
    """One generation request: parsed input, then state a backend mutates as it decodes.

    Backends must only touch state through `append_token` and `finish`, then call
    `EngineCore.notify`. A retracted request keeps its streamed tokens and is resumed by
    re-prefilling prompt + output so far. `n_committed` and `finish_reason` are written
    last so a reader on the event-loop thread never sees a finish without its tokens.
    """

    rid: str
    input_ids: list[int]
    sampling: SamplingParams
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    stream: bool = False
    priority: int | None = None
    """SGLang request priority; orders the waiting queue when the engine schedules by priority."""
    lora_name: str | None = None
    """The LoRA adapter this request runs on (SGLang's per-request `lora_path`); None: the base model."""
    return_routed_experts: bool = False
    """Record the experts every fed token is routed to, per layer (SGLang's return_routed_experts)."""
    routed_experts_start_len: int = 0
    """The first token position meta_info["routed_experts"] covers."""
    # Filled by EngineCore.make_request: eos ids of the tokenizer/model, stop-string matcher.
    eos_token_ids: frozenset[int] = frozenset()
    stop_matcher: StopStringMatcher | None = None
    created_at: float = field(default_factory=time.perf_counter)

    # ---- state written by the backend
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    output_top_logprobs: list[list[tuple[float, int]]] = field(default_factory=list)
    """Filled only when top_logprobs_num > 0: per output token, the top (logprob, token_id) pairs."""
    input_token_logprobs: list[float | None] | None = None
    """Prompt-token logprobs from position max(logprob_start_len, 0) on (first prompt token: None);
    filled at prefill when return_logprob and logprob_start_len >= 0."""
    input_top_logprobs: list[list[tuple[float, int]] | None] | None = None
    routed_chunks: list[Any] = field(default_factory=list)
    """With return_routed_experts: [tokens, layers, top_k] int32 arrays, one per forward that fed this request
    tokens (its prefill, then one per decode step), in position order from 0."""
    num_retractions: int = 0
    admitted: bool = False
    """Past the pause/update gate and handed to the backend (set on the event loop)."""
    n_committed: int = 0
    finish_reason: FinishReason | None = None
    cached_tokens: int = 0
    weight_version: str = ""
    finished_at: float | None = None
    wakeup: asyncio.Event | None = field(default=None, repr=False)
    """Set by EngineCore.generate: the event its consumer waits on for new tokens."""

    def __post_init__(self) -> None:
        if self.return_routed_experts and not 0 <= self.routed_experts_start_len <= len(self.input_ids):
            raise InvalidRequest(f"routed_experts_start_len = {self.routed_experts_start_len} must lie in [0, "
                                 f"{len(self.input_ids)}] (the prompt's tokens)")

    @property
    def prompt_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def completion_tokens(self) -> int:
        return self.n_committed

    @property
    def stop_ids(self) -> frozenset[int]:
        """Token ids that finish the request; empty under ignore_eos (SGLang ignores both then)."""
        if self.sampling.ignore_eos:
            return frozenset()
        return self.eos_token_ids | frozenset(self.sampling.stop_token_ids)

    def append_token(self, token_id: int, logprob: float, weight_version: str,
                     top: list[tuple[float, int]] | None = None) -> FinishReason | None:
        """Record one sampled token and apply SGLang's finish rules; returns the finish, if any."""
        if top is not None:
            self.output_top_logprobs.append(top)
        self.output_ids.append(token_id)
        self.output_logprobs.append(logprob)
        self.weight_version = weight_version
        n = len(self.output_ids)
        reason: FinishReason | None = None
        if n >= self.sampling.max_new_tokens:
            reason = FinishReason("length", length=self.sampling.max_new_tokens)
        elif token_id in self.stop_ids:
            reason = FinishReason("stop", matched=token_id)
        elif self.stop_matcher is not None:
            hit = self.stop_matcher.match(self.output_ids)
            if hit is not None:
                reason = FinishReason("stop", matched=hit)
        self.n_committed = n
        if reason is not None:
            self.finish(reason)
        return reason

    def finish(self, reason: FinishReason) -> None:
        if self.finish_reason is None:
            self.finished_at = time.perf_counter()
            self.finish_reason = reason

    @property
    def e2e_latency(self) -> float:
        end = self.finished_at if self.finished_at is not None else time.perf_counter()
        return end - self.created_at

    # ---- views used by the HTTP layer
    def output_text(self, tokenizer: Any, upto: int | None = None) -> str:
        """Decoded output, with the matched stop string / stop token trimmed as SGLang does."""
        ids = self.output_ids[: self.n_committed if upto is None else upto]
        fr = self.finish_reason if upto is None else None
        trimmed = fr.matched if fr is not None and fr.type == "stop" and not self.sampling.no_stop_trim else None
        if isinstance(trimmed, int) and ids:
            ids = ids[:-1]
        text = tokenizer.decode(
            ids,
            skip_special_tokens=self.sampling.skip_special_tokens,
            spaces_between_special_tokens=self.sampling.spaces_between_special_tokens,
        ) if ids else ""
        if isinstance(trimmed, str):
            pos = text.find(trimmed)
            if pos != -1:
                text = text[:pos]
        return text


@dataclass
class TokenDelta:
    """What `EngineCore.generate` yields: tokens committed since the previous delta."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason | None  # set on the last delta only


__all__ = [
    "DEFAULT_MAX_NEW_TOKENS", "FinishReason", "GenerateRequest", "InvalidRequest", "SamplingParams",
    "StopStringMatcher", "TokenDelta",
]
