"""SGLang's native data-plane and info routes: /generate (plain and streamed, single and
batched), /health, /health_generate, model / server info, load (/v1/loads) and weight version.

/generate returns {text, output_ids, meta_info{id, finish_reason, prompt_tokens, completion_tokens,
cached_tokens, weight_version, e2e_latency, output_token_logprobs [[logprob, id, text|null]]...,
routed_experts (MoE, when asked: tandem.moe)}};
its stream chunks carry the cumulative text / output_ids / logprobs (SGLang's default,
non-incremental stream output).
"""

from __future__ import annotations

from datetime import datetime, timezone
from collections.abc import Sequence
from typing import Any, AsyncIterator

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from tandem.engine.backend import SERVER_VERSION
from tandem.engine.core import EngineCore, GenerateRequest, InvalidRequest, SamplingParams
from tandem.engine.http.common import (SSE_DONE, TextView, core_of, generate_all, json_response, merged, parse, sse,
                                       token_texts)
from tandem.engine.http.models import GenerateReqInput
from tandem.moe import ROUTED_EXPERTS, encode_routed_experts

router = APIRouter()


# --------------------------------------------------------------------------- health / info
@router.get("/health")
async def health(request: Request) -> Response:
    # Lightweight on purpose: sglang-router polls it, also while generation is paused.
    return Response(status_code=200 if core_of(request).alive() else 503)


@router.get("/health_generate")
async def health_generate(request: Request) -> Response:
    return Response(status_code=200 if await core_of(request).health_generate() else 503)


@router.get("/get_model_info")
@router.get("/model_info")
async def model_info(request: Request) -> Response:
    return json_response(core_of(request).model_info())


@router.get("/get_server_info")
@router.get("/server_info")
async def server_info(request: Request) -> Response:
    info = core_of(request).server_info()
    info["engine_name"] = request.app.state.engine_name
    return json_response(info)


@router.get("/v1/loads")
async def loads(request: Request) -> Response:
    """SGLang 0.5.23's load report (it serves no /get_load any more, and neither does this engine, so a
    client still asking there fails against either): one entry per DP rank under `loads`."""
    core = core_of(request)
    return json_response({"timestamp": datetime.now(timezone.utc).isoformat(), "version": SERVER_VERSION,
                          "accelerator": None, "num_accelerators": 1, "loads": [core.get_load().to_json()]})


@router.get("/get_weight_version")
async def get_weight_version(request: Request) -> Response:
    return json_response({"weight_version": core_of(request).weight_version})


# --------------------------------------------------------------------------- /generate results
def _lp_triples(lps: Sequence[float | None], ids: list[int], texts: list[str] | None) -> list[list[Any]]:
    if texts is None:
        return [[lp, i, None] for lp, i in zip(lps, ids)]
    return [[lp, i, t] for lp, i, t in zip(lps, ids, texts)]


def _top_triples(tops: Sequence[list[tuple[float, int]] | None], tokenizer: Any, with_text: bool) -> list[Any]:
    out: list[Any] = []
    for pos in tops:
        if pos is None:
            out.append(None)
            continue
        out.append([[lp, i, tokenizer.decode([i]) if with_text else None] for lp, i in pos])
    return out


def _logprob_meta(req: GenerateRequest, n: int, tokenizer: Any, with_text: bool) -> dict[str, Any]:
    """Logprob fields of meta_info for the first `n` output tokens."""
    ids = req.output_ids[:n]
    meta = {"output_token_logprobs": _lp_triples(
        req.output_logprobs[:n], ids, token_texts(tokenizer, ids) if with_text else None)}
    inp = req.input_token_logprobs or []
    start = max(req.logprob_start_len, 0)
    in_ids = req.input_ids[start:start + len(inp)]
    meta["input_token_logprobs"] = _lp_triples(inp, in_ids, token_texts(tokenizer, in_ids) if with_text else None)
    if req.top_logprobs_num > 0:
        meta["output_top_logprobs"] = _top_triples(req.output_top_logprobs[:n], tokenizer, with_text)
        meta["input_top_logprobs"] = _top_triples(req.input_top_logprobs or [], tokenizer, with_text)
    return meta


def generate_result(req: GenerateRequest, tokenizer: Any, text: str, *, with_text: bool) -> dict[str, Any]:
    """One /generate result (also a stream chunk: cumulative text / ids / logprobs)."""
    n = req.n_committed
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
        meta.update(_logprob_meta(req, n, tokenizer, with_text))
    if fr is not None and req.return_routed_experts and req.routed_chunks:  # as SGLang: once finished
        meta[ROUTED_EXPERTS] = encode_routed_experts(
            np.concatenate(req.routed_chunks)[req.routed_experts_start_len:])
    return {"text": text, "output_ids": req.output_ids[:n], "meta_info": meta}


# --------------------------------------------------------------------------- /generate requests
def _per_item(value: Any, i: int, n: int, field: str) -> Any:
    """Item i of a per-prompt list, or `value` itself when one value serves the whole batch."""
    if isinstance(value, list):
        if len(value) != n:
            raise InvalidRequest(f"{field} has {len(value)} entries for a batch of {n}")
        return value[i]
    return value


def _prompts(core: EngineCore, obj: GenerateReqInput) -> tuple[list[list[int]], bool]:
    """The prompts as token ids, and whether the body was a batch."""
    if (obj.text is None) == (obj.input_ids is None):
        raise InvalidRequest("exactly one of text or input_ids must be given")
    if obj.text is not None:
        batch = isinstance(obj.text, list)
        texts = obj.text if batch else [obj.text]
        prompts = [core.tokenizer.encode(t) for t in texts]
    else:
        ids: Any = obj.input_ids  # list[int], or a batch: list[list[int]] (told apart by its first item)
        batch = bool(ids) and isinstance(ids[0], list)
        prompts = list(ids) if batch else [ids]
    if batch and not prompts:
        raise InvalidRequest("the batch is empty")
    return prompts, batch


def _generate_requests(core: EngineCore, obj: GenerateReqInput) -> tuple[list[GenerateRequest], bool]:
    prompts, batch = _prompts(core, obj)
    n = len(prompts)
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
            stream=obj.stream, priority=obj.priority, lora_name=_per_item(obj.lora_path, i, n, "lora_path"),
            return_routed_experts=obj.return_routed_experts, routed_experts_start_len=obj.routed_experts_start_len))
    return reqs, batch


@router.api_route("/generate", methods=["POST", "PUT"])
async def generate(request: Request) -> Response:
    core = core_of(request)
    obj = await parse(request, GenerateReqInput)
    reqs, batch = _generate_requests(core, obj)
    wt = obj.return_text_in_logprobs
    if obj.stream:
        return StreamingResponse(_stream_generate(core, reqs, batch, wt), media_type="text/event-stream")
    tok = core.tokenizer
    done = await generate_all(request, core, reqs)
    out = [generate_result(r, tok, r.output_text(tok), with_text=wt) for r in done]
    return json_response(out if batch else out[0])


async def _stream_generate(core: EngineCore, reqs: list[GenerateRequest], batch: bool,
                           with_text: bool) -> AsyncIterator[bytes]:
    tok = core.tokenizer
    async for i, req in merged(core, reqs):
        chunk = generate_result(req, tok, TextView(req, tok).current(), with_text=with_text)
        if batch:
            chunk["index"] = i
        yield sse(chunk)
    yield SSE_DONE
