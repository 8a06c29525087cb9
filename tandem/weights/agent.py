"""The weight agent: one per engine host, beside its engine.

    python -m tandem.weights agent --source s3://bucket/run/weights --local-dir /local/weights \\
        --engine http://127.0.0.1:30000 [--api-key-env TANDEM_ENGINE_API_KEY]

It polls the store for the newest version (one whose manifest exists: a half-uploaded one is
invisible), builds it as a whole checkpoint on host-local disk (a full version is downloaded,
a delta applied to the previous one: tandem/weights/materialize.py), verifies it against the
manifest's checksums, and has the engine load it through /update_weights_from_disk, pausing it as the
manifest's partial-rollout policy says. A file that fails its checksum is named in the log and
the engine stays on its previous version; the version is retried only once the trainer
publishes it again or publishes a newer one. The agent compares against the version the engine
itself reports, so a restarted engine (back on its base weights) is brought to the current
version, and the orchestrator, which also asks the engine, never relies on the agent's word.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Callable

import httpx

from tandem.weights.delta import DeltaError
from tandem.weights.materialize import LocalVersions, fingerprint, kind
from tandem.lora import adapter_versions, doomed_adapters
from tandem.engine_api import read_load
from tandem.weights.reload import SyncError, engine_adapters, engine_weight_version, reload_engine, unload_adapters
from tandem.weights.store import ChecksumError, StoreError, WeightStore


class WeightAgent:
    def __init__(self, store: WeightStore, local_dir: Path, engine_url: str, http: httpx.AsyncClient, *,
                 keep_last: int = 2, reload_timeout_s: float = 300.0, policy: str | None = None,
                 log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)):
        self.store, self.engine_url, self.http = store, engine_url.rstrip("/"), http
        self.reload_timeout_s, self.policy, self.log = reload_timeout_s, policy, log
        self.copies = LocalVersions(store, Path(local_dir), keep_last, log=lambda line: log(f"tandem.weights agent: {line}"))
        self.refused: dict[int, str] = {}
        """Versions that failed verification -> the manifest fingerprint that failed."""
        self.loaded: tuple[int, str] | None = None
        """(version, fingerprint) this agent last had the engine load."""
        self.adapters: set[int] = set()
        """With LoRA: adapter versions the engine holds (what it listed, and loaded since)."""
        self._unloading: asyncio.Task | None = None

    async def poll_once(self) -> str:
        """One look at the store and the engine; returns what it did, for the log and for tests."""
        latest = await asyncio.to_thread(self.store.latest)
        if latest is None:
            return "no version published"
        served = await engine_weight_version(self.http, self.engine_url)
        if served is None:
            return "engine not answering"
        manifest = await asyncio.to_thread(self.store.manifest, latest)
        identity = fingerprint(manifest)
        if manifest.get("kind") == "lora":  # an adapter: the engine lists it among its models
            listed = await engine_adapters(self.http, self.engine_url)
            if listed is None:
                return "engine not answering"
            # What the engine holds, whoever loaded it (this agent before a restart, an earlier run).
            self.adapters = adapter_versions(listed)
            served = str(latest) if latest in self.adapters else None
        if served == str(latest) and self.loaded in (None, (latest, identity)):
            return f"engine serves version {latest}"
        if self.refused.get(latest) == identity:
            return f"version {latest} refused (failed verification)"
        try:
            local = await asyncio.to_thread(self.copies.materialize, latest)
        except (ChecksumError, DeltaError) as err:
            self.refused[latest] = identity
            self.log(f"tandem.weights agent: error: {err}; {self.engine_url} stays on its previous version")
            return f"version {latest} refused (failed verification)"
        self.log(f"tandem.weights agent: version {latest} ({kind(manifest)}) ready in {local} after "
                 f"{self.copies.apply_s:.2f}s of fetching and applying, checksums verified")
        await self._reload(local, latest, manifest.get("partial_rollout", "continue"))
        self.loaded = (latest, identity)
        if manifest.get("kind") == "lora":
            await self._unload_old_adapters(latest, int(manifest["adapters_kept"]))
        return f"loaded version {latest}"

    async def _unload_old_adapters(self, version: int, kept: int) -> None:
        """Keep the adapters of the staleness window (the manifest says how many) and unload the rest,
        in the background: an unload waits for the requests on its adapter, the next load must not.
        One unload round at a time; what it leaves is doomed again after the next version."""
        self.adapters.add(version)
        doomed = doomed_adapters(sorted(self.adapters), version, kept - 2)
        if not doomed or (self._unloading is not None and not self._unloading.done()):
            return

        async def unload() -> None:
            gone = await unload_adapters(self.http, self.engine_url, doomed, self.reload_timeout_s)
            self.adapters -= set(gone)
            self.log(f"tandem.weights agent: unloaded LoRA adapters of versions {gone} from {self.engine_url}")
        self._unloading = asyncio.create_task(unload())

    async def _reload(self, local: Path, version: int, manifest_policy: str) -> None:
        policy = self.policy or manifest_policy
        started = asyncio.get_running_loop().time()
        if policy == "drain":  # the orchestrator's gate is closed during a drain sync: wait for the tail
            while not await self._engine_idle():
                await asyncio.sleep(0.1)
        await reload_engine(self.http, self.engine_url, local, version, policy, self.reload_timeout_s)
        self.log(f"tandem.weights agent: {self.engine_url} now serves version {version} ({policy}, "
                 f"{asyncio.get_running_loop().time() - started:.2f}s)")

    async def _engine_idle(self) -> bool:
        load = await read_load(self.http, self.engine_url)
        return load is not None and load.requests == 0

    async def run(self, poll_s: float) -> None:
        last = None
        while True:
            try:
                what = await self.poll_once()
            except (StoreError, SyncError, httpx.HTTPError, OSError) as err:
                what = f"error: {err}"
            if what != last:  # log changes, not every poll
                self.log(f"tandem.weights agent: {what}")
                last = what
            await asyncio.sleep(poll_s)
