"""The engine fleet: weight sync to every engine, and the doctor that keeps them alive.

An engine that exits (OOM, CUDA error, kill -9) or stops answering /health for
`faults.engine_unresponsive_s` (a hang, SIGSTOP) is taken out of sglang-router, killed,
restarted on the same port, loaded with the current weight version, and put back. The
requests it held fail at the router and are retried by the rollout client on another
engine, so no sample is lost and none is counted twice (a retried request has one
answer). Weight sync and recovery share one lock, so a restarted engine always comes
back on the version the others serve. Past `faults.max_engine_restarts` the run stops.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field

import httpx

from sync import SyncError, reload_engines, sync_engines
from tandem.config import TandemConfig
from tandem.supervisor import Child, ChildFailed, Supervisor, tail


class EngineCrashLoop(RuntimeError):
    """An engine failed more often than faults.max_engine_restarts allows."""


@dataclass
class Recovery:
    engine: str
    cause: str
    detect_s: float
    """From the last healthy answer (or the exit) to the doctor noticing."""
    recover_s: float
    """From noticing to the engine serving the current weights behind the router again."""
    at: float = field(default_factory=time.time)


class Fleet:
    def __init__(self, cfg: TandemConfig, sup: Supervisor, engines: dict[str, str], router_url: str):
        self.cfg, self.sup, self.engines, self.router_url = cfg, sup, engines, router_url
        self.lock = asyncio.Lock()
        self.weights: tuple[str, int] | None = None
        """(path, version) every engine should serve; None = the base model."""
        self.recovering: set[str] = set()
        self.recoveries: list[Recovery] = []

    # ------------------------------------------------------------------ sync
    async def sync(self, client, path: str, version: int, policy: str, timeout_s: float) -> float:
        async with self.lock:
            self.weights = (path, version)
            urls = [u for n, u in self.engines.items() if n not in self.recovering]
            try:
                return await sync_engines(client, urls, path, version, policy, timeout_s)
            except SyncError as err:
                # An engine that died mid-sync is the doctor's to bring back on this version;
                # a live engine that refused the weights is a real failure.
                live_failures = [n for n, u in self.engines.items() if u in err.failed_urls
                                 and self.sup.children[n].alive and await self._healthy(u)]
                if live_failures:
                    raise
                client.weight_version = version
                client.open_gate()
                print(f"tandem: weight sync skipped dead engine(s); the doctor restores them: {err}", file=sys.stderr)
                return 0.0

    # ------------------------------------------------------------------ doctor
    async def _healthy(self, url: str) -> bool:
        try:
            async with httpx.AsyncClient(timeout=min(2.0, self.cfg.faults.engine_unresponsive_s)) as c:
                return (await c.get(f"{url}/health")).status_code == 200
        except httpx.HTTPError:
            return False

    async def run_doctor(self) -> None:
        faults = self.cfg.faults
        last_ok = {name: time.monotonic() for name in self.engines}
        while True:
            await asyncio.sleep(faults.engine_check_interval_s)
            for name, url in self.engines.items():
                child = self.sup.children[name]
                now = time.monotonic()
                if not child.alive:
                    cause = f"exited ({child.describe_exit().splitlines()[0]})"
                elif await self._healthy(url):
                    last_ok[name] = time.monotonic()
                    continue
                elif now - last_ok[name] >= faults.engine_unresponsive_s:
                    cause = f"unresponsive for {now - last_ok[name]:.1f}s"
                else:
                    continue
                await self.recover(name, cause, detect_s=time.monotonic() - last_ok[name])
                last_ok[name] = time.monotonic()

    async def recover(self, name: str, cause: str, detect_s: float) -> Recovery:
        if len(self.recoveries) >= self.cfg.faults.max_engine_restarts:
            old = self.sup.children[name]
            raise EngineCrashLoop(
                f"{name} failed again ({cause}) after {len(self.recoveries)} restart(s) "
                f"(faults.max_engine_restarts = {self.cfg.faults.max_engine_restarts}); last lines of "
                f"{old.log_path}:\n{tail(old.log_path)}")
        print(f"tandem: {name} {cause}; restarting it", file=sys.stderr, flush=True)
        started = time.monotonic()
        self.recovering.add(name)
        try:
            url = self.engines[name]
            await self._router_remove(url)
            old = self.sup.children[name]
            await asyncio.to_thread(self.sup.stop_child, old, 2.0)
            child = self.sup.start(name, old.cmd, env=old.env, url=url, role=old.role, critical=old.critical)
            await asyncio.to_thread(self.sup.wait_ready, child, self.sup.http_ok(f"{url}/health"),
                                    self.cfg.engine.startup_timeout_s, "healthy again (GET /health)")
            async with self.lock:  # come back on the version everyone else serves
                if self.weights is not None:
                    path, version = self.weights
                    await reload_engines([url], path, version, policy="drain", timeout_s=self.cfg.sync.reload_timeout_s)
                await self._router_add(url)
        except ChildFailed as err:
            raise EngineCrashLoop(f"{name} could not be restarted: {err}") from err
        finally:
            self.recovering.discard(name)
        rec = Recovery(name, cause, detect_s, time.monotonic() - started)
        self.recoveries.append(rec)
        print(f"tandem: {name} back after {rec.recover_s:.1f}s (detected in {detect_s:.1f}s)", file=sys.stderr,
              flush=True)
        return rec

    # ------------------------------------------------------------------ router membership
    async def _workers(self, client: httpx.AsyncClient) -> list[dict]:
        body = (await client.get(f"{self.router_url}/workers")).json()
        return body.get("workers", []) if isinstance(body, dict) else body

    async def _router_remove(self, url: str) -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            for w in await self._workers(client):
                if w.get("url") == url and w.get("id"):
                    await client.delete(f"{self.router_url}/workers/{w['id']}")

    async def _router_add(self, url: str, timeout_s: float = 60.0) -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            if not any(w.get("url") == url for w in await self._workers(client)):
                await client.post(f"{self.router_url}/workers", json={"url": url})
            deadline = time.monotonic() + timeout_s
            while not any(w.get("url") == url for w in await self._workers(client)):
                if time.monotonic() > deadline:
                    raise EngineCrashLoop(f"router did not take {url} back within {timeout_s:.0f}s")
                await asyncio.sleep(0.2)

    def metrics(self) -> dict[str, float]:
        recs = self.recoveries
        return {
            "engine_restarts": len(recs),
            "engine_detect_s_max": max((r.detect_s for r in recs), default=0.0),
            "engine_recover_s_max": max((r.recover_s for r in recs), default=0.0),
        }
