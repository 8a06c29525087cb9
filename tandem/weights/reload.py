"""Orchestrator side of weight sync: every engine reloads version V from disk, directly (the
router does not forward `/update_weights_from_disk`), paused according to the partial-rollout
policy, with `weight_version` set so every sample can say which weights produced it. Any engine
that fails leaves the run on the previous version and raises SyncError."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from dataclasses import dataclass
import httpx

from tandem.engine_api import error_message
from tandem.lora import adapter_name, is_adapter_dir

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
        raise SyncError(f"{url} answered HTTP {resp.status_code}: {error_message(resp.text)[:300]}")
    return resp.json() if resp.content else {}


@contextlib.asynccontextmanager
async def _paused(client: httpx.AsyncClient, base_url: str, mode: str | None, timeout_s: float):
    """The engine paused in SGLang's `mode` (None: not paused) for the block, continued after it."""
    if mode is not None:
        await _post(client, f"{base_url}/pause_generation", {"mode": mode}, timeout_s)
    try:
        yield
    finally:
        if mode is not None:
            await _post(client, f"{base_url}/continue_generation", {}, timeout_s)


RELOAD_TRIES = 3
"""How often one engine's reload is tried when the engine accepted a connection and then dropped it
(an overloaded or just-restarted engine: a lookup run under load died of one ReadError at /pause_generation).
Pause, load and continue are each safe to repeat: the same version loaded twice is the same weights."""
RETRY_PAUSE_S = 1.0
"""Seconds before the second try; doubled before each later one."""
DROPPED = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
"""Connection dropped after it was accepted. Not ConnectError: nothing listens (the engine died), which the
engine doctor handles by a restart, so retrying would only delay the sync."""


async def reload_engine(client: httpx.AsyncClient, base_url: str, path: str | os.PathLike, version: int,
                        policy: str, timeout_s: float) -> int:
    """Have one engine serve version `version` from `path`: whole weights, or with LoRA the
    version's adapter (tandem/lora.py), loaded beside the ones still in use. A dropped connection
    is tried again, RELOAD_TRIES times in all."""
    if is_adapter_dir(path):
        return await load_adapter(client, base_url, path, version, policy, timeout_s)
    for attempt in range(1, RELOAD_TRIES):
        try:
            return await _reload_whole(client, base_url, path, version, policy, timeout_s)
        except DROPPED as err:
            print(f"tandem: engine {base_url} dropped the connection while loading weight version {version} "
                  f"({err!r}); trying again ({attempt + 1}/{RELOAD_TRIES})", file=sys.stderr, flush=True)
            await asyncio.sleep(RETRY_PAUSE_S * 2 ** (attempt - 1))
    try:
        return await _reload_whole(client, base_url, path, version, policy, timeout_s)
    except DROPPED as err:
        raise SyncError(f"engine {base_url} dropped the connection on each of {RELOAD_TRIES} tries to load "
                        f"weight version {version} (last: {err!r}); it stays on its previous version") from err


async def _reload_whole(client: httpx.AsyncClient, base_url: str, path: str | os.PathLike, version: int,
                        policy: str, timeout_s: float) -> int:
    pause = PAUSE_MODE[policy]
    async with _paused(client, base_url, pause, timeout_s):
        answer = await _post(client, f"{base_url}/update_weights_from_disk", {
            "model_path": str(path),
            "weight_version": str(version),
            "abort_all_requests": pause == "abort",
            # in_place keeps the KV cache of paused requests, so SGLang refuses a flush then.
            "flush_cache": pause != "in_place",
        }, timeout_s)
    if not answer.get("success", False):
        raise SyncError(f"engine {base_url} failed to load weight version {version} from {path}: "
                        f"{answer.get('message', answer)}; it stays on its previous version")
    return int(answer.get("num_paused_requests", 0) or 0)


async def load_adapter(client: httpx.AsyncClient, base_url: str, path: str | os.PathLike, version: int,
                       policy: str, timeout_s: float) -> int:
    """/load_lora_adapter as `policy-vV`. Requests on older adapters keep running on them, so only
    the abort policy pauses the engine (to abort them: their groups are regenerated). An adapter
    of that name already there (an earlier run's, on an engine that outlived it) is replaced:
    the name must mean this run's version V."""
    name = adapter_name(version)
    async with _paused(client, base_url, "abort" if policy == "abort" else None, timeout_s):
        body = {"lora_name": name, "lora_path": str(path)}
        status, answer = await _post_lora(client, f"{base_url}/load_lora_adapter", body, timeout_s)
        if status != 200 and name in (answer.get("loaded_adapters") or {}):
            await _post_lora(client, f"{base_url}/unload_lora_adapter", {"lora_name": name}, timeout_s)
            status, answer = await _post_lora(client, f"{base_url}/load_lora_adapter", body, timeout_s)
    if status != 200:
        raise SyncError(f"engine {base_url} failed to load LoRA adapter {name} from {path}: "
                        f"{answer.get('error_message') or answer}; it stays on its previous version")
    return 0


async def _post_lora(client: httpx.AsyncClient, url: str, body: dict, timeout_s: float) -> tuple[int, dict]:
    """(HTTP status, SGLang's LoRAUpdateOutput); a body that is not one is reported with its status."""
    resp = await client.post(url, json=body, timeout=timeout_s)
    try:
        answer = resp.json()
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        answer = {"error_message": f"HTTP {resp.status_code} from {url}: {resp.text[:300]!r}"}
    return resp.status_code, answer


