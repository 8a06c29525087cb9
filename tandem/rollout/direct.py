"""Requests sent straight to the engines behind the router, for fields the router does not forward.

sglang-router 0.3.2 parses /generate into its own GenerateRequest type and re-serialises it, so a
field that type lacks never reaches the engine: `return_routed_experts` and
`routed_experts_start_len` (trainer.moe) are dropped. With them, the rollout client picks the
engine itself among the router's workers (GET /workers, re-read when they may have changed) the
way the router's manual policy would: every request of one routing key (one agent trajectory)
to the same engine while it is listed, a new key to the engine with the fewest requests in flight.
"""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable

import aiohttp

GetWorkers = Callable[[], Awaitable[list[str]]]
"""The URLs of the engines behind the router now."""

REFRESH_S = 5.0
"""How old the worker list may be before it is read again (also after any failed request)."""


class DirectDispatch:
    """Picks an engine URL per request: sticky per routing key, else the least loaded."""

    def __init__(self, get_workers: GetWorkers, clock: Callable[[], float] = time.monotonic):
        self._get_workers = get_workers
        self._clock = clock
        self._workers: list[str] = []
        self._read_at: float | None = None
        self._pinned: dict[str, str] = {}
        self.in_flight: dict[str, int] = {}

    def stale(self) -> None:
        """Read the worker list again before the next pick (a request failed: its engine may be gone)."""
        self._read_at = None

    async def _current(self) -> list[str]:
        now = self._clock()
        if self._read_at is None or now - self._read_at > REFRESH_S or not self._workers:
            self._workers, self._read_at = list(await self._get_workers()), now
            self._pinned = {k: u for k, u in self._pinned.items() if u in self._workers}
        return self._workers

    async def pick(self, routing_key: str | None) -> str | None:
        """The engine for the next request (None: no engine is listed)."""
        workers = await self._current()
        if not workers:
            return None
        if routing_key is not None and routing_key in self._pinned:
            return self._pinned[routing_key]
        url = min(workers, key=lambda u: (self.in_flight.get(u, 0), workers.index(u)))
        if routing_key is not None:
            self._pinned[routing_key] = url
        return url

    def started(self, url: str) -> None:
        self.in_flight[url] = self.in_flight.get(url, 0) + 1

    def finished(self, url: str) -> None:
        self.in_flight[url] = self.in_flight.get(url, 1) - 1


def router_workers(router_url: str, headers: dict[str, str] | None = None) -> GetWorkers:
    """GetWorkers over sglang-router's worker API."""
    async def get() -> list[str]:
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.get(f"{router_url}/workers", timeout=aiohttp.ClientTimeout(total=10)) as resp:
                body: Any = await resp.json(content_type=None)
        listed = body.get("workers", []) if isinstance(body, dict) else body
        return [w["url"] for w in listed if isinstance(w, dict) and w.get("url")]
    return get
