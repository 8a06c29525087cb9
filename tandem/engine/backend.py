"""The contract between `EngineCore` and an engine backend (embedded HF model, sim latency model).

`EngineCore` (tandem.engine.core) owns everything that must behave identically across
backends: request admission, the pause / weight-update gate, the token stream to the HTTP
layer. A backend only schedules the requests it is handed and produces their tokens; it
implements `EngineBackend` and reports back through the public surface of the core it is
attached to (`core.notify`, `core.weight_version`, `core.loop`).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
import asyncio
from typing import Any, Literal, Protocol, Sequence

from tandem.engine.request import GenerateRequest

PauseMode = Literal["abort", "retract", "in_place"]
SERVER_VERSION = "tandem-0"
"""What the engine answers for SGLang's server version (/get_server_info, /v1/loads)."""


# SGLang 0.5.23's answer when the new weights are in but requests still hold KV of the old ones.
FLUSH_REFUSED = ("Weights were updated, but the cache was not flushed because requests are still running or queued. "
                 "Retract or finish them, then call /flush_cache.")


@dataclass
class WeightUpdateResult:
    success: bool
    message: str
    num_paused_requests: int = 0
    """Always 0, as SGLang 0.5.23's scheduler answers (the field stays for its clients)."""


@dataclass
class LoadInfo:
    """A core's load; `to_json` is one entry of the `loads` list SGLang 0.5.23's /v1/loads answers (its
    core keys, plus tandem's extras)."""

    num_running_reqs: int
    num_waiting_reqs: int
    num_tokens: int
    """Tokens held in the KV cache by running requests (prompt + generated)."""
    max_running_requests: int
    max_total_tokens: int
    max_running_batch_seen: int
    """Largest decode batch since start: proves concurrent requests really are batched."""
    num_pending_admission: int = 0
    """Requests held at the door while paused / while a weight update drains (not yet queued)."""
    paused: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "dp_rank": 0,
            "num_running_reqs": self.num_running_reqs,
            "num_waiting_reqs": self.num_waiting_reqs,
            "num_used_tokens": self.num_tokens,
            "max_total_num_tokens": self.max_total_tokens,
            "max_running_requests": self.max_running_requests,
            "token_usage": round(self.num_tokens / self.max_total_tokens, 4) if self.max_total_tokens else 0.0,
            # tandem's own
            "num_pending_admission": self.num_pending_admission,
            "max_running_batch_seen": self.max_running_batch_seen,
            "paused": self.paused,
        }


class ServingCore(Protocol):
    """What a backend uses of the core that serves it (tandem.engine.core.EngineCore is one): the
    backend depends on this, not on the core, so the two modules import in one direction."""

    loop: asyncio.AbstractEventLoop | None
    weight_version: str

    def notify(self, reqs: Sequence[GenerateRequest]) -> None:
        """Wake the waiters of requests that got tokens or finished (thread-safe)."""


class EngineBackend(abc.ABC):
    """What a backend implements. `EngineCore` calls these on its event loop, already gated:
    `submit` only gets admitted requests, `pause` / `resume` / `load_weights` run under the
    core's gate, so a backend never re-checks pause or drain state itself.

    Threading: a backend may produce tokens on another thread; it appends them with
    `req.append_token(...)` / `req.finish(...)` from the thread that owns the request, then calls
    `self.core.notify(reqs)` (thread-safe, once per step for a whole batch).
    """

    name: str = "abstract"
    """Reported as `backend` in /get_server_info."""

    core: ServingCore

    def attach(self, core: ServingCore) -> None:
        """Called once by the EngineCore this backend serves, before anything else."""
        self.core = core

    @abc.abstractmethod
    def submit(self, req: GenerateRequest) -> None:
        """Queue an admitted request (FIFO, or by priority). Called on the event loop."""

    @abc.abstractmethod
    async def abort(self, rids: list[str] | None) -> int:
        """Abort these admitted requests (None: all, waiting and running): finish each with
        FinishReason.abort() and notify; return once they are finished. Returns how many."""

    @abc.abstractmethod
    async def pause(self, mode: Literal["retract", "in_place"]) -> int:
        """Stop decoding; retract: running -> waiting (KV dropped). Returns requests held."""

    @abc.abstractmethod
    async def resume(self) -> None:
        """Start decoding again."""

    @abc.abstractmethod
    async def flush_cache(self) -> tuple[bool, str]:
        """Drop cached KV; (False, reason) while requests still need it."""

    @abc.abstractmethod
    async def load_weights(self, model_path: str, load_format: str | None) -> tuple[bool, str]:
        """Swap in weights from disk atomically between steps; (False, reason) leaves the old ones."""

    async def load_lora(self, name: str, path: str, limits: Any) -> tuple[bool, str]:
        """Serve the peft adapter at `path` as `name` (within `limits`, a core.LoraLimits); (False,
        reason) loads nothing. Called only on an engine started with LoRA."""
        return False, f"the {self.name} backend serves no LoRA adapters"

    async def unload_lora(self, name: str) -> None:
        """Free adapter `name`; no request uses it any more."""

    async def release_memory(self, tags: list[str]) -> None:
        """Free the memory of these regions (tandem.engine.core.MEMORY_TAGS); the engine is idle and
        its door closed. The default holds nothing worth freeing (a backend without device memory)."""

    async def resume_memory(self, tags: list[str]) -> None:
        """Take these released regions' memory again; resumed weights need not hold their values."""

    async def restore_weights(self, model_path: str) -> None:
        """Every region is back: if the weights lost their values and no load has refilled them,
        read them again from `model_path` (the version served before the release)."""

    async def set_cpu_threads(self, threads: int) -> int:
        """Compute with `threads` torch threads from the next step on; returns the count in force."""
        import torch

        torch.set_num_threads(threads)
        return torch.get_num_threads()

    @abc.abstractmethod
    def get_load(self) -> LoadInfo:
        """The backend's queues; the core fills in `num_pending_admission` and `paused`."""

    def alive(self) -> bool:
        """Whether the backend's worker (thread / task) is still running."""
        return True

    async def start(self) -> None:
        """Called once on the serving loop before requests arrive (`core.loop` is set)."""

    async def shutdown(self) -> None:
        """Stop producing tokens and release the worker."""

    def server_info(self) -> dict[str, Any]:
        """Backend-specific keys appended to /get_server_info."""
        return {}

    def model_info(self) -> dict[str, Any]:
        """Keys of /get_model_info the backend knows better than the core (model_type, ...)."""
        return {}


__all__ = ["EngineBackend", "LoadInfo", "PauseMode"]
