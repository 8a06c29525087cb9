"""The records the scheduler model moves around: one request (`SimReq`) and one GPU phase (`Phase`).

A request carries both what the client asked for (lengths, priority, streaming) and what the
scheduler did with it (state, tokens done, the cached blocks it holds, its share of busy
time); a phase is one stretch of GPU work (a prefill forward, a run of decode steps, a weight
reload) from its start to its end in model seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

ReqState = Literal["waiting", "prefill", "running", "finished", "aborted"]


@dataclass(eq=False)
class SimReq:
    rid: str
    input_len: int
    max_new_tokens: int
    """The client's limit; admission reserves against it (clipped)."""
    target: int
    """Tokens this request will generate before it finishes (<= max_new_tokens)."""
    input_blocks: list[int] = field(default_factory=list)
    """Prefix-cache block hashes of the input ids."""
    payload: Any = None
    stream: bool = False
    """A streaming client: decode runs are cut every STREAM_STEPS so tokens flow out step-wise."""
    priority: int = 0
    """SGLang request priority (larger first) when the scheduler orders its queue by priority."""

    state: ReqState = "waiting"
    done: int = 0
    """Tokens generated so far."""
    held_blocks: list[int] = field(default_factory=list)
    cached_tokens: int = 0
    """Prompt tokens served from the prefix cache at the last admission."""
    submitted_at: float = 0.0
    first_token_at: float | None = None
    finished_at: float | None = None
    work_s: float = 0.0
    """This request's share of engine busy time (model seconds)."""
    prefill_tokens: int = 0
    retractions: int = 0

    @property
    def context(self) -> int:
        return self.input_len + self.done

    @property
    def remaining(self) -> int:
        return self.target - self.done


@dataclass
class Phase:
    """What the GPU is doing from `start` to `end` (model seconds)."""

    kind: Literal["prefill", "decode", "tail", "reload"]
    start: float
    end: float
    batch: list[SimReq] = field(default_factory=list)
    steps: int = 0                      # decode: steps planned
    kv0: int = 0                        # decode: KV tokens of the batch at start
    parts: list[tuple[int, int]] = field(default_factory=list)  # prefill: (new, prev) per request
    on_done: Callable[[], None] | None = None   # reload: completion callback
