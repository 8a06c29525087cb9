"""The contract between tandem's SGLang-compatible HTTP layer and an engine backend.

`api.py` turns HTTP requests into `GenerateRequest`s and calls an `EngineCore`; a core
(embedded HF model, sim latency model, ...) only schedules requests and produces tokens.
Everything that must behave identically across cores lives here or in `api.py`:

* parsing/validating sampling params (`SamplingParams.from_dict`, SGLang field names),
* the finish rules (`GenerateRequest.append_token`: max_new_tokens, then stop token ids /
  eos unless ignore_eos, then stop strings), in SGLang's order,
* detokenization and stop-string trimming (`GenerateRequest.output_text`),
* the JSON shapes of finish reasons and results.

Threading model. The HTTP layer runs on one asyncio loop. A core may produce tokens on
another thread (the embedded core decodes on a dedicated thread). The core appends tokens
with `req.append_token(...)` / finishes with `req.finish(...)` from whatever thread owns the
request, then calls `self.notify(reqs)` (thread-safe, once per step for a whole batch) so
the waiting `generate()` iterators wake up. `generate()` itself is implemented here: it
registers the request, calls the core's `_submit`, and yields `TokenDelta`s.
"""

from __future__ import annotations

import abc
import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Literal, Sequence

PauseMode = Literal["abort", "retract", "in_place"]

# SGLang's default when a request names no max_new_tokens.
DEFAULT_MAX_NEW_TOKENS = 128


class InvalidRequest(ValueError):
    """Bad client input; the HTTP layer answers 400 with this message."""


