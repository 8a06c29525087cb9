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
from pathlib import Path

import httpx

from tandem.lora import adapter_name, adapter_versions, doomed_adapters
from tandem.weights import SyncError, reload_engines, sync_engines
from tandem.engine_api import read_load
from tandem.weights.reload import engine_adapters, engine_weight_version, unload_adapters
from tandem.weights.delta import DELTA_FILE
from tandem.weights.transport import local_copies, reload_by_agent
from tandem.config import TandemConfig
from tandem.auth import bearer_headers
from tandem.orchestrator.hooks import NO_HOOKS, RunHooks
from tandem.orchestrator.router_workers import RouterMembership, RouterRefused, RouterWorkers
from tandem.supervisor import Child, ChildFailed, Supervisor, tail


PROBE_FLOOR_S = 0.25
"""Shortest /health probe timeout: the last probe before a hang is declared still gets this long."""


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
    def __init__(self, cfg: TandemConfig, sup: Supervisor, engines: dict[str, str], router_url: str,
                 hooks: RunHooks = NO_HOOKS, http: httpx.AsyncClient | None = None,
                 router: RouterMembership | None = None):
        self.cfg, self.sup, self.engines, self.router_url, self.hooks = cfg, sup, engines, router_url, hooks
        self.router = router or RouterWorkers(router_url)
        """Who routes to the engines: sglang-router over HTTP, or a simulated run's in-process router."""
        self.lock = asyncio.Lock()
        self.weights: tuple[str, int] | None = None
        """(path, version) every engine should serve; None = the base model."""
        self.recovering: set[str] = set()
        # An injected client (a simulated run's: engine URLs mounted on in-process ASGI apps)
        # belongs to the caller, who closes it.
        self._http: httpx.AsyncClient | None = http
        self._owns_http = http is None
        self.by_agent = reload_by_agent(cfg)
        """Weight agents beside the engines load each version; this side waits for the engines to report it."""
        self.copies = None if self.by_agent or cfg.sync.encoding == "full" else local_copies(cfg)
        """Deltas loaded by this side: applied here to whole local checkpoints the engines read."""
        self.lora = cfg.trainer.lora.enabled
        self.adapters: dict[str, set[int]] = {url: set() for url in engines.values()}
        """With LoRA: the adapter versions each engine holds (this side loads and unloads them)."""
        self._unloads: dict[asyncio.Task, tuple[str, int]] = {}
        """Unloads still running -> (engine URL, how many adapters they unload)."""
        self.recoveries: list[Recovery] = []
        self.restarts = 0
        """Restarts begun (finished ones are in `recoveries`)."""
        self.released = False
        """run.colocate: the engines have released their memory for a train step. The doctor checks only
        that their processes live meanwhile: SGLang's /health generates a token, which a released engine
        cannot."""

    # ------------------------------------------------------------------ sync
    @property
    def apply_s(self) -> float:
        """Seconds the last sync spent turning a delta into a whole checkpoint (0: none)."""
        return self.copies.apply_s if self.copies is not None else 0.0

    async def sync(self, client, path: str, version: int, policy: str, timeout_s: float) -> float:
        async with self.lock:
            if self.copies is not None and (Path(path) / DELTA_FILE).exists():
                path = str(await asyncio.to_thread(self.copies.materialize, version))
            self.weights = (path, version)
            urls = [u for n, u in self.engines.items() if n not in self.recovering]
            if self.lora and not self.by_agent:
                await self._make_room_for_adapter(urls, timeout_s)
            try:
                seconds = await sync_engines(client, urls, path, version, policy, timeout_s, http=self._client(),
                                             by_agent=self.by_agent, lora=self.lora)
            except SyncError as err:
                # An engine that died mid-sync is the doctor's to bring back on this version;
                # a live engine that refused the weights is a real failure. An engine the doctor
                # is already replacing counts as dead even if its successor answers /health.
                live_failures = [n for n, u in self.engines.items() if u in err.failed_urls
                                 and n not in self.recovering and await self._serving(n, u)]
                if live_failures:
                    raise
                client.weight_version, client.adapter = version, adapter_name(version) if self.lora else None
                client.open_gate()
                print(f"tandem: weight sync skipped dead engine(s); the doctor restores them: {err}", file=sys.stderr)
                seconds = 0.0
            if self.lora and not self.by_agent:
                self._unload_old_adapters(urls, version)
            await self.hooks.at_async("sync", version)
            return seconds

    async def _make_room_for_adapter(self, urls: list[str], timeout_s: float) -> None:
        """Before a load: an engine this side has loaded nothing into yet (the run's first sync, or
        an engine that outlived an earlier run) gets every `policy-v*` adapter it lists unloaded,
        so leftovers take no slot; then the last round of unloads must have finished (one may
        still drain: the engines' limit leaves room for it, not for two)."""
        fresh = [url for url in urls if not self.adapters.get(url)]
        listed = await asyncio.gather(*(engine_adapters(self._client(), url) for url in fresh))
        leftovers = [(url, sorted(adapter_versions(names))) for url, names in zip(fresh, listed) if names]
        await asyncio.gather(*(unload_adapters(self._client(), url, versions, timeout_s)
                               for url, versions in leftovers if versions))
        for url in urls:
            pending = {task: n for task, (where, n) in self._unloads.items() if where == url and not task.done()}
            if sum(pending.values()) > 1:
                await asyncio.wait(list(pending), timeout=timeout_s)

    def _unload_old_adapters(self, urls: list[str], version: int) -> None:
        """Record `version` as loaded on `urls` and unload what fell out of the window, in the
        background: an unload waits for the requests still on its adapter, which the sync must not."""
        staleness = self.cfg.effective_staleness
        for url in urls:
            held = self.adapters.setdefault(url, set())
            held.add(version)
            doomed = doomed_adapters(sorted(held), version, staleness)
            if doomed:
                held.difference_update(doomed)
                task = asyncio.create_task(unload_adapters(self._client(), url, doomed, self.cfg.sync.reload_timeout_s))
                self._unloads[task] = (url, len(doomed))
                task.add_done_callback(self._unload_done(url, doomed))

    def _unload_done(self, url: str, doomed: list[int]):
        def done(task: asyncio.Task) -> None:
            self._unloads.pop(task, None)
            if not task.cancelled() and task.exception() is not None:
                print(f"tandem: unloading LoRA adapters {doomed} from {url} failed: {task.exception()!r}",
                      file=sys.stderr, flush=True)
        return done

    async def set_cpu_threads(self, threads: int) -> None:
        """Every local engine computes with `threads` torch threads (run.cpu_split = "phase").
        An engine being restarted is skipped: it starts with placement's count."""
        urls = [u for n, u in self.engines.items() if n not in self.recovering]
        answers = await asyncio.gather(*(self._client().post(f"{u}/set_cpu_threads", json={"threads": threads},
                                                             timeout=10.0) for u in urls), return_exceptions=True)
        for url, answer in zip(urls, answers):
            if isinstance(answer, BaseException) or answer.status_code != 200:
                print(f"tandem: setting {threads} CPU thread(s) on {url} failed: "
                      f"{answer if isinstance(answer, BaseException) else answer.text[:200]}", file=sys.stderr)

    # ------------------------------------------------------------------ doctor
    async def close(self) -> None:
        for task in list(self._unloads):
            task.cancel()
        if self._http is not None and self._owns_http:
            await self._http.aclose()

    def http(self) -> httpx.AsyncClient:
        """The fleet's one HTTP client (with the engines' API key)."""
        return self._client()

    def _client(self) -> httpx.AsyncClient:
        # One client for every probe: building one per call costs ~50 ms of CPU (SSL context),
        # once a second per engine. Created lazily inside the running loop.
        if self._http is None:
            self._http = httpx.AsyncClient(headers=bearer_headers(self.cfg.engine.api_key_env))
        return self._http

    async def _serving(self, name: str, url: str) -> bool:
        """The engine's process lives and answers /health."""
        return self.sup.children[name].alive and await self._healthy(url)

    async def _healthy(self, url: str, timeout_s: float | None = None) -> bool:
        timeout = timeout_s if timeout_s is not None else min(2.0, self.cfg.faults.engine_unresponsive_s)
        try:
            return (await self._client().get(f"{url}/health", timeout=timeout)).status_code == 200
        except httpx.HTTPError:
            return False

    async def run_doctor(self) -> None:
        """One watcher per engine, so a hung engine's probe or a long restart never delays the others;
        an engine that joins later (autoscaling) gets its own, and a watcher ends when its engine leaves."""
        watchers: dict[str, asyncio.Task] = {}
        try:
            while True:
                for name in list(self.engines):
                    if name not in watchers or watchers[name].done():
                        if name in watchers and watchers[name].exception() is not None:
                            raise watchers[name].exception()  # type: ignore[misc]
                        watchers[name] = asyncio.create_task(self._watch(name), name=f"doctor-{name}")
                await asyncio.sleep(self.cfg.faults.engine_check_interval_s)
        finally:
            for task in watchers.values():
                task.cancel()

    # ------------------------------------------------------------------ membership (autoscaling)
    async def join(self, name: str, url: str) -> tuple[int, int | None]:
        """A new, healthy engine: it loads the version every engine serves, then enters the router.
        Both under the sync lock, so no sync can land between its load and its admission and the
        router never sends it a request on an older version. Returns (the fleet's version, the
        version the engine itself reported just before it entered the router)."""
        async with self.lock:
            version = 0
            if self.weights is not None:
                path, version = self.weights
                await reload_engines([url], path, version, policy="drain", timeout_s=self.cfg.sync.reload_timeout_s,
                                     http=self._client())
            reported = await self.serves_version(url)
            await self._router_add(url)
            self.engines[name] = url
            self.adapters[url] = set()
        return version, reported

    async def leave(self, name: str, drain_timeout_s: float) -> int:
        """Take an engine out: first out of the router (no new request reaches it; a sticky session
        it held moves to another engine on its next turn), then drained: wait until the requests it
        holds finish, at most `drain_timeout_s`. Syncs skip it meanwhile. Returns how many requests
        it still held; they fail when it stops, and the rollout client retries each elsewhere."""
        url = self.engines[name]
        self.recovering.add(name)
        try:
            await self._router_remove(url)
            held = await self.drain(url, drain_timeout_s)
        finally:
            async with self.lock:
                self.engines.pop(name, None)
                self.adapters.pop(url, None)
                self.recovering.discard(name)
        return held

    async def serves_version(self, url: str) -> int | None:
        """The weight version an engine itself reports (None: it did not answer)."""
        version = await engine_weight_version(self._client(), url)
        return int(version) if version is not None else None

    async def loads(self) -> dict[str, dict[str, float]]:
        """Every serving engine's queue and KV use from its load report (tandem.engine_api: {waiting,
        running, kv_usage}); an engine that does not answer is left out."""
        async def one(url: str) -> dict[str, float] | None:
            try:
                load = await read_load(self._client(), url)
            except (httpx.HTTPError, ValueError):
                return None
            return None if load is None else {"waiting": load.waiting, "running": load.running,
                                              "kv_usage": load.kv_usage}
        serving = {n: u for n, u in self.engines.items() if n not in self.recovering}
        answers = await asyncio.gather(*(one(u) for u in serving.values()))
        return {n: a for n, a in zip(serving, answers) if a is not None}

    async def drain(self, url: str, timeout_s: float, poll_s: float = 0.2) -> int:
        """Wait until the engine at `url` holds no request (at most `timeout_s`); returns how many it still holds."""
        clock = asyncio.get_running_loop().time  # a simulated run drains on its virtual clock
        deadline = clock() + timeout_s
        while True:
            try:
                load = await read_load(self._client(), url)
            except (httpx.HTTPError, ValueError):
                return 0  # gone already: whatever it held failed and is being retried
            held = load.requests if load is not None else 0
            if held == 0 or clock() > deadline:
                return held
            await asyncio.sleep(poll_s)

    async def _watch(self, name: str) -> None:
        faults = self.cfg.faults
        url = self.engines[name]
        last_ok = time.monotonic()
        wait = faults.engine_check_interval_s
        while True:
            await asyncio.sleep(wait)
            if self.engines.get(name) != url:
                return  # it left the fleet
            wait = faults.engine_check_interval_s
            child = self.sup.children[name]
            if child.alive and self.released:
                last_ok = time.monotonic()
                continue
            if child.alive:
                # A probe may wait for what is left of the unresponsive budget (a slow answer
                # still counts), so a hang is declared when the budget ends, not a probe timeout
                # later; after a failed probe the next one comes as the budget runs out.
                left = last_ok + faults.engine_unresponsive_s - time.monotonic()
                if await self._healthy(url, min(2.0, max(PROBE_FLOOR_S, left))):
                    last_ok = time.monotonic()
                    continue
            now = time.monotonic()
            if not child.alive:
                code = child.proc.returncode if child.proc else None
                cause = f"exited ({f'signal {-code}' if code is not None and code < 0 else f'exit code {code}'})"
            elif now - last_ok >= faults.engine_unresponsive_s:
                cause = f"unresponsive for {now - last_ok:.1f}s"
            else:
                wait = min(wait, last_ok + faults.engine_unresponsive_s - now)
                continue
            await self.recover(name, cause, detect_s=now - last_ok)
            last_ok = time.monotonic()

    async def _wait_healthy(self, child: Child, url: str, timeout_s: float) -> None:
        """Like tandem.orchestrator.startup.wait_all, but on the event loop: a Ctrl-C (task cancel) stops it at
        once, where a thread blocked in wait_all would hold the launcher's exit for up to
        engine.startup_timeout_s (asyncio.run joins its worker threads before returning)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if not child.alive:
                raise ChildFailed(f"{child.name} exited before it was healthy again. {child.describe_exit()}")
            if await self._healthy(url, 2.0):
                return
            if time.monotonic() > deadline:
                raise ChildFailed(f"{child.name} was not healthy again (GET /health) after {timeout_s:.0f}s; "
                                  f"last lines of {child.log_path}:\n{tail(child.log_path)}")
            await asyncio.sleep(0.2)

    async def recover(self, name: str, cause: str, detect_s: float) -> Recovery:
        self.restarts += 1  # counted at the start: two engines failing at once may not both slip past the limit
        if self.restarts > self.cfg.faults.max_engine_restarts:
            old = self.sup.children[name]
            raise EngineCrashLoop(
                f"{name} failed again ({cause}) after {self.restarts - 1} restart(s) "
                f"(faults.max_engine_restarts = {self.cfg.faults.max_engine_restarts}); last lines of "
                f"{old.log_path}:\n{tail(old.log_path)}")
        print(f"tandem: {name} {cause}; restarting it", file=sys.stderr, flush=True)
        started = time.monotonic()
        self.recovering.add(name)
        try:
            url = self.engines[name]
            await self._router_remove(url)
            old = self.sup.children[name]
            await asyncio.to_thread(self.sup.stop_child, old, 2.0)  # bounded: SIGTERM, 2 s, SIGKILL
            child = self.sup.start(name, old.cmd, env=old.env, url=url, role=old.role, critical=old.critical)
            await self._wait_healthy(child, url, self.cfg.engine.startup_timeout_s)
            async with self.lock:  # come back on the version everyone else serves
                if self.weights is not None:
                    path, version = self.weights
                    await reload_engines([url], path, version, policy="drain", timeout_s=self.cfg.sync.reload_timeout_s,
                                         http=self._client())
                    self.adapters[url] = {version} if self.lora else set()  # a new process holds only this one
                await self._router_add(url)
        except (ChildFailed, SyncError) as err:
            raise EngineCrashLoop(f"{name} could not be restarted: {err}") from err
        finally:
            self.recovering.discard(name)
        rec = Recovery(name, cause, detect_s, time.monotonic() - started)
        self.recoveries.append(rec)
        print(f"tandem: {name} back after {rec.recover_s:.1f}s (detected in {detect_s:.1f}s)", file=sys.stderr,
              flush=True)
        return rec

    # ------------------------------------------------------------------ router membership
    async def _router_remove(self, url: str) -> None:
        await self.router.remove(url)

    async def _router_add(self, url: str) -> None:
        try:
            await self.router.add(url)
        except RouterRefused as err:
            raise EngineCrashLoop(str(err)) from err

    def metrics(self) -> dict[str, float]:
        recs = self.recoveries
        return {
            "engine_restarts": len(recs),
            "engine_detect_s_max": max((r.detect_s for r in recs), default=0.0),
            "engine_recover_s_max": max((r.recover_s for r in recs), default=0.0),
        }
