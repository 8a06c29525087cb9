"""The per-trajectory OpenAI-compatible endpoint a harness talks to, inside the orchestrator.

One aiohttp server on 127.0.0.1 serves every trajectory of the run; each trajectory gets its own
base URL (`.../trajectories/<id>/v1`) and key, open while its harness runs. Its routes are
/v1/chat/completions (with `tools`, plain or streamed token by token), /v1/completions and /v1/models. A request
becomes token ids here (tandem.harness.capture), goes to the fleet as SGLang's /generate through
the run's engine client (the router, the trajectory's sticky routing key, the group's priority, the
drain gate), and the answer is recorded (prompt ids, completion ids, log-probs, weight version)
before the harness gets an OpenAI response, tool calls parsed by the project's tool-call parser.

Sampling is the rollout's: temperature, top_p and top_k come from rollout.sampling (the trainer
scores with them; a held-out row under evaluation gets eval.temperature), a request's max_tokens is capped at rollout.sampling.max_new_tokens, and its stop
strings are added to the run's. A call may ask for n choices: each is sampled by its own /generate,
recorded as a call of its own, and trained as a branch of the trajectory (tandem.harness.trajectory).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from aiohttp import web

from tandem.env.parsers import ParsedReply
from tandem.harness.capture import (CapturedCall, ChatPrompts, chat_prompt, completion_prompt, normalised,
                                    template_message, tools_key)
from tandem.harness.streaming import WRITER, ChoiceStream, StreamedAnswer, chat_logprobs
from tandem.rollout.client import (GROUP_PROGRESS, REQUEST_PRIORITY, REQUEST_SEED, GenerationError, RolloutAborted,
                                   trajectory_seed)
from tandem.rollout.single_turn import read_output

MAX_CHOICES = 64
"""The most choices (`n`) one call may ask for."""


@dataclass
class Trajectory:
    """One harness run's endpoint state: its key, routing key and recorded calls."""

    id: str
    key: str
    priority: int | None
    progress: Any
    sampling_params: dict
    """The rollout's sampling settings (training's, or evaluation's greedy ones for a held-out row)."""
    calls: list[CapturedCall] = field(default_factory=list)
    aborted: RolloutAborted | None = None
    """Set when the engines aborted a call for a weight update: the group is regenerated."""
    errors: list[str] = field(default_factory=list)
    """Requests answered with an error (the harness may have carried on)."""
    seed: int | None = None
    """run.reproducible: the trajectory's sampling seed (each call's is derived from it and its turn)."""

    @property
    def routing_key(self) -> str:
        return f"harness:{self.id}"


class _Refused(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.kind = status, kind


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "code": None}}, status=status)


