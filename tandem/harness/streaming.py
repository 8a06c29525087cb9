"""A harness's `stream = true` call, token by token: OpenAI chunks sent as the engine's streamed
/generate brings the tokens (EngineClient.generate_stream), the call recorded once it ends.

Each choice's text is decoded from the cumulative ids the engine sent so far; what is not final yet
is held back (a split UTF-8 character; with `tools`, the text from where tool-call markup may begin,
since the reply the harness gets has the calls parsed out of it), and what extends the text already
sent goes out as a delta. When the choice ends, its reply is built as a plain call's is; the rest of
its content and its tool calls go out in one closing delta, then its finish. The reply the harness
holds (what it was sent, in order) is the reply recorded, so a harness that keeps its history still
extends the call's sampled ids. The response opens with its first chunk: a call that fails before
any token still answers its HTTP error; one that fails after ends its stream with an error event
(the openai client raises it)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from tandem.env.parsers import CALL_OPENERS

class SSEWriter:
    """The response's server-sent events, opened at the first one."""

    def __init__(self, request: web.Request):
        self.request = request
        self.resp: web.StreamResponse | None = None
        self._lock = asyncio.Lock()  # the choices of an n call write from their own tasks
        request[WRITER] = self

    @property
    def started(self) -> bool:
        return self.resp is not None

    async def send(self, event: dict | str) -> web.StreamResponse:
        data = event if isinstance(event, str) else json.dumps(event)
        async with self._lock:
            if self.resp is None:
                self.resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
                await self.resp.prepare(self.request)
            await self.resp.write(f"data: {data}\n\n".encode())
            return self.resp

    async def end(self) -> web.StreamResponse:
        resp = await self.send("[DONE]")
        await resp.write_eof()
        return resp

    async def fail(self, status: int, message: str, kind: str) -> web.StreamResponse:
        """An error after the stream began: OpenAI's error event, then the end (no [DONE])."""
        resp = await self.send({"error": {"message": message, "type": kind, "code": status}})
        await resp.write_eof()
        return resp


def chat_logprobs(tok: Any, ids: list[int], lps: list[float]) -> dict:
    """A chat completion's `logprobs` for these tokens, in OpenAI's format (a whole reply or one delta)."""
    content = []
    for i, lp in zip(ids, lps):
        t = tok.decode([i])
        content.append({"token": t, "logprob": lp, "bytes": list(t.encode("utf-8")), "top_logprobs": []})
    return {"content": content}


WRITER = web.RequestKey("tandem_sse_writer", SSEWriter)
"""Where a streamed call's writer sits on its aiohttp request (the error path looks for it there)."""


class ChoiceStream:
    """Choice `index`'s deltas, from the engine's cumulative chunks."""

    def __init__(self, answer: "StreamedAnswer", index: int):
        self.answer, self.index = answer, index
        self.sent = ""
        """The text sent so far."""
        self.sent_ids = 0
        """How many of the choice's ids the deltas sent so far cover (their log-probs went with them)."""
        self.tail = ""
        """The content still to send when the choice ends (its closing delta)."""

    def _final_part(self, text: str) -> str:
        text = text.rstrip("\ufffd")
        cut = len(text)
        for opener in self.answer.holds:
            if (at := text.find(opener)) >= 0:
                cut = min(cut, at)
            for k in range(min(len(opener) - 1, len(text)), 0, -1):  # a partial opener at the end
                if text.endswith(opener[:k]):
                    cut = min(cut, len(text) - k)
                    break
        return text[:cut]

    async def on_chunk(self, chunk: dict) -> None:
        ids = [int(i) for i in chunk.get("output_ids") or []]
        text = self._final_part(self.answer.tok.decode(ids, skip_special_tokens=True))
        if len(text) <= len(self.sent) or not text.startswith(self.sent):
            return  # nothing new, or a decode that rewrote sent text: wait until it extends it again
        lps = [float(t[0]) for t in (chunk.get("meta_info") or {}).get("output_token_logprobs") or []]
        await self.answer.delta(self, text[len(self.sent):], ids[self.sent_ids:], lps[self.sent_ids:len(ids)])
        self.sent, self.sent_ids = text, len(ids)

    def close(self, content: str) -> str:
        """The content the harness ends up holding, given the reply's final `content`: what was sent,
        plus what is left of `content` when it extends it (then sent as the closing delta)."""
        self.tail = content[len(self.sent):] if content.startswith(self.sent) else ""
        return self.sent + self.tail


class StreamedAnswer:
    """One streamed call: its writer, a ChoiceStream per choice, the chunk format of its route."""

    def __init__(self, request: web.Request, tok: Any, head: dict, body: dict, n: int, chat: bool, tools: bool):
        self.tok, self.body, self.chat = tok, body, chat
        self.head = {**head, "object": "chat.completion.chunk" if chat else "text_completion"}
        self.holds = CALL_OPENERS if tools else ()
        self.writer = SSEWriter(request)
        self.choices = [ChoiceStream(self, k) for k in range(n)]
        self._opened: set[int] = set()

    def _logprobs(self, text_before: str, ids: list[int], lps: list[float]) -> dict | None:
        if self.chat:
            return chat_logprobs(self.tok, ids, lps) if self.body.get("logprobs") else None
        if self.body.get("logprobs") is None:
            return None
        tokens = [self.tok.decode([i]) for i in ids]
        return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": None,
                "text_offset": [len(text_before) + sum(len(t) for t in tokens[:k]) for k in range(len(tokens))]}

    def _chunk(self, index: int, delta: dict | str, logprobs: dict | None, finish: str | None) -> dict:
        if self.chat:
            if index not in self._opened and isinstance(delta, dict):  # the role goes with a choice's first delta
                self._opened.add(index)
                delta = {"role": "assistant", **delta}
            choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        else:
            choice = {"index": index, "text": delta, "logprobs": logprobs, "finish_reason": finish}
        return {**self.head, "choices": [choice]}

    async def delta(self, stream: ChoiceStream, text: str, ids: list[int], lps: list[float]) -> None:
        await self.writer.send(self._chunk(stream.index, {"content": text} if self.chat else text,
                                           self._logprobs(stream.sent, ids, lps), None))

    async def end(self, outs: list[tuple], choices: list[dict], usage: dict) -> web.StreamResponse:
        """Each choice's closing delta (the rest of its content, its tool calls) and finish, the
        usage when asked (stream_options.include_usage), [DONE]."""
        for stream, (ids, lps, *_), choice in zip(self.choices, outs, choices):
            rest_ids, rest_lps = ids[stream.sent_ids:], lps[stream.sent_ids:]
            if self.chat:
                calls = choice["message"]["tool_calls"] or []
                delta: dict | str = {"content": stream.tail} | (
                    {"tool_calls": [{"index": k, **c} for k, c in enumerate(calls)]} if calls else {})
            else:
                delta = stream.tail
            if stream.tail or rest_ids or (self.chat and (calls or stream.index not in self._opened)):
                await self.writer.send(self._chunk(stream.index, delta, self._logprobs(stream.sent, rest_ids, rest_lps),
                                                   None))
            await self.writer.send(self._chunk(stream.index, {} if self.chat else "", None, choice["finish_reason"]))
        if (self.body.get("stream_options") or {}).get("include_usage"):
            await self.writer.send({**self.head, "choices": [], "usage": usage})
        return await self.writer.end()
