"""The file channel between orchestrator and trainer.

They are separate processes (the trainer may be a torchrun group on other GPUs), so they
meet on local disk, like prime-rl: the orchestrator writes the samples for training step
N to `rollouts/step_N.json` (steps numbered from 1); the trainer answers with `trainer/step_N.json`
once step N is trained and (if due) its weights are published. Every write is atomic (temporary file,
then rename), so a reader never sees half a file, and a crash leaves either the whole
file or none. Files are also a record of what each step trained on.

The per-step files are not fsynced: the reader is another process on the same machine, which
sees the renamed file whole without it, and a power loss is recovered from a checkpoint, which
is. An fsync per file cost the step a few milliseconds of disk flush on the critical path.
Waiting is a poll of the file's existence every POLL_S (a stat call: ~5 us of CPU), short
enough that the handoff adds about a millisecond to a step instead of half of a 20 ms period.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from tandem.sample import Sample
from tandem.weights.record import NOTHING_PUBLISHED, Published

POLL_S = 0.002


class HandoffTimeout(TimeoutError):
    """The other side did not produce its file in time."""


def _step_file(run_dir: str | os.PathLike, kind: str, step: int) -> Path:
    """The loops count steps from 0 (step k trains on weights of version k); what users see, files
    included, numbers them from 1, like the checkpoints: the file of the loops' step k is step_{k+1}."""
    return Path(run_dir) / kind / f"step_{step + 1:06d}.json"


def batch_path(run_dir: str | os.PathLike, step: int) -> Path:
    return _step_file(run_dir, "rollouts", step)


def result_path(run_dir: str | os.PathLike, step: int) -> Path:
    return _step_file(run_dir, "trainer", step)


def atomic_write_json(path: Path, payload: Any, durable: bool = True) -> None:
    """Write `payload` whole or not at all (temporary file, then rename); `durable` also
    flushes it to disk before the rename, so it survives a power loss."""
    import orjson  # several times faster than json on the long token lists of agent batches

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(orjson.dumps(payload))
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def _wait_json(path: Path, timeout_s: float, what: str, is_alive: Callable[[], bool] | None) -> Any:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if is_alive is not None and not is_alive():
            raise RuntimeError(f"gave up waiting for {what} ({path}): the producer is gone")
        if time.monotonic() > deadline:
            raise HandoffTimeout(f"no {what} after {timeout_s:.0f}s (waiting for {path})")
        time.sleep(POLL_S)
    import orjson

    return orjson.loads(path.read_bytes())


@dataclass
class TrainBatch:
    """rollouts/step_N.json: what the orchestrator hands the trainer for the loops' step `step`
    (N = step + 1 in the file's name and its "step" field, as on screen and in the checkpoints)."""
    step: int
    samples: list[Sample]
    cpu_threads: int | None = None
    """run.cpu_split = "phase": the torch threads to train this step with (None: keep the count)."""
    checkpoint_only: str | None = None
    """The run stops before this step, for this reason: checkpoint the steps done, train nothing
    (`samples`, the step's failed ones, are kept in the file for inspection)."""

    def to_json(self) -> dict:
        return {"step": self.step + 1, "cpu_threads": self.cpu_threads, "checkpoint_only": self.checkpoint_only,
                "samples": [s.to_dict() for s in self.samples]}

    @classmethod
    def from_json(cls, payload: dict) -> TrainBatch:
        if "extra" in payload:  # before issue 52: "step" from 0 and an untyped "extra"; never read across versions
            raise ValueError("a rollouts/step_N.json written by an older tandem (its steps number from 0): "
                             "start this run afresh (--overwrite) or resume it with the tandem that started it")
        return cls(payload["step"] - 1, [Sample.from_dict(d) for d in payload["samples"]],
                   payload["cpu_threads"], payload["checkpoint_only"])


def write_batch(run_dir: str | os.PathLike, batch: TrainBatch) -> Path:
    path = batch_path(run_dir, batch.step)
    atomic_write_json(path, batch.to_json(), durable=False)
    return path


def wait_batch(run_dir: str | os.PathLike, step: int, timeout_s: float = 3600.0,
               is_alive: Callable[[], bool] | None = None) -> TrainBatch:
    """Step `step`'s batch, once the orchestrator has written it."""
    payload = _wait_json(batch_path(run_dir, step), timeout_s, f"rollout batch for step {step + 1}", is_alive)
    return TrainBatch.from_json(payload)


