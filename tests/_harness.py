"""Fakes at the edge for the harness tests: an engine client answering /generate from a script."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from aiohttp import web

from tandem.config import TandemConfig
from tandem.rollout import REQUEST_PRIORITY, ROUTING_KEY_HEADER, RolloutContext, sampling_params_from_config
from tests._fakes import fake_logprob
from tests._swe import REPO, tiny_tokenizer


class ScriptedClient:
    """EngineClient.generate's shape: `reply(prompt text, call number)` is the model's text; its ids
    (+ eos) come back with position-dependent log-probs and `version`."""

    def __init__(self, reply: Callable[[str, int], str], version: int = 2):
        self.tok, self.reply, self.version = tiny_tokenizer(), reply, version
        self.requests: list[dict] = []

    async def generate(self, input_ids, sampling_params, return_logprob=True, routing_key=None) -> dict:
        self.requests.append({"input_ids": list(input_ids), "params": dict(sampling_params), "key": routing_key,
                              "priority": REQUEST_PRIORITY.get()})
        text = self.reply(self.tok.decode(input_ids, skip_special_tokens=False), len(self.requests))
        out = list(self.tok.encode(text, add_special_tokens=False)) + [self.tok.eos_token_id]
        return {"text": text, "output_ids": out, "meta_info": {
            "finish_reason": {"type": "stop"}, "weight_version": str(self.version),
            "output_token_logprobs": [[fake_logprob(t, len(input_ids) + k), t, None] for k, t in enumerate(out)]}}


    async def generate_stream(self, input_ids, sampling_params, on_chunk, return_logprob=True, routing_key=None) -> dict:
        """SGLang's stream: one cumulative chunk per token, the last one finished."""
        out = await self.generate(input_ids, sampling_params, return_logprob, routing_key)
        ids, lps = out["output_ids"], out["meta_info"]["output_token_logprobs"]
        for k in range(1, len(ids) + 1):
            await on_chunk({"text": self.tok.decode(ids[:k], skip_special_tokens=True), "output_ids": ids[:k],
                            "meta_info": {**out["meta_info"], "output_token_logprobs": lps[:k],
                                          "finish_reason": out["meta_info"]["finish_reason"] if k == len(ids) else None}})
        return out


class FakeSGLang:
    """SGLang's /generate at the edge, over HTTP on loopback, for the real EngineClient: answers `ids`
    (one token per chunk when streamed, cumulative as SGLang streams), reports `version`. `plan` says
    what each attempt gets, in order (then "ok"): "ok"; "abort" (the second chunk is SGLang's abort);
    "break" (the connection drops after the first chunk); or (status, text), a refusal. A stream
    holds after its first chunk until `release` is set."""

    def __init__(self, ids: list[int], version: int = 5, plan: list | None = None, finish: str = "length",
                 per_chunk: int = 1):
        self.ids, self.version, self.plan, self.finish = list(ids), version, list(plan or []), finish
        self.per_chunk = per_chunk
        """Tokens a stream chunk adds (the last chunk ends the reply)."""
        self.tok = tiny_tokenizer()
        self.requests: list[dict] = []
        self.first_sent, self.release = asyncio.Event(), asyncio.Event()
        self.url, self._runner = "", None

    async def __aenter__(self) -> FakeSGLang:
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        await self._runner.cleanup()

    def chunk(self, prompt: list[int], k: int, finish: dict | None) -> dict:
        lps = [[fake_logprob(t, len(prompt) + j), t, None] for j, t in enumerate(self.ids[:k])]
        return {"text": self.tok.decode(self.ids[:k], skip_special_tokens=True), "output_ids": self.ids[:k],
                "meta_info": {"id": "r", "finish_reason": finish, "prompt_tokens": len(prompt), "completion_tokens": k,
                              "weight_version": str(self.version), "output_token_logprobs": lps}}

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({**body, "routing_key": request.headers.get(ROUTING_KEY_HEADER)})
        step = self.plan.pop(0) if self.plan else "ok"
        if isinstance(step, tuple):
            return web.Response(status=step[0], text=step[1])
        done = {"type": self.finish} | ({"length": len(self.ids)} if self.finish == "length" else {})
        if not body.get("stream"):
            return web.json_response(self.chunk(body["input_ids"], len(self.ids), done))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for j, k in enumerate([*range(1, len(self.ids), self.per_chunk), len(self.ids)]):
            finish = done if k == len(self.ids) else None
            if step == "abort" and j == 1:
                finish = {"type": "abort", "message": "Abort before update weights"}
            await resp.write(b"data: " + json.dumps(self.chunk(body["input_ids"], k, finish)).encode() + b"\n\n")
            if j == 0:
                self.first_sent.set()
                await self.release.wait()
                if step == "break":
                    request.transport.close()
                    return resp
            if finish:
                break
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def harness_cfg(tmp_path, **rollout) -> TandemConfig:
    return TandemConfig.model_validate({"run": {"run_dir": str(tmp_path / "run"), "cache_dir": str(REPO / ".cache" / "tandem")},
                                        "rollout": rollout})


def harness_ctx(cfg: TandemConfig, engine, reward_fn=None) -> RolloutContext:
    return RolloutContext(cfg, tiny_tokenizer(), engine, ThreadPoolExecutor(4), reward_fn,
                          sampling_params_from_config(cfg))
