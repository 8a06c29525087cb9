"""The pieces a virtual-clock run (tandem.lab.virtual) puts in place of child processes: sim
engines served in-process through their real FastAPI apps, a stand-in for sglang-router, and a
trainer on the loop's clock.

Engines: `SimEngineCore.from_config` as `python -m tandem.engine` builds them, named engine0..,
each behind `tandem.engine.http.build_app`, reached through one `httpx.AsyncClient` whose
transport sends each engine URL to `httpx.ASGITransport(app)`. ASGITransport runs no lifespan,
so the cores are started and shut down here. With engine.autoscale, `SimProvider` adds engines
during the run (after the engine profile's startup time) and stops them.

Router (`InProcessRouter`): what sglang-router's policy 'manual' does with `x-smg-routing-key`,
and nothing else. Modelled: the first request of a key goes to an engine chosen by
`router.assignment_mode` ('min_load': fewest requests the router has in flight to it, ties to
the lowest-numbered engine, so runs repeat; 'random': a seeded draw), every later request of
that key to the same engine; requests without a key go to the least-loaded engine; policy
'round_robin' is also served. Not modelled: key expiry (keys stay pinned for the whole run),
health checks and failures (engines cannot fail in a virtual run), the fields
the router adds to the body (the sim engines ignore them), and the router's own latency. Other
policies are refused. Also modelled: its
worker list (`add`, `remove`: a removed engine's sessions are assigned afresh), and the 502 a
request gets when its engine stops under it.

Trainer (`VirtualTrainer`, a `TrainerLink`): `trainer.sim.train_time_s` of loop time per step,
the same model-free metrics as the sim trainer backend (`batch_metrics`), then, when a sync is
due, a weight version published with the real `publish_weights` (a few KB: the bytes take no
virtual time) followed by `publish_s` of modelled publish time, and the answer written as the
trainer child writes it (`trainer/step_N.json`, its mtime on the loop's unix-like clock, which
is what `tandem.lab.sim.sweep.analyse` reads as the step's end).
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Set as AbstractSet
from typing import Any

import httpx

from tandem import handoff
from tandem.handoff import TrainResult
from tandem.config import ConfigError, TandemConfig
from tandem.rollout.client import ROUTING_KEY_HEADER
from tandem.sample import Sample
from tandem.lab.sim.virtual_clock import unix_time
from tandem.engine.http import build_app
from tandem.lab.sim.profiles import load_engine_profile
from tandem.lab.sim_engine import SimEngineCore
from tandem.lab.sim_trainer import batch_metrics, make_weights
from tandem.trainer.__main__ import sync_due
from tandem.weights import publish_weights
from tandem.weights.record import Published

ROUTER_URL = "http://router.virtual"
ROUTED_POLICIES = ("manual", "round_robin")

DEFAULT_PUBLISH_S = 10.0
"""Modelled seconds to write one weight version. The real-time sweep's publish is real I/O of
trainer.sim.weight_size_gb (0.02 GB, ~0.1 s of write + fsync, x time_scale ~= 10-12 model s,
per the reference workload profile); with the engine profile's 10 s reload the sync lands in the
reference run's 17-37 s range."""


