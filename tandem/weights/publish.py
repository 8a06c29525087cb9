"""Trainer side of weight sync: publish version V as an HF checkpoint under
`<run_dir>/weights/step_V/` (or another weights directory, e.g. on a shared filesystem), with a
manifest of checksums, through a temporary directory and one rename, so an engine can never
load a half-written version; then prune all but the last K versions. Nothing is fsynced: a
version is read back from the page cache within the step, the trainer can publish it again,
and a checkpoint fsyncs the weights it keeps. tandem/weights/store.py
carries a published version on to an object store."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from tandem.weights import safetensors_io
from tandem.weights.store import write_manifest


WEIGHTS_DIR = "weights"
MAX_SHARD_BYTES = 5 * 1024**3
MIN_PARALLEL_SHARD_BYTES = 256 * 1024**2
PUBLISH_WRITERS = max(1, min(4, os.cpu_count() or 1))
"""Shards written at once, one thread each (the file writes release the GIL)."""
# Files an engine needs beside the tensors to treat the directory as a model.
SIDECAR_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt", "tokenizer.model",
    "added_tokens.json",
)


class PublishError(RuntimeError):
    """Writing a weight version failed; nothing was published."""



def version_dir(run_dir: str | os.PathLike, version: int, root: str | os.PathLike | None = None) -> Path:
    """Version `version`'s directory: under `root` when given, else under <run_dir>/weights."""
    return Path(root or Path(run_dir) / WEIGHTS_DIR) / f"step_{version:06d}"


def published_versions(run_dir: str | os.PathLike, root: str | os.PathLike | None = None) -> list[int]:
    root = Path(root or Path(run_dir) / WEIGHTS_DIR)
    if not root.exists():
        return []
    return sorted(int(p.name.split("_")[1]) for p in root.glob("step_*") if p.name.split("_")[1].isdigit())


def _tensor_bytes(t) -> int:
    return t.numel() * t.element_size()


def state_bytes(state_dict: dict) -> int:
    """Bytes of every tensor of a state dict (what writing it takes)."""
    return sum(_tensor_bytes(t) for t in state_dict.values())


