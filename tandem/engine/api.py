"""SGLang's HTTP API (native + OpenAI-compatible) over any `EngineCore`.

Field names, response shapes and status codes follow SGLang's http_server.py / io_struct.py:
/generate returns {text, output_ids, meta_info{id, finish_reason, prompt_tokens, completion_tokens,
cached_tokens, weight_version, e2e_latency, output_token_logprobs [[logprob, id, text|null]]...}};
streams are SSE `data: {json}\\n\\n` chunks ending with `data: [DONE]\\n\\n`, each chunk carrying the
cumulative text / output_ids / logprobs (SGLang's default, non-incremental stream output).
Every request body accepts unknown fields: sglang-router adds its own (ignore_eos, no_stop_trim,
separate_reasoning, return_hidden_states, ...) and renames max_tokens to max_completion_tokens.
Bad input answers 400 with SGLang's error body {object: "error", message, type, param, code}.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any, AsyncIterator, Literal

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from tandem.engine.core import EngineCore, GenerateRequest, InvalidRequest, SamplingParams

log = logging.getLogger("tandem.engine.api")

# Completions default like OpenAI / SGLang's CompletionRequest.
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


# --------------------------------------------------------------------------- request models
class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class GenerateReqInput(_Open):
    text: str | list[str] | None = None
    input_ids: list[int] | list[list[int]] | None = None
    sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None
    rid: str | list[str] | None = None
    return_logprob: bool | list[bool] | None = None
    logprob_start_len: int | list[int] | None = None
    top_logprobs_num: int | list[int] | None = None
    return_text_in_logprobs: bool = False
    stream: bool = False
    priority: int | None = None


class UpdateWeightFromDiskReqInput(_Open):
    model_path: str
    load_format: str | None = None
    abort_all_requests: bool = False
    weight_version: str | None = None
    is_async: bool = False
    torch_empty_cache: bool = False
    keep_pause: bool = False
    recapture_cuda_graph: bool = False
    token_step: int = 0
    flush_cache: bool = True


class PauseGenerationReqInput(_Open):
    mode: Literal["abort", "retract", "in_place"] = "abort"


class AbortReq(_Open):
    rid: str | None = ""
    abort_all: bool = False


class StreamOptions(_Open):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class _OpenAISampling(_Open):
    """Sampling fields shared by /v1/completions and /v1/chat/completions (SGLang extensions included)."""

    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    n: int = 1
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    rid: str | None = None


class CompletionRequest(_OpenAISampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = None
    echo: bool = False


class ChatCompletionRequest(_OpenAISampling):
    messages: list[dict[str, Any]]
    logprobs: bool = False
    top_logprobs: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None


# --------------------------------------------------------------------------- helpers
def _json(content: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status, media_type="application/json")


def _error(message: str, status: int = 400) -> Response:
    kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(status, "Error")
    return _json({"object": "error", "message": message, "type": kind, "param": None, "code": status}, status)


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise InvalidRequest(f"the request body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return body


def _validate(model: type[BaseModel], body: dict[str, Any]) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as err:
        parts = []
        for e in err.errors():
            loc = ".".join(str(p) for p in e["loc"])
            parts.append(f"{loc}: {e['msg']}" if loc else e["msg"])
        raise InvalidRequest("invalid request: " + "; ".join(parts)) from None


async def _until_disconnect(request: Request) -> None:
    """Return when the client goes away (the body was already read, so receive() only says that)."""
    while True:
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            return


class ClientGone(Exception):
    """The client disconnected before its (non-streaming) result was ready."""


async def _run_or_abort(request: Request, coro: Any) -> Any:
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


# --------------------------------------------------------------------------- /generate formatting
def _token_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    return [tokenizer.decode([i]) for i in ids]


def _lp_triples(lps: list[float | None], ids: list[int], texts: list[str] | None) -> list[list[Any]]:
    if texts is None:
        return [[lp, i, None] for lp, i in zip(lps, ids)]
    return [[lp, i, t] for lp, i, t in zip(lps, ids, texts)]


def _top_triples(tops: list[list[tuple[float, int]] | None], tokenizer: Any, with_text: bool) -> list[Any]:
    out: list[Any] = []
    for pos in tops:
        if pos is None:
            out.append(None)
            continue
        out.append([[lp, i, tokenizer.decode([i]) if with_text else None] for lp, i in pos])
    return out


def generate_result(req: GenerateRequest, tokenizer: Any, text: str, *, with_text: bool) -> dict[str, Any]:
    """One /generate result (also a stream chunk: cumulative text / ids / logprobs)."""
    n = req.n_committed
    ids = req.output_ids[:n]
    fr = req.finish_reason
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": fr.to_json() if fr is not None else None,
        "prompt_tokens": req.prompt_tokens,
        "weight_version": req.weight_version,
        "num_retractions": req.num_retractions,
        "completion_tokens": n,
        "cached_tokens": req.cached_tokens,
        "e2e_latency": req.e2e_latency,
    }
    if req.return_logprob:
        meta["output_token_logprobs"] = _lp_triples(
            req.output_logprobs[:n], ids, _token_texts(tokenizer, ids) if with_text else None)
        inp = req.input_token_logprobs or []
        start = max(req.logprob_start_len, 0)
        in_ids = req.input_ids[start:start + len(inp)]
        meta["input_token_logprobs"] = _lp_triples(
            inp, in_ids, _token_texts(tokenizer, in_ids) if with_text else None)
        if req.top_logprobs_num > 0:
            meta["output_top_logprobs"] = _top_triples(req.output_top_logprobs[:n], tokenizer, with_text)
            meta["input_top_logprobs"] = _top_triples(req.input_top_logprobs or [], tokenizer, with_text)
    return {"text": text, "output_ids": ids, "meta_info": meta}


# --------------------------------------------------------------------------- the app
def build_app(core: EngineCore, *, name: str = "engine") -> FastAPI:
    """A FastAPI app serving SGLang's HTTP API from `core` (started/stopped with the app)."""

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        await core.start()
        log.info("%s: %s core started (model %s, weight_version %s)", name, core.backend, core.model_path,
                 core.weight_version)
        try:
            yield
        finally:
            await core.shutdown()

    app = FastAPI(title=f"tandem engine {name}", lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)
    tok = core.tokenizer
    created = int(time.time())

    @app.exception_handler(InvalidRequest)
    async def _bad(_: Request, exc: InvalidRequest) -> Response:
        return _error(str(exc), 400)

    @app.exception_handler(ClientGone)
    async def _gone(_: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)  # nobody reads it; nginx's "client closed request"

    @app.exception_handler(RequestValidationError)
    async def _bad_validation(_: Request, exc: RequestValidationError) -> Response:
        return _error(f"invalid request: {exc.errors()}", 400)

    # ---------------------------------------------------------------- health / info
    @app.get("/health")
    async def health() -> Response:
        # Lightweight on purpose: sglang-router polls it, also while generation is paused.
        return Response(status_code=200 if core._alive() else 503)

    @app.get("/health_generate")
    async def health_generate() -> Response:
        return Response(status_code=200 if await core.health_generate() else 503)

    @app.get("/get_model_info")
    @app.get("/model_info")
    async def model_info() -> Response:
        return _json(core.model_info())

    @app.get("/get_server_info")
    @app.get("/server_info")
    async def server_info() -> Response:
        info = core.server_info()
        info["engine_name"] = name
        return _json(info)

    @app.get("/get_load")
    async def get_load() -> Response:
        return _json([core.get_load().to_json()])

    @app.get("/get_weight_version")
    async def get_weight_version() -> Response:
        return _json({"weight_version": core.weight_version})

    @app.get("/v1/models")
    async def models() -> Response:
        card = {"id": core.served_model_name, "object": "model", "created": created, "owned_by": "tandem",
                "root": core.served_model_name, "max_model_len": core.context_length}
        return _json({"object": "list", "data": [card]})

    # ---------------------------------------------------------------- control plane
    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request) -> Response:
        obj = _validate(UpdateWeightFromDiskReqInput, await _body(request))
        res = await core.update_weights_from_disk(
            obj.model_path, obj.weight_version, abort_all_requests=obj.abort_all_requests,
            flush_cache=obj.flush_cache, load_format=obj.load_format)
        content = {"success": res.success, "message": res.message, "num_paused_requests": res.num_paused_requests}
        return _json(content, 200 if res.success else 400)

    @app.post("/pause_generation")
    async def pause_generation(request: Request) -> Response:
        obj = _validate(PauseGenerationReqInput, await _body(request))
        n = await core.pause(obj.mode)
        return _json({"message": "Generation paused successfully.", "status": "ok", "mode": obj.mode,
                      "num_requests": n})

    @app.post("/continue_generation")
    async def continue_generation() -> Response:
        await core.resume()
        return _json({"message": "Generation continued successfully.", "status": "ok"})

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache() -> Response:
        ok, msg = await core.flush_cache()
        return Response(content=msg + "\n", status_code=200 if ok else 400, media_type="text/plain")

    @app.post("/abort_request")
    async def abort_request(request: Request) -> Response:
        obj = _validate(AbortReq, await _body(request))
        await core.abort(obj.rid, abort_all=obj.abort_all)
        return Response(status_code=200)

    # ---------------------------------------------------------------- /generate
    def _per_item(value: Any, i: int, n: int, field: str) -> Any:
        if isinstance(value, list):
            if len(value) != n:
                raise InvalidRequest(f"{field} has {len(value)} entries for a batch of {n}")
            return value[i]
        return value

    def _build_generate(obj: GenerateReqInput) -> tuple[list[GenerateRequest], bool]:
        if (obj.text is None) == (obj.input_ids is None):
            raise InvalidRequest("exactly one of text or input_ids must be given")
        if obj.text is not None:
            batch = isinstance(obj.text, list)
            texts = obj.text if batch else [obj.text]
            prompts = [tok.encode(t) for t in texts]
        else:
            ids = obj.input_ids
            batch = bool(ids) and isinstance(ids[0], list)
            prompts = list(ids) if batch else [ids]  # type: ignore[list-item]
        n = len(prompts)
        if batch and n == 0:
            raise InvalidRequest("the batch is empty")
        reqs = []
        for i, p in enumerate(prompts):
            sp = SamplingParams.from_dict(_per_item(obj.sampling_params, i, n, "sampling_params"),
                                          vocab_size=core.vocab_size)
            rid = obj.rid
            if isinstance(rid, list):
                rid = _per_item(rid, i, n, "rid")
            elif rid is not None and batch:
                rid = f"{rid}_{i}"
            rl = _per_item(obj.return_logprob, i, n, "return_logprob")
            ls = _per_item(obj.logprob_start_len, i, n, "logprob_start_len")
            tn = _per_item(obj.top_logprobs_num, i, n, "top_logprobs_num")
            reqs.append(core.make_request(
                input_ids=p, sampling=sp, rid=rid, return_logprob=bool(rl),
                logprob_start_len=-1 if ls is None else int(ls), top_logprobs_num=int(tn or 0),
                stream=obj.stream, priority=obj.priority))
        return reqs, batch

    async def _drain(req: GenerateRequest) -> GenerateRequest:
        async for _ in core.generate(req):
            pass
        return req

    @app.api_route("/generate", methods=["POST", "PUT"])
    async def generate(request: Request) -> Response:
        obj = _validate(GenerateReqInput, await _body(request))
        reqs, batch = _build_generate(obj)
        wt = obj.return_text_in_logprobs
        if obj.stream:
            return StreamingResponse(_stream_generate(reqs, batch, wt), media_type="text/event-stream")
        done = await _run_or_abort(request, asyncio.gather(*(_drain(r) for r in reqs)))
        out = [generate_result(r, tok, r.output_text(tok), with_text=wt) for r in done]
        return _json(out if batch else out[0])

    async def _stream_generate(reqs: list[GenerateRequest], batch: bool, wt: bool) -> AsyncIterator[bytes]:
        async for i, req in _merged(reqs):
            chunk = generate_result(req, tok, TextView(req, tok).current(), with_text=wt)
            if batch:
                chunk["index"] = i
            yield _sse(chunk)
        yield SSE_DONE

    async def _merged(reqs: list[GenerateRequest]) -> AsyncIterator[tuple[int, GenerateRequest]]:
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

    # ---------------------------------------------------------------- OpenAI
    def _openai_sampling(obj: _OpenAISampling, prompt_len: int, default_max: int | None) -> SamplingParams:
        max_new = obj.max_completion_tokens if obj.max_completion_tokens is not None else obj.max_tokens
        if max_new is None:
            max_new = default_max
        if max_new is None:  # chat without a limit: what fits the context, like SGLang
            limit = min(core.context_length or core.max_total_tokens, core.max_total_tokens)
            max_new = max(limit - prompt_len, 0)
        d: dict[str, Any] = {
            "max_new_tokens": max_new, "temperature": obj.temperature, "top_p": obj.top_p, "top_k": obj.top_k,
            "min_p": obj.min_p, "stop": obj.stop, "stop_token_ids": obj.stop_token_ids,
            "ignore_eos": obj.ignore_eos, "skip_special_tokens": obj.skip_special_tokens,
            "no_stop_trim": obj.no_stop_trim,
        }
        extra = obj.model_extra or {}
        for name in (*SamplingParams.NEUTRAL, "logit_bias", "regex", "ebnf", "json_schema"):
            if extra.get(name) is not None:
                d[name] = extra[name]
        return SamplingParams.from_dict(d, vocab_size=core.vocab_size)

    def _check_n(obj: _OpenAISampling) -> int:
        if obj.n < 1:
            raise InvalidRequest(f"n must be >= 1, got {obj.n}")
        return obj.n

    def _finish(req: GenerateRequest) -> str | None:
        fr = req.finish_reason
        return None if fr is None else fr.type

    def _matched(req: GenerateRequest) -> Any:
        fr = req.finish_reason
        return fr.matched if fr is not None and fr.type == "stop" else None

    def _usage(reqs: list[GenerateRequest], prompt_lens: list[int]) -> dict[str, Any]:
        p = sum(prompt_lens)
        c = sum(r.n_committed for r in reqs)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
                "prompt_tokens_details": {"cached_tokens": sum(r.cached_tokens for r in reqs)}}

    # -- /v1/completions
    def _completion_logprobs(req: GenerateRequest, start: int, end: int, echo_prompt: bool,
                             text_offset0: int) -> dict[str, Any]:
        ids: list[int] = []
        lps: list[float | None] = []
        tops: list[Any] = []
        if echo_prompt:
            ids += req.input_ids
            lps += req.input_token_logprobs or [None] * len(req.input_ids)
            tops += req.input_top_logprobs or [None] * len(req.input_ids)
        ids += req.output_ids[start:end]
        lps += req.output_logprobs[start:end]
        if req.top_logprobs_num > 0:
            tops += req.output_top_logprobs[start:end]
        toks = _token_texts(tok, ids)
        offsets, o = [], text_offset0
        for t in toks:
            offsets.append(o)
            o += len(t)
        top_dicts = None
        if req.top_logprobs_num > 0:
            top_dicts = [None if pos is None else {tok.decode([i]): lp for lp, i in pos} for pos in tops]
        return {"tokens": toks, "token_logprobs": lps, "top_logprobs": top_dicts, "text_offset": offsets}

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        obj = _validate(CompletionRequest, await _body(request))
        n = _check_n(obj)
        p = obj.prompt
        if isinstance(p, str):
            prompts = [tok.encode(p)]
        elif isinstance(p, list) and p and all(isinstance(x, str) for x in p):
            prompts = [tok.encode(x) for x in p]  # type: ignore[arg-type]
        elif isinstance(p, list) and p and all(isinstance(x, list) for x in p):
            prompts = [list(x) for x in p]  # type: ignore[arg-type]
        elif isinstance(p, list) and p and all(isinstance(x, int) for x in p):
            prompts = [list(p)]  # type: ignore[arg-type]
        else:
            raise InvalidRequest("prompt must be a string, a list of strings, a list of token ids or a list of lists")
        want_lp = obj.logprobs is not None
        reqs: list[GenerateRequest] = []
        for pi, ids in enumerate(prompts):
            for j in range(n):
                sp = _openai_sampling(obj, len(ids), COMPLETIONS_DEFAULT_MAX_TOKENS)
                rid = f"{obj.rid}_{pi * n + j}" if obj.rid and len(prompts) * n > 1 else (obj.rid or None)
                reqs.append(core.make_request(
                    input_ids=ids, sampling=sp, rid=rid, return_logprob=want_lp,
                    logprob_start_len=0 if (want_lp and obj.echo) else -1,
                    top_logprobs_num=max(obj.logprobs or 0, 0), stream=obj.stream))
        prompt_texts = [tok.decode(ids) for ids in prompts]
        cid = f"cmpl-{uuid.uuid4().hex}"
        model = obj.model or core.served_model_name
        if obj.stream:
            return StreamingResponse(_stream_completions(reqs, obj, cid, model, prompt_texts, n),
                                     media_type="text/event-stream")
        done = await _run_or_abort(request, asyncio.gather(*(_drain(r) for r in reqs)))
        choices = []
        for k, r in enumerate(done):
            text = r.output_text(tok)
            prefix = prompt_texts[k // n] if obj.echo else ""
            choices.append({
                "index": k, "text": prefix + text,
                "logprobs": _completion_logprobs(r, 0, r.n_committed, obj.echo, 0) if want_lp else None,
                "finish_reason": _finish(r), "matched_stop": _matched(r)})
        return _json({"id": cid, "object": "text_completion", "created": int(time.time()), "model": model,
                      "choices": choices, "usage": _usage(done, [r.prompt_tokens for r in done])})

    async def _stream_completions(reqs: list[GenerateRequest], obj: CompletionRequest, cid: str, model: str,
                                  prompt_texts: list[str], n: int) -> AsyncIterator[bytes]:
        views = [TextView(r, tok) for r in reqs]
        sent_text = [""] * len(reqs)
        sent_ids = [0] * len(reqs)
        echoed = [False] * len(reqs)
        want_lp = obj.logprobs is not None
        now = int(time.time())
        async for k, r in _merged(reqs):
            text = views[k].current()
            delta = text[len(sent_text[k]):] if text.startswith(sent_text[k]) else ""
            if delta or r.finish_reason is not None or r.n_committed > sent_ids[k]:
                prefix = ""
                if obj.echo and not echoed[k]:
                    prefix, echoed[k] = prompt_texts[k // n], True
                lp = None
                if want_lp:
                    lp = _completion_logprobs(r, sent_ids[k], r.n_committed, False, len(sent_text[k]))
                sent_ids[k] = r.n_committed
                sent_text[k] = text if text.startswith(sent_text[k]) else sent_text[k]
                yield _sse({"id": cid, "object": "text_completion", "created": now, "model": model,
                            "choices": [{"index": k, "text": prefix + delta, "logprobs": lp,
                                         "finish_reason": _finish(r), "matched_stop": _matched(r)}]})
        if obj.stream_options is not None and obj.stream_options.include_usage:
            yield _sse({"id": cid, "object": "text_completion", "created": now, "model": model, "choices": [],
                        "usage": _usage(reqs, [r.prompt_tokens for r in reqs])})
        yield SSE_DONE

    # -- /v1/chat/completions
    def _chat_prompt(obj: ChatCompletionRequest) -> list[int]:
        msgs = []
        for m in obj.messages:
            if not isinstance(m, dict) or "role" not in m:
                raise InvalidRequest("every message needs a role")
            content = m.get("content")
            if isinstance(content, list):  # OpenAI content parts: keep the text ones
                content = "".join(part.get("text", "") for part in content
                                  if isinstance(part, dict) and part.get("type") in ("text", "input_text"))
            msgs.append({**m, "content": content if content is not None else ""})
        if not msgs:
            raise InvalidRequest("messages must not be empty")
        kwargs = dict(obj.chat_template_kwargs or {})
        try:
            ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False,
                                          **kwargs)
        except Exception as err:  # template errors are the client's (bad roles, ...)
            raise InvalidRequest(f"cannot apply the chat template: {err}") from None
        if isinstance(ids, dict):
            ids = ids["input_ids"]
        return list(ids)

    def _chat_logprobs(req: GenerateRequest, start: int, end: int) -> dict[str, Any]:
        content = []
        for k in range(start, end):
            tid = req.output_ids[k]
            t = tok.decode([tid])
            item: dict[str, Any] = {"token": t, "logprob": req.output_logprobs[k],
                                    "bytes": list(t.encode("utf-8")), "top_logprobs": []}
            if req.top_logprobs_num > 0 and k < len(req.output_top_logprobs):
                item["top_logprobs"] = [
                    {"token": (s := tok.decode([i])), "logprob": lp, "bytes": list(s.encode("utf-8"))}
                    for lp, i in req.output_top_logprobs[k]]
            content.append(item)
        return {"content": content}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        obj = _validate(ChatCompletionRequest, await _body(request))
        n = _check_n(obj)
        ids = _chat_prompt(obj)
        reqs = []
        for j in range(n):
            sp = _openai_sampling(obj, len(ids), None)
            rid = f"{obj.rid}_{j}" if obj.rid and n > 1 else (obj.rid or None)
            reqs.append(core.make_request(
                input_ids=ids, sampling=sp, rid=rid, return_logprob=obj.logprobs,
                top_logprobs_num=(obj.top_logprobs or 0) if obj.logprobs else 0, stream=obj.stream))
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        model = obj.model or core.served_model_name
        if obj.stream:
            return StreamingResponse(_stream_chat(reqs, obj, cid, model), media_type="text/event-stream")
        done = await _run_or_abort(request, asyncio.gather(*(_drain(r) for r in reqs)))
        choices = [{
            "index": k,
            "message": {"role": "assistant", "content": r.output_text(tok), "reasoning_content": None,
                        "tool_calls": None},
            "logprobs": _chat_logprobs(r, 0, r.n_committed) if obj.logprobs else None,
            "finish_reason": _finish(r), "matched_stop": _matched(r)} for k, r in enumerate(done)]
        return _json({"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
                      "choices": choices, "usage": _usage(done, [len(ids)] * len(done))})

    async def _stream_chat(reqs: list[GenerateRequest], obj: ChatCompletionRequest, cid: str,
                           model: str) -> AsyncIterator[bytes]:
        now = int(time.time())
        base = {"id": cid, "object": "chat.completion.chunk", "created": now, "model": model}
        for k in range(len(reqs)):
            yield _sse({**base, "choices": [{"index": k, "delta": {"role": "assistant", "content": ""},
                                             "logprobs": None, "finish_reason": None}]})
        views = [TextView(r, tok) for r in reqs]
        sent_text = [""] * len(reqs)
        sent_ids = [0] * len(reqs)
        async for k, r in _merged(reqs):
            text = views[k].current()
            delta = text[len(sent_text[k]):] if text.startswith(sent_text[k]) else ""
            fin = r.finish_reason is not None
            if not delta and not fin and r.n_committed == sent_ids[k]:
                continue
            lp = _chat_logprobs(r, sent_ids[k], r.n_committed) if obj.logprobs else None
            sent_ids[k] = r.n_committed
            if text.startswith(sent_text[k]):
                sent_text[k] = text
            choice: dict[str, Any] = {"index": k, "delta": {"content": delta} if delta else {},
                                      "logprobs": lp, "finish_reason": _finish(r)}
            if fin:
                choice["matched_stop"] = _matched(r)
            yield _sse({**base, "choices": [choice]})
        if obj.stream_options is not None and obj.stream_options.include_usage:
            yield _sse({**base, "choices": [], "usage": _usage(reqs, [r.prompt_tokens for r in reqs])})
        yield SSE_DONE

    return app
