"""Weight sync: the trainer publishes versions, every engine reloads them.

- publish.py    trainer side: an HF safetensors checkpoint per version with a manifest of
                checksums, atomic by one rename (shards written in parallel by safetensors_io.py,
                hashed while written)
- delta.py      sync.encoding = "delta": changed elements only, with every tensor's checksum
- materialize.py  whole local checkpoints from a store that may hold deltas
- store.py      versions under any fsspec URL (a path, s3://, gs://), manifest last
- transport.py  the trainer's publish for sync.url: in place, or staged and uploaded
- reload.py     orchestrator side: /update_weights_from_disk on each engine, under the
                partial-rollout policy's pause mode, or waiting for each engine's weight agent
- agent.py      the weight agent beside a remote engine (`python -m tandem.weights agent`)
"""

from tandem.weights.publish import (MAX_SHARD_BYTES, SIDECAR_FILES, WEIGHTS_DIR, PublishError, check_free_space,
                                    prune_versions, publish_weights, published_versions, version_dir,
                                    write_hf_checkpoint)
from tandem.weights.reload import (PAUSE_MODE, ReloadReport, SyncError, engine_weight_version, reload_engine,
                                   reload_engines, sync_engines, wait_engine_versions)
from tandem.weights.store import ChecksumError, StoreError, WeightStore

__all__ = [
    "MAX_SHARD_BYTES", "PAUSE_MODE", "SIDECAR_FILES", "WEIGHTS_DIR", "PublishError", "ReloadReport", "SyncError",
    "ChecksumError", "StoreError", "WeightStore", "check_free_space", "engine_weight_version", "prune_versions",
    "publish_weights", "published_versions", "reload_engine", "reload_engines", "sync_engines", "version_dir",
    "wait_engine_versions", "write_hf_checkpoint",
]
