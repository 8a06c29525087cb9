"""Who is behind the router: the seam the fleet adds and removes engines through.

`RouterWorkers` is sglang-router's worker API over HTTP (GET /workers, POST /workers with
{"url": ...}, DELETE /workers/{id}). A simulated run passes its in-process router instead
(tandem.lab.inprocess.InProcessRouter has the same two methods), so the fleet's join, leave
and recovery code runs unchanged against either.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import httpx


class RouterRefused(RuntimeError):
    """The router did not list an engine it was asked to take."""


class RouterMembership(Protocol):
    async def add(self, url: str) -> None:
        """Route to `url` from now on; returns once the router lists it."""

    async def remove(self, url: str) -> None:
        """Send `url` nothing new; sticky sessions pinned to it move to another engine."""


class RouterWorkers:
    def __init__(self, router_url: str, listed_timeout_s: float = 60.0):
        self.router_url, self.listed_timeout_s = router_url, listed_timeout_s

    async def _workers(self, client: httpx.AsyncClient) -> list[dict]:
        body = (await client.get(f"{self.router_url}/workers")).json()
        return body.get("workers", []) if isinstance(body, dict) else body

    async def remove(self, url: str) -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            for w in await self._workers(client):
                if w.get("url") == url and w.get("id"):
                    await client.delete(f"{self.router_url}/workers/{w['id']}")

    async def add(self, url: str) -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            if not any(w.get("url") == url for w in await self._workers(client)):
                await client.post(f"{self.router_url}/workers", json={"url": url})
            deadline = time.monotonic() + self.listed_timeout_s
            while not any(w.get("url") == url for w in await self._workers(client)):
                if time.monotonic() > deadline:
                    raise RouterRefused(f"router did not take {url} back within {self.listed_timeout_s:.0f}s")
                await asyncio.sleep(0.2)
