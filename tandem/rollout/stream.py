"""Reading SGLang's streamed /generate, as its http_server sends it: one `data: {...}` line per
chunk, each cumulative (the text, output_ids and meta_info so far, the log-probs included; SGLang's
default stream output), finish_reason null until the last, then `data: [DONE]`. An error met in
mid-stream comes as a `data: {"error": {"message": ...}}` line; an aborted request's last chunk has
finish_reason {"type": "abort"}."""

from __future__ import annotations

import asyncio
from typing import AsyncIterable, AsyncIterator, Awaitable, Callable

import aiohttp
import orjson

OnChunk = Callable[[dict], Awaitable[None]]
"""Given each chunk of a streamed /generate as it arrives (the abort chunk excepted)."""


class StreamBroken(RuntimeError):
    """The stream failed once chunks had been passed on (or the engine said so in it): not retried,
    since the caller already forwarded the tokens it got."""


MAX_LINE = 1 << 30
"""The longest chunk line read: a chunk is cumulative (every id and log-prob so far), so a long reply's
last chunks pass the bound of aiohttp's own line reader (512 KiB: LineTooLong) near 19,000 tokens."""


async def sse_lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """A response body's lines, each up to MAX_LINE bytes."""
    while line := await content.readuntil(b"\n", max_size=MAX_LINE):
        yield line


def is_abort(chunk: dict) -> bool:
    finish = (chunk.get("meta_info") or {}).get("finish_reason")
    return isinstance(finish, dict) and finish.get("type") == "abort"


def _finished(chunk: dict | None) -> bool:
    return chunk is not None and (chunk.get("meta_info") or {}).get("finish_reason") is not None


async def read_generate_stream(lines: AsyncIterable[bytes], on_chunk: OnChunk) -> dict:
    """The stream's last chunk, each chunk before it (and the last, unless aborted) given to
    `on_chunk` as it arrives. A transport error or an early end before anything was passed on is
    raised as the transport's error, so the caller may retry; after, as StreamBroken."""
    last: dict | None = None
    try:
        async for raw in lines:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, comments
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            chunk = orjson.loads(data)
            if "error" in chunk:
                raise StreamBroken(f"the engine failed in mid-stream: {str(chunk['error'])[:300]}")
            if is_abort(chunk):
                return chunk  # the caller raises RolloutAborted on it
            last = chunk
            await on_chunk(chunk)
    except (aiohttp.ClientError, asyncio.TimeoutError) as err:
        if last is None:
            raise
        raise StreamBroken(f"the stream broke after {len(last.get('output_ids', []))} tokens: {err!r}") from err
    if last is None:
        raise aiohttp.ClientPayloadError("the /generate stream ended before its first chunk")
    if not _finished(last):
        raise StreamBroken(f"the stream ended after {len(last.get('output_ids', []))} tokens, unfinished")
    return last