class HarnessEndpoint:
    def __init__(self, engine: Any, tokenizer: Any, parse: Callable[[str, list[str]], ParsedReply],
                 host: str = "127.0.0.1"):
        self.engine, self.tok, self.parse = engine, tokenizer, parse
        self.prompts = ChatPrompts(tokenizer)
        self.host, self.url = host, ""
        self.open_trajectories: dict[str, Trajectory] = {}
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        prefix = "/trajectories/{tid}/v1"
        app.router.add_post(prefix + "/chat/completions", self._chat)
        app.router.add_post(prefix + "/completions", self._completions)
        app.router.add_get(prefix + "/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{self.host}:{port}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def open(self, sampling_params: dict, index: int = 0) -> Trajectory:
        """A new trajectory (the `index`-th of its group) sampled with `sampling_params` (its rollout
        context's: evaluation's differ from training's), served under the calling task's request
        priority and group progress, and under run.reproducible its seed (child `index` of the group's)."""
        seed = None if (group_seed := REQUEST_SEED.get()) is None else trajectory_seed(group_seed, index)
        traj = Trajectory(uuid.uuid4().hex[:16], f"tandem-{secrets.token_hex(16)}", REQUEST_PRIORITY.get(),
                          GROUP_PROGRESS.get(), dict(sampling_params), seed=seed)
        self.open_trajectories[traj.id] = traj
        return traj

    def finish(self, traj: Trajectory) -> None:
        """Close its endpoint: later requests (a harness's stray child) are refused."""
        self.open_trajectories.pop(traj.id, None)

    def base_url(self, traj: Trajectory) -> str:
        return f"{self.url}/trajectories/{traj.id}/v1"

    # ------------------------------------------------------------------ requests
    def _trajectory(self, request: web.Request) -> Trajectory:
        traj = self.open_trajectories.get(request.match_info["tid"])
        if traj is None:
            raise _Refused(404, "no open trajectory at this URL (it has ended)", "not_found_error")
        if request.headers.get("Authorization", "") != f"Bearer {traj.key}":
            raise _Refused(401, "wrong API key for this trajectory", "authentication_error")
        return traj

    async def _body(self, request: web.Request) -> dict:
        try:
            body = await request.json()
        except ValueError:
            raise _Refused(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise _Refused(400, "the body must be a JSON object")
        n = body.get("n") if body.get("n") is not None else 1
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_CHOICES:
            raise _Refused(400, f"n must be an integer from 1 to {MAX_CHOICES}, got {n!r}")
        return body

    @staticmethod
    def _params(traj: Trajectory, body: dict) -> dict:
        params = dict(traj.sampling_params)
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        if asked:
            params["max_new_tokens"] = max(1, min(int(asked), int(params.get("max_new_tokens", asked))))
        stop = body.get("stop")
        if stop:
            params["stop"] = [*params.get("stop", []), *([stop] if isinstance(stop, str) else list(stop))]
        return params

    async def _generate(self, traj: Trajectory, prompt_ids: list[int], body: dict, stream: ChoiceStream | None = None,
                        choice: int | None = None) -> tuple[list, list, int, str, int]:
        """One sample: `choice` k of an n > 1 call is seeded with the trajectory seed's child k (as
        EngineClient.generate_many seeds a group), a single one with the trajectory's own."""
        if traj.aborted is not None:  # its group is regenerated anyway: the harness need not go on
            raise _Refused(503, f"generation aborted for a weight update: {traj.aborted} (this trajectory "
                                "is discarded and run again)", "server_error")
        REQUEST_PRIORITY.set(traj.priority)  # this handler's context: the group's priority and progress
        GROUP_PROGRESS.set(traj.progress)
        REQUEST_SEED.set(traj.seed if traj.seed is None or choice is None else trajectory_seed(traj.seed, choice))
        try:
            if stream is None:
                out = await self.engine.generate(prompt_ids, self._params(traj, body), routing_key=traj.routing_key)
            else:
                out = await self.engine.generate_stream(prompt_ids, self._params(traj, body), stream.on_chunk,
                                                        routing_key=traj.routing_key)
        except RolloutAborted as err:
            traj.aborted = err
            raise _Refused(503, f"generation aborted for a weight update: {err}", "server_error") from None
        except GenerationError as err:
            raise _Refused(502, f"the engines failed: {err}", "server_error") from None
        return read_output(out)

    async def _generate_choices(self, traj: Trajectory, prompt_ids: list[int], body: dict,
                                stream: StreamedAnswer | None) -> list[tuple]:
        """The request's n choices: n independent samples of one prompt, each its own /generate on the
        trajectory's engine (its own ids, log-probs and version), streamed when the call is. One
        aborted or failed fails the call."""
        n = body.get("n") or 1
        streams = stream.choices if stream is not None else [None] * n
        if n == 1:
            return [await self._generate(traj, prompt_ids, body, streams[0])]
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._generate(traj, prompt_ids, body, s, k)) for k, s in enumerate(streams)]
        except BaseExceptionGroup as eg:
            raise eg.exceptions[0] from None
        return [t.result() for t in tasks]

    async def _serve(self, request: web.Request, handle) -> web.StreamResponse:
        traj = None
        try:
            traj = self._trajectory(request)
            return await handle(request, traj, await self._body(request))
        except _Refused as err:
            return await self._refuse(request, traj, err)
        except (ValueError, TypeError, KeyError) as err:  # a request the template or parser cannot take
            return await self._refuse(request, traj, _Refused(400, f"bad request: {err!r}"))

    @staticmethod
    async def _refuse(request: web.Request, traj: Trajectory | None, err: _Refused) -> web.StreamResponse:
        if traj is not None:
            traj.errors.append(f"HTTP {err.status}: {err}")
        writer = request.get(WRITER)
        if writer is not None and writer.started:  # tokens were streamed already: the error ends the stream
            return await writer.fail(err.status, str(err), err.kind)
        return _error(err.status, str(err), err.kind)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._chat_call)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._completion_call)

    async def _models(self, request: web.Request) -> web.Response:
        try:
            self._trajectory(request)
        except _Refused as err:
            return _error(err.status, str(err), err.kind)
        return web.json_response({"object": "list", "data": [{"id": "tandem", "object": "model", "created": 0,
                                                               "owned_by": "tandem"}]})

    async def _chat_call(self, request: web.Request, traj: Trajectory, body: dict) -> web.StreamResponse:
        messages, tools = body.get("messages"), body.get("tools") or None
        if not isinstance(messages, list) or not messages:
            raise _Refused(400, "messages must be a non-empty list")
        prompt_ids, extended = chat_prompt(traj.calls, self.prompts, messages, tools)
        head = _head("chatcmpl", body)
        stream = StreamedAnswer(request, self.tok, head, body, body.get("n") or 1, True, bool(tools)) \
            if body.get("stream") else None
        outs = await self._generate_choices(traj, prompt_ids, body, stream)
        choices = [self._chat_choice(traj, k, prompt_ids, extended, messages, tools, out, body,
                                     stream.choices[k] if stream else None) for k, out in enumerate(outs)]
        usage = _usage(prompt_ids, [i for out in outs for i in out[0]])
        if stream is not None:
            return await stream.end(outs, choices, usage)
        return web.json_response({**head, "object": "chat.completion", "choices": choices, "usage": usage})

    def _chat_choice(self, traj: Trajectory, index: int, prompt_ids: list[int], extended: bool, messages: list[dict],
                     tools: list[dict] | None, out: tuple, body: dict, streamed: ChoiceStream | None) -> dict:
        """Choice `index` of a chat call, recorded as a call of its own (a branch when index > 0).
        Streamed, its content is what the harness was sent (tandem.harness.streaming)."""
        ids, lps, version, finish, finished_on = out
        text = self.tok.decode(ids, skip_special_tokens=True)
        names = [t.get("function", t).get("name", "") for t in tools or []]
        parsed = self.parse(text, names) if tools else ParsedReply(text)
        tool_calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                       "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in parsed.calls]
        content = (parsed.content or None) if tool_calls else text
        if streamed is not None:
            content = streamed.close(content or "") or (None if tool_calls else "")
        message = {"role": "assistant", "content": content, "tool_calls": tool_calls or None}
        traj.calls.append(CapturedCall(
            "chat", prompt_ids, ids, lps, version, finish, text, extended, [normalised(m) for m in messages],
            normalised(message), [template_message(m) for m in messages], tools_key(tools), finished_on=finished_on,
            choice=index))
        reason = "tool_calls" if tool_calls and finish == "stop" else (finish or "stop")
        logprobs = chat_logprobs(self.tok, ids, lps) if body.get("logprobs") else None
        return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": reason}

    async def _completion_call(self, request: web.Request, traj: Trajectory, body: dict) -> web.StreamResponse:
        prompt_ids, extended, prompt_text = completion_prompt(traj.calls, self.tok, body.get("prompt"))
        head = _head("cmpl", body)
        stream = StreamedAnswer(request, self.tok, head, body, body.get("n") or 1, False, False) \
            if body.get("stream") else None
        outs = await self._generate_choices(traj, prompt_ids, body, stream)
        choices = []
        for index, (ids, lps, version, finish, finished_on) in enumerate(outs):
            text = self.tok.decode(ids, skip_special_tokens=True)
            if stream is not None:  # what the harness was sent
                text = stream.choices[index].close(text)
            traj.calls.append(CapturedCall("completion", prompt_ids, ids, lps, version, finish, text, extended,
                                           prompt_text=prompt_text, finished_on=finished_on, choice=index))
            logprobs = None
            if body.get("logprobs") is not None:
                tokens = [self.tok.decode([i]) for i in ids]
                logprobs = {"tokens": tokens, "token_logprobs": lps, "top_logprobs": None,
                            "text_offset": [sum(len(t) for t in tokens[:k]) for k in range(len(tokens))]}
            choices.append({"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish or "stop"})
        usage = _usage(prompt_ids, [i for out in outs for i in out[0]])
        if stream is not None:
            return await stream.end(outs, choices, usage)
        return web.json_response({**head, "object": "text_completion", "choices": choices, "usage": usage})


def _head(prefix: str, body: dict) -> dict:
    return {"id": f"{prefix}-{uuid.uuid4().hex}", "created": int(time.time()), "model": str(body.get("model") or "tandem")}


def _usage(prompt_ids: list[int], ids: list[int]) -> dict:
    return {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids), "total_tokens": len(prompt_ids) + len(ids)}
