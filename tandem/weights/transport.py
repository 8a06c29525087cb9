"""Where the trainer puts each weight version, from `sync.url`:

- empty: `<run_dir>/weights` (one node; the orchestrator has every engine reload the path);
- a path: the same, in that directory (a shared filesystem that engine hosts mount at the
  same path);
- an fsspec URL (`s3://`, `gs://`, …): written to `<run_dir>/weights` first, then uploaded,
  manifest last; a weight agent on each engine host downloads, verifies and loads it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tandem.config import TandemConfig
from tandem.weights.publish import publish_weights
from tandem.config.sections import is_remote_url as is_remote
from tandem.weights.store import WeightStore


def reload_by_agent(cfg: TandemConfig) -> bool:
    """True when weight agents beside the engines load each version (sync.reload_by, resolved)."""
    if cfg.sync.reload_by == "auto":
        return bool(cfg.sync.url) and is_remote(cfg.sync.url)
    return cfg.sync.reload_by == "agent"


class WeightPublisher:
    """The trainer's side of `sync.url`: publish a version, then upload it when the store is remote."""

    def __init__(self, cfg: TandemConfig, source_model_dir: str, store: WeightStore | None = None):
        self.cfg, self.source_model_dir = cfg, source_model_dir
        url = cfg.sync.url
        remote = bool(url) and is_remote(url)
        self.store = store or (WeightStore(url, cfg.sync.storage_options) if url else None)
        self.shared_root = Path(url) if url and not remote else None
        """Publish straight into this directory (a shared filesystem); None: <run_dir>/weights."""
        self.remote = remote

    def publish(self, state_dict: dict, version: int) -> dict[str, Any]:
        """Publish `version`; returns weights_path (a local or shared path), and for a remote
        store weights_url and upload_time."""
        cfg = self.cfg
        path = publish_weights(state_dict, self.source_model_dir, cfg.run.run_dir, version, cfg.sync.keep_last,
                               root=self.shared_root, manifest_extra={"partial_rollout": cfg.rollout.partial_rollout})
        out: dict[str, Any] = {"weights_path": str(path)}
        if self.remote:
            started = time.perf_counter()
            out["weights_url"] = self.store.upload(path, version)
            self.store.prune(cfg.sync.keep_last)
            out["upload_time"] = time.perf_counter() - started
        return out

    def forget_after(self, version: int) -> list[int]:
        """Remove versions newer than `version` from the store (an earlier run's, or a crashed
        run's past its checkpoint), so a weight agent never serves them."""
        return self.store.remove_after(version) if self.store is not None else []
