"""The OpenAI-compatible routes as SGLang serves them: /v1/models, /v1/completions and
/v1/chat/completions (plain and streamed, with n choices, logprobs and usage)."""

from __future__ import annotations

import time
import uuid
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from tandem.engine.core import EngineCore, GenerateRequest, InvalidRequest, SamplingParams
from tandem.engine.http.common import (SSE_DONE, Delta, core_of, generate_all, json_response, parse, sse,
                                       stream_deltas, token_texts)
from tandem.engine.http.models import ChatCompletionRequest, CompletionRequest, OpenAISampling

# Completions default like OpenAI / SGLang's CompletionRequest.
COMPLETIONS_DEFAULT_MAX_TOKENS = 16

router = APIRouter()


@router.get("/v1/models")
async def models(request: Request) -> Response:
    core = core_of(request)
    card = {"id": core.served_model_name, "object": "model", "created": request.app.state.created,
            "owned_by": "tandem", "root": core.served_model_name, "max_model_len": core.context_length}
    # SGLang lists each loaded LoRA adapter as a model whose parent is the base model.
    adapters = [{**card, "id": name, "root": path, "parent": core.served_model_name}
                for name, path in core.adapters.loaded.items()]
    return json_response({"object": "list", "data": [card, *adapters]})


# --------------------------------------------------------------------------- shared by both routes
def _sampling(core: EngineCore, obj: OpenAISampling, prompt_len: int, default_max: int | None) -> SamplingParams:
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


async def _parse_openai(request: Request, model: type[OpenAISampling]) -> tuple[EngineCore, Any]:
    """The core and the request body, with its choice count n checked."""
    obj = await parse(request, model)
    if obj.n < 1:
        raise InvalidRequest(f"n must be >= 1, got {obj.n}")
    return core_of(request), obj


def _choice_rid(rid: str | None, i: int, total: int) -> str | None:
    """The client's rid, suffixed with the choice index when it names several requests."""
    return f"{rid}_{i}" if rid and total > 1 else (rid or None)


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


async def _stream_end(base: dict[str, Any], obj: OpenAISampling, reqs: list[GenerateRequest]) -> AsyncIterator[bytes]:
    """The usage chunk (when stream_options asks for it), then [DONE]."""
    if obj.stream_options is not None and obj.stream_options.include_usage:
        yield sse({**base, "choices": [], "usage": _usage(reqs, [r.prompt_tokens for r in reqs])})
    yield SSE_DONE


# --------------------------------------------------------------------------- /v1/completions
def _completion_prompts(tok: Any, p: Any) -> list[list[int]]:
    if isinstance(p, str):
        return [tok.encode(p)]
    if isinstance(p, list) and p and all(isinstance(x, str) for x in p):
        return [tok.encode(x) for x in p]
    if isinstance(p, list) and p and all(isinstance(x, list) for x in p):
        return [list(x) for x in p]
    if isinstance(p, list) and p and all(isinstance(x, int) for x in p):
        return [list(p)]
    raise InvalidRequest("prompt must be a string, a list of strings, a list of token ids or a list of lists")


def _completion_requests(core: EngineCore, obj: CompletionRequest, prompts: list[list[int]],
                         n: int) -> list[GenerateRequest]:
    """n requests per prompt, prompt-major (choice k belongs to prompt k // n)."""
    want_lp = obj.logprobs is not None
    reqs: list[GenerateRequest] = []
    for pi, ids in enumerate(prompts):
        for j in range(n):
            sp = _sampling(core, obj, len(ids), COMPLETIONS_DEFAULT_MAX_TOKENS)
            reqs.append(core.make_request(
                input_ids=ids, sampling=sp, rid=_choice_rid(obj.rid, pi * n + j, len(prompts) * n),
                return_logprob=want_lp, logprob_start_len=0 if (want_lp and obj.echo) else -1,
                top_logprobs_num=max(obj.logprobs or 0, 0), stream=obj.stream, lora_name=_adapter(core, obj)))
    return reqs


def _adapter(core: EngineCore, obj: OpenAISampling) -> str | None:
    """SGLang serves a loaded LoRA adapter under its name as a model (/v1/models lists it)."""
    return obj.model if obj.model in core.adapters.loaded else None


