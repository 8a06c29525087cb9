"""Who starts and stops engines for the autoscaler (engine.autoscale.provider).

A provider is asked for one engine at a time and answers with its base URL once the engine
answers /health; joining it to the fleet (current weights, then the router) is the fleet's
job (tandem.orchestrator.fleet.Fleet.join), and so is draining one before it stops.

- `NodeProvider` (provider = "node"): engine processes on this machine, started by the run's
  supervisor like the first ones (their own log, explicit device pinning, killed with the
  run). Each takes a free GPU after the trainer's, or runs on the CPU.
- `CommandProvider` (provider = "command"): a shell command per engine, for engines placed
  elsewhere (a SkyPilot launch, a Kubernetes job). It prints `TANDEM_ENGINE_URL=<base URL>` and
  may keep running for as long as the engine lives, or exit 0 once it is up; `stop_command`
  (or terminating that process) stops it. The supervisor owns the command's process too.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import time
from typing import Callable, Protocol

import httpx

from tandem.config import TandemConfig
from tandem.supervisor import Child, ChildFailed, Supervisor, tail
from tandem.placement import Placement
from tandem.ports import free_port

URL_LINE = re.compile(r"^TANDEM_ENGINE_URL=(https?://\S+)\s*$", re.MULTILINE)


class EngineProvider(Protocol):
    async def start(self, name: str) -> str:
        """Start engine `name`; its base URL once it answers /health (ChildFailed if it does not)."""

    async def stop(self, name: str, url: str) -> None:
        """Stop engine `name` (already out of the router and drained)."""


async def wait_healthy(url: str, child: Child | None, deadline: float, headers: dict | None = None) -> None:
    async with httpx.AsyncClient(headers=headers) as http:
        while True:
            try:
                if (await http.get(f"{url}/health", timeout=2.0)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if child is not None and child.proc is not None and child.proc.poll() not in (None, 0):
                raise ChildFailed(f"{child.name} exited before it was healthy. {child.describe_exit()}")
            if time.monotonic() > deadline:
                where = f"; last lines of {child.log_path}:\n{tail(child.log_path)}" if child else ""
                raise ChildFailed(f"new engine at {url} did not answer /health in time{where}")
            await asyncio.sleep(0.2)


class NodeProvider:
    def __init__(self, cfg: TandemConfig, sup: Supervisor, placement: Placement,
                 command: Callable[[str, int], list[str]], gpus: list[str | None]):
        """`command(name, port)`: the argv of one engine, as the run started the first ones
        (the launcher's engine_command; the provider knows no engine backend)."""
        self.cfg, self.sup, self.placement = cfg, sup, placement
        self._command = command
        self.free = list(gpus)
        """Devices no engine holds: GPU ids, or None for a CPU engine (as many as may still start)."""
        self.held: dict[str, str | None] = {}

    async def start(self, name: str) -> str:
        if not self.free:
            raise ChildFailed(f"no free device for {name}: engine.autoscale.max is larger than this node holds")
        device = self.free.pop(0)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {"CUDA_VISIBLE_DEVICES": device, **self.placement.engine_extra_env} if device is not None \
            else self.placement.cpu_engine_env()
        child = self.sup.start(name, self._command(name, port), env=env, url=url, role="engine", critical=False)
        self.held[name] = device
        try:
            await wait_healthy(url, child, time.monotonic() + self.cfg.engine.autoscale.ready_timeout_s)
        except ChildFailed:
            await self.stop(name, url)
            raise
        return url

    async def stop(self, name: str, url: str) -> None:
        child = self.sup.children.get(name)
        if child is not None:
            await asyncio.to_thread(self.sup.stop_child, child, 10.0)
        if name in self.held:
            self.free.append(self.held.pop(name))


class CommandProvider:
    def __init__(self, cfg: TandemConfig, sup: Supervisor):
        self.cfg, self.sup = cfg, sup
        self.scale = cfg.engine.autoscale

    async def start(self, name: str) -> str:
        cmd = self.scale.command.replace("{name}", name)
        child = self.sup.start(f"{name}-provider", ["bash", "-c", cmd], role="engine-provider", critical=False)
        deadline = time.monotonic() + self.scale.ready_timeout_s
        try:
            url = await self._reported_url(child, deadline)
        except ChildFailed:
            await asyncio.to_thread(self.sup.stop_child, child, 10.0)
            raise
        try:
            await wait_healthy(url, child, deadline)
        except ChildFailed:
            await self.stop(name, url)  # placed but never healthy: take it down, not leave it billed
            raise
        return url

    async def _reported_url(self, child: Child, deadline: float) -> str:
        while True:
            found = URL_LINE.search(child.log_path.read_text(errors="replace"))
            if found:
                return found.group(1).rstrip("/")
            code = child.proc.poll() if child.proc else None
            if code is not None and code != 0:
                raise ChildFailed(f"engine.autoscale.command for {child.name} exited with {code} before printing "
                                  f"TANDEM_ENGINE_URL=...; last lines:\n{tail(child.log_path)}")
            if time.monotonic() > deadline:
                raise ChildFailed(f"engine.autoscale.command for {child.name} printed no TANDEM_ENGINE_URL=... within "
                                  f"{self.scale.ready_timeout_s:.0f}s (engine.autoscale.ready_timeout_s)")
            await asyncio.sleep(0.2)

    async def stop(self, name: str, url: str) -> None:
        if self.scale.stop_command:
            cmd = self.scale.stop_command.replace("{name}", name).replace("{url}", shlex.quote(url))
            done = await asyncio.to_thread(subprocess.run, ["bash", "-c", cmd], capture_output=True, text=True,
                                           timeout=self.scale.drain_timeout_s)
            if done.returncode != 0:
                print(f"tandem: engine.autoscale.stop_command for {name} exited {done.returncode}: "
                      f"{done.stderr[-500:]}", flush=True)
        child = self.sup.children.get(f"{name}-provider")
        if child is not None:
            await asyncio.to_thread(self.sup.stop_child, child, 10.0)
