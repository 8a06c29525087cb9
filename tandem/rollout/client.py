"""The engine client rollouts call: SGLang's native /generate through the router, with retries,
request priorities and sticky sessions."""

from __future__ import annotations

import asyncio
import hashlib
import contextvars
from typing import Any, Awaitable, Callable

import aiohttp
import orjson

from tandem.rollout.direct import DirectDispatch, GetWorkers
from tandem.rollout.stream import OnChunk, StreamBroken, read_generate_stream, sse_lines


class RolloutAborted(RuntimeError):
    """The engine aborted the request (a weight update with policy 'abort'); the group is regenerated."""


class GenerationError(RuntimeError):
    pass


REQUEST_PRIORITY: contextvars.ContextVar[int | None] = contextvars.ContextVar("tandem_request_priority",
                                                                             default=None)
"""SGLang request priority of the generate calls made in this task. The rollout producer sets it
in each group's task (larger = served first; rollout.staleness.request_priority: minus the group's
admission order, or minus the version it was admitted under), so engines that schedule by
priority (engine.priority_scheduling) finish older trajectories first."""


REQUEST_SEED: contextvars.ContextVar[int | None] = contextvars.ContextVar("tandem_request_seed", default=None)
"""run.reproducible: the sampling seed of this task's trajectory (the producer sets one per group, a
multi-turn rollout one per episode with `trajectory_seed`). Each generate call sends a
`sampling_seed` derived from it and the context's length (the turn), so what is sampled is a
function of the run seed and the data, never of timing or batch layout."""


def trajectory_seed(parent: int, index: int) -> int:
    """A child seed (episode `index` of a group, sample `index` of a batched call), 63 hashed bits."""
    return int.from_bytes(hashlib.blake2b(f"{parent}:{index}".encode(), digest_size=8).digest(), "big") >> 1


def _seed_request(payload: dict, seed: int) -> None:
    """The request's sampling_seed (SGLang's name): the trajectory's seed and the context length (its turn)."""
    payload["sampling_params"] = {**payload["sampling_params"],
                                  "sampling_seed": trajectory_seed(seed, len(payload["input_ids"]))}


class GroupProgress:
    """What a group's requests got back so far: the oldest weight version among the answers (None:
    no answer yet), and how many answers and tokens. The producer puts one in each group's
    context; `EngineClient.generate` updates it, so the producer knows, while a trajectory still
    runs, whether its oldest token is already too old for any step it could still reach, and how
    far a group it cancels had got (the length-bias window counts it)."""

    def __init__(self) -> None:
        self.oldest_version: int | None = None
        self.answers = 0
        """Answers with tokens so far (a multi-turn trajectory gets one per turn)."""
        self.tokens = 0

    def saw(self, version: int, tokens: int = 0) -> None:
        self.oldest_version = version if self.oldest_version is None else min(self.oldest_version, version)
        self.answers += 1
        self.tokens += tokens


GROUP_PROGRESS: contextvars.ContextVar[GroupProgress | None] = contextvars.ContextVar("tandem_group_progress",
                                                                                     default=None)

ROUTING_KEY_HEADER = "x-smg-routing-key"
"""sglang-router's session header: its 'manual' policy pins every request with one key to one worker."""

Post = Callable[[dict, "dict | None"], Awaitable[tuple[int, Any]]]
"""How one /generate reaches the router: (payload, headers) -> (HTTP status, JSON body if 200
else the body's text). The default posts over HTTP with aiohttp; a simulated run injects an
in-process router (tandem.lab.virtual). A streamed /generate posts the same way, its 200 body the
stream's last chunk (tandem.rollout.stream)."""


class InFlightMeter:
    """Requests in flight and their context tokens, time-averaged on the loop's clock (a simulated
    run's too): the batch the engines serve, which the autoscaler's latency model spreads over
    other fleet sizes. A request's context counts its prompt plus half its max_new_tokens, the mean
    KV it holds while it decodes to that length."""

    def __init__(self) -> None:
        self._t: float | None = None
        self._requests = self._tokens = 0
        self._area_requests = self._area_tokens = self._span = 0.0

    def _advance(self) -> None:
        now = asyncio.get_running_loop().time()
        if self._t is not None:
            dt = now - self._t
            self._area_requests += self._requests * dt
            self._area_tokens += self._tokens * dt
            self._span += dt
        self._t = now

    def add(self, requests: int, tokens: int) -> None:
        """`requests` (negative: finished) holding `tokens` of context between them."""
        self._advance()
        self._requests += requests
        self._tokens += tokens

    def take(self) -> dict[str, float]:
        """The means since the last take (0 before any request)."""
        self._advance()
        span = self._span or 1.0
        means = {"engine_requests_mean": self._area_requests / span, "engine_context_tokens_mean": self._area_tokens / span}
        self._area_requests = self._area_tokens = self._span = 0.0
        return means


