"""Engines tandem did not start (engine.backend = 'external'): driven, never started or killed.

The doctor watches each engine's /health. One that stops answering (at once when its port
refuses connections, after `faults.engine_unresponsive_s` when it hangs) is taken out of
sglang-router; the requests it held fail there and the rollout client retries them on the
others, so nothing is lost. When its /health answers again it rejoins, but only once it
serves the run's current weights: the orchestrator reloads it, or, with weight agents,
waits until the engine itself reports the current version (its agent sees the engine back
on its base weights and loads the newest one). A sync that lands meanwhile moves the target;
the rejoin re-checks under the sync lock, so an engine never re-enters the router a version
behind.
"""

from __future__ import annotations

import asyncio
import sys
import time

import httpx

from tandem.orchestrator.fleet import Fleet, Recovery
from tandem.weights import SyncError, reload_engines
from tandem.weights.reload import engine_serves


class ExternalFleet(Fleet):
    async def _serving(self, name: str, url: str) -> bool:
        return await self._healthy(url)

    async def _probe(self, url: str, timeout_s: float) -> str:
        """'ok', 'refused' (nothing listens: the engine is gone) or 'failed'."""
        try:
            resp = await self._client().get(f"{url}/health", timeout=timeout_s)
            return "ok" if resp.status_code == 200 else "failed"
        except httpx.ConnectError:
            return "refused"
        except httpx.HTTPError:
            return "failed"

    async def _watch(self, name: str) -> None:
        faults = self.cfg.faults
        url = self.engines[name]
        last_ok = time.monotonic()
        down: tuple[str, float, float] | None = None
        """(cause, detect_s, detected_at) while the engine is out of the router."""
        while True:
            await asyncio.sleep(faults.engine_check_interval_s)
            if self.engines.get(name) != url:
                return  # it left the fleet
            answer = await self._probe(url, min(2.0, faults.engine_unresponsive_s))
            now = time.monotonic()
            if answer == "ok":
                last_ok = now
                if down is not None and await self._rejoin(name, url):
                    cause, detect_s, detected_at = down
                    self.recoveries.append(Recovery(name, cause, detect_s, time.monotonic() - detected_at))
                    print(f"tandem: external {name} ({url}) rejoined the router after "
                          f"{time.monotonic() - detected_at:.1f}s", file=sys.stderr, flush=True)
                    down = None
                continue
            if down is None and (answer == "refused" or now - last_ok >= faults.engine_unresponsive_s):
                cause = "refused connections" if answer == "refused" else f"unresponsive for {now - last_ok:.1f}s"
                down = (cause, now - last_ok, now)
                await self._leave(name, url, cause)

    async def _leave(self, name: str, url: str, cause: str) -> None:
        self.recovering.add(name)  # syncs skip it until it rejoins on the current version
        print(f"tandem: external {name} ({url}) {cause}; taken out of the router until it is healthy again",
              file=sys.stderr, flush=True)
        try:
            await self._router_remove(url)
        except httpx.HTTPError as err:
            print(f"tandem: could not remove {url} from the router ({err}); its health check will", file=sys.stderr)

    async def _rejoin(self, name: str, url: str) -> bool:
        """Bring a healthy-again engine to the current version, then back into the router.
        False: not yet (its agent has not loaded the version; the doctor tries again)."""
        target = self.weights
        if target is not None and self.by_agent:
            if not await engine_serves(self._client(), url, target[1], self.lora):
                return False
        async with self.lock:
            if self.weights != target:
                return False  # a sync moved on while we looked; look again
            if target is not None and not self.by_agent:
                try:
                    await reload_engines([url], target[0], target[1], policy="drain",
                                         timeout_s=self.cfg.sync.reload_timeout_s, http=self._client())
                except SyncError as err:
                    print(f"tandem: external {name} is healthy but did not load version {target[1]}: {err}",
                          file=sys.stderr, flush=True)
                    return False
            await self._router_add(url)
            self.recovering.discard(name)
        return True
