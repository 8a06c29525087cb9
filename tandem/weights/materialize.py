"""Whole checkpoints on an engine host's disk, built from a store that may hold deltas.

Stock SGLang reloads whole checkpoints from disk, so whatever crossed the wire, the engine
reads a full one. A full version is downloaded and verified. A delta is applied to the local
copy of its base on a copy (`step_V.partial`, renamed when every tensor matches the manifest's
checksum), so a crash or a bad delta mid-apply leaves the previous version intact. When the
base is not here (a gap: this host was down, or the store pruned it) the newest full anchor
is fetched and the deltas after it are applied in order; a chain the store cannot rebuild is
an error that names the missing version.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from tandem.weights.delta import DELTA_FILE, DeltaError, apply_delta
from tandem.weights.publish import prune_versions
from tandem.weights.store import MANIFEST, WeightStore, built_in_place_of, verify_dir
from tandem.weights import safetensors_io


def fingerprint(manifest: dict[str, Any]) -> str:
    """A version's identity beyond its number: a version re-published after a resume differs."""
    return json.dumps([manifest.get("files"), manifest.get("tensors")], sort_keys=True)


def kind(manifest: dict[str, Any]) -> str:
    return manifest.get("kind", "full")


def is_whole(manifest: dict[str, Any]) -> bool:
    """A version that stands alone (whole weights, or a LoRA adapter), not a delta on another."""
    return kind(manifest) != "delta"


class LocalVersions:
    """Full local checkpoints of the versions in `store`, under `local_dir`. With `in_place` (the
    store is a directory on this host), full versions are used where they are, not copied."""

    def __init__(self, store: WeightStore, local_dir: Path, keep_last: int = 2, in_place: bool = False,
                 log: Callable[[str], None] = lambda line: None):
        self.store, self.local_dir, self.keep_last, self.in_place, self.log = store, Path(local_dir), keep_last, in_place, log
        self.apply_s = 0.0
        """Seconds the last materialize spent downloading and applying (0 when it had the version)."""

    def _local(self, version: int) -> Path:
        return self.local_dir / f"step_{version:06d}"

    def path_of(self, version: int, manifest: dict[str, Any]) -> Path | None:
        """Where a verified full copy of exactly this version is, if anywhere."""
        if self.in_place and is_whole(manifest):
            return Path(self.store.root) / f"step_{version:06d}"
        local = self._local(version) / MANIFEST
        if local.exists() and fingerprint(json.loads(local.read_text())) == fingerprint(manifest):
            return self._local(version)
        return None

    def materialize(self, version: int) -> Path:
        """A full checkpoint of `version` on local disk; DeltaError or ChecksumError if it cannot be built."""
        started = time.perf_counter()
        manifest = self.store.manifest(version)
        if (have := self.path_of(version, manifest)) is not None:
            self.apply_s = 0.0
            return have
        for step_version, step_manifest in self._plan(version, manifest):
            self._build(step_version, step_manifest)
        self._prune(keep=version)
        self.apply_s = time.perf_counter() - started
        built = self.path_of(version, manifest)
        if built is None:
            raise FileNotFoundError(f"weight version {version}: built from its deltas, yet not found under {self.local_dir}")
        return built

    def _plan(self, version: int, manifest: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
        """The versions to build, oldest first: back from `version` to one this host has, or a full one."""
        chain = [(version, manifest)]
        while kind(chain[-1][1]) == "delta":
            base = chain[-1][1]["base_version"]
            try:
                base_manifest = self.store.manifest(base)
            except FileNotFoundError:
                return self._from_anchor(version)
            if self.path_of(base, base_manifest) is not None:
                break
            chain.append((base, base_manifest))
        return list(reversed(chain))

    def _from_anchor(self, version: int) -> list[tuple[int, dict[str, Any]]]:
        listed = [v for v in self.store.versions() if v <= version]
        manifests = {v: self.store.manifest(v) for v in listed}
        anchors = [v for v in listed if is_whole(manifests[v])]
        if not anchors:
            raise DeltaError(f"cannot rebuild weight version {version}: the store holds no full anchor at or "
                             f"before it (versions {listed})")
        anchor = anchors[-1]
        chain = [(v, manifests[v]) for v in listed if v >= anchor]
        for (prev, _), (v, m) in zip(chain, chain[1:]):
            if m["base_version"] != prev:
                raise DeltaError(f"cannot rebuild weight version {version}: delta {v} builds on version "
                                 f"{m['base_version']}, which the store no longer holds (chain after anchor {anchor})")
        self.log(f"rebuilding weight version {version} from anchor {anchor} (its base was not on this host)")
        return chain

    def _build(self, version: int, manifest: dict[str, Any]) -> None:
        dest = self._local(version)
        if is_whole(manifest):
            if self.path_of(version, manifest) is None:
                self.store.download(version, dest)
            return
        base = self.path_of(manifest["base_version"], self.store.manifest(manifest["base_version"]))
        if base is None:
            raise DeltaError(f"weight version {version}: its base, version {manifest['base_version']}, is not here")
        with built_in_place_of(dest) as partial:
            self.store.fs.get_file(f"{self.store.root}/step_{version:06d}/{DELTA_FILE}", str(partial / DELTA_FILE))
            verify_dir(partial, manifest)
            write_applied(base, (partial / DELTA_FILE).read_bytes(), manifest, partial)
            (partial / DELTA_FILE).unlink()
            (partial / MANIFEST).write_text(json.dumps(manifest))

    def _prune(self, keep: int) -> None:
        prune_versions(self.local_dir, self.keep_last, root=self.local_dir, keep_from=keep)


def write_applied(base_dir: Path, payload: bytes, manifest: dict[str, Any], out_dir: Path) -> None:
    """Write base + delta into out_dir: shards with a changed tensor are rewritten, the others
    and the config/tokenizer files are hard links (never modified in place, so sharing is safe)."""
    from safetensors import safe_open

    shards = sorted(base_dir.glob("*.safetensors"))
    state: dict[str, Any] = {}
    members: dict[Path, list[str]] = {}
    metadata: dict[Path, Any] = {}
    for shard in shards:
        with safe_open(str(shard), "pt") as fh:
            metadata[shard], members[shard] = fh.metadata(), list(fh.keys())
            state.update((name, fh.get_tensor(name)) for name in members[shard])
    changed = apply_delta(state, payload, manifest)
    for shard in shards:
        if changed.intersection(members[shard]):
            safetensors_io.write_safetensors(out_dir / shard.name, {n: state[n] for n in members[shard]}, metadata[shard])
        else:
            os.link(shard, out_dir / shard.name)
    for f in base_dir.iterdir():
        if f.is_file() and f.suffix != ".safetensors" and f.name != MANIFEST and not (out_dir / f.name).exists():
            os.link(f, out_dir / f.name)