def _context_tokens(payload: dict) -> tuple[int, int]:
    """(requests, context tokens) of one /generate payload, single or batched."""
    ids = payload["input_ids"]
    prompts = ids if ids and isinstance(ids[0], list) else [ids]
    decode = int(payload.get("sampling_params", {}).get("max_new_tokens", 0) or 0) // 2
    return len(prompts), sum(len(p) for p in prompts) + decode * len(prompts)


class EngineClient:
    """Async client for SGLang's /generate through the router, with the drain gate.

    All generation goes through `generate`, so the orchestrator can count requests in
    flight and close a gate in front of new ones: that is how 'drain, then sync' works.
    """

    def __init__(self, base_url: str, concurrency: int, timeout_s: float, retries: int = 8,
                 post: Post | None = None, headers: dict[str, str] | None = None):
        self.base_url = base_url
        self.headers = headers or {}
        """Sent with every request (the engines' API key: the router forwards it)."""
        self._post = post or self._post_http
        self.timeout_s = timeout_s
        self.retries = retries
        self._sem = asyncio.Semaphore(concurrency)
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.in_flight = 0
        self.retried = 0
        """Requests that failed once (e.g. their engine died) and were sent again."""
        self.generated_tokens = 0
        self.load = InFlightMeter()
        """Requests in flight over time (the autoscaler's latency model reads it per step)."""
        self.weight_version = 0
        """Version every engine is known to serve; set by weight sync before the gate reopens."""
        self.adapter: str | None = None
        """With LoRA: the adapter of weight_version, loaded on every engine (set with it by weight sync);
        each request names it. None: the base model (version 0, or no LoRA)."""
        # aiohttp, not httpx: httpx's pool bookkeeping scans every pooled connection on each
        # request, which at hundreds of concurrent rollouts cost the orchestrator as much CPU
        # as the engines themselves (measured by bench/trl_compare.py's profile).
        self._concurrency = concurrency
        self._http: aiohttp.ClientSession | None = None
        self.routed_experts = False
        """Ask engines for the experts they routed each token to (trainer.moe: SGLang's return_routed_experts)."""
        self.direct: DirectDispatch | None = None
        """Send requests to the engines themselves, past a router that drops fields (tandem.rollout.direct)."""

    def ask_routed_experts(self, get_workers: GetWorkers) -> None:
        """trainer.moe: every request asks for its routed experts, sent straight to one of the router's
        engines (sglang-router drops the field)."""
        self.routed_experts = True
        self.direct = DirectDispatch(get_workers)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:  # created inside the running event loop, as aiohttp requires
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._concurrency + 8),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s), headers=self.headers)
        return self._http

    def close_gate(self) -> None:
        self._open.clear()

    def open_gate(self) -> None:
        self._open.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def generate(self, input_ids: list[int], sampling_params: dict, return_logprob: bool = True,
                       routing_key: str | None = None, routed_experts_start_len: int = 0) -> dict:
        """One /generate call. `routing_key` names the session (one agent trajectory): with
        router.policy = 'manual' every call with the same key lands on the same engine.
        `routed_experts_start_len`: the first token position whose routed experts come back (when asked)."""
        payload = {"input_ids": input_ids, "sampling_params": sampling_params, "return_logprob": return_logprob}
        self._ask_routing(payload, routed_experts_start_len)
        out, start_version, adapter_version = await self._send(payload, routing_key)
        return self._received(out, start_version, adapter_version)

    async def generate_stream(self, input_ids: list[int], sampling_params: dict, on_chunk: OnChunk,
                              return_logprob: bool = True, routing_key: str | None = None) -> dict:
        """`generate` streamed (SGLang's /generate with "stream": true): `on_chunk` gets each chunk as
        the engine sends it (cumulative text, output_ids and meta_info, SGLang's default stream
        output), then the last chunk comes back labelled as `generate`'s answer. Same drain gate,
        priority, seed, fleet-down wait and version labels; an aborted request raises RolloutAborted
        (its abort chunk is not passed on). Retried only until the first chunk is passed on: after
        that the caller has forwarded tokens, so a broken stream fails the call (StreamBroken)."""
        payload = {"input_ids": input_ids, "sampling_params": sampling_params, "return_logprob": return_logprob,
                   "stream": True}
        self._ask_routing(payload, 0)

        async def post(body: dict, headers: dict | None) -> tuple[int, Any]:
            return await self._post_http(body, headers, lambda url, b, h: self._stream_to(url, b, h, on_chunk))
        out, start_version, adapter_version = await self._send(payload, routing_key, post)
        return self._received(out, start_version, adapter_version)

    async def generate_many(self, input_ids: list[int], sampling_params: dict, n: int,
                            return_logprob: bool = True) -> list[dict]:
        """`n` independent completions of one prompt in one batched /generate (SGLang's batch
        form: `input_ids` a list of prompts), so one engine runs the whole group and the request
        costs one round trip instead of n. Each answer keeps its own ids, logprobs and version.
        Seeded (run.reproducible): n single calls, each with its own seed, since a batch carries one
        sampling_params for all its prompts through sglang-router."""
        if (seed := REQUEST_SEED.get()) is not None:
            return list(await asyncio.gather(*(self._seeded(trajectory_seed(seed, i), input_ids, sampling_params,
                                                            return_logprob) for i in range(n))))
        payload = {"input_ids": [list(input_ids)] * n, "sampling_params": sampling_params,
                   "return_logprob": return_logprob}
        self._ask_routing(payload, 0)
        outs, start_version, adapter_version = await self._send(payload, None)
        if not isinstance(outs, list) or len(outs) != n:
            raise GenerationError(f"a batched /generate of {n} prompts answered "
                                  f"{len(outs) if isinstance(outs, list) else type(outs).__name__}")
        return [self._received(out, start_version, adapter_version) for out in outs]

    async def _seeded(self, seed: int, input_ids: list[int], sampling_params: dict, return_logprob: bool) -> dict:
        REQUEST_SEED.set(seed)  # this task's context only
        return await self.generate(input_ids, sampling_params, return_logprob)

    def _ask_routing(self, payload: dict, start: int) -> None:
        if self.routed_experts:
            payload["return_routed_experts"] = True
            if start:
                payload["routed_experts_start_len"] = start

    async def _send(self, payload: dict, routing_key: str | None,
                    post: Post | None = None) -> tuple[Any, int, int | None]:
        """Post through the drain gate: (answer, version served when sent, LoRA adapter version)."""
        async with self._sem:
            await self._open.wait()
            self.in_flight += 1
            self._idle.clear()
            start_version = self.weight_version
            if (priority := REQUEST_PRIORITY.get()) is not None:
                payload["priority"] = priority
            requests, tokens = _context_tokens(payload)
            self.load.add(requests, tokens)
            if (seed := REQUEST_SEED.get()) is not None:
                _seed_request(payload, seed)
            try:
                out, adapter_version = await self._post_with_retry(payload, routing_key, post)
            finally:
                self.load.add(-requests, -tokens)
                self.in_flight -= 1
                if self.in_flight == 0:
                    self._idle.set()
        return out, start_version, adapter_version

    def _received(self, out: dict, start_version: int, adapter_version: int | None) -> dict:
        """Label one answer with the oldest version its tokens may come from; count it."""
        meta = out.setdefault("meta_info", {})
        # An engine reports the version it finished on; with in-place updates earlier tokens
        # may be older. Staleness must count the oldest, so keep the smaller of the two.
        meta["engine_weight_version"] = meta.get("weight_version")
        if adapter_version is not None:  # a LoRA request ran wholly on the adapter it named
            meta["weight_version"] = str(adapter_version)
        else:
            self._label_version(meta, start_version)
        finish = meta.get("finish_reason") or {}
        if isinstance(finish, dict) and finish.get("type") == "abort":
            raise RolloutAborted(finish.get("message", "aborted by engine"))
        if (progress := GROUP_PROGRESS.get()) is not None and out.get("output_ids"):
            progress.saw(int(meta["weight_version"]), len(out["output_ids"]))
        self.generated_tokens += len(out.get("output_ids", []))
        return out

    @staticmethod
    def _label_version(meta: dict, start_version: int) -> None:
        try:
            meta["weight_version"] = str(min(int(meta.get("weight_version", start_version)), start_version))
        except (TypeError, ValueError):
            meta["weight_version"] = str(start_version)

    async def _post_with_retry(self, payload: dict, routing_key: str | None = None,
                               post: Post | None = None) -> tuple[dict, int | None]:
        """(answer, the version of the LoRA adapter it ran on, or None without one). Each attempt
        names the adapter current when it is sent: a retry never asks for one unloaded meanwhile."""
        post = post or self._post
        last: Exception | None = None
        headers = {ROUTING_KEY_HEADER: routing_key} if routing_key else None
        attempt, fleet_down_since = 0, None
        while attempt <= self.retries:
            adapter_version = None
            if self.adapter is not None:
                payload["lora_path"], adapter_version = self.adapter, self.weight_version
            try:
                status, body = await post(payload, headers)
                if status == 200:
                    return body, adapter_version
                last = GenerationError(f"/generate answered HTTP {status}: {str(body)[:300]}")
                if self._fleet_down(status, body, fleet_down_since):
                    # No engine routable (the only one is being restarted): the engine doctor
                    # brings one back or stops the run; wait for it, within one request timeout.
                    fleet_down_since = fleet_down_since or asyncio.get_running_loop().time()
                    await asyncio.sleep(min(2.0, 0.2 * 2**attempt))
                    continue
                # A refused adapter is retried (on the adapter current then); other client errors are final.
                if status < 500 and not (adapter_version is not None and "LoRA adapters are not loaded" in str(body)):
                    break
            except (aiohttp.ClientError, asyncio.TimeoutError) as err:
                last = GenerationError(f"/generate transport error: {err!r}")
            if attempt < self.retries:
                self.retried += 1
                await asyncio.sleep(min(2.0, 0.2 * 2**attempt))
            attempt += 1
        raise last  # type: ignore[misc]

    def _fleet_down(self, status: int, body: Any, since: float | None) -> bool:
        """sglang-router's answer when it has no healthy worker, for at most one request timeout."""
        if status != 503 or "no_available_workers" not in str(body):
            return False
        return since is None or asyncio.get_running_loop().time() - since < self.timeout_s

    async def _post_http(self, payload: dict, headers: dict | None, to=None) -> tuple[int, Any]:
        """POST to the router, or past it to one of its engines (trainer.moe); `to(url, payload,
        headers)` makes the request (default: a plain /generate)."""
        to = to or self._post_to
        if self.direct is None:
            return await to(self.base_url, payload, headers)
        url = await self.direct.pick((headers or {}).get(ROUTING_KEY_HEADER))
        if url is None:  # answered as the router answers with no worker, so the wait is the same
            return 503, "no_available_workers: no engine is listed behind the router"
        self.direct.started(url)
        try:
            status, body = await to(url, payload, headers)
        except (aiohttp.ClientError, asyncio.TimeoutError):
            self.direct.stale()
            raise
        finally:
            self.direct.finished(url)
        if status != 200:
            self.direct.stale()
        return status, body

    async def _post_to(self, base_url: str, payload: dict, headers: dict | None) -> tuple[int, Any]:
        async with self._session().post(f"{base_url}/generate", json=payload, headers=headers) as resp:
            if resp.status == 200:
                return 200, await resp.json(loads=orjson.loads)  # stdlib json was a tenth of the orchestrator's CPU
            return resp.status, await resp.text()

    async def _stream_to(self, base_url: str, payload: dict, headers: dict | None, on_chunk: OnChunk) -> tuple[int, Any]:
        async with self._session().post(f"{base_url}/generate", json=payload, headers=headers) as resp:
            if resp.status != 200:
                return resp.status, await resp.text()
            try:
                return 200, await read_generate_stream(sse_lines(resp.content), on_chunk)
            except StreamBroken as err:  # a GenerationError is final: _post_with_retry does not retry it
                raise GenerationError(str(err)) from err
