"""Orchestrator side of weight sync: every engine reloads version V from disk, directly (the
router does not forward `/update_weights_from_disk`), paused according to the partial-rollout
policy, with `weight_version` set so every sample can say which weights produced it. Any engine
that fails leaves the run on the previous version and raises SyncError."""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass
from typing import Any

import httpx

# How each partial-rollout policy pauses an engine around a reload (SGLang pause modes).
PAUSE_MODE = {"drain": None, "abort": "abort", "continue": "in_place"}


class SyncError(RuntimeError):
    """An engine did not take the new weights; it stays on its previous version."""

    def __init__(self, message: str, failed_urls: list[str] | None = None):
        super().__init__(message)
        self.failed_urls = failed_urls or []



@dataclass
class ReloadReport:
    version: int
    seconds: float
    paused_requests: int


async def _post(client: httpx.AsyncClient, url: str, payload: dict, timeout_s: float) -> dict:
    resp = await client.post(url, json=payload, timeout=timeout_s)
    if resp.status_code != 200:
        raise SyncError(f"{url} answered HTTP {resp.status_code}: {resp.text[:300]}")
    return resp.json() if resp.content else {}


async def reload_engine(client: httpx.AsyncClient, base_url: str, path: str | os.PathLike, version: int,
                        policy: str, timeout_s: float) -> int:
    pause = PAUSE_MODE[policy]
    if pause is not None:
        await _post(client, f"{base_url}/pause_generation", {"mode": pause}, timeout_s)
    try:
        answer = await _post(client, f"{base_url}/update_weights_from_disk", {
            "model_path": str(path),
            "weight_version": str(version),
            "abort_all_requests": pause == "abort",
            # in_place keeps the KV cache of paused requests, so SGLang refuses a flush then.
            "flush_cache": pause != "in_place",
        }, timeout_s)
    finally:
        if pause is not None:
            await _post(client, f"{base_url}/continue_generation", {}, timeout_s)
    if not answer.get("success", False):
        raise SyncError(f"engine {base_url} failed to load weight version {version} from {path}: "
                        f"{answer.get('message', answer)}; it stays on its previous version")
    return int(answer.get("num_paused_requests", 0) or 0)


async def reload_engines(engine_urls: list[str], path: str | os.PathLike, version: int, *,
                         policy: str = "drain", timeout_s: float = 300.0,
                         http: httpx.AsyncClient | None = None) -> ReloadReport:
    """Load version `version` into every engine in parallel; raise SyncError naming any that failed.

    Pass a long-lived `http` client when calling every step: building one costs ~50 ms of CPU.
    """
    clock = asyncio.get_running_loop().time  # the loop's clock: a simulated run times its syncs virtually
    start = clock()
    async with contextlib.AsyncExitStack() as stack:
        client = http or await stack.enter_async_context(httpx.AsyncClient())
        results = await asyncio.gather(
            *(reload_engine(client, url, path, version, policy, timeout_s) for url in engine_urls),
            return_exceptions=True,
        )
    failed = [(url, r) for url, r in zip(engine_urls, results) if isinstance(r, BaseException)]
    if failed:
        raise SyncError(f"weight sync to version {version} failed on {len(failed)} engine(s): "
                        + "; ".join(f"{url}: {r!r}" if not isinstance(r, SyncError) else f"{url}: {r}" for url, r in failed),
                        [url for url, _ in failed])
    return ReloadReport(version, clock() - start, sum(results))


def parse_load(payload: Any) -> tuple[int, int]:
    """(waiting, running) from SGLang's /get_load answer (a list per DP rank, or one dict)."""
    entries = payload if isinstance(payload, list) else [payload]
    waiting = running = 0
    for e in entries:
        if isinstance(e, dict):
            # SGLang's num_reqs counts running and waiting requests together.
            w = int(e.get("num_waiting_reqs", 0) or 0)
            waiting += w
            running += max(0, int(e.get("num_reqs", 0) or 0) - w)
    return waiting, running


async def engine_weight_version(http: httpx.AsyncClient, base_url: str, timeout_s: float = 5.0) -> str | None:
    """The weight version an engine says it serves (SGLang: /model_info; older: /get_model_info,
    /get_weight_version); None when it does not answer."""
    for route in ("/model_info", "/get_model_info", "/get_weight_version"):
        try:
            resp = await http.get(f"{base_url}{route}", timeout=timeout_s)
        except httpx.HTTPError:
            return None
        if resp.status_code == 200 and "weight_version" in (body := resp.json()):
            return str(body["weight_version"])
    return None


async def wait_engine_versions(engine_urls: list[str], version: int, *, timeout_s: float,
                               http: httpx.AsyncClient, poll_s: float = 0.2) -> ReloadReport:
    """Weights loaded by a weight agent beside each engine: wait until every engine itself says
    it serves `version` (never the agent's word); SyncError names the engines that do not."""
    clock = asyncio.get_running_loop().time
    start = clock()
    pending = list(engine_urls)
    while pending:
        answers = await asyncio.gather(*(engine_weight_version(http, url) for url in pending))
        pending = [url for url, served in zip(pending, answers) if served != str(version)]
        if pending and clock() - start > timeout_s:
            raise SyncError(f"weight version {version} was not loaded within {timeout_s:.0f}s (sync.reload_timeout_s) "
                            f"by {', '.join(pending)}: their weight agents did not load it (see each agent's log); "
                            f"they stay on their previous version", pending)
        if pending:
            await asyncio.sleep(poll_s)
    return ReloadReport(version, clock() - start, 0)


async def sync_engines(client, engine_urls: list[str], path: str | os.PathLike, version: int, policy: str,
                       timeout_s: float, http: httpx.AsyncClient | None = None, by_agent: bool = False) -> float:
    """Reload every engine under the partial-rollout policy; returns the seconds it took.

    drain: close the client's gate so no new request starts, wait until the requests in
    flight finish, reload, reopen. abort / continue: the engines pause themselves (abort
    returns in-flight requests, which the producer regenerates; in_place keeps decoding
    them on the new weights after continue_generation). Under abort the gate is closed too:
    a regenerated request must start once the client knows the new version, or its sample
    would be labelled with the old one. `by_agent`: each engine's weight agent pauses and
    reloads it (the manifest carries the policy); this side only waits for every engine to
    report the version.
    """
    clock = asyncio.get_running_loop().time  # the loop's clock: a simulated run times its syncs virtually
    start = clock()
    gated = policy in ("drain", "abort")
    if gated:
        client.close_gate()
    try:
        if policy == "drain":
            await client.wait_idle()
        if by_agent:
            await wait_engine_versions(engine_urls, version, timeout_s=timeout_s, http=http)
        else:
            await reload_engines(engine_urls, path, version, policy=policy, timeout_s=timeout_s, http=http)
        client.weight_version = version
    finally:
        if gated:
            client.open_gate()
    return clock() - start