@dataclass
class RoutingAgreement:
    """trainer.moe (routing replay, record_routing): how the trainer's routers agreed with the engines'."""
    recorded_tokens: float
    """Token positions the engines recorded their experts for."""
    agreement: float | None = None
    """The fraction of (token, MoE layer) pairs whose recomputed top-k equals the engine's (None: nothing recorded)."""
    agreement_tokens: float | None = None
    """The fraction of tokens whose every layer agreed (None: nothing recorded, or pipeline parallel)."""

    KEYS: ClassVar[dict[str, str]] = {"agreement": "routing_agreement", "recorded_tokens": "routing_recorded_tokens",
            "agreement_tokens": "routing_agreement_tokens"}
    """Field -> its name in the backend's step metrics and in the metrics row, in the row's order."""

    @classmethod
    def take(cls, metrics: dict[str, float]) -> RoutingAgreement | None:
        """Move the routing numbers a backend's train_step reported (tandem.trainer.routing_replay) out of
        `metrics`; None when the backend reported none (no trainer.moe)."""
        found = {name: metrics.pop(key) for name, key in cls.KEYS.items() if key in metrics}
        return cls(**found) if found else None

    def row(self) -> dict[str, float]:
        return {key: value for name, key in self.KEYS.items() if (value := getattr(self, name)) is not None}


@dataclass
class TrainResult:
    """trainer/step_N.json: the trainer's answer for the loops' step `step` (N = step + 1, as in the batch's
    file), written once the step is trained and, when due, its weights published and its checkpoint part saved."""
    step: int
    metrics: dict[str, float] = field(default_factory=dict)
    """The backend's train_step numbers (loss, kl, entropy, clip_frac, grad_norm, tokens, train_time, ...)."""
    routing: RoutingAgreement | None = None
    """trainer.moe: the routers' agreement with the engines (None without it)."""
    handover: dict[str, float] = field(default_factory=dict)
    """run.colocate: the backend's offload/onload report (trainer_offloaded_mb, trainer_onload_time, ...)."""
    wait_time: float = 0.0
    """Seconds the trainer waited for the batch."""
    published: Published | None = None
    """The weight version published after this step (None: no sync was due)."""
    publish_time: float = 0.0
    checkpoint_tmp: str | None = None
    """The checkpoint's temporary directory holding the trainer's part (None: no checkpoint was due); the
    orchestrator adds its state and renames it."""
    checkpoint_time: float = 0.0
    checkpoint_only: bool = False
    """The answer to a TrainBatch.checkpoint_only: nothing trained, the steps done checkpointed."""

    @property
    def train_time(self) -> float:
        return self.metrics.get("train_time", 0.0)

    def sync_metrics(self) -> dict[str, float]:
        return dict(NOTHING_PUBLISHED) if self.published is None else self.published.sync_metrics()

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step + 1, "metrics": self.metrics,
                "routing": None if self.routing is None else self.routing.__dict__, "handover": self.handover,
                "wait_time": self.wait_time, "published": None if self.published is None else self.published.to_json(),
                "publish_time": self.publish_time, "checkpoint_tmp": self.checkpoint_tmp,
                "checkpoint_time": self.checkpoint_time, "checkpoint_only": self.checkpoint_only}

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> TrainResult:
        if "metrics" not in payload:  # before issue 52 the answer was one flat dict
            raise ValueError("a trainer/step_N.json written by an older tandem: start this run afresh (--overwrite) "
                             "or resume it with the tandem that started it")
        routing, published = payload["routing"], payload["published"]
        return cls(payload["step"] - 1, payload["metrics"], None if routing is None else RoutingAgreement(**routing),
                   payload["handover"], payload["wait_time"], None if published is None else Published.from_json(published),
                   payload["publish_time"], payload["checkpoint_tmp"], payload["checkpoint_time"],
                   payload["checkpoint_only"])


def write_train_result(run_dir: str | os.PathLike, result: TrainResult) -> Path:
    path = result_path(run_dir, result.step)
    atomic_write_json(path, result.to_json(), durable=False)
    return path


def prune_step_files(run_dir: str | os.PathLike, steps_done: int, keep: int | str) -> None:
    """run.keep_rollouts: once `steps_done` steps are trained, keep the batch and result files of the
    last `keep` steps only ("all": every one). Both sides are done with older ones."""
    if keep == "all":
        return
    for kind in ("rollouts", "trainer"):
        for path in (Path(run_dir) / kind).glob("step_*.json"):  # a handful: the older ones are gone
            if int(path.stem.split("_")[1]) <= steps_done - int(keep):
                path.unlink(missing_ok=True)


def wait_train_result(run_dir: str | os.PathLike, step: int, timeout_s: float = 3600.0,
                      is_alive: Callable[[], bool] | None = None) -> TrainResult:
    payload = _wait_json(result_path(run_dir, step), timeout_s, f"trainer result for step {step + 1}", is_alive)
    return TrainResult.from_json(payload)
