"""Plumbing every route module of the engine's HTTP API shares: JSON / error / SSE responses,
body parsing and validation, running requests through the core (aborting them when the client
leaves), and the streaming bookkeeping that turns a core's progress into text deltas."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator

import orjson
from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from tandem.engine.core import EngineCore, GenerateRequest, InvalidRequest
from tandem.engine.sampling_params import ContractError

SSE_DONE = b"data: [DONE]\n\n"


def core_of(request: Request) -> EngineCore:
    """The core the app serves (set by `build_app`)."""
    return request.app.state.core


def json_response(content: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status, media_type="application/json")


def error_response(message: str, status: int = 400) -> Response:
    """SGLang's ErrorResponse body: its OpenAI routes' errors, and a body that fails validation anywhere."""
    kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(status, "Error")
    return json_response({"object": "error", "message": message, "type": kind, "param": None, "code": status}, status)


class InvalidBody(InvalidRequest):
    """The body is not what the route takes (no body, not JSON, a field missing or of the wrong type)."""


def invalid_request_response(path: str, err: InvalidRequest) -> Response:
    """The 400 SGLang 0.5.23 answers for `err` on `path`, in its shape: a body that fails validation and
    any OpenAI route's error, {object: "error", message, ...}; a /generate body that breaks its JSON
    contract, {"error": "<text>"}; any other native route's ValueError, {"error": {"message": ...}}
    (tandem.engine_api.error_message reads all three)."""
    if isinstance(err, InvalidBody) or path.startswith("/v1/"):
        return error_response(str(err), 400)
    if isinstance(err, ContractError):
        return json_response({"error": str(err)}, 400)
    return json_response({"error": {"message": str(err)}}, 400)


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


async def read_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        raise InvalidBody("invalid request: body: Field required")  # SGLang's routes all take a body
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise InvalidBody(f"the request body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise InvalidBody("the request body must be a JSON object")
    return body


def validate(model: type[BaseModel], body: dict[str, Any]) -> Any:
    """`model` parsed from `body`; pydantic's errors become one InvalidBody (a 400)."""
    try:
        return model.model_validate(body)
    except ValidationError as err:
        parts = []
        for e in err.errors():
            loc = ".".join(str(p) for p in e["loc"])
            parts.append(f"{loc}: {e['msg']}" if loc else e["msg"])
        raise InvalidBody("invalid request: " + "; ".join(parts)) from None


async def parse(request: Request, model: type[BaseModel]) -> Any:
    return validate(model, await read_body(request))


def token_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    return [tokenizer.decode([i]) for i in ids]


# --------------------------------------------------------------------------- running requests
class ClientGone(Exception):
    """The client disconnected before its (non-streaming) result was ready."""


async def _until_disconnect(request: Request) -> None:
    """Return when the client goes away (the body was already read, so receive() only says that)."""
    while True:
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            return


async def run_or_abort(request: Request, coro: Any) -> Any:
    """Run a non-streaming generation; if the client disconnects first, cancel it (which aborts
    the request in the core, as SGLang does)."""
    work = asyncio.ensure_future(coro)
    watch = asyncio.ensure_future(_until_disconnect(request))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not work.done():
        work.cancel()
        raise ClientGone()
    return work.result()


async def _drain(core: EngineCore, req: GenerateRequest) -> GenerateRequest:
    async for _ in core.generate(req):
        pass
    return req


async def generate_all(request: Request, core: EngineCore, reqs: list[GenerateRequest]) -> list[GenerateRequest]:
    """Run `reqs` to their end (a non-streaming response); ClientGone if the client leaves first."""
    return await run_or_abort(request, asyncio.gather(*(_drain(core, r) for r in reqs)))


async def merged(core: EngineCore, reqs: list[GenerateRequest]) -> AsyncIterator[tuple[int, GenerateRequest]]:
    """Interleave several requests' deltas as they come (one item per delta)."""
    if len(reqs) == 1:
        async for _ in core.generate(reqs[0]):
            yield 0, reqs[0]
        return
    q: asyncio.Queue[tuple[int, bool]] = asyncio.Queue()

    async def pump(i: int, r: GenerateRequest) -> None:
        try:
            async for _ in core.generate(r):
                q.put_nowait((i, False))
        finally:
            q.put_nowait((i, True))

    tasks = [asyncio.ensure_future(pump(i, r)) for i, r in enumerate(reqs)]
    try:
        left = len(reqs)
        while left:
            i, end = await q.get()
            if end:
                left -= 1
                continue
            yield i, reqs[i]
    finally:
        for t in tasks:
            t.cancel()


# --------------------------------------------------------------------------- streaming text
class TextView:
    """Detokenized output of one request: streams only text that is final (no dangling UTF-8 byte,
    no partial stop string that the final trim might remove), ends with SGLang's trimmed text."""

    def __init__(self, req: GenerateRequest, tokenizer: Any):
        self.req = req
        self.tok = tokenizer
        self.stops = [s for s in req.sampling.stop if s] if not req.sampling.no_stop_trim else []

    def current(self) -> str:
        r = self.req
        if r.finish_reason is not None:
            return r.output_text(self.tok)
        text = r.output_text(self.tok, upto=r.n_committed)
        text = text.rstrip("\ufffd")
        hold = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(text)), 0, -1):
                if text.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        return text[:len(text) - hold] if hold else text


@dataclass(frozen=True)
class Delta:
    """What one request gained since its previous delta: new text and output tokens [start, end)."""

    index: int
    req: GenerateRequest
    text: str
    start: int
    end: int
    text_offset: int
    """Length of the text sent before this delta (OpenAI's text_offset of its first token)."""


async def stream_deltas(core: EngineCore, reqs: list[GenerateRequest]) -> AsyncIterator[Delta]:
    """Run `reqs` and yield each one's progress as a Delta, skipping updates that add nothing.

    Text that a later decode rewrites (it no longer extends what was sent) is not resent: the
    client keeps what it has, and text resumes once the output extends it again."""
    views = [TextView(r, core.tokenizer) for r in reqs]
    sent_text = [""] * len(reqs)
    sent_ids = [0] * len(reqs)
    async for k, r in merged(core, reqs):
        text = views[k].current()
        extends = text.startswith(sent_text[k])
        new_text = text[len(sent_text[k]):] if extends else ""
        # One read of n_committed, so the tokens reported and the tokens marked sent agree.
        end = r.n_committed
        if not new_text and r.finish_reason is None and end == sent_ids[k]:
            continue
        delta = Delta(k, r, new_text, sent_ids[k], end, len(sent_text[k]))
        sent_ids[k] = end
        if extends:
            sent_text[k] = text
        yield delta
