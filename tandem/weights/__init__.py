"""Weight sync through local disk: the trainer publishes versions, the orchestrator has every
engine reload them.

- publish.py  trainer side: an HF safetensors checkpoint per version, atomic by one rename
- reload.py   orchestrator side: /update_weights_from_disk on each engine, under the
              partial-rollout policy's pause mode
"""

from tandem.weights.publish import (MAX_SHARD_BYTES, SIDECAR_FILES, WEIGHTS_DIR, PublishError, check_free_space,
                                    prune_versions, publish_weights, published_versions, version_dir,
                                    write_hf_checkpoint)
from tandem.weights.reload import PAUSE_MODE, ReloadReport, SyncError, reload_engine, reload_engines, sync_engines

__all__ = [
    "MAX_SHARD_BYTES", "PAUSE_MODE", "SIDECAR_FILES", "WEIGHTS_DIR", "PublishError", "ReloadReport", "SyncError",
    "check_free_space", "prune_versions", "publish_weights", "published_versions", "reload_engine",
    "reload_engines", "sync_engines", "version_dir", "write_hf_checkpoint",
]