def _completion_logprobs(tok: Any, req: GenerateRequest, start: int, end: int, echo_prompt: bool,
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
    toks = token_texts(tok, ids)
    offsets, o = [], text_offset0
    for t in toks:
        offsets.append(o)
        o += len(t)
    top_dicts = None
    if req.top_logprobs_num > 0:
        top_dicts = [None if pos is None else {tok.decode([i]): lp for lp, i in pos} for pos in tops]
    return {"tokens": toks, "token_logprobs": lps, "top_logprobs": top_dicts, "text_offset": offsets}


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    core, obj = await _parse_openai(request, CompletionRequest)
    tok, n = core.tokenizer, obj.n
    prompts = _completion_prompts(tok, obj.prompt)
    reqs = _completion_requests(core, obj, prompts, n)
    prompt_texts = [tok.decode(ids) for ids in prompts]
    cid = f"cmpl-{uuid.uuid4().hex}"
    model = obj.model or core.served_model_name
    if obj.stream:
        return StreamingResponse(_stream_completions(core, reqs, obj, cid, model, prompt_texts, n),
                                 media_type="text/event-stream")
    done = await generate_all(request, core, reqs)
    want_lp = obj.logprobs is not None
    choices = []
    for k, r in enumerate(done):
        prefix = prompt_texts[k // n] if obj.echo else ""
        choices.append({
            "index": k, "text": prefix + r.output_text(tok),
            "logprobs": _completion_logprobs(tok, r, 0, r.n_committed, obj.echo, 0) if want_lp else None,
            "finish_reason": _finish(r), "matched_stop": _matched(r)})
    return json_response({"id": cid, "object": "text_completion", "created": int(time.time()), "model": model,
                          "choices": choices, "usage": _usage(done, [r.prompt_tokens for r in done])})


async def _stream_completions(core: EngineCore, reqs: list[GenerateRequest], obj: CompletionRequest, cid: str,
                              model: str, prompt_texts: list[str], n: int) -> AsyncIterator[bytes]:
    base = {"id": cid, "object": "text_completion", "created": int(time.time()), "model": model}
    echoed: set[int] = set()
    async for d in stream_deltas(core, reqs):
        prefix = ""
        if obj.echo and d.index not in echoed:
            prefix = prompt_texts[d.index // n]
            echoed.add(d.index)
        lp = None
        if obj.logprobs is not None:
            lp = _completion_logprobs(core.tokenizer, d.req, d.start, d.end, False, d.text_offset)
        yield sse({**base, "choices": [{"index": d.index, "text": prefix + d.text, "logprobs": lp,
                                        "finish_reason": _finish(d.req), "matched_stop": _matched(d.req)}]})
    async for chunk in _stream_end(base, obj, reqs):
        yield chunk


# --------------------------------------------------------------------------- /v1/chat/completions
def _chat_prompt(tok: Any, obj: ChatCompletionRequest) -> list[int]:
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
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False, **kwargs)
    except Exception as err:  # template errors are the client's (bad roles, ...)
        raise InvalidRequest(f"cannot apply the chat template: {err}") from None
    if isinstance(ids, dict):
        ids = ids["input_ids"]
    return list(ids)


def _chat_logprobs(tok: Any, req: GenerateRequest, start: int, end: int) -> dict[str, Any]:
    content = []
    for k in range(start, end):
        t = tok.decode([req.output_ids[k]])
        item: dict[str, Any] = {"token": t, "logprob": req.output_logprobs[k],
                                "bytes": list(t.encode("utf-8")), "top_logprobs": []}
        if req.top_logprobs_num > 0 and k < len(req.output_top_logprobs):
            item["top_logprobs"] = [
                {"token": (s := tok.decode([i])), "logprob": lp, "bytes": list(s.encode("utf-8"))}
                for lp, i in req.output_top_logprobs[k]]
        content.append(item)
    return {"content": content}


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    core, obj = await _parse_openai(request, ChatCompletionRequest)
    tok, n = core.tokenizer, obj.n
    ids = _chat_prompt(tok, obj)
    reqs = [core.make_request(
        input_ids=ids, sampling=_sampling(core, obj, len(ids), None), rid=_choice_rid(obj.rid, j, n),
        return_logprob=obj.logprobs, top_logprobs_num=(obj.top_logprobs or 0) if obj.logprobs else 0,
        stream=obj.stream, lora_name=_adapter(core, obj)) for j in range(n)]
    cid = f"chatcmpl-{uuid.uuid4().hex}"
    model = obj.model or core.served_model_name
    if obj.stream:
        return StreamingResponse(_stream_chat(core, reqs, obj, cid, model), media_type="text/event-stream")
    done = await generate_all(request, core, reqs)
    choices = [{
        "index": k,
        "message": {"role": "assistant", "content": r.output_text(tok), "reasoning_content": None,
                    "tool_calls": None},
        "logprobs": _chat_logprobs(tok, r, 0, r.n_committed) if obj.logprobs else None,
        "finish_reason": _finish(r), "matched_stop": _matched(r)} for k, r in enumerate(done)]
    return json_response({"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
                          "choices": choices, "usage": _usage(done, [len(ids)] * len(done))})


def _chat_choice(tok: Any, obj: ChatCompletionRequest, d: Delta) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": d.index, "delta": {"content": d.text} if d.text else {},
        "logprobs": _chat_logprobs(tok, d.req, d.start, d.end) if obj.logprobs else None,
        "finish_reason": _finish(d.req)}
    if d.req.finish_reason is not None:
        choice["matched_stop"] = _matched(d.req)
    return choice


async def _stream_chat(core: EngineCore, reqs: list[GenerateRequest], obj: ChatCompletionRequest, cid: str,
                       model: str) -> AsyncIterator[bytes]:
    base = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    for k in range(len(reqs)):
        yield sse({**base, "choices": [{"index": k, "delta": {"role": "assistant", "content": ""},
                                        "logprobs": None, "finish_reason": None}]})
    async for d in stream_deltas(core, reqs):
        yield sse({**base, "choices": [_chat_choice(core.tokenizer, obj, d)]})
    async for chunk in _stream_end(base, obj, reqs):
        yield chunk
