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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tandem.sample import Sample

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


def write_train_result(run_dir: str | os.PathLike, step: int, result: dict) -> Path:
    path = result_path(run_dir, step)
    atomic_write_json(path, {**result, "step": step + 1}, durable=False)  # numbered as its file
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
                      is_alive: Callable[[], bool] | None = None) -> dict:
    return _wait_json(result_path(run_dir, step), timeout_s, f"trainer result for step {step + 1}", is_alive)