# --------------------------------------------------------------------------- sampling params
@dataclass
class SamplingParams:
    """The subset of SGLang's `sampling_params` that tandem's cores honour (names as SGLang)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    n: int = 1
    seed: int | None = None
    """Accepted for compatibility; per-request seeding is not reproduced across batch layouts."""

    # SGLang knobs tandem's cores do not implement: accepted at their neutral value (sglang-router
    # and clients send them), refused otherwise so a request is never silently decoded differently.
    NEUTRAL = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0, "min_new_tokens": 0}
    UNSUPPORTED = ("json_schema", "regex", "ebnf", "structural_tag", "custom_params", "logit_bias")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, *, vocab_size: int | None = None) -> "SamplingParams":
        """Validate a client's sampling_params dict; raises InvalidRequest naming the bad field."""
        d = dict(d or {})
        p = cls()
        try:
            if d.get("temperature") is not None:
                p.temperature = float(d["temperature"])
            if d.get("top_p") is not None:
                p.top_p = float(d["top_p"])
            if d.get("top_k") is not None:
                p.top_k = int(d["top_k"])
            if d.get("min_p") is not None:
                p.min_p = float(d["min_p"])
            if d.get("max_new_tokens") is not None:
                p.max_new_tokens = int(d["max_new_tokens"])
            stop = d.get("stop")
            if stop is not None:
                p.stop = [stop] if isinstance(stop, str) else [str(s) for s in stop]
            if d.get("stop_token_ids") is not None:
                p.stop_token_ids = [int(t) for t in d["stop_token_ids"]]
            for name in ("ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim"):
                if d.get(name) is not None:
                    setattr(p, name, bool(d[name]))
            if d.get("n") is not None:
                p.n = int(d["n"])
            if d.get("seed") is not None:
                p.seed = int(d["seed"])
            for name, neutral in cls.NEUTRAL.items():
                if d.get(name) is not None and float(d[name]) != neutral:
                    raise InvalidRequest(f"sampling_params.{name} = {d[name]} is not supported by this engine "
                                         f"(only the neutral value {neutral})")
        except (TypeError, ValueError) as err:
            if isinstance(err, InvalidRequest):
                raise
            raise InvalidRequest(f"invalid sampling_params: {err}") from None
        for name in cls.UNSUPPORTED:
            if d.get(name):
                raise InvalidRequest(f"sampling_params.{name} is not supported by this engine")
        if p.temperature < 0:
            raise InvalidRequest(f"sampling_params.temperature must be >= 0, got {p.temperature}")
        if not 0 < p.top_p <= 1:
            raise InvalidRequest(f"sampling_params.top_p must be in (0, 1], got {p.top_p}")
        if p.top_k == 0 or p.top_k < -1:
            raise InvalidRequest(f"sampling_params.top_k must be -1 (disabled) or >= 1, got {p.top_k}")
        if not 0 <= p.min_p <= 1:
            raise InvalidRequest(f"sampling_params.min_p must be in [0, 1], got {p.min_p}")
        if p.max_new_tokens < 0:
            raise InvalidRequest(f"sampling_params.max_new_tokens must be >= 0, got {p.max_new_tokens}")
        if p.n != 1:
            raise InvalidRequest("sampling_params.n > 1 is not supported; send n separate requests")
        if vocab_size is not None and any(not 0 <= t < vocab_size for t in p.stop_token_ids):
            raise InvalidRequest(f"sampling_params.stop_token_ids must be in [0, {vocab_size})")
        return p

    @property
    def greedy(self) -> bool:
        # SGLang treats very small temperatures as greedy too.
        return self.temperature < 1e-6 or self.top_k == 1


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
    """One generation request: parsed input, then state a core mutates as it decodes.

    Cores must only touch state through `append_token` and `finish`, then call
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
    # Filled by EngineCore.make_request: eos ids of the tokenizer/model, stop-string matcher.
    eos_token_ids: frozenset[int] = frozenset()
    stop_matcher: StopStringMatcher | None = None
    created_at: float = field(default_factory=time.perf_counter)

    # ---- state written by the core
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    output_top_logprobs: list[list[tuple[float, int]]] = field(default_factory=list)
    """Filled only when top_logprobs_num > 0: per output token, the top (logprob, token_id) pairs."""
    input_token_logprobs: list[float | None] | None = None
    """Prompt-token logprobs from position max(logprob_start_len, 0) on (first prompt token: None);
    filled at prefill when return_logprob and logprob_start_len >= 0."""
    input_top_logprobs: list[list[tuple[float, int]] | None] | None = None
    num_retractions: int = 0
    admitted: bool = False
    """Past the pause/update gate and handed to the core (set on the event loop)."""
    n_committed: int = 0
    finish_reason: FinishReason | None = None
    cached_tokens: int = 0
    weight_version: str = ""
    finished_at: float | None = None
    # Set by EngineCore.generate: where to wake the consumer.
    _event: asyncio.Event | None = field(default=None, repr=False)

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
        trim = fr is not None and fr.type == "stop" and not self.sampling.no_stop_trim
        if trim and isinstance(fr.matched, int) and ids:
            ids = ids[:-1]
        text = tokenizer.decode(
            ids,
            skip_special_tokens=self.sampling.skip_special_tokens,
            spaces_between_special_tokens=self.sampling.spaces_between_special_tokens,
        ) if ids else ""
        if trim and isinstance(fr.matched, str):
            pos = text.find(fr.matched)
            if pos != -1:
                text = text[:pos]
        return text


@dataclass
class TokenDelta:
    """What `EngineCore.generate` yields: tokens committed since the previous delta."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason | None  # set on the last delta only


# --------------------------------------------------------------------------- load / weights
@dataclass
class LoadInfo:
    """A core's load; `to_json` is one entry of SGLang's /get_load list (plus tandem extras)."""

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
            "num_reqs": self.num_running_reqs + self.num_waiting_reqs,
            "num_waiting_reqs": self.num_waiting_reqs,
            "num_tokens": self.num_tokens,
            "num_running_reqs": self.num_running_reqs,
            "num_pending_admission": self.num_pending_admission,
            "max_running_requests": self.max_running_requests,
            "max_total_num_tokens": self.max_total_tokens,
            "max_running_batch_seen": self.max_running_batch_seen,
            "paused": self.paused,
        }


@dataclass
class WeightUpdateResult:
    success: bool
    message: str
    num_paused_requests: int = 0