class _Mounted(httpx.AsyncBaseTransport):
    """Each engine URL to its app's ASGITransport; engines come and go during a run (autoscaling),
    which httpx's fixed `mounts` cannot follow. A URL with nothing mounted refuses the connection."""

    def __init__(self) -> None:
        self.apps: dict[str, httpx.ASGITransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        transport = self.apps.get(f"{request.url.scheme}://{request.url.host}")
        if transport is None:
            raise httpx.ConnectError(f"nothing listens at {request.url.host}", request=request)
        return await transport.handle_async_request(request)


class InProcessEngines:
    """Sim engines named engine0.. (as the launcher names them: sim/<name>.jsonl, sampling seed),
    each behind its real app; `add` and `remove` change the set while the run goes."""

    def __init__(self, cfg: TandemConfig, model_path: str, tokenizer: Any):
        self.cfg, self.model_path, self.tokenizer = cfg, model_path, tokenizer
        self.cores: dict[str, Any] = {}
        """engine name -> started SimEngineCore"""
        self.urls: dict[str, str] = {}
        """engine name -> the URL its ASGI app is mounted on"""
        self.gone: set[str] = set()
        """URLs of engines stopped during the run: a request they still held is answered as a dropped connection."""
        self._mounted = _Mounted()
        # No timeout: ASGITransport enforces none anyway, and a wall-clock one has no meaning here.
        self.http = httpx.AsyncClient(transport=self._mounted, timeout=None)

    @classmethod
    async def start(cls, cfg: TandemConfig, model_path: str, tokenizer: Any) -> "InProcessEngines":
        engines = cls(cfg, model_path, tokenizer)
        for i in range(cfg.engine.count):
            await engines.add(f"engine{i}")
        return engines

    async def add(self, name: str) -> str:
        core = SimEngineCore.from_config(self.cfg, model_path=self.model_path, name=name, tokenizer=self.tokenizer)
        await core.start()
        url = f"http://{name}.virtual"
        self.cores[name], self.urls[name] = core, url
        self._mounted.apps[url] = httpx.ASGITransport(app=build_app(core, name=name))
        self.gone.discard(url)
        return url

    async def remove(self, name: str) -> int:
        """Stop engine `name`: what it still held is aborted, and its callers see the connection
        drop (the router answers 502 and the rollout client retries elsewhere). Returns how many."""
        url = self.urls.pop(name)
        core = self.cores.pop(name)
        self.gone.add(url)
        del self._mounted.apps[url]
        held = await core.abort(abort_all=True)
        await core.shutdown()
        return held

    async def close(self) -> None:
        await self.http.aclose()
        for core in self.cores.values():
            await core.shutdown()

    def loads(self) -> dict[str, dict]:
        """Each engine's /v1/loads entry, read from the core (an HTTP round trip per sample would
        cost more CPU than the rest of the run)."""
        return {name: core.engine_backend.get_load().to_json() for name, core in list(self.cores.items())}


class SimProvider:
    """engine.autoscale's actuator in a virtual run (a tandem.autoscale.providers.EngineProvider):
    a new sim engine in this process, once the engine profile's startup.server_s has passed on
    the loop's clock, as a real server would take to load its weights."""

    def __init__(self, engines: InProcessEngines):
        self.engines = engines
        self.startup_s = load_engine_profile(engines.cfg.engine.sim.profile).startup.server_s

    async def start(self, name: str) -> str:
        await asyncio.sleep(self.startup_s)
        return await self.engines.add(name)

    async def stop(self, name: str, url: str) -> None:
        await self.engines.remove(name)


class InProcessRouter:
    """sglang-router's 'manual' (sticky routing key) or 'round_robin' policy over in-process engines,
    with its worker list (a `tandem.orchestrator.router_workers.RouterMembership`)."""

    def __init__(self, cfg: TandemConfig, urls: dict[str, str], http: httpx.AsyncClient, gone: AbstractSet[str] = frozenset()):
        policy, mode = cfg.router.policy, cfg.router.assignment_mode
        if policy not in ROUTED_POLICIES:
            raise ConfigError(f"router.policy = {policy!r} is not modelled by the virtual-clock run "
                              f"(choose one of {list(ROUTED_POLICIES)}, or run with the real router)")
        if policy == "manual" and mode not in ("min_load", "random"):
            raise ConfigError(f"router.assignment_mode = {mode!r} is not modelled by the virtual-clock run "
                              "(choose 'min_load' or 'random')")
        self.policy, self.mode = policy, mode
        self.urls = list(urls.values())
        self.http, self.gone = http, gone
        self.in_flight = {u: 0 for u in self.urls}
        self.sessions: dict[str, str] = {}
        self._rng = random.Random(f"{cfg.run.seed}:router")
        self._next = 0

    async def add(self, url: str) -> None:
        if url not in self.urls:
            self.urls.append(url)
            self.in_flight.setdefault(url, 0)

    async def remove(self, url: str) -> None:
        """As sglang-router's DELETE /workers/{id}: nothing new goes to `url`, and a session pinned
        to it is assigned afresh on its next request."""
        if url in self.urls:
            self.urls.remove(url)
        self.sessions = {key: u for key, u in self.sessions.items() if u != url}

    def pick(self, key: str | None) -> str:
        if self.policy == "round_robin":
            url, self._next = self.urls[self._next % len(self.urls)], self._next + 1
            return url
        if key is not None and key in self.sessions:
            return self.sessions[key]
        if self.mode == "random":
            url = self._rng.choice(self.urls)
        else:
            url = min(self.urls, key=lambda u: self.in_flight[u])  # min() keeps the first of ties
        if key is not None:
            self.sessions[key] = url
        return url

    async def post(self, payload: dict, headers: dict | None) -> tuple[int, Any]:
        """`EngineClient`'s transport seam: forward one /generate to the chosen engine's app. An
        engine stopped under the request answers as sglang-router does for a dead worker: 502."""
        url = self.pick((headers or {}).get(ROUTING_KEY_HEADER))
        self.in_flight[url] += 1
        try:
            resp = await self.http.post(f"{url}/generate", json=payload)
        except httpx.TransportError as err:
            return 502, f"worker {url} unreachable: {err}"
        finally:
            self.in_flight[url] -= 1
        if url in self.gone:
            return 502, f"worker {url} stopped while it held the request"
        return (200, resp.json()) if resp.status_code == 200 else (resp.status_code, resp.text)


class VirtualTrainer:
    """A `TrainerLink` that trains on the loop's clock (see the module docstring)."""

    def __init__(self, cfg: TandemConfig, model_path: str, publish_s: float = DEFAULT_PUBLISH_S):
        import torch

        if cfg.checkpoint.interval:
            raise ConfigError("checkpoint.interval must be 0 in a virtual-clock run (no trainer state to save)")
        self.cfg, self.model_path, self.publish_s = cfg, model_path, publish_s
        # A few KB of real safetensors: engines read every version, the size is not what is modelled.
        self.weights = make_weights(4e-6, getattr(torch, cfg.model.dtype))
        self._running: dict[int, asyncio.Task] = {}

    async def submit(self, step: int, samples: list[Sample], cpu_threads: int | None = None) -> None:
        self._running[step] = asyncio.create_task(self._train(step, samples), name=f"virtual-trainer-{step}")

    async def result(self, step: int) -> TrainResult:
        return await self._running.pop(step)

    async def checkpoint_only(self, step: int, samples: list[Sample], reason: str) -> TrainResult:
        """TrainerLink's stop-and-checkpoint: a virtual run has no trainer state to save (checkpoint.interval
        = 0, checked above), so a stopping run raises before it would ask for one."""
        raise ConfigError(f"a virtual-clock run cannot checkpoint (stopping before step {step}: {reason})")

    async def _train(self, step: int, samples: list[Sample]) -> TrainResult:
        clock = asyncio.get_running_loop().time
        t0 = clock()
        metrics = batch_metrics(samples, self.cfg.trainer.loss.aggregation)
        await asyncio.sleep(self.cfg.trainer.sim.train_time_s)
        result = TrainResult(step, {**metrics, "train_time": clock() - t0})
        if sync_due(self.cfg, step):
            version = step + 1
            for t in self.weights.values():  # every version differs from the last, as with the sim trainer
                t[0] = float(version)
            t_pub = clock()
            path = publish_weights(self.weights, self.model_path, self.cfg.run.run_dir, version,
                                   self.cfg.sync.keep_last)
            await asyncio.sleep(self.publish_s)
            result.published, result.publish_time = Published(version, str(path)), clock() - t_pub
        answer = handoff.write_train_result(self.cfg.run.run_dir, result)
        now = unix_time()
        os.utime(answer, (now, now))  # the step's end, on the same clock as the engines' traces
        return result


__all__ = ["DEFAULT_PUBLISH_S", "InProcessEngines", "InProcessRouter", "ROUTER_URL", "SimProvider", "VirtualTrainer"]
