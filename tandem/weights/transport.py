"""Where the trainer puts each weight version, from `sync.url`:

- empty: `<run_dir>/weights` (one node; the orchestrator has every engine reload the path);
- a path: the same, in that directory (a shared filesystem that engine hosts mount at the
  same path);
- an fsspec URL (`s3://`, `gs://`, …): written to `<run_dir>/weights` first, then uploaded,
  manifest last; a weight agent on each engine host downloads, verifies and loads it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tandem.config import TandemConfig
from tandem.config.views import TrainerSide, TrainerView
from tandem.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, adapter_name, adapters_kept, peft_config_dict
from tandem.weights.delta import DeltaEncoder, write_delta_dir
from tandem.weights.materialize import LocalVersions
from tandem.weights.record import Published
from tandem.weights.publish import WEIGHTS_DIR, drop_tied, publish_dir, publish_weights, remove_spare, state_bytes
from tandem.config.sections import is_remote_url as is_remote
from tandem.weights.store import WeightStore
from tandem.weights import safetensors_io


def reload_by_agent(cfg: TrainerSide) -> bool:
    """True when weight agents beside the engines load each version (sync.reload_by, resolved)."""
    if cfg.sync.reload_by == "auto":
        return bool(cfg.sync.url) and is_remote(cfg.sync.url)
    return cfg.sync.reload_by == "agent"


class WeightPublisher:
    """The trainer's side of `sync.url`: publish a version, then upload it when the store is remote."""

    def __init__(self, cfg: TrainerView, source_model_dir: str, store: WeightStore | None = None):
        self.cfg, self.source_model_dir = cfg, source_model_dir
        url = cfg.sync.url
        remote = bool(url) and is_remote(url)
        self.store = store or (WeightStore(url, cfg.sync.storage_options) if url else None)
        self.shared_root = Path(url) if url and not remote else None
        """Publish straight into this directory (a shared filesystem); None: <run_dir>/weights."""
        self.remote = remote
        self.encoder = DeltaEncoder(cfg.sync.anchor_interval) if cfg.sync.encoding == "delta" else None
        self.model_config = json.loads((Path(source_model_dir) / "config.json").read_text())

    def publish(self, state_dict: dict, version: int, force_full: bool = False) -> Published:
        """Publish `version` (whole when `force_full`: a checkpoint needs whole weights); the record says
        where it is, what kind it is and what it cost (with deltas the changed fraction and encode time,
        for a remote store the upload's URL and time)."""
        cfg = self.cfg
        extra: dict[str, Any] = {"partial_rollout": cfg.rollout.staleness.partial_rollout, "kind": "full"}
        keep_from = None
        publish_args: dict[str, Any] = dict(root=self.shared_root, manifest_extra=extra)
        out = Published(version, "")
        if cfg.trainer.lora.enabled:
            extra.update(kind="lora", adapter_name=adapter_name(version),
                         adapters_kept=adapters_kept(cfg.effective_staleness))
            path = publish_dir(lambda tmp: write_adapter_dir(tmp, state_dict, cfg.trainer.lora, cfg.model.path),
                               cfg.run.run_dir, version, state_bytes(state_dict),
                               cfg.sync.keep_last, **publish_args)
        elif self.encoder is None:
            path = publish_weights(state_dict, self.source_model_dir, cfg.run.run_dir, version, cfg.sync.keep_last,
                                   **publish_args)
        else:
            state = drop_tied(state_dict, self.model_config)  # exactly the tensors a full publish writes
            encoded = self.encoder.encode(state, version, force_full)
            extra.update(encoded.manifest_fields())
            keep_from = self.encoder.anchor_version  # the chain a delta needs stays published
            if encoded.kind == "full":
                path = publish_weights(state, self.source_model_dir, cfg.run.run_dir, version, cfg.sync.keep_last,
                                       keep_from=keep_from, **publish_args)
            else:
                path = publish_dir(lambda tmp: write_delta_dir(tmp, encoded), cfg.run.run_dir, version,
                                   len(encoded.payload), cfg.sync.keep_last, keep_from=keep_from, **publish_args)
            out.changed_fraction, out.encode_time = encoded.changed_fraction, encoded.encode_s
        out.weights_path, out.weights_kind = str(path), extra["kind"]
        out.publish_bytes = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        if self.remote and self.store is not None:
            started = time.perf_counter()
            out.weights_url = self.store.upload(path, version)
            self.store.prune(cfg.sync.keep_last, keep_from)
            out.upload_time = time.perf_counter() - started
        return out

    def close(self) -> None:
        """The run is over: drop the spare version kept for in-place publishing."""
        remove_spare(self.shared_root or Path(self.cfg.run.run_dir) / WEIGHTS_DIR)

    def forget_after(self, version: int) -> list[int]:
        """Remove versions newer than `version` from the store (an earlier run's, or a crashed
        run's past its checkpoint), so a weight agent never serves them."""
        return self.store.remove_after(version) if self.store is not None else []


def write_adapter_dir(out_dir: Path, tensors: dict, lora, base_model: str) -> dict[str, str]:
    """A peft adapter directory (adapter_model.safetensors, adapter_config.json); returns the
    weights' xxh3-128, computed while writing."""
    out_dir.mkdir(parents=True)
    digest = safetensors_io.write_safetensors(out_dir / ADAPTER_WEIGHTS, tensors, {"format": "pt"})
    (out_dir / ADAPTER_CONFIG).write_text(json.dumps(peft_config_dict(lora, base_model), indent=1))
    return {ADAPTER_WEIGHTS: digest}


def local_copies(cfg: TandemConfig) -> LocalVersions:
    """One node (or a shared directory) with deltas: the orchestrator applies each delta to a
    whole checkpoint beside the published versions, in `<weights dir>/full/`, which the engines
    reload from; whole versions are read where they were published."""
    root = Path(cfg.sync.url) if cfg.sync.url else Path(cfg.run.run_dir) / WEIGHTS_DIR
    return LocalVersions(WeightStore(str(root)), root / "full", keep_last=2, in_place=True)