def _shards(state_dict: dict, writers: int = 1) -> list[dict]:
    """HF-style shards of at most MAX_SHARD_BYTES; with several writers, about one per writer
    (never under MIN_PARALLEL_SHARD_BYTES: small files gain nothing from a thread of their own)."""
    total = state_bytes(state_dict)
    limit = min(MAX_SHARD_BYTES, max(MIN_PARALLEL_SHARD_BYTES, -(-total // max(1, writers))))
    shards: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    size = 0
    for name, tensor in state_dict.items():
        nbytes = _tensor_bytes(tensor)
        if current and size + nbytes > limit:
            shards.append(current)
            current, size = {}, 0
        current[name] = tensor
        size += nbytes
    if current:
        shards.append(current)
    return shards


def drop_tied(state_dict: dict, config: dict) -> dict:
    # safetensors refuses tensors that share storage; HF re-ties lm_head on load.
    if config.get("tie_word_embeddings") and "lm_head.weight" in state_dict:
        state_dict = {k: v for k, v in state_dict.items() if k != "lm_head.weight"}
    return state_dict


def check_free_space(target: Path, needed_bytes: int, what: str, margin: float = 1.1,
                     error: type[Exception] = PublishError, consequence: str = "") -> None:
    """Refuse to start a write the disk cannot hold, rather than leave a partial one."""
    probe = target
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed_bytes * margin:
        raise error(f"not enough free disk for {what} under {target}: need {needed_bytes * margin / 1e6:.1f} MB, "
                    f"{free / 1e6:.1f} MB free{consequence}")


def write_hf_checkpoint(state_dict: dict, source_model_dir: str | os.PathLike, out_dir: Path,
                        writers: int | None = None, reuse: Path | None = None) -> dict[str, str]:
    """Write tensors (sharded like HF, shards in parallel) plus the config/tokenizer sidecars into
    out_dir; returns each shard's xxh3-128, computed while writing. A shard of the same name in
    `reuse` (a retired version, see prune_versions) is moved in and written over in place."""
    from concurrent.futures import ThreadPoolExecutor

    writers = writers or PUBLISH_WRITERS
    source = Path(source_model_dir)
    config = json.loads((source / "config.json").read_text())
    state_dict = drop_tied(state_dict, config)
    out_dir.mkdir(parents=True)
    shards = _shards(state_dict, writers)
    names = ["model.safetensors"] if len(shards) == 1 else \
        [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    reused = {name for name in names if reuse is not None and _take_file(reuse / name, out_dir / name)}
    with ThreadPoolExecutor(max_workers=min(writers, len(shards))) as pool:
        digests = dict(zip(names, pool.map(lambda item: safetensors_io.write_safetensors(
            out_dir / item[0], item[1], {"format": "pt"}, in_place=item[0] in reused), zip(names, shards))))
    if len(shards) > 1:
        total = state_bytes(state_dict)
        weight_map = {k: name for name, shard in zip(names, shards) for k in shard}
        (out_dir / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    link_sidecars(source, out_dir)
    return digests


def _take_file(spare: Path, dest: Path) -> bool:
    """Move a retired version's file to `dest` to be written over; only a file nothing else links
    (a checkpoint hard-links the versions it keeps, and those must never change)."""
    try:
        if spare.stat().st_nlink != 1:
            return False
        os.replace(spare, dest)
        return True
    except FileNotFoundError:
        return False


def link_sidecars(source: Path, out_dir: Path) -> None:
    """Config and tokenizer files into `out_dir`: hard links to the source model's (they never
    change, and a tokenizer.json is megabytes written again per version otherwise), copies where
    linking is refused (another filesystem)."""
    for fname in SIDECAR_FILES:
        if (source / fname).exists():
            link_or_copy(str(source / fname), str(out_dir / fname))


def link_or_copy(src: str, dst: str) -> None:
    """A hard link to `src` (no bytes written), or a copy where linking is refused (another filesystem)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def publish_weights(state_dict: dict, source_model_dir: str | os.PathLike, run_dir: str | os.PathLike,
                    version: int, keep_last: int, *, root: str | os.PathLike | None = None,
                    manifest_extra: dict | None = None, keep_from: int | None = None) -> Path:
    """Atomically publish weight version `version` (under `root`, default <run_dir>/weights), with
    its manifest.json; returns its directory. Pruning never removes `keep_from` or later."""
    spare = spare_dir(version_dir(run_dir, version, root).parent)
    return publish_dir(lambda tmp: write_hf_checkpoint(state_dict, source_model_dir, tmp, reuse=spare), run_dir,
                       version, state_bytes(state_dict), keep_last, root=root,
                       manifest_extra=manifest_extra, keep_from=keep_from, spare=spare)


def spare_dir(weights_dir: Path) -> Path:
    """Where this process keeps the last retired version, whose shard files the next publish writes
    over in place. Writing a new file per version made the kernel allocate (and on this project's
    VM, fault in) fresh page-cache pages for every byte: 0.3-0.5 s per publish at 23M parameters,
    against ~0.05 s for the same bytes written over pages it already holds."""
    return weights_dir / f".step_spare.spare{os.getpid()}"


def remove_spare(weights_dir: Path) -> None:
    """At the end of a run: the spare is a whole copy of the weights nobody will read."""
    shutil.rmtree(spare_dir(weights_dir), ignore_errors=True)


def publish_dir(write: Callable[[Path], dict[str, str] | None], run_dir: str | os.PathLike, version: int, nbytes: int,
                keep_last: int, *, root: str | os.PathLike | None = None, manifest_extra: dict | None = None,
                keep_from: int | None = None, spare: Path | None = None) -> Path:
    """Publish what `write(tmp_dir)` writes as version `version`: manifest, then one rename.
    `write` may return the xxh3-128 of files it hashed while writing them (not read again)."""
    final = version_dir(run_dir, version, root)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_temps(final.parent)
    tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        check_free_space(final.parent, nbytes, f"weight version {version}")
        known = write(tmp)
        write_manifest(tmp, version, manifest_extra, known)
        if final.exists():  # re-publishing the same version (e.g. after a resume)
            _retire_version_dir(final)
        os.replace(tmp, final)
    except Exception as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, PublishError):
            raise
        raise PublishError(f"publishing weight version {version} to {final} failed: {err}") from err
    prune_versions(run_dir, keep_last, root, keep_from, spare)
    return final


def _remove_abandoned_temps(weights_dir: Path) -> None:
    """A publish or prune killed midway leaves .step_N.tmp<pid> / .step_N.del<pid>, and a trainer
    that died leaves its .step_spare.spare<pid> (whole weight copies)."""
    for hidden in weights_dir.glob(".step_*"):
        pid = "".join(c for c in hidden.name.rsplit(".", 1)[-1] if c.isdigit())
        if pid and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(hidden, ignore_errors=True)


def prune_versions(run_dir: str | os.PathLike, keep_last: int, root: str | os.PathLike | None = None,
                   keep_from: int | None = None, spare: Path | None = None) -> list[int]:
    """Remove all but the last `keep_last` versions, and never `keep_from` or later (a delta
    chain's anchor and the deltas built on it). With `spare`, the first removed version becomes
    the spare (one rename: unlisted at once), replacing what the last publish left of the old one."""
    versions = published_versions(run_dir, root)
    doomed = [v for v in (versions[:-keep_last] if keep_last > 0 else []) if keep_from is None or v < keep_from]
    for v in doomed:
        path = version_dir(run_dir, v, root)
        if spare is not None:
            shutil.rmtree(spare, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, spare)
            spare = None
            continue
        _retire_version_dir(path)
    return doomed


def _retire_version_dir(path: Path) -> None:
    """Unlist a version in one rename, then delete it: a kill midway never leaves a half-deleted version listed."""
    hidden = path.with_name(f".{path.name}.del{os.getpid()}")
    try:
        os.replace(path, hidden)
    except FileNotFoundError:
        return
    shutil.rmtree(hidden, ignore_errors=True)
