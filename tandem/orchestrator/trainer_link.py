"""How the loop reaches the trainer: the `TrainerLink` protocol, and the real run's link to the
trainer child process (batches and answers cross as files in the run directory, tandem.handoff)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Protocol

from tandem.config import TandemConfig
from tandem.handoff import TrainBatch, TrainResult, wait_train_result, write_batch
from tandem.orchestrator.cluster import Cluster
from tandem.supervisor import ChildFailed


class TrainerLink(Protocol):
    """How the loop reaches the trainer: hand it a step's batch, then wait for its answer (the
    training metrics, and the weight version when it published one)."""

    async def submit(self, step: int, samples: list, cpu_threads: int | None = None) -> None:
        """`cpu_threads`: the torch threads to train this step with (None: keep the current count)."""

    async def result(self, step: int) -> TrainResult: ...

    async def checkpoint_only(self, step: int, samples: list, reason: str) -> TrainResult:
        """The run stops before `step`: have the trainer checkpoint the steps done and train nothing
        (`samples`, the step's failed samples, are kept in its batch file for inspection)."""


class FileTrainerLink:
    """The trainer child process: batches and answers cross as files in the run directory."""

    def __init__(self, run_dir: Path, cfg: TandemConfig, cluster: Cluster):
        self.run_dir, self.cfg, self.cluster = run_dir, cfg, cluster

    async def submit(self, step: int, samples: list, cpu_threads: int | None = None) -> None:
        batch = TrainBatch(step, samples, cpu_threads=cpu_threads or None)
        await asyncio.to_thread(write_batch, self.run_dir, batch)  # off the loop: rollouts keep flowing

    async def result(self, step: int) -> TrainResult:
        return await wait_trainer(self.run_dir, step, self.cfg, self.cluster)

    async def checkpoint_only(self, step: int, samples: list, reason: str) -> TrainResult:
        self.cluster.trainer.critical = False  # it exits once the checkpoint is written: not a failure
        await asyncio.to_thread(write_batch, self.run_dir, TrainBatch(step, samples, checkpoint_only=reason))
        return await self.result(step)


async def wait_trainer(run_dir: Path, step: int, cfg: TandemConfig, cluster: Cluster) -> TrainResult:
    """The trainer's answer for `step`, polled in a thread that stops as soon as this task is
    cancelled (Ctrl-C: asyncio.run joins its threads before returning, so a thread that kept
    polling would hold the launcher, and every child, for as long as the step takes). A dead
    trainer is reported with its exit and log tail."""
    cancelled = threading.Event()
    try:
        return await asyncio.to_thread(wait_train_result, run_dir, step, cfg.sync.trainer_timeout_s,
                                       lambda: cluster.trainer.alive and not cancelled.is_set())
    except RuntimeError:
        if not cluster.trainer.alive:
            raise ChildFailed(cluster.trainer.describe_exit()) from None
        raise
    finally:
        cancelled.set()
