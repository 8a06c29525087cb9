"""Weight versions at `sync.url`: a local directory (the default, `<run_dir>/weights`), a shared
filesystem path, or any fsspec URL (`s3://bucket/prefix`, `gs://…`).

Layout, the same everywhere: `<url>/step_{V:06d}/` holds an HF checkpoint and `manifest.json`,
which lists every file with its size and xxh3-128 checksum. A version exists once its manifest
does: on a filesystem the whole directory appears in one rename; in an object store the
manifest is uploaded after every part (one PUT, atomic), so a reader never sees a version
whose upload was cut off. Pruning deletes the manifest first for the same reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import xxhash

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "tandem-weights/1"
_VERSION_DIR = re.compile(r"step_(\d{6,})$")
_CHUNK = 8 * 1024 * 1024


class StoreError(RuntimeError):
    """A weight version could not be published to, or fetched from, the store."""


class ChecksumError(StoreError):
    """A downloaded file does not match its manifest; the message names the file."""


def file_digest(path: Path) -> str:
    digest = xxhash.xxh3_128()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def build_manifest(version_dir: Path, version: int, extra: dict[str, Any] | None = None,
                   known: dict[str, str] | None = None) -> dict[str, Any]:
    """`known`: digests of files hashed while they were written (the weight shards)."""
    known = known or {}
    files = {f.name: {"bytes": f.stat().st_size, "xxh3_128": known.get(f.name) or file_digest(f)}
             for f in sorted(version_dir.iterdir()) if f.is_file() and f.name != MANIFEST}
    return {"format": MANIFEST_FORMAT, "version": version, "created": time.time(), "files": files, **(extra or {})}


def write_manifest(version_dir: Path, version: int, extra: dict[str, Any] | None = None,
                   known: dict[str, str] | None = None) -> dict[str, Any]:
    """Checksum every file of a version directory into its manifest.json (written last)."""
    manifest = build_manifest(version_dir, version, extra, known)
    with open(version_dir / MANIFEST, "w") as fh:
        fh.write(json.dumps(manifest, indent=1))
        fh.flush()
        os.fsync(fh.fileno())
    return manifest


def verify_dir(version_dir: Path, manifest: dict[str, Any]) -> None:
    """Every file the manifest lists is present with its size and checksum; else ChecksumError naming it."""
    for name, want in manifest["files"].items():
        path = version_dir / name
        if not path.is_file():
            raise ChecksumError(f"weight version {manifest['version']}: {name} is missing")
        size = path.stat().st_size
        if size != want["bytes"]:
            raise ChecksumError(f"weight version {manifest['version']}: {name} has {size} bytes, "
                                f"the manifest says {want['bytes']}")
        got = file_digest(path)
        if got != want["xxh3_128"]:
            raise ChecksumError(f"weight version {manifest['version']}: {name} failed its checksum "
                                f"(xxh3-128 {got}, the manifest says {want['xxh3_128']})")


@contextmanager
def built_in_place_of(dest: Path) -> Iterator[Path]:
    """A fresh `dest`.partial to build a version in: renamed over `dest` when the block ends, removed
    when it raises (or found and replaced by the next attempt, after a kill)."""
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        yield partial
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(partial, dest)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


class WeightStore:
    """The versions under one URL. `fs` injects a filesystem (tests fake faults at this edge)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, fs: Any = None):
        import fsspec

        if fs is None:
            fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
        else:
            root = fs._strip_protocol(url)
        self.url, self.fs, self.root = url, fs, str(root).rstrip("/")

    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def version_url(self, version: int) -> str:
        return self.fs.unstrip_protocol(self._path(f"step_{version:06d}"))

    # ------------------------------------------------------------------ reading
    def versions(self) -> list[int]:
        """Versions whose manifest exists, oldest first (a fresh listing every call)."""
        self.fs.invalidate_cache()  # s3fs drops only the path and its parents otherwise, not step_* listings
        try:
            found = self.fs.glob(self._path("step_*", MANIFEST))
        except FileNotFoundError:
            return []
        versions = []
        for path in found:
            match = _VERSION_DIR.search(str(path).rstrip("/").rsplit("/", 2)[-2])
            if match:
                versions.append(int(match.group(1)))
        return sorted(versions)

    def latest(self) -> int | None:
        versions = self.versions()
        return versions[-1] if versions else None

    def manifest(self, version: int) -> dict[str, Any]:
        with self.fs.open(self._path(f"step_{version:06d}", MANIFEST), "rb") as fh:
            return json.loads(fh.read())

    def download(self, version: int, dest: Path) -> dict[str, Any]:
        """Fetch version `version` into `dest` (through `dest`.partial, renamed once every file
        verified); returns its manifest. Raises ChecksumError naming a bad file, leaving nothing."""
        manifest = self.manifest(version)
        with built_in_place_of(dest) as partial:
            for name in manifest["files"]:
                self.fs.get_file(self._path(f"step_{version:06d}", name), str(partial / name))
            verify_dir(partial, manifest)
            (partial / MANIFEST).write_text(json.dumps(manifest))
        return manifest

    # ------------------------------------------------------------------ writing
    def upload(self, version_dir: Path, version: int) -> str:
        """Upload a local version directory (with its manifest): every part, then the manifest."""
        manifest_path = version_dir / MANIFEST
        if not manifest_path.exists():
            raise StoreError(f"{version_dir} has no {MANIFEST}; publish it with publish_weights first")
        target = self._path(f"step_{version:06d}")
        self._unlist(version)  # re-publishing a version (a resume): never let the old manifest vouch for new parts
        for f in sorted(version_dir.iterdir()):
            if f.is_file() and f.name != MANIFEST:
                self.fs.put_file(str(f), f"{target}/{f.name}")
        self.fs.put_file(str(manifest_path), f"{target}/{MANIFEST}")
        return self.version_url(version)

    def _unlist(self, version: int) -> None:
        manifest = self._path(f"step_{version:06d}", MANIFEST)
        if self.fs.exists(manifest):
            self.fs.rm_file(manifest)

    def remove(self, version: int) -> None:
        """Unlist (manifest first), then delete the parts."""
        self._unlist(version)
        target = self._path(f"step_{version:06d}")
        if self.fs.exists(target):
            self.fs.rm(target, recursive=True)

    def prune(self, keep_last: int, keep_from: int | None = None) -> list[int]:
        """Remove all but the last `keep_last` versions, never `keep_from` or later (a delta chain)."""
        doomed = [v for v in (self.versions()[:-keep_last] if keep_last > 0 else [])
                  if keep_from is None or v < keep_from]
        for version in doomed:
            self.remove(version)
        return doomed

    def remove_after(self, version: int) -> list[int]:
        """Drop versions newer than `version` (left by a run that crashed, or by an earlier run):
        a weight agent serves the newest version listed."""
        doomed = [v for v in self.versions() if v > version]
        for v in doomed:
            self.remove(v)
        return doomed
