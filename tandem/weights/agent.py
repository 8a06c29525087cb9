"""The weight agent: one per engine host, beside its engine.

    python -m tandem.weights agent --source s3://bucket/run/weights --local-dir /local/weights \\
        --engine http://127.0.0.1:30000 [--api-key-env TANDEM_ENGINE_API_KEY]

It polls the store for the newest version (one whose manifest exists: a half-uploaded one is
invisible), downloads it to host-local disk, verifies every file against the manifest's
checksums, and has the engine load it through /update_weights_from_disk, pausing it as the
manifest's partial-rollout policy says. A file that fails its checksum is named in the log and
the engine stays on its previous version; the version is retried only once the trainer
publishes it again or publishes a newer one. The agent compares against the version the engine
itself reports, so a restarted engine (back on its base weights) is brought to the current
version, and the orchestrator, which also asks the engine, never relies on the agent's word.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

import httpx

from tandem.weights.reload import SyncError, engine_weight_version, reload_engine
from tandem.weights.store import MANIFEST, ChecksumError, StoreError, WeightStore


def _fingerprint(manifest: dict[str, Any]) -> str:
    """Identifies a version's content: a version re-published after a resume has other checksums."""
    return json.dumps(manifest["files"], sort_keys=True)


class WeightAgent:
    def __init__(self, store: WeightStore, local_dir: Path, engine_url: str, http: httpx.AsyncClient, *,
                 keep_last: int = 2, reload_timeout_s: float = 300.0, policy: str | None = None,
                 log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)):
        self.store, self.local_dir, self.engine_url, self.http = store, Path(local_dir), engine_url.rstrip("/"), http
        self.keep_last, self.reload_timeout_s, self.policy, self.log = keep_last, reload_timeout_s, policy, log
        self.refused: dict[int, str] = {}
        """Versions whose files failed verification -> the manifest fingerprint that failed."""
        self.loaded: tuple[int, str] | None = None
        """(version, fingerprint) this agent last had the engine load."""

    def _local(self, version: int) -> Path:
        return self.local_dir / f"step_{version:06d}"

    def _local_manifest(self, version: int) -> dict[str, Any] | None:
        path = self._local(version) / MANIFEST
        return json.loads(path.read_text()) if path.exists() else None

    async def poll_once(self) -> str:
        """One look at the store and the engine; returns what it did, for the log and for tests."""
        latest = await asyncio.to_thread(self.store.latest)
        if latest is None:
            return "no version published"
        served = await engine_weight_version(self.http, self.engine_url)
        if served is None:
            return "engine not answering"
        manifest = await asyncio.to_thread(self.store.manifest, latest)
        fingerprint = _fingerprint(manifest)
        if served == str(latest) and self.loaded in (None, (latest, fingerprint)):
            return f"engine serves version {latest}"
        if self.refused.get(latest) == fingerprint:
            return f"version {latest} refused (failed verification)"
        local = await self._fetch(latest, fingerprint)
        if local is None:
            return f"version {latest} refused (failed verification)"
        await self._reload(local, latest, manifest.get("partial_rollout", "continue"))
        self.loaded = (latest, fingerprint)
        self._prune(keep=latest)
        return f"loaded version {latest}"

    async def _fetch(self, version: int, fingerprint: str) -> Path | None:
        local = self._local(version)
        have = self._local_manifest(version)
        if have is not None and _fingerprint(have) == fingerprint:
            return local
        try:
            await asyncio.to_thread(self.store.download, version, local)
        except ChecksumError as err:
            self.refused[version] = fingerprint
            self.log(f"tandem.weights agent: error: {err}; {self.engine_url} stays on its previous version")
            return None
        self.log(f"tandem.weights agent: fetched version {version} into {local}, checksums verified")
        return local

    async def _reload(self, local: Path, version: int, manifest_policy: str) -> None:
        policy = self.policy or manifest_policy
        if policy == "drain":  # the orchestrator's gate is closed during a drain sync: wait for the tail
            while not await self._engine_idle():
                await asyncio.sleep(0.1)
        await reload_engine(self.http, self.engine_url, local, version, policy, self.reload_timeout_s)
        self.log(f"tandem.weights agent: {self.engine_url} now serves version {version} ({policy})")

    async def _engine_idle(self) -> bool:
        resp = await self.http.get(f"{self.engine_url}/get_load", timeout=5.0)
        entries = resp.json() if resp.status_code == 200 else [{"num_reqs": 1}]
        entries = entries if isinstance(entries, list) else [entries]
        return sum(int(e.get("num_reqs", 0) or 0) for e in entries if isinstance(e, dict)) == 0

    def _prune(self, keep: int) -> None:
        versions = sorted(int(p.name.split("_")[1]) for p in self.local_dir.glob("step_*") if p.name[5:].isdigit())
        for version in versions[:-self.keep_last]:
            if version != keep:
                shutil.rmtree(self._local(version), ignore_errors=True)

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
