"""`EngineCore`: what tandem's SGLang-compatible HTTP layer talks to, over any engine backend.

The HTTP layer turns HTTP requests into `GenerateRequest`s (tandem.engine.request) and calls
an `EngineCore`; the core admits them through SGLang's pause / weight-update gate, hands them
to its `EngineBackend` (tandem.engine.backend: embedded HF model, sim latency model, ...), and
streams the backend's tokens back as `TokenDelta`s. Everything that must behave identically
across backends lives in the core, in tandem.engine.request, or in the HTTP layer.

Threading model. The HTTP layer runs on one asyncio loop. A backend may produce tokens on
another thread (the embedded backend decodes on a dedicated thread). It appends tokens with
`req.append_token(...)` / finishes with `req.finish(...)` from whatever thread owns the
request, then calls `core.notify(reqs)` (thread-safe, once per step for a whole batch) so
the waiting `generate()` iterators wake up.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, AsyncIterator, Sequence

from tandem.engine.adapters import Adapters, LoraLimits
from tandem.engine.backend import (FLUSH_REFUSED, SERVER_VERSION, EngineBackend, LoadInfo, PauseMode,
                                   WeightUpdateResult)
from tandem.engine.memory_occupation import MemoryOccupation
from tandem.engine.request import (DEFAULT_MAX_NEW_TOKENS, FinishReason, GenerateRequest, InvalidRequest,
                                   SamplingParams, StopStringMatcher, TokenDelta)


class EngineCore(MemoryOccupation):
    """Request admission, pause/continue and weight-update gating over one `EngineBackend`.

    The gating follows SGLang's TokenizerManager:
    * a new request waits at the door while generation is paused or a weight update drains;
    * /update_weights_from_disk when NOT paused waits until every admitted request finished
      (drain; new ones wait), then swaps; when paused it swaps at once, under the paused
      requests (in_place requests continue on the new weights after continue_generation);
    * pause(abort) aborts every admitted request; retract / in_place keep them (see
      `EngineBackend.pause`).
    """

    def __init__(self, engine_backend: EngineBackend, *, tokenizer: Any, model_path: str,
                 served_model_name: str | None = None, weight_version: str = "0", max_running_requests: int = 64,
                 max_total_tokens: int = 262144, context_length: int | None = None,
                 lora: LoraLimits | None = None):
        self.engine_backend = engine_backend
        self.adapters = Adapters(lora, engine_backend)
        """LoRA adapters served (none unless started with LoRA)."""
        self.tokenizer = tokenizer
        self.model_path = model_path
        self.served_model_name = served_model_name or model_path
        self.weight_version = weight_version
        self.max_running_requests = max_running_requests
        self.max_total_tokens = max_total_tokens
        self.context_length = context_length
        self.loop: asyncio.AbstractEventLoop | None = None
        self.requests: dict[str, GenerateRequest] = {}
        self.started_at = time.time()
        eos = getattr(tokenizer, "eos_token_id", None)
        self.eos_token_ids: frozenset[int] = frozenset([eos] if eos is not None else [])
        self._paused = False
        self._updating = False
        self.released: set[str] = set()  # memory regions released and not resumed: requests wait at the door
        self._admitted = 0
        self._pending_admission = 0
        self._gate: asyncio.Condition | None = None
        self._update_lock: asyncio.Lock | None = None
        self._bg_tasks: set[asyncio.Task] = set()
        engine_backend.attach(self)

    @property
    def backend(self) -> str:
        """The backend's name (embedded, sim, ...), as /get_server_info reports it."""
        return self.engine_backend.name

    # ---- lifecycle
    async def start(self) -> None:
        """Called once on the serving loop before requests arrive."""
        self.loop = asyncio.get_running_loop()
        self._gate = asyncio.Condition()
        self._update_lock = asyncio.Lock()
        await self.engine_backend.start()

    async def shutdown(self) -> None:
        await self.engine_backend.shutdown()

    def alive(self) -> bool:
        """Whether the backend's worker (thread / task) is still running (/health)."""
        return self.engine_backend.alive()

    @property
    def paused(self) -> bool:
        return self._paused

    # ---- request construction (shared so every backend parses identically)
    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    def make_request(self, *, input_ids: list[int], sampling: SamplingParams, rid: str | None = None,
                     return_logprob: bool = False, logprob_start_len: int = -1, top_logprobs_num: int = 0,
                     stream: bool = False, priority: int | None = None, lora_name: str | None = None,
                     **routed_experts: Any) -> GenerateRequest:
        """`routed_experts`: GenerateRequest's return_routed_experts and routed_experts_start_len."""
        self._check_lengths(input_ids, sampling)
        if lora_name is not None:
            self.adapters.check(lora_name)
        rid = rid or uuid.uuid4().hex
        if rid in self.requests:
            raise InvalidRequest(f"duplicate request id (rid) {rid!r}")
        return GenerateRequest(
            rid=rid, input_ids=list(input_ids), sampling=sampling, return_logprob=return_logprob,
            logprob_start_len=logprob_start_len, top_logprobs_num=top_logprobs_num, stream=stream,
            priority=priority, lora_name=lora_name, eos_token_ids=self.eos_token_ids,
            stop_matcher=StopStringMatcher(self.tokenizer, sampling.stop) if sampling.stop else None, **routed_experts)

    def _check_lengths(self, input_ids: list[int], sampling: SamplingParams) -> None:
        if not input_ids:
            raise InvalidRequest("the input is empty (no text / input_ids tokens)")
        vs = self.vocab_size
        if any((not isinstance(t, int)) or isinstance(t, bool) or t < 0 or t >= vs for t in input_ids):
            raise InvalidRequest(f"input_ids must be integers in [0, {vs})")
        if self.context_length is not None and len(input_ids) + sampling.max_new_tokens > self.context_length:
            raise InvalidRequest(
                f"prompt ({len(input_ids)} tokens) + max_new_tokens ({sampling.max_new_tokens}) exceeds the "
                f"model's context length ({self.context_length} tokens)")
        if len(input_ids) + sampling.max_new_tokens > self.max_total_tokens:
            raise InvalidRequest(
                f"prompt ({len(input_ids)}) + max_new_tokens ({sampling.max_new_tokens}) exceeds the engine's "
                f"max_total_tokens ({self.max_total_tokens})")

    # ---- generation
    async def generate(self, req: GenerateRequest) -> AsyncIterator[TokenDelta]:
        """Yield committed tokens as they come; the last delta carries the finish reason.

        If the consumer goes away (client disconnect, cancellation) the request is aborted.
        """
        assert self._gate is not None, "EngineCore.start() was not awaited"
        req.wakeup = asyncio.Event()
        if req.lora_name is not None:
            self.adapters.acquire(req.lora_name)
        self.requests[req.rid] = req
        sent = 0
        admitted = False
        try:
            admitted = await self._wait_for_admission(req)
            if admitted:
                self._start_decoding(req)
            while True:
                # Read finish before n_committed: append_token writes them in the opposite order.
                fr = req.finish_reason
                n = req.n_committed
                if n > sent or fr is not None:
                    delta = TokenDelta(req.output_ids[sent:n], req.output_logprobs[sent:n], fr)
                    sent = n
                    yield delta
                    if fr is not None:
                        return
                    continue
                req.wakeup.clear()
                if req.n_committed == sent and req.finish_reason is None:
                    await req.wakeup.wait()
        finally:
            self.requests.pop(req.rid, None)
            if req.finish_reason is None and admitted:
                # The consumer went away (client disconnect / cancel): free the slot. A task,
                # because awaiting inside a closing async generator is not reliable. Its adapter
                # is released after the abort: the batch must no longer hold the row when it goes.
                self._spawn(self._abort_then_release(req))
            elif req.lora_name is not None:
                self.adapters.release(req.lora_name)
            if admitted:
                self._admitted -= 1
                if self._admitted == 0:
                    self._spawn(self._notify_gate())

    async def _abort_then_release(self, req: GenerateRequest) -> None:
        try:
            await self.engine_backend.abort([req.rid])
        finally:
            if req.lora_name is not None:
                self.adapters.release(req.lora_name)

    async def _wait_for_admission(self, req: GenerateRequest) -> bool:
        """Hold `req` at the door while paused or while a weight update drains, then count it as
        admitted. False: it was aborted while it waited."""
        assert self._gate is not None
        self._pending_admission += 1
        try:
            async with self._gate:
                await self._gate.wait_for(lambda: req.finish_reason is not None or
                                          not (self._paused or self._updating or self.released))
        finally:
            self._pending_admission -= 1
        if req.finish_reason is not None:
            return False
        req.admitted = True
        self._admitted += 1
        return True

    def _start_decoding(self, req: GenerateRequest) -> None:
        if req.sampling.max_new_tokens == 0:
            req.weight_version = self.weight_version
            req.finish(FinishReason("length", length=0))
        else:
            self.engine_backend.submit(req)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._bg_tasks.add(task)
        task.add_done_callback(self._bg_tasks.discard)

    async def _notify_gate(self) -> None:
        assert self._gate is not None
        async with self._gate:
            self._gate.notify_all()

    def notify(self, reqs: Sequence[GenerateRequest]) -> None:
        """Wake consumers of `reqs`; safe to call from any thread, once per step for a batch.

        Only streaming requests and finished ones are woken: a non-streaming consumer needs just
        the end, and skipping its per-token wakeups keeps the event loop (and the GIL) free.
        """
        if self.loop is None:
            return
        reqs = [r for r in reqs if r.stream or r.finish_reason is not None]
        if not reqs:
            return
        if running_on(self.loop):
            _wake(reqs)
        else:
            self.loop.call_soon_threadsafe(_wake, list(reqs))

    # ---- control plane (SGLang semantics)
    async def abort(self, rid: str | None = None, abort_all: bool = False) -> int:
        """/abort_request: abort one request by exact rid, or every admitted one."""
        if abort_all:
            return await self.engine_backend.abort(None)
        req = self.requests.get(rid) if rid else None
        if req is None or req.finish_reason is not None:
            return 0
        if req.admitted:
            return await self.engine_backend.abort([req.rid])
        # Still at the door (paused / draining): finish it here; generate() wakes on the gate.
        req.weight_version = self.weight_version
        req.finish(FinishReason.abort())
        assert self._gate is not None
        async with self._gate:
            self._gate.notify_all()
        return 1

    async def pause(self, mode: PauseMode = "abort") -> int:
        """/pause_generation. New requests wait at the door until continue_generation.
        abort: abort every admitted request (their callers get finish_reason abort).
        retract: running requests go back to the waiting queue, their KV is dropped and recomputed
        after continue. in_place: running requests keep their KV and resume where they were.
        Returns the number of requests aborted (abort) or held (retract / in_place)."""
        if mode not in ("abort", "retract", "in_place"):
            raise InvalidRequest(f"pause mode must be one of abort, retract, in_place; got {mode!r}")
        assert self._gate is not None
        async with self._gate:
            self._paused = True
            if mode == "abort":
                return await self.engine_backend.abort(None)
            return await self.engine_backend.pause(mode)

    async def resume(self) -> None:
        """/continue_generation."""
        assert self._gate is not None
        async with self._gate:
            self._paused = False
            await self.engine_backend.resume()
            self._gate.notify_all()

    async def flush_cache(self) -> tuple[bool, str]:
        """/flush_cache: fails while requests run (their KV is in use); retracted requests don't count."""
        return await self.engine_backend.flush_cache()

    async def update_weights_from_disk(self, model_path: str, weight_version: str | None = None, *,
                                       abort_all_requests: bool = False, flush_cache: bool = True,
                                       load_format: str | None = None) -> WeightUpdateResult:
        """Load HF safetensors from model_path (SGLang semantics: drain when not paused, immediate when
        paused). On failure the old weights and version stay and success is False with the reason. As SGLang
        0.5.23: with flush_cache and requests held in place, the weights load but the answer is FLUSH_REFUSED
        and the version is not taken (send flush_cache false under an in_place pause)."""
        assert self._update_lock is not None
        async with self._update_lock:
            if abort_all_requests:
                await self.engine_backend.abort(None)
            return await self._load_weights_gated(model_path, load_format, weight_version, flush_cache)

    async def _load_weights_gated(self, model_path: str, load_format: str | None, version: str | None,
                                  flush_cache: bool) -> WeightUpdateResult:
        """Paused: swap under the held requests at once. Otherwise drain every admitted request first,
        holding new ones at the door until the weights, the flush and the version are all in."""
        assert self._gate is not None
        async with self._gate:
            if self._paused:
                return await self._swap_weights(model_path, load_format, version, flush_cache)
            self._updating = True
            try:
                await self._gate.wait_for(lambda: self._admitted == 0)
                return await self._swap_weights(model_path, load_format, version, flush_cache)
            finally:
                self._updating = False
                self._gate.notify_all()

    async def _swap_weights(self, model_path: str, load_format: str | None, version: str | None,
                            flush_cache: bool) -> WeightUpdateResult:
        """Load, flush the prefix cache the old weights made, take the version: SGLang's order."""
        ok, msg = await self.engine_backend.load_weights(model_path, load_format)
        if not ok:
            return WeightUpdateResult(False, msg)
        self.model_path = model_path
        if flush_cache and not (await self.engine_backend.flush_cache())[0]:
            return WeightUpdateResult(False, FLUSH_REFUSED)
        if version is not None:
            self.weight_version = str(version)
            msg += f" Weight version updated to {self.weight_version}."
        return WeightUpdateResult(True, msg)

    async def health_generate(self, timeout_s: float = 20.0) -> bool:
        """Generate one token end to end (bypassing the pause gate only when paused, where SGLang
        would also answer from its scheduler heartbeat); False if none comes within timeout_s."""
        if self._paused or self._updating or self.released:
            return self.alive()
        req = self.make_request(input_ids=[0], sampling=SamplingParams(temperature=0.0, max_new_tokens=1),
                                rid=f"HEALTH_CHECK_{uuid.uuid4().hex}")
        async def run() -> bool:
            async for d in self.generate(req):
                if d.token_ids or d.finish_reason is not None:
                    return True
            return False
        try:
            return await asyncio.wait_for(run(), timeout_s)
        except asyncio.TimeoutError:
            return False

    # ---- info
    def get_load(self) -> LoadInfo:
        load = self.engine_backend.get_load()
        load.num_pending_admission = self._pending_admission
        load.paused = self._paused
        return load

    def model_info(self) -> dict[str, Any]:
        info = {
            "model_path": self.model_path,
            "tokenizer_path": self.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": self.weight_version,
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": None,
            "architectures": None,
        }
        info.update(self.engine_backend.model_info())
        return info

    def server_info(self) -> dict[str, Any]:
        load = self.get_load()
        info = {
            "model_path": self.model_path,
            "tokenizer_path": self.model_path,
            "served_model_name": self.served_model_name,
            "backend": self.backend,
            "weight_version": self.weight_version,
            "max_running_requests": self.max_running_requests,
            "max_total_num_tokens": self.max_total_tokens,
            "context_length": self.context_length,
            "dp_size": 1,
            "tp_size": 1,
            "internal_states": [{"load": load.to_json(), "paused": self._paused, "released": sorted(self.released)}],
            "version": SERVER_VERSION,
            "uptime_s": time.time() - self.started_at,
            "loaded_lora_adapters": dict(self.adapters.loaded),
        }
        info.update(self.engine_backend.server_info())
        return info


def running_on(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the caller runs on `loop`'s thread, inside it."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _wake(reqs: Sequence[GenerateRequest]) -> None:
    for r in reqs:
        if r.wakeup is not None:
            r.wakeup.set()


__all__ = ["DEFAULT_MAX_NEW_TOKENS", "EngineBackend", "EngineCore", "FinishReason", "GenerateRequest", "InvalidRequest",
           "LoadInfo", "PauseMode", "SamplingParams", "StopStringMatcher", "TokenDelta", "WeightUpdateResult",
           "running_on"]