async def unload_adapters(client: httpx.AsyncClient, base_url: str, versions: list[int], timeout_s: float) -> list[int]:
    """/unload_lora_adapter for each version (each waits until no request uses it); returns the
    versions the engine no longer holds (unloaded now, or already gone)."""
    gone = []
    for version in versions:
        name = adapter_name(version)
        status, answer = await _post_lora(client, f"{base_url}/unload_lora_adapter", {"lora_name": name}, timeout_s)
        if status == 200 or ("loaded_adapters" in answer and name not in answer["loaded_adapters"]):
            gone.append(version)
    return gone


async def reload_engines(engine_urls: list[str], path: str | os.PathLike, version: int, *,
                         policy: str = "drain", timeout_s: float = 300.0,
                         http: httpx.AsyncClient | None = None) -> ReloadReport:
    """Load version `version` into every engine in parallel; raise SyncError naming any that failed.

    Pass a long-lived `http` client when calling every step: building one costs ~50 ms of CPU.
    """
    clock = asyncio.get_running_loop().time  # the loop's clock: a simulated run times its syncs virtually
    start = clock()
    async with contextlib.AsyncExitStack() as stack:
        client = http if http is not None else await stack.enter_async_context(httpx.AsyncClient())
        results = await asyncio.gather(
            *(reload_engine(client, url, path, version, policy, timeout_s) for url in engine_urls),
            return_exceptions=True,
        )
    failed = [(url, r) for url, r in zip(engine_urls, results) if isinstance(r, BaseException)]
    if failed:
        raise SyncError(f"weight sync to version {version} failed on {len(failed)} engine(s): "
                        + "; ".join(f"{url}: {r!r}" if not isinstance(r, SyncError) else f"{url}: {r}" for url, r in failed),
                        [url for url, _ in failed])
    return ReloadReport(version, clock() - start, sum(r for r in results if not isinstance(r, BaseException)))


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


async def engine_adapters(http: httpx.AsyncClient, base_url: str, timeout_s: float = 5.0) -> set[str] | None:
    """The LoRA adapters an engine serves (SGLang lists each as a model with a parent in
    /v1/models); None when it does not answer, which is not the same as serving none."""
    try:
        resp = await http.get(f"{base_url}/v1/models", timeout=timeout_s)
        cards = resp.json().get("data", []) if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return None if cards is None else {card.get("id") for card in cards if card.get("parent")}


async def engine_serves(http: httpx.AsyncClient, base_url: str, version: int, lora: bool) -> bool:
    if lora:
        return adapter_name(version) in (await engine_adapters(http, base_url) or set())
    return await engine_weight_version(http, base_url) == str(version)


async def wait_engine_versions(engine_urls: list[str], version: int, *, timeout_s: float,
                               http: httpx.AsyncClient | None = None, poll_s: float = 0.2,
                               lora: bool = False) -> ReloadReport:
    """Weights loaded by a weight agent beside each engine: wait until every engine itself says
    it serves `version` (never the agent's word; with LoRA, lists its adapter); SyncError names
    the engines that do not."""
    clock = asyncio.get_running_loop().time
    start = clock()
    pending = list(engine_urls)
    async with contextlib.AsyncExitStack() as stack:
        client = http if http is not None else await stack.enter_async_context(httpx.AsyncClient())
        while pending:
            answers = await asyncio.gather(*(engine_serves(client, url, version, lora) for url in pending))
            pending = [url for url, serves in zip(pending, answers) if not serves]
            if pending and clock() - start > timeout_s:
                raise SyncError(f"weight version {version} was not loaded within {timeout_s:.0f}s (sync.reload_timeout_s) "
                                f"by {', '.join(pending)}: their weight agents did not load it (see each agent's log); "
                                f"they stay on their previous version", pending)
            if pending:
                await asyncio.sleep(poll_s)
    return ReloadReport(version, clock() - start, 0)


async def sync_engines(client, engine_urls: list[str], path: str | os.PathLike, version: int, policy: str,
                       timeout_s: float, http: httpx.AsyncClient | None = None, by_agent: bool = False,
                       lora: bool = False) -> float:
    """Reload every engine under the partial-rollout policy; returns the seconds it took.

    drain: close the client's gate so no new request starts, wait until the requests in
    flight finish, reload, reopen. abort / continue: the engines pause themselves (abort
    returns in-flight requests, which the producer regenerates; in_place keeps decoding
    them on the new weights after continue_generation). Under abort the gate is closed too:
    a regenerated request must start once the client knows the new version, or its sample
    would be labelled with the old one. `by_agent`: each engine's weight agent pauses and
    reloads it (the manifest carries the policy); this side only waits for every engine to
    report the version. `lora`: the version is an adapter, which requests name from now on.
    """
    clock = asyncio.get_running_loop().time  # the loop's clock: a simulated run times its syncs virtually
    start = clock()
    if policy == "continue" and client.in_flight == 0 and not by_agent:
        # Nothing to continue (always so in sync mode): a drain with nothing to drain. The engines
        # reload unpaused, which saves a pause and a continue round trip per engine; the gate
        # closes before the next await, so no request can start on the old version meanwhile.
        policy = "drain"
    gated = policy in ("drain", "abort")
    if gated:
        client.close_gate()
    try:
        if policy == "drain":
            await client.wait_idle()
        if by_agent:
            await wait_engine_versions(engine_urls, version, timeout_s=timeout_s, http=http, lora=lora)
        else:
            await reload_engines(engine_urls, path, version, policy=policy, timeout_s=timeout_s, http=http)
        client.weight_version, client.adapter = version, adapter_name(version) if lora else None
    finally:
        if gated:
            client.open_gate()
    return clock() - start