# --------------------------------------------------------------------------- the core
class EngineCore(abc.ABC):
    """Request admission, pause/continue and weight-update gating, shared by every backend.

    The gating follows SGLang's TokenizerManager:
    * a new request waits at the door while generation is paused or a weight update drains;
    * /update_weights_from_disk when NOT paused waits until every admitted request finished
      (drain; new ones wait), then swaps; when paused it swaps at once, under the paused
      requests (in_place requests continue on the new weights after continue_generation);
    * pause(abort) aborts every admitted request; retract / in_place keep them (see `_pause`).

    Backends implement the `_`-prefixed hooks: `_submit`, `_abort`, `_pause`, `_resume`,
    `_flush_cache`, `_load_weights`, `get_load`.
    """

    backend: str = "abstract"

    def __init__(self, *, tokenizer: Any, model_path: str, served_model_name: str | None = None,
                 weight_version: str = "0", max_running_requests: int = 64, max_total_tokens: int = 262144,
                 context_length: int | None = None, priority_scheduling: bool = False):
        self.tokenizer = tokenizer
        self.priority_scheduling = priority_scheduling
        """Waiting requests are served by `priority` (see tandem.engine.queueing), else FIFO."""
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
        self._admitted = 0
        self._pending_admission = 0
        self._gate: asyncio.Condition | None = None
        self._update_lock: asyncio.Lock | None = None
        self._bg_tasks: set[asyncio.Task] = set()

    @classmethod
    def from_config(cls, cfg: Any, *, model_path: str, name: str = "engine") -> "EngineCore":
        """Build a core from the run's TandemConfig; `python -m tandem.engine` calls this.

        `model_path` is `tandem.model_source.resolve_model_path(cfg)` (a directory with the
        tokenizer and, for real backends, the weights). Initial weight_version is "0"."""
        raise NotImplementedError(f"{cls.__name__} does not implement from_config")

    # ---- lifecycle
    async def start(self) -> None:
        """Called once on the serving loop before requests arrive."""
        self.loop = asyncio.get_running_loop()
        self._gate = asyncio.Condition()
        self._update_lock = asyncio.Lock()
        await self._start()

    async def shutdown(self) -> None:
        await self._shutdown()

    @property
    def paused(self) -> bool:
        return self._paused

    # ---- request construction (shared so every core parses identically)
    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    def make_request(self, *, input_ids: list[int], sampling: SamplingParams, rid: str | None = None,
                     return_logprob: bool = False, logprob_start_len: int = -1, top_logprobs_num: int = 0,
                     stream: bool = False, priority: int | None = None) -> GenerateRequest:
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
        rid = rid or uuid.uuid4().hex
        if rid in self.requests:
            raise InvalidRequest(f"duplicate request id (rid) {rid!r}")
        return GenerateRequest(
            rid=rid, input_ids=list(input_ids), sampling=sampling, return_logprob=return_logprob,
            logprob_start_len=logprob_start_len, top_logprobs_num=top_logprobs_num, stream=stream,
            priority=priority, eos_token_ids=self.eos_token_ids,
            stop_matcher=StopStringMatcher(self.tokenizer, sampling.stop) if sampling.stop else None,
        )

    # ---- generation
    async def generate(self, req: GenerateRequest) -> AsyncIterator[TokenDelta]:
        """Yield committed tokens as they come; the last delta carries the finish reason.

        If the consumer goes away (client disconnect, cancellation) the request is aborted.
        """
        assert self._gate is not None, "EngineCore.start() was not awaited"
        req._event = asyncio.Event()
        self.requests[req.rid] = req
        sent = 0
        admitted = False
        try:
            self._pending_admission += 1
            try:
                async with self._gate:
                    await self._gate.wait_for(lambda: req.finish_reason is not None or
                                              not (self._paused or self._updating))
            finally:
                self._pending_admission -= 1
            if req.finish_reason is None:
                admitted = req.admitted = True
                self._admitted += 1
                if req.sampling.max_new_tokens == 0:
                    req.weight_version = self.weight_version
                    req.finish(FinishReason("length", length=0))
                else:
                    self._submit(req)
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
                req._event.clear()
                if req.n_committed == sent and req.finish_reason is None:
                    await req._event.wait()
        finally:
            self.requests.pop(req.rid, None)
            if req.finish_reason is None and admitted:
                # The consumer went away (client disconnect / cancel): free the slot. A task,
                # because awaiting inside a closing async generator is not reliable.
                self._spawn(self._abort([req.rid]))
            if admitted:
                self._admitted -= 1
                if self._admitted == 0:
                    self._spawn(self._notify_gate())

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
        if _on_loop(self.loop):
            _wake(reqs)
        else:
            self.loop.call_soon_threadsafe(_wake, list(reqs))

    # ---- control plane (SGLang semantics)
    async def abort(self, rid: str | None = None, abort_all: bool = False) -> int:
        """/abort_request: abort one request by exact rid, or every admitted one."""
        if abort_all:
            return await self._abort(None)
        if not rid or rid not in self.requests:
            return 0
        req = self.requests[rid]
        if req.finish_reason is not None:
            return 0
        if req.admitted:
            return await self._abort([rid])
        # Still at the door (paused / draining): finish it here; generate() wakes on the gate.
        req.weight_version = self.weight_version
        req.finish(FinishReason.abort())
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
        async with self._gate:
            self._paused = True
            if mode == "abort":
                return await self._abort(None)
            return await self._pause(mode)

    async def resume(self) -> None:
        """/continue_generation."""
        async with self._gate:
            self._paused = False
            await self._resume()
            self._gate.notify_all()

    async def flush_cache(self) -> tuple[bool, str]:
        """/flush_cache: fails while requests run (their KV is in use); retracted requests don't count."""
        return await self._flush_cache()

    async def update_weights_from_disk(self, model_path: str, weight_version: str | None = None, *,
                                       abort_all_requests: bool = False, flush_cache: bool = True,
                                       load_format: str | None = None) -> WeightUpdateResult:
        """Load HF safetensors from model_path (SGLang semantics: drain when not paused, immediate when
        paused). On failure the old weights and version stay and success is False with the reason."""
        assert self._update_lock is not None and self._gate is not None
        async with self._update_lock:
            if abort_all_requests:
                await self._abort(None)
            num_paused = 0
            async with self._gate:
                if self._paused:
                    num_paused = self._admitted
                    ok, msg = await self._load_weights(model_path, load_format)
                else:
                    self._updating = True
                    try:
                        await self._gate.wait_for(lambda: self._admitted == 0)
                        ok, msg = await self._load_weights(model_path, load_format)
                    finally:
                        self._updating = False
                        self._gate.notify_all()
            if ok:
                if weight_version is not None:
                    self.weight_version = str(weight_version)
                    msg += f" Weight version updated to {self.weight_version}."
                self.model_path = model_path
                if flush_cache:
                    await self._flush_cache()
            return WeightUpdateResult(ok, msg, num_paused)

    async def health_generate(self, timeout_s: float = 20.0) -> bool:
        """Generate one token end to end (bypassing the pause gate only when paused, where SGLang
        would also answer from its scheduler heartbeat); False if none comes within timeout_s."""
        if self._paused or self._updating:
            return self._alive()
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

    # ---- backend hooks
    @abc.abstractmethod
    def _submit(self, req: GenerateRequest) -> None:
        """Queue an admitted request (FIFO). Called on the event loop."""

    @abc.abstractmethod
    async def _abort(self, rids: list[str] | None) -> int:
        """Abort these admitted requests (None: all, waiting and running): finish each with
        FinishReason.abort() and notify; return once they are finished. Returns how many."""

    @abc.abstractmethod
    async def _pause(self, mode: Literal["retract", "in_place"]) -> int:
        """Stop decoding; retract: running -> waiting (KV dropped). Returns requests held."""

    @abc.abstractmethod
    async def _resume(self) -> None:
        """Start decoding again."""

    @abc.abstractmethod
    async def _flush_cache(self) -> tuple[bool, str]:
        ...

    @abc.abstractmethod
    async def _load_weights(self, model_path: str, load_format: str | None) -> tuple[bool, str]:
        """Swap in weights from disk atomically between steps; (False, reason) leaves the old ones."""

    @abc.abstractmethod
    def get_load(self) -> LoadInfo:
        ...

    def _alive(self) -> bool:
        """Whether the backend's worker (thread / task) is still running."""
        return True

    async def _start(self) -> None:
        pass

    async def _shutdown(self) -> None:
        pass

    # ---- info
    def model_info(self) -> dict[str, Any]:
        return {
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

    def server_info(self) -> dict[str, Any]:
        load = self.get_load()
        return {
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
            "internal_states": [{"load": load.to_json(), "paused": self._paused}],
            "version": "tandem-0",
            "uptime_s": time.time() - self.started_at,
        }


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _wake(reqs: Sequence[GenerateRequest]) -> None:
    for r in reqs:
        if r._event is not None:
            r._event.set()


__all__ = [
    "DEFAULT_MAX_NEW_TOKENS", "EngineCore", "FinishReason", "GenerateRequest", "InvalidRequest", "LoadInfo",
    "PauseMode", "SamplingParams", "StopStringMatcher", "TokenDelta", "WeightUpdateResult",
]
